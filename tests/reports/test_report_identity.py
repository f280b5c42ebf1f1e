"""The report's row identity (reports/pipeline/tidy.py IDENTITY): two rows are one
measurement, and the later replaces the earlier, only where every setting that makes them
different measurements is equal; the suite (which fixes the timer and what the case is
for) is one of them. Synthetic rows, no framework."""

from __future__ import annotations

import json

from reports.pipeline.load import load
from reports.pipeline.tidy import tidy
from tests import report_fixtures as fx


def write(tmp_path, rows):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load([path])


def test_a_latency_row_never_replaces_a_seed_suites_row_of_the_same_settings(tmp_path):
    seed = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.30, threads=4,
                       suite="bahrampour2016", started="2026-01-10T10:00:00")
    latency = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.12, threads=4,
                          suite="latency-gpu", started="2026-01-10T11:00:00")
    merged = tidy(write(tmp_path, [seed, latency]))
    assert sorted(merged.measurements["suite"]) == ["bahrampour2016", "latency-gpu"]
    assert sorted(merged.measurements["median_ms"]) == [0.12, 0.30]
    assert merged.superseded == 0


def test_a_rerun_in_the_same_suite_still_replaces_the_older_row(tmp_path):
    old = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.30, threads=4,
                      suite="latency-gpu", started="2026-01-10T10:00:00")
    new = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.12, threads=4,
                      suite="latency-gpu", started="2026-01-10T11:00:00")
    merged = tidy(write(tmp_path, [new, old]))
    assert list(merged.measurements["median_ms"]) == [0.12]
    assert merged.superseded == 1


def test_a_reused_copy_is_the_measurement_it_copies(tmp_path):
    """A matrix run copies a case measured for an earlier suite into a later one
    (suites/harness/reuse.py): the copy is that measurement, kept once."""
    measured = fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0, threads=4,
                           suite="default-gpu")
    copy = {**fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0, threads=4,
                          suite="cnn-benchmarks"), "reused_from": measured["case_id"]}
    merged = tidy(write(tmp_path, [measured, copy]))
    assert list(merged.measurements["median_ms"]) == [10.0]
    assert merged.superseded == 1


def test_tables_show_the_latest_of_a_cells_measurements_and_the_csv_keeps_both(tmp_path):
    from reports.render.build import build

    seed = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.30, threads=4,
                       suite="bahrampour2016", started="2026-01-10T10:00:00")
    latency = fx.make_row("lenet", 1, "forward", "torch", "gpu", 0.12, threads=4,
                          suite="latency-gpu", started="2026-01-10T11:00:00")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in (seed, latency)))
    report, _ = build([tmp_path / "results"], tmp_path / "out")
    assert list(report.frame["suite"]) == ["latency-gpu"]
    assert any("1 row(s) measured the same setting" in p for p in report.sections[0].paragraphs)
    csv = (tmp_path / "out" / "results_tidy.csv").read_text()
    assert "bahrampour2016" in csv and "latency-gpu" in csv
