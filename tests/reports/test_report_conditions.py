"""The report's measurement conditions (reports/sections/conditions.py) and the transfer
table's host buffer, from synthetic rows in tests/report_fixtures.py."""

from __future__ import annotations

import json

from reports.pipeline.load import load
from reports.render.build import make_report
from tests import report_fixtures as fx

GPU_STATE = {"repetitions": 5, "device_median_ms": 0.15, "gpu_sm_clock_mhz_min": 1755,
             "gpu_sm_clock_mhz_median": 1980, "gpu_sm_clock_mhz_max": 1980,
             "gpu_sm_clock_max_mhz": 1980, "gpu_mem_clock_mhz_median": 2619,
             "gpu_power_w_median": 212.5, "gpu_temperature_c_max": 48,
             "interval": "95% prediction interval of a re-run's median over 5 repetitions"}


def table_of(report, key: str):
    for section in report.sections:
        for table in section.tables:
            if table.key == key:
                return table
    raise AssertionError(f"no table {key}")


def test_conditions_show_repetitions_device_time_and_clocks(tmp_path):
    rows = [fx.make_row("lenet", 64, "forward", "torch", "gpu", 0.25, timing_extra=GPU_STATE),
            fx.make_row("lenet", 64, "forward", "jax", "gpu", 0.20,
                        timing_extra={"repetitions": 3, "device_median_ms": None,
                                      "device_time_reason": "no device clock"}),
            fx.make_row("resnet50", 16, "transfer_pinned", "torch", "gpu", 0.5,
                        timing_extra={"repetitions": 3, "host_buffer": "pinned (page-locked)"}),
            fx.make_row("resnet50", 16, "transfer", "torch", "gpu", 0.9,
                        timing_extra={"repetitions": 3, "host_buffer": "pageable (numpy)"})]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = make_report(load([tmp_path]))
    table = table_of(report, "conditions")
    index = {c: i for i, c in enumerate(table.columns)}
    torch_row = next(r for r in table.rows if r[3].text.startswith("torch")
                     and r[0].text == "lenet")
    assert torch_row[index["Repetitions"]].text == "5"
    assert torch_row[index["Host overhead (ms)"]].text == "0.10 (40%)"   # 0.25 - 0.15
    assert torch_row[index["SM clock (MHz)"]].text == "1980 (min 1755)"
    assert "5 independent repetitions" in torch_row[index["Wall time (ms)"]].title
    jax_row = next(r for r in table.rows if r[3].text.startswith("jax"))
    assert jax_row[index["Device time (ms)"]].title == "no device clock"
    transfer = table_of(report, "transfer")
    buffers = sorted(r[3].text for r in transfer.rows)
    assert buffers == ["pageable", "pinned"]


def test_rows_without_repetitions_leave_the_conditions_table_out(tmp_path):
    row = fx.make_row("lenet", 64, "forward", "torch", "cpu", 2.0)
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    report = make_report(load([tmp_path]))
    assert all(t.key != "conditions" for s in report.sections for t in s.tables)
