"""Today's practice (reports/sections/practice.py): the practice suites' rows in a section of their
own, with throughput, utilisation, memory, energy and the float64 verdict; their figure of
throughput against batch size; their README table; and their absence from every strict-fp32
table, ranking and ratio. Synthetic rows, no framework."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from matplotlib.axes import Axes

from reports import readme_tables
from reports.pipeline.load import load
from reports.render.build import build, judge, make_report
from reports.render.plots import practice_plots
from reports.sections import practice
from tests import report_fixtures as fx

GPU = "NVIDIA H100 80GB HBM3"
RESNET50_FLOPS = fx.INFO["resnet50"][1]           # forward FLOPs per example (fixture)
H100_BF16_PEAK = 989.5                            # reports/data/device_peaks.csv, H100 SXM
COUNTER = "NVML total energy counter over 4.10 s of the case running"
POWER = "median NVML power reading × time (this GPU has no energy counter)"
SKIPPED = ("float64 reference skipped: 6279 GFLOP > 3000 (DLBENCH_TRUTH_MAX_GFLOP); "
           "pairwise agreement only")


def timed(model, batch, measure, framework, median, *, precision="bf16", variant=None,
          energy_j=None, source=COUNTER, suite="practice-gpu", **kw):
    extra = {} if energy_j is None else {"energy_per_iteration_j": energy_j,
                                         "gpu_energy_power_w": energy_j / median * 1e3,
                                         "energy_source": source}
    return fx.make_row(model, batch, measure, framework, "gpu", median, precision=precision,
                       variant=variant, threads=4, suite=suite, timing_extra=extra, **kw)


def printed(model, batch, framework, vs_f64, *, precision="bf16", variant=None,
            fp_scale=1.0, suite="practice-gpu"):
    """A job's fingerprint row: no timing, the fingerprint with its float64 errors."""
    row = fx.make_row(model, batch, "fingerprint", framework, "gpu", 1.0, precision=precision,
                      variant=variant, threads=4, suite=suite)
    row.update(timing=None, memory=None)
    row["fingerprint"] = {**fx.fingerprint("gradient", fp_scale), "vs_f64": copy.deepcopy(vs_f64)}
    return row


def bf16_errors(output=3e-3):
    return {"norm": "max-abs relative", "output": output, "loss": 1e-3, "grad": None,
            "grad_norms": None, "grad_skipped": "not computed: ReLU network"}


def practice_rows() -> list[dict]:
    """ResNet-50 bf16 on an H100: torch (eager and compile) and jax swept over batches,
    torch's largest batch out of memory, ONNX Runtime without a training step; the float64
    reference skipped at batch 1024 (pairwise only, both frameworks agree); an fp32 row of
    the same model at batch 16 that must stay out of the strict tables."""
    rows = []
    for batch, torch_ms, jax_ms in ((64, 40.0, 45.0), (256, 128.0, 150.0),
                                    (1024, 500.0, 580.0)):
        rows += [timed("resnet50", batch, "train_step", "torch", torch_ms,
                       energy_j=0.9 * batch, peak_bytes=batch * 60 * 2**20),
                 timed("resnet50", batch, "train_step", "jax", jax_ms,
                       energy_j=1.0 * batch, source=POWER)]
        errors = {"skipped": SKIPPED} if batch == 1024 else bf16_errors()
        rows += [printed("resnet50", batch, "torch", errors),
                 printed("resnet50", batch, "jax", errors, fp_scale=1.001)]
    rows.append(timed("resnet50", 2048, "train_step", "torch", None, status="oom",
                      reason="CUDA out of memory. Tried to allocate 3.06 GiB"))
    rows.append(timed("resnet50", 256, "forward", "torch", 40.0, energy_j=60.0))
    rows.append(timed("resnet50", 256, "train_step", "torch", 100.0, variant="compile",
                      energy_j=200.0))
    rows.append(printed("resnet50", 256, "torch", bf16_errors(), variant="compile"))
    rows.append(timed("resnet50", 256, "forward", "ort", 35.0, variant="ort_all"))
    rows.append(timed("resnet50", 256, "train_step", "ort", None, variant="ort_all",
                      status="unsupported", reason="ONNX Runtime runs here as an inference "
                                                   "engine: no training step"))
    # a bf16 error past ResNet-50's bound (5.7e-2 at batch 256): ✗
    rows.append(timed("resnet50", 256, "forward", "jax", 45.0, precision="tf32",
                      energy_j=70.0))
    rows.append(printed("resnet50", 256, "jax", bf16_errors(output=2e-1), precision="tf32"))
    # the LSTM counts sequences
    rows.append(timed("lstm", 128, "train_step", "torch", 20.0, energy_j=12.8))
    rows.append(printed("lstm", 128, "torch", {**bf16_errors(), "grad": 8e-3,
                                               "grad_skipped": ""}))
    # fp32 strict in the practice suite, at the strict suites' batch
    rows.append(timed("resnet50", 16, "forward", "torch", 3.0, precision="fp32"))
    return rows


