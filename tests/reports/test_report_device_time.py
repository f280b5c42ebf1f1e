"""Device time beside wall time in the report (reports/pipeline/cells.py, sections/models.py,
compare.py, readme_tables.py), the launch-bound mark, and the ranking rule's bold marks
(reports/pipeline/ranking.py; its branches: tests/reports/test_ranking.py). Rows come from
tests/report_fixtures.py: with device fields, without them (older rows) and CPU rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from reports import readme_tables
from reports.pipeline import cells, ranking
from reports.pipeline.load import load
from reports.pipeline.tidy import tidy
from reports.render.build import make_report
from reports.render.table import Cell, Table
from reports.sections.models import COLUMNS
from tests import report_fixtures as fx


def report_of(tmp_path, rows):
    fx._write(tmp_path / "r.jsonl", rows)
    return make_report(load([tmp_path]))


def tables(report):
    return [t for s in report.sections for t in s.tables]


def find(report, title_part: str) -> Table:
    found = [t for t in tables(report) if title_part in t.title]
    assert found, f"no table titled like {title_part!r}"
    return found[0]


def column(table: Table, name: str, **where) -> Cell:
    index = {c: i for i, c in enumerate(table.columns)}
    for row in table.rows:
        if all(row[index[c]].text == v for c, v in where.items()):
            return row[index[name]]
    raise AssertionError(f"no row {where} in {table.title}")


# --- tidy: the fields, stated or computed, never zero when absent ----------------------------

def test_host_overhead_and_launch_bound_are_computed_where_the_row_does_not_state_them(tmp_path):
    fx._write(tmp_path / "r.jsonl", fx.device_rows())
    frame = tidy(load([tmp_path])).frame

    def one(model, measure, framework):
        return frame[(frame.model == model) & (frame.measure == measure)
                     & (frame.framework == framework)].iloc[0]

    resnet = one("resnet50", "gradient", "torch")
    assert resnet.host_overhead_ms == pytest.approx(24.12 - 22.68)
    assert resnet.launch_bound is False or resnet.launch_bound == False  # noqa: E712
    assert resnet.device_span_median_ms == 23.9
    assert resnet.device_time_kind.startswith("CUDA events")
    assert one("sae_ae1", "gradient", "torch").launch_bound == True  # noqa: E712  0.09 < 0.56
    stated = one("sae_ae1", "forward", "torch")          # the row's own fields win
    assert stated.host_overhead_ms == 0.1 and stated.launch_bound == False  # noqa: E712
    for absent in (one("resnet50", "gradient", "jax"), one("sae_ae1", "gradient", "tf")):
        assert math.isnan(absent.device_median_ms) and math.isnan(absent.host_overhead_ms)
        assert math.isnan(absent.device_span_median_ms)
        assert absent.launch_bound is None                # unknown, not False and not 0


# --- summary and per-model tables ----------------------------------------------------------

def test_summary_cells_carry_device_time_and_the_launch_bound_mark(tmp_path):
    report = report_of(tmp_path, fx.device_rows())
    total = find(report, "Summary: Total (ms), gpu")
    assert column(total, "torch", Model="resnet50").text == "24.12 (eager, dev 22.68)"
    assert column(total, "jax", Model="resnet50").text == "26.70 (jit)"
    assert column(total, "torch", Model="sae_ae1").text == "1.12 (eager, dev 0.0914) †"
    assert "host overhead 1.44 ms" in column(total, "torch", Model="resnet50").title
    assert cells.DEVICE_NOTE in total.notes and cells.LAUNCH_BOUND_NOTE in total.notes
    assert any("by wall-time median" in n for n in total.notes)
    forward = find(report, "Summary: Forward (ms), gpu")
    # launch_bound stated false by the row: no mark, though 0.035 < 0.14 / 2
    assert column(forward, "torch", Model="sae_ae1").text == "0.14 (eager, dev 0.0354)"


def test_model_table_has_a_device_column_beside_the_wall_times(tmp_path):
    report = report_of(tmp_path, fx.device_rows())
    table = find(report, "resnet50 (input 16")
    at = table.columns.index("Total (ms)")
    assert table.columns[at + 1] == "Device fwd / total (ms)"
    assert column(table, "Device fwd / total (ms)", Framework="torch").text == "7.52 / 22.68"
    jax = column(table, "Device fwd / total (ms)", Framework="jax")
    assert jax.text == "—" and "no device clock" in jax.title
    assert cells.DEVICE_COLUMNS_NOTE in table.notes
    lenet = find(report, "lenet (input 64")
    assert "Device fwd / total (ms)" not in lenet.columns     # no row there has device time


def test_the_launch_bound_mark_is_explained_wherever_it_stands(tmp_path):
    report = report_of(tmp_path, fx.device_rows())
    marked = [t for t in tables(report)
              if any(c.text.endswith(f" {cells.LAUNCH_BOUND}") for r in t.rows for c in r)]
    titles = [t.title for t in marked]
    assert any(t.startswith("Summary: Total (ms), gpu") for t in titles), titles
    assert any(t.startswith("Stacked autoencoders") for t in titles), titles
    for table in marked:
        assert cells.LAUNCH_BOUND_NOTE in table.notes, table.title
    sae = find(report, "Stacked autoencoders")
    assert sae.rows[[r[2].text for r in sae.rows].index("torch eager fp32")][3].text == \
        "1.12 (dev 0.0914) †"


def test_rows_without_device_fields_render_as_before(tmp_path):
    """Older rows (and CPU rows, whose host and device time are one): no device column,
    no "dev", no mark; the model table keeps the cnn-benchmarks columns."""
    report = report_of(tmp_path, fx.gpu_rows() + fx.cpu_rows())
    texts = [c.text for t in tables(report) for r in t.rows for c in r]
    assert not any("dev " in t or t.endswith(cells.LAUNCH_BOUND) for t in texts)
    for table in tables(report):
        assert cells.DEVICE_NOTE not in table.notes
        assert cells.LAUNCH_BOUND_NOTE not in table.notes
        if table.key.startswith("model-") and not table.key.endswith("-hist"):
            assert table.columns == COLUMNS
    assert column(find(report, "Summary: Total (ms), gpu"), "torch",
                  Model="resnet50", Batch="16").text == "30.00 (eager)"


def test_cpu_rows_never_show_device_time(tmp_path):
    row = fx.make_row("resnet50", 16, "forward", "torch", "cpu", 400.0,
                      timing_extra=fx.device_timing(400.0))
    report = report_of(tmp_path, [row, fx.make_row("resnet50", 16, "forward", "jax", "cpu",
                                                   500.0)])
    assert column(find(report, "Summary: Forward (ms), cpu"), "torch").text == \
        "400.0 (eager, 8 thr)"
    assert find(report, "resnet50 (input").columns == COLUMNS


# --- ranking --------------------------------------------------------------------------------

def _timed(median, low, high, status="ok"):
    return {"status": status, "median_ms": median, "ci_low_ms": low, "ci_high_ms": high}


def test_a_winner_needs_an_interval_clear_of_the_runner_up():
    clear, next_ = _timed(1.0, 0.9, 1.1), _timed(1.5, 1.2, 1.8)
    assert ranking.clear_winner([next_, clear]) is clear
    assert ranking.clear_winner([clear, _timed(1.2, 1.05, 1.3)]) is None      # overlap
    assert ranking.clear_winner([clear]) is None                             # alone
    assert ranking.clear_winner([clear, None, _timed(0.5, 0.4, 0.6, "oom")]) is None
    assert ranking.clear_winner([_timed(1.0, 0.9, math.nan), next_]) is None  # no interval
    # the runner-up decides, not the slowest
    assert ranking.clear_winner([clear, _timed(1.15, 1.1, 1.2), _timed(9, 8, 10)]) is None


def test_gpu_cases_without_device_time_or_launch_bound_are_not_ranked(tmp_path):
    report = report_of(tmp_path, fx.device_rows())
    total = find(report, "Summary: Total (ms), gpu")
    lenet = [column(total, fw, Model="lenet") for fw in ("tf", "torch")]
    assert [c.emphasis for c in lenet] == ["", ""]          # no device time, no earlier runs
    assert "not ranked: no device time" in lenet[0].title
    # JAX has no device time: ResNet-50 is not ranked, though its wall intervals are apart
    assert column(total, "torch", Model="resnet50").emphasis == ""
    # launch-bound (torch's device time 8% of its wall): the wall times are the host's
    assert column(total, "tf", Model="sae_ae1").emphasis == ""
    assert "launch-bound" in column(total, "tf", Model="sae_ae1").title
    assert any("not ranked" in n and "device-time median" in n for n in total.notes)
    model = find(report, "lenet (input 64")
    assert not any(c.emphasis == "bold" for r in model.rows for c in r)
    assert any("wall-time median" in n and "not ranked" in n for n in model.notes)


def test_one_framework_alone_is_not_bold(tmp_path):
    report = report_of(tmp_path, [fx.make_row("lenet", 64, "forward", "tf", "gpu", 0.5),
                                  fx.make_row("vgg16", 16, "forward", "tf", "gpu", 9.0,
                                              timing_extra=fx.device_timing(8.8)),
                                  fx.make_row("vgg16", 16, "forward", "torch", "gpu", 12.0,
                                              timing_extra=fx.device_timing(11.5))])
    summary = find(report, "Summary: Forward (ms), gpu")
    assert column(summary, "tf", Model="lenet").emphasis == ""
    assert column(summary, "tf", Model="vgg16").emphasis == "bold"


# --- README headline tables and conditions -------------------------------------------------

def test_readme_rows_keep_only_the_notes_their_cells_need():
    notes = ("fastest", cells.DEVICE_NOTE, cells.LAUNCH_BOUND_NOTE)
    table = Table("t", "t", ("Model", "Batch", "a", "b", "Equiv."),
                  ((Cell("m1"), Cell("16"), Cell("1.00 (jit)"), Cell("2.00 (eager)"), Cell("✓")),
                   (Cell("m2"), Cell("16"), Cell("1.00 (eager, dev 0.20) †"), Cell("—"),
                    Cell("—"))), notes=notes)
    kept = readme_tables.compared_rows(table, frameworks=2)
    assert [r[0].text for r in kept.rows] == ["m1"] and kept.notes == ("fastest",)


def test_conditions_show_device_span_and_host_overhead(tmp_path):
    extra = {"repetitions": 5}
    rows = [fx.make_row("resnet50", 16, "gradient", "torch", "gpu", 24.12, threads=4,
                        timing_extra={**extra, **fx.device_timing(22.68, span=23.9)}),
            fx.make_row("sae_ae1", 64, "gradient", "torch", "gpu", 1.12, threads=4,
                        timing_extra={**extra, **fx.device_timing(0.0914)})]
    table = find(report_of(tmp_path, rows), "Measurement conditions")
    assert column(table, "Device span (ms)", Model="resnet50").text == "23.90"
    assert column(table, "Device span (ms)", Model="sae_ae1").text == "—"
    assert column(table, "Host overhead (ms)", Model="resnet50").text == "1.44 (6%)"
    assert column(table, "Wall time (ms)", Model="sae_ae1").text.endswith(cells.LAUNCH_BOUND)
    assert column(table, "Device time (ms)", Model="resnet50").title.startswith("CUDA events")


def test_device_time_above_the_wall_time_is_marked_and_gives_no_host_overhead(tmp_path):
    """Two processes that ran different work (TensorFlow's autotuning chose a 2x slower
    convolution in its device process on an H200: 4.84 ms wall, 9.61 ms device): the cell
    says so (≠) and explains it, and no host overhead is made up; a device time a little
    above the wall median (two phases' blocks, under models/measures.py's 5%) stays
    unmarked."""
    extra = {"repetitions": 5}
    rows = [fx.make_row("alexnet", 64, "forward", "tf", "gpu", 4.84, threads=4,
                        timing_extra={**extra, **fx.device_timing(9.61)}),
            fx.make_row("lenet", 64, "forward", "tf", "gpu", 1.00, threads=4,
                        timing_extra={**extra, **fx.device_timing(1.03)})]
    report = report_of(tmp_path, rows)
    total = find(report, "Summary: Forward (ms), gpu")
    above = column(total, "tf", Model="alexnet")
    assert above.text == "4.84 (graph, dev 9.61) ≠"
    assert "host overhead" not in above.title and "different work" in above.title
    assert cells.DEVICE_ABOVE_NOTE in total.notes
    assert not column(total, "tf", Model="lenet").text.endswith(cells.DEVICE_ABOVE)
    conditions = find(report, "Measurement conditions")
    assert column(conditions, "Host overhead (ms)", Model="alexnet").text == \
        f"{cells.MISSING} {cells.DEVICE_ABOVE}"
    assert column(conditions, "Host overhead (ms)", Model="lenet").text == "0 (0%)"


# --- compared with a reference --------------------------------------------------------------

def _published(root: Path, rows) -> Path:
    from reports import publish
    source = root / "reference-rows"
    (source / "default-gpu" / "gpubox").mkdir(parents=True)
    fx._write(source / "default-gpu" / "gpubox" / "torch_gpu.jsonl", rows)
    target = root / "published" / "h100-2026-01"
    assert publish.main([str(source), "--to", str(target), "--device-name", "H100"]) == 0
    return target


def _yours(root: Path, rows) -> Path:
    (root / "results" / "userbox").mkdir(parents=True)
    fx._write(root / "results" / "userbox" / "gpu.jsonl", rows)
    return root / "results"


def test_compare_gives_the_device_ratio_where_both_sides_have_device_time(tmp_path):
    from reports.compare import pair_rows, split

    env = {**fx.GPU_HOST, "host": "userbox"}
    reference = _published(tmp_path, fx.device_rows())
    # another host: wall 23.02 against 24.12 (its CPU), device within 0.5%
    yours = _yours(tmp_path, [
        fx.make_row("resnet50", 16, "gradient", "torch", "gpu", 23.02, threads=4, env=env,
                    timing_extra=fx.device_timing(22.79)),
        fx.make_row("resnet50", 16, "gradient", "jax", "gpu", 26.0, threads=4, env=env,
                    timing_extra=fx.device_timing(None)),
        fx.make_row("sae_ae1", 64, "gradient", "torch", "gpu", 0.83, threads=4, env=env)])
    loaded = load([yours, reference])
    pairs, _ = pair_rows(*split(loaded, (reference,)))
    by = {(p.yours["model"], p.yours["framework"]): p for p in pairs}
    assert by[("resnet50", "torch")].device_ratio == pytest.approx(22.79 / 22.68)
    assert math.isnan(by[("resnet50", "jax")].device_ratio)       # neither side has one
    assert math.isnan(by[("sae_ae1", "torch")].device_ratio)      # only the reference has
    section = next(s for s in make_report(loaded, (reference,)).sections if s.key == "compare")
    summary, rows = section.tables
    assert summary.columns[-2:] == ("Rows with device time", "Geo-mean device ratio")
    torch = next(r for r in summary.rows if r[0].text == "torch")
    assert (torch[-2].text, torch[-1].text) == ("1", "1.00×")
    index = {c: i for i, c in enumerate(rows.columns)}
    line = next(r for r in rows.rows if r[0].text == "resnet50"
                and r[index["Framework"]].text == "torch eager")
    assert line[index["Yours (ms)"]].text == "23.02 (dev 22.79)"
    assert line[index["Reference (ms)"]].text == "24.12 (dev 22.68)"
    assert line[index["Ratio"]].text == "0.95×"
    assert line[index["Device ratio"]].text == "1.00×"
    assert any(n.startswith("dev:") for n in rows.notes)


def test_compare_without_device_time_keeps_its_columns(tmp_path):
    from reports.compare import section_parts

    env = {**fx.GPU_HOST, "host": "userbox"}
    reference = _published(tmp_path, fx.gpu_rows())
    yours = _yours(tmp_path, [fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.05,
                                          threads=4, env=env)])
    _, (summary, rows) = section_parts(load([yours, reference]), (reference,))
    assert "Geo-mean device ratio" not in summary.columns
    assert "Device ratio" not in rows.columns
    assert rows.rows[0][rows.columns.index("Yours (ms)")].text == "10.05"