def strict_rows() -> list[dict]:
    """A strict-fp32 run of the same GPU: ResNet-50 at batch 16, torch and jax."""
    return [fx.make_row("resnet50", 16, measure, fw, "gpu", median, threads=4)
            for fw, fwd, grad in (("torch", 10.0, 30.0), ("jax", 20.0, 75.0))
            for measure, median in (("forward", fwd), ("gradient", grad))]


def write(root: Path, rows: list[dict], name: str = "rows.jsonl") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    fx._write(root / name, rows)
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write(tmp_path_factory.mktemp("practice") / "results", practice_rows())
    write(root, strict_rows(), "strict.jsonl")
    return make_report(load([root]))


def section(report):
    return next(s for s in report.sections if s.key == "practice")


def table(report, title):
    return next(t for t in section(report).tables if t.title == title)


def line(table, **cols) -> dict[str, str]:
    index = {c: i for i, c in enumerate(table.columns)}
    found = [row for row in table.rows if all(row[index[c]].text == v for c, v in cols.items())]
    assert len(found) == 1, (cols, len(found))
    return {c: found[0][i].text for c, i in index.items()}


def test_the_section_has_one_table_per_hardware_and_model(report):
    titles = [t.title for t in section(report).tables]
    assert titles == [f"resnet50 on {GPU}", f"lstm on {GPU}"]
    resnet = table(report, f"resnet50 on {GPU}")
    assert resnet.columns[6:10] == ("Images/s", "Utilisation", "Peak memory (GiB)", "J/image")
    assert table(report, f"lstm on {GPU}").columns[6] == "Sequences/s"
    # bf16 first, then tf32, then fp32; batches ascending
    precisions = [row[1].text for row in resnet.rows]
    assert precisions == sorted(precisions, key=practice.PRECISION_ORDER.index)


def test_throughput_utilisation_memory_and_energy(report):
    row = line(table(report, f"resnet50 on {GPU}"), Batch="256", Framework="torch",
               Variant="eager", Measure="train step")
    assert row["Median (ms)"] == "128.0"
    assert row["Images/s"] == "2,000"                       # 256 / 0.128 s
    assert row["Utilisation"] == "5.0%"                     # 4.96%: the next test
    assert row["Peak memory (GiB)"] == "15"                 # 256 × 60 MiB
    assert row["J/image"] == "0.9"
    assert row["vs float64"] == "3.0e-03 ✓"
    jax = line(table(report, f"resnet50 on {GPU}"), Batch="256", Framework="jax",
               Precision="bf16", Measure="train step")
    assert jax["J/image"] == f"1 {practice.NOT_COUNTER}"     # power readings, marked
    assert any(POWER in note for note in table(report, f"resnet50 on {GPU}").notes)
    lstm = line(table(report, f"lstm on {GPU}"), Batch="128")
    assert lstm["Sequences/s"] == "6,400" and lstm["J/sequence"] == "0.1"
    assert lstm["vs float64"] == "8.0e-03 ✓"           # its gradients are judged too


def test_utilisation_is_the_share_of_the_precisions_peak(report):
    """By hand: a training step is 3 × the forward FLOPs, 3 × 8.18 GFLOP × 256 images in
    0.128 s = 49.08 TFLOP/s; the H100 SXM's dense bf16 peak is 989.5 TFLOP/s: 4.960%."""
    frame = report.frame
    row = frame[(frame["suite"] == "practice-gpu") & (frame["measure"] == "train_step")
                & (frame["batch"] == 256) & (frame["variant"] == "eager")
                & (frame["framework"] == "torch")].iloc[0]
    assert RESNET50_FLOPS == 8.18e9
    assert row["achieved_tflops"] == pytest.approx(49.08)
    assert row["peak_tflops"] == H100_BF16_PEAK
    assert row["peak_share"] == pytest.approx(0.04960, abs=1e-5)


def test_statuses_other_than_ok_are_rows(report):
    resnet = table(report, f"resnet50 on {GPU}")
    oom = line(resnet, Batch="2048", Framework="torch")
    assert oom["Median (ms)"] == "OOM" and oom["Images/s"] == "—"
    ort = line(resnet, Framework="ort", Measure="train step")
    assert ort["Median (ms)"].startswith("unsupported")
    assert line(resnet, Framework="ort", Measure="forward")["Images/s"] == "7,314"


def test_the_float64_verdict_and_pairwise_only(report):
    resnet = table(report, f"resnet50 on {GPU}")
    skipped = line(resnet, Batch="1024", Framework="torch")
    assert skipped["vs float64"] == "pairwise ✓"
    assert f"pairwise: {SKIPPED}" in resnet.notes
    assert line(resnet, Precision="tf32")["vs float64"] == "2.0e-01 ✗"


def test_the_figure_marks_the_batch_that_did_not_fit(report, monkeypatch):
    plots = section(report).plots
    assert [p.key for p in plots] == [f"practice_resnet50_bf16_{GPU.replace(' ', '_')}"]
    assert plots[0].png.startswith(b"\x89PNG") and "OOM" in plots[0].caption
    calls, original = [], Axes.annotate
    monkeypatch.setattr(Axes, "annotate", lambda self, text, xy, **kw: calls.append(
        (text, xy)) or original(self, text, xy, **kw))
    lines = []
    monkeypatch.setattr(Axes, "set_xscale", lambda self, *a, **kw: lines.append((a, kw)))
    practice_plots(report.frame[report.frame["practice"]])
    # at batch 2048, level with torch's last batch that ran (1024 in 0.5 s: 2048 images/s)
    assert calls == [("OOM", (2048, pytest.approx(1024 / 0.5)))]
    assert lines == [(("log",), {"base": 2})]


def test_practice_rows_stay_out_of_every_strict_table(report):
    for s in report.sections:
        if s.key in ("practice", "reference"):     # reference: the datasheet peaks used
            continue
        for t in s.tables:
            texts = " ".join(c.text for row in t.rows for c in row)
            assert "bf16" not in texts and "practice" not in texts, t.title
            if t.key.startswith(("summary", "model-")):
                # the strict rows only: batch 16, and the practice suite's fp32 batch-16
                # forward (3.00 ms) never among them
                assert "3.00" not in texts, t.title
    summary = next(t for s in report.sections if s.key == "summary" for t in s.tables
                   if "Forward" in t.title)
    assert [row[0].text for row in summary.rows] == ["resnet50"]
    assert all("practice" not in r.context for r in report.ratios)
    assert report.equivalence.verdicts.keys() == {("resnet50", 16, "fp32")}


def test_markdown_and_html_carry_the_section(tmp_path):
    root = write(tmp_path / "results", practice_rows())
    report, written = build([root], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Today's practice" in md and "| 256 | bf16 | torch | eager | train step |" in md
    assert "Today&#x27;s practice" in (tmp_path / "out" / "report.html").read_text()
    assert (tmp_path / "out" / "plots" / f"{section(report).plots[0].key}.png") in written
    assert "Today's practice (practice suites" in (tmp_path / "out" / "summary.txt").read_text()


def test_readme_table_from_a_published_folder(tmp_path):
    folder = write(tmp_path / "published" / "h100-2027-01" / "practice-gpu", practice_rows())
    write(folder, strict_rows(), "strict.jsonl")
    judged = judge(load([folder]))
    # the README's strict headline matrices: the strict rows alone
    headline = readme_tables.summary_parts(judged)
    texts = " ".join(c.text for t in headline for row in t.rows for c in row)
    assert [t.title for t in headline] == [f"Summary: Total (ms), gpu {GPU}, fp32",
                                           f"Summary: Forward (ms), gpu {GPU}, fp32"]
    assert "10.00" in texts and "3.00" not in texts
    lines = practice.readme_lines(judged.practice, "published/h100-2027-01")
    table = practice.readme_table(lines)
    rows = {row[1].text: [c.text for c in row] for row in table.rows}
    # torch's fastest variant by training step (compile: 2560 img/s); compile has no forward
    # row here, so the fastest forward of another variant stands beside it, named
    assert rows["torch"][2:] == ["compile (compiled)", "2,560", "6,400 (eager)", "6.3%", "0.781"]
    assert rows["jax"][2:5] == ["jit (compiled)", "1,707", "—"]
    assert rows["ort"][2] == "ort_all"          # a session: not compiled (reports/pipeline/modes.py)
    assert practice.COMPILED_NOTE in table.notes
    assert rows["ort"][3].startswith("unsupported") and rows["ort"][4] == "7,314"
    assert GPU in rows["torch"][0] and "published/h100-2027-01" in rows["torch"][0]
    text = "\n".join(practice.readme_part(lines))
    assert "938 img/s" in text and "2470 img/s" in text and "| torch | compile (compiled) |" in text


def test_readme_without_practice_rows_says_so_in_one_line():
    part = practice.readme_part([])
    assert part[2] == "No published `practice-gpu` rows yet (`suites/practice-gpu.toml`)."
    assert not any(text.startswith("|") for text in part)
    block = readme_tables.block([], readme_tables.ROOT)
    assert block.count("No published `practice-gpu` rows yet") == 1


def test_cpu_tables_leave_out_utilisation_and_energy(tmp_path):
    rows = [fx.make_row("resnet50", 4, measure, fw, "cpu", median, precision=precision,
                        threads=2, suite="practice-cpu")
            for fw, precision, measure, median in (("torch", "fp32", "train_step", 1100.0),
                                                   ("torch", "bf16", "train_step", 9000.0),
                                                   ("tf", "bf16", "forward", 400.0))]
    rows.append(fx.make_row("resnet50", 4, "forward", "ort", "cpu", None, precision="bf16",
                            threads=2, suite="practice-cpu", status="unsupported",
                            reason="ONNX Runtime has no automatic mixed precision"))
    report = make_report(load([write(tmp_path, rows + practice_rows())]))
    titles = [t.title for t in section(report).tables]
    assert titles[-1] == f"resnet50 on {fx.CPU_HOST['cpu_model']}"      # GPUs first
    cpu = section(report).tables[-1]
    assert "Utilisation" not in cpu.columns and "J/image" not in cpu.columns
    assert line(cpu, Framework="torch", Precision="bf16")["Images/s"] == "0.444"
    assert line(cpu, Framework="ort")["Median (ms)"].startswith("unsupported")
    assert any("RSS" in note for note in cpu.notes)


def test_a_practice_row_never_supersedes_a_strict_row_of_the_same_settings(tmp_path):
    strict = fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0, threads=4,
                         started="2026-01-10T10:00:00")
    again = fx.make_row("resnet50", 16, "forward", "torch", "gpu", 3.0, threads=4,
                        suite="practice-gpu", started="2026-01-11T10:00:00")
    judged = judge(load([write(tmp_path, [strict, again])]))
    assert list(judged.steady["median_ms"]) == [10.0]
    assert list(judged.practice["median_ms"]) == [3.0]


def test_the_comparison_pairs_practice_rows_with_practice_rows_only(tmp_path):
    from reports.compare import pair_rows, split

    reference = write(tmp_path / "published", strict_rows())
    yours = write(tmp_path / "results", [timed("resnet50", 16, "forward", "torch", 3.0,
                                               precision="fp32")])
    pairs, unmatched = pair_rows(*split(load([yours, reference]), (reference,)))
    assert pairs == [] and [r["suite"] for r in unmatched] == ["practice-gpu"]


def test_train_step_rows_of_a_strict_suite_reach_its_tables(tmp_path):
    rows = strict_rows() + [fx.make_row("resnet50", 16, "train_step", fw, "gpu", median,
                                        threads=4)
                            for fw, median in (("torch", 33.0), ("jax", 80.0))]
    report = make_report(load([write(tmp_path, rows)]))
    summary = [t.title for s in report.sections if s.key == "summary" for t in s.tables]
    assert summary == [f"Summary: {m} (ms), gpu {GPU}, fp32"
                       for m in ("Total", "Train step", "Forward")]
    model = next(t for s in report.sections if s.key == "models" for t in s.tables
                 if t.key == "model-resnet50-b16")
    at = model.columns.index("Total (ms)")
    assert model.columns[at + 1] == "Train step (ms)"
    assert [row[at + 1].text.split()[0] for row in model.rows] == ["33.00", "80.00"]
    frame = report.frame
    torch = frame[(frame["measure"] == "train_step") & (frame["framework"] == "torch")].iloc[0]
    assert torch["achieved_tflops"] == pytest.approx(3 * 8.18e9 * 16 / 0.033 / 1e12)
    assert all(s.key != "practice" for s in report.sections)


def test_a_practice_only_run_has_no_empty_strict_sections(tmp_path):
    report = make_report(load([write(tmp_path, practice_rows())]))
    keys = [s.key for s in report.sections]
    assert keys[:2] == ["overview", "practice"] and "summary" not in keys
    assert all(s.tables or s.plots or s.paragraphs for s in report.sections)
