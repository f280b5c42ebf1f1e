"""The report stage (reports/): tables in the seeds' formats, statistics, equivalence,
ratios, failures, plots, the HTML page, historical data and bad input. Synthetic rows come
from tests/report_fixtures.py."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reports.pipeline import equivalence, peaks, ratios
from reports.pipeline.historical import HISTORICAL_CSV, load_historical
from reports.pipeline.load import load
from reports.pipeline.naming import parse_conv
from reports.pipeline.tidy import tidy
from reports.render.build import build, make_report
from reports.render.html import HOOK
from tests import report_fixtures as fx

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reports", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    results = fx.write_results(root / "results")
    report, written = build([results], root / "report")
    return report, root / "report", results


def find_table(report, title_part: str):
    for section in report.sections:
        for table in section.tables:
            if title_part in table.title:
                return table
    raise AssertionError(f"no table titled like {title_part!r}")


def row_where(table, **cols):
    index = {c: i for i, c in enumerate(table.columns)}
    for row in table.rows:
        if all(row[index[c]].text == v for c, v in cols.items()):
            return {c: row[i].text for c, i in index.items()}
    raise AssertionError(f"no row {cols} in {table.title}")


# --- outputs --------------------------------------------------------------------------------

def test_cli_writes_every_output_and_prints_summary(tmp_path):
    results = fx.write_results(tmp_path / "results")
    proc = run_cli(str(results), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    for name in ("report.md", "report.html", "summary.txt", "results_tidy.csv"):
        assert (out / name).stat().st_size > 0, name
    assert pd.read_csv(out / "results_tidy.csv").shape[0] == 100
    assert not list(out.glob("*.parquet"))   # CSV only: Parquet is not promised
    assert {p.name for p in (out / "plots").glob("*.png")} >= {
        "batch_resnet50.png", "sweep_i.png", "threads_resnet18_b16.png",
        "bars_resnet50_b16.png"}
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["model", "batch", "hardware"]
    vgg_jax = [line for line in lines if line.startswith("vgg16") and " jax " in line]
    assert len(vgg_jax) == 1 and "OOM" in vgg_jax[0] and "✗" in vgg_jax[0]


def test_tidy_csv_has_one_row_per_kept_result(built):
    report, out, _ = built
    with (out / "results_tidy.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(report.frame) == 100
    tf32 = [r for r in rows if r["precision"] == "tf32"]
    assert len(tf32) == 1 and float(tf32[0]["median_ms"]) == 4.0
    assert {"achieved_tflops", "peak_share", "equiv", "hardware", "reason"} <= set(rows[0])


# --- merging --------------------------------------------------------------------------------

def test_tf32_and_fp32_rows_of_one_case_are_never_merged(built):
    report, _, _ = built
    f = report.frame
    same = f[(f.model == "resnet50") & (f.batch == 16) & (f.measure == "forward")
             & (f.framework == "torch") & (f.device == "gpu")]
    assert sorted(same.precision) == ["fp32", "tf32"]
    assert sorted(same.median_ms) == [4.0, 10.0]
    table = find_table(report, "resnet50 (input 16 x")
    assert row_where(table, Precision="tf32", Hardware="NVIDIA H100 80GB HBM3")[
        "Forward (ms)"] == "4.00 (3.96–4.04)"
    assert row_where(table, Precision="fp32", Framework="torch",
                     Hardware="NVIDIA H100 80GB HBM3")["Forward (ms)"].startswith("10.00")


def test_reruns_of_identical_settings_keep_the_latest(built):
    report, _, _ = built
    f = report.frame
    kept = f[(f.model == "resnet50") & (f.batch == 16) & (f.measure == "forward")
             & (f.framework == "torch") & (f.device == "gpu") & (f.precision == "fp32")]
    assert list(kept.median_ms) == [10.0]          # the older 99 ms run was superseded
    assert report.superseded == 1
    assert any("superseded" in p for p in report.sections[0].paragraphs)


def test_same_shown_settings_on_two_hosts_stay_two_rows(tmp_path):
    a = fx.make_row("resnet50", 16, "forward", "torch", "cpu", 100.0)
    b = fx.make_row("resnet50", 16, "forward", "torch", "cpu", 150.0,
                    env={**fx.CPU_HOST, "host": "otherbox"})
    (tmp_path / "r.jsonl").write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    report = make_report(load([tmp_path]))
    table = find_table(report, "resnet50 (input")
    variants = sorted(r[2].text for r in table.rows)
    assert variants == ["eager [host cpubox]", "eager [host otherbox]"]


# --- cnn-benchmarks tables ------------------------------------------------------------------

def test_model_table_backward_is_total_minus_forward(built):
    report, _, _ = built
    table = find_table(report, "resnet50 (input 16 x 3 x 224 x 224)")
    row = row_where(table, Framework="torch", Precision="fp32",
                    Hardware="NVIDIA H100 80GB HBM3")
    assert row["Backward (ms)"] == "20.00"
    assert row["Total (ms)"] == "30.00 (29.70–30.30)"
    assert row["First call fwd / grad (ms)"] == "400.0 / 1200"
    assert row["Peak memory"] == "763 MiB (alloc)"
    assert row["Equiv."] == "✓"
    # fastest first, as cnn-benchmarks sorts its tables
    assert table.rows[0][1].text == "torch" and table.rows[0][0].text.startswith("NVIDIA")


def test_failures_are_cells_not_dropped(built):
    report, _, _ = built
    vgg = find_table(report, "vgg16 (input 16")
    assert row_where(vgg, Framework="jax")["Total (ms)"] == "OOM"
    assert row_where(vgg, Framework="jax")["Backward (ms)"] == "—"
    cpu = row_where(vgg, Hardware="Intel(R) Xeon(R) Platinum 8480+")
    assert cpu["Total (ms)"] == "failed (RuntimeError: boom in conv3_1)"
    lstm = find_table(report, "Table 6: LSTM, batch 16")
    assert lstm.rows[0][3].text == "unsupported (masked LSTM not implemented)"
    failures = find_table(report, "Failures")
    assert sorted(r[4].text for r in failures.rows) == ["OOM", "failed", "unsupported"]


def test_unstable_rows_are_marked_with_their_reason(built):
    report, _, _ = built
    table = find_table(report, "resnet50 (input 16 x 3 x 224 x 224)")
    row = row_where(table, Framework="torch", Hardware="Intel(R) Xeon(R) Platinum 8480+")
    assert row["Forward (ms)"].endswith("⚠")
    assert not row["Total (ms)"].endswith("⚠")
    assert any("IQR 14.0% of median" in n for n in table.notes)


def test_throughput_and_share_of_peak(built):
    report, _, _ = built
    table = find_table(report, "resnet50 (input 16 x 3 x 224 x 224)")
    gpu = row_where(table, Framework="torch", Precision="fp32",
                    Hardware="NVIDIA H100 80GB HBM3")
    # forward: 8.18 GFLOP × 16 / 10 ms = 13.1 TFLOP/s; gradient: 3 × that / 30 ms = 13.1
    assert gpu["TFLOP/s fwd / grad"] == "13.1 / 13.1"
    assert gpu["% of peak fwd / grad"] == "19.5% / 19.5%"          # of 67 TFLOP/s fp32
    tf32 = row_where(table, Precision="tf32")
    assert tf32["% of peak fwd / grad"].startswith("6.6%")          # of 494.5 TFLOP/s tf32
    cpu = row_where(table, Framework="torch", Hardware="Intel(R) Xeon(R) Platinum 8480+")
    assert cpu["% of peak fwd / grad"] == "—"
    assert cpu["TFLOP/s fwd / grad"] != "—"


def test_summary_matrix_models_by_frameworks(built):
    report, _, _ = built
    table = find_table(report, "Summary: Total (ms), gpu NVIDIA H100 80GB HBM3, fp32")
    assert table.columns == ("Model", "Batch", "jax", "torch", "Equiv.")
    row = row_where(table, Model="resnet50", Batch="16")
    assert row["torch"] == "30.00 (eager)" and row["jax"] == "75.00 (jit)"
    assert row_where(table, Model="vgg16")["jax"] == "OOM"
    cpu = find_table(report, "Summary: Total (ms), cpu")
    assert "tf" in cpu.columns            # a framework is just a string: picked up as is


# --- convnet-benchmarks layer tables --------------------------------------------------------

def test_layer_tables_best_per_layer_row(built):
    report, _, _ = built
    fwd = find_table(report, "convnet-benchmarks layers L1–L5: forward, gpu")
    assert fwd.columns[4:] == ("L1", "L2", "L3", "L4", "L5", "Total")
    best = [c.text for c in fwd.rows[-1]]
    assert best[:2] == ["cherry-picking", "best per layer"]
    assert best[4:] == ["9.00", "21.00", "8.00", "0.67", "2.00", "40.67"]   # L4 from jax
    summary = find_table(report, "convnet-benchmarks layers L1–L5: forward + backprop")
    assert row_where(summary, Framework="torch")["Total Time (ms)"] == "123.0"
    assert summary.rows[0][0].text == "torch"                   # ranked by total
    gi = find_table(report, "layers L1–L5: gradInput")
    assert row_where(gi, Framework="jax")["L4"] == "0.67"
    hist = find_table(report, "Historical (published, not measured here): convnet-benchmarks")
    cudnn = [r for r in hist.rows if r[2].text == "forward" and "CuDNN (R2)" in r[3].text][0]
    assert [c.text for c in cudnn[4:]] == ["90", "218", "79", "9", "17", "413"]


# --- Bahrampour tables ----------------------------------------------------------------------

def test_bahrampour_tables_cpu_rows_per_thread_count(built):
    report, _, _ = built
    table = find_table(report, "Table 3: LeNet, batch 64")
    assert table.columns == ("Device", "Threads", "Setting", "Gradient (ms)", "Forward (ms)",
                             "Peak memory")
    threads = [(r[0].text.split()[0], r[1].text, r[3].text) for r in table.rows]
    assert threads == [("CPU", "1", "46.00"), ("CPU", "6", "18.00"), ("GPU", "", "1.70")]
    hist = find_table(report, "Historical (published, not measured here): lenet, batch 64")
    assert any(r[2].text == "Torch7" and r[4].text == "16.5" for r in hist.rows)


def test_autoencoder_phase_columns(built):
    report, _, _ = built
    table = find_table(report, "Stacked autoencoders, Bahrampour Table 5")
    assert table.columns[3:] == ("AE1", "AE2", "AE3", "Total pre-training", "SE gradient",
                                 "SE forward")
    cpu = [r for r in table.rows if r[0].text.startswith("CPU")][0]
    assert [c.text for c in cpu[3:]] == ["5.00", "3.00", "2.00", "10.00", "3.30", "1.90"]
    gpu = [r for r in table.rows if r[2].text.startswith("jax")][0]
    assert gpu[6].text == "1.60"


# --- equivalence ----------------------------------------------------------------------------

def test_equivalence_flags_disagreement_and_compares_like_precision_only(built):
    report, _, _ = built
    eq = report.equivalence
    vgg = eq.verdicts[("vgg16", 16, "fp32")]
    assert vgg.agree is False and vgg.worst == pytest.approx(0.02 / 1.02, rel=1e-6)
    assert eq.model_text("vgg16", 16) == "✗ 2.0e-02"
    # the tf32 row is 5e-3 off fp32: fp32 still agrees, tf32 has nobody to compare with
    assert eq.verdicts[("resnet50", 16, "fp32")].agree is True
    assert eq.verdicts[("resnet50", 16, "tf32")].agree is None
    table = find_table(report, "vgg16 (input 16")
    assert row_where(table, Framework="jax")["Equiv."] == "✗ 2.0e-02"


def test_fingerprint_comparison_fields():
    base = fx.fingerprint("gradient")
    moved = json.loads(json.dumps(base))
    moved["grad_norms"]["fc.weight"] *= 1.01
    diff, where = equivalence.compare(base, moved)
    assert where == "grad_norms[fc.weight]"
    assert diff == pytest.approx(0.01 / 1.01 / equivalence.GRADIENT_SLACK)
    assert equivalence.compare(base, base) == (0.0, "")
    # a gradient missing from one framework is a disagreement, not a skipped parameter
    fewer = json.loads(json.dumps(base))
    fewer["grad_norms"].pop("fc.weight")
    assert equivalence.compare(base, fewer) == (float("inf"), "grad_norms: different parameter sets")
    # a mean near zero is scaled by the output's spread, not blown up
    a, b = dict(base, output_mean=1e-9), dict(base, output_mean=-1e-9)
    assert equivalence.compare(a, b)[0] < 1e-8


# --- ratios ---------------------------------------------------------------------------------

def test_framework_ratio_sentence_with_range_over_models(tmp_path):
    rows = []
    for model, k in (("resnet18", 2.0), ("resnet50", 2.2), ("vgg16", 2.5)):
        rows.append(fx.make_row(model, 16, "forward", "torch", "gpu", 10.0))
        rows.append(fx.make_row(model, 16, "forward", "jax", "gpu", 10.0 * k))
    fx._write(tmp_path / "r.jsonl", rows)
    found = ratios.framework_ratios(tidy(load([tmp_path])).frame)
    assert [r.sentence() for r in found] == [
        "torch is 2.00×–2.50× faster than jax across 3 models "
        "(forward, gpu NVIDIA H100 80GB HBM3, fp32)"]


def test_device_ratios_in_report(built):
    report, _, _ = built
    device = [r for r in report.ratios if r.kind == "device" and r.context ==
              "torch eager, gradient, fp32"]
    # resnet50 b16: 1200 ms cpu / 30 ms gpu = 40×; sae_ae3: 2.0 / 0.5 = 4×; vgg16 failed on
    # the CPU and is left out; lenet's CPU side is its faster thread count (6).
    assert [r.sentence() for r in device] == [
        "gpu NVIDIA H100 80GB HBM3 is 4.00×–40.00× faster than cpu Intel(R) Xeon(R) "
        "Platinum 8480+ across 6 models (torch eager, gradient, fp32)"]
    assert dict(zip(device[0].models, device[0].values))["lenet b64"] == pytest.approx(18 / 1.7)


# --- plots ----------------------------------------------------------------------------------

def test_plots_only_where_data_exist(built, tmp_path):
    report, _, _ = built
    keys = {p.key for s in report.sections for p in s.plots}
    assert {"batch_resnet50", "sweep_i", "threads_resnet18_b16", "bars_vgg16_b16"} <= keys
    assert not {"sweep_b", "sweep_k", "sweep_f", "sweep_s", "batch_vgg16"} & keys
    for plot in (p for s in report.sections for p in s.plots):
        assert plot.png[:8] == b"\x89PNG\r\n\x1a\n"
    one = fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0)
    (tmp_path / "one.jsonl").write_text(json.dumps(one) + "\n")
    small = make_report(load([tmp_path]))
    assert {p.key for s in small.sections for p in s.plots} == {"bars_resnet50_b16"}


def test_a_line_keeps_its_colour_in_every_panel_of_a_figure():
    """The panels of a figure share one legend, so a setting must have one colour in all of
    them: a panel without ONNX Runtime (it has no gradient) once drew TensorFlow in the
    colour the legend gave ONNX Runtime."""
    import matplotlib.pyplot as plt

    from reports.render.plots import _lines, line_styles

    def row(framework, measure, batch, ms):
        return {"framework": framework, "measure": measure, "batch": batch, "median_ms": ms}

    def name(r):
        return r["framework"]

    rows = [row(fw, m, b, 1.0 + b) for fw in ("jax", "ort", "tf", "torch")
            for m in ("gradient", "forward") for b in (16, 128)
            if not (fw == "ort" and m == "gradient")]
    styles = line_styles(name(r) for r in rows)
    fig, axes = plt.subplots(1, 2)
    for ax, measure in zip(axes, ("gradient", "forward")):
        _lines(ax, [r for r in rows if r["measure"] == measure], "batch", name=name,
               styles=styles)
    colours: dict[str, set] = {}
    for ax in axes:
        for line in ax.get_lines():
            colours.setdefault(line.get_label(), set()).add(line.get_color())
    plt.close(fig)
    assert sorted(colours) == ["jax", "ort", "tf", "torch"]
    assert all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == 4
    eleven = line_styles(f"setting {i:02d}" for i in range(11))
    assert eleven["setting 00"]["color"] == eleven["setting 10"]["color"]
    assert eleven["setting 00"]["ls"] != eleven["setting 10"]["ls"]


def test_parametric_conv_names():
    assert parse_conv("conv:c=3,i=128,f=64,k=11,s=1") == {"c": 3, "i": 128, "f": 64, "k": 11,
                                                         "s": 1, "p": 0}
    assert parse_conv("conv:c=3,i=128,f=64,k=11")["s"] == 1
    assert parse_conv("conv_l1") is None and parse_conv("conv:c=3,x=1") is None


# --- HTML -----------------------------------------------------------------------------------

def test_html_escapes_every_row_string(built):
    _, out, _ = built
    page = (out / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("<script") == 1                     # the error hook only
    md = (out / "report.md").read_text()
    assert "&lt;script>alert(1)&lt;/script>" in md and "<script>" not in md


def test_html_is_self_contained(built):
    _, out, _ = built
    page = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page
    images = re.findall(r'<img [^>]*src="([^"]{0,30})', page)
    assert images and all(src.startswith("data:image/png;base64,") for src in images)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium not installed "
                    "(apt-get install -y chromium)")
def test_headless_chromium_renders_without_errors(built, tmp_path):
    from reports.render.screenshot import check
    _, out, _ = built
    result = check(out / "report.html", tmp_path / "shot.png", height=2500)
    assert result.js_ok and result.errors == () and result.passed
    assert (tmp_path / "shot.png").read_bytes()[:4] == b"\x89PNG"
    # the check itself can fail: a page whose script throws is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><script>" + HOOK + "</script></head>"
                   "<body><p>x</p><script>throw new Error('boom')</script>"
                   "</body></html>")
    failed = check(bad, tmp_path / "bad.png", height=300)
    assert not failed.passed and any("boom" in e for e in failed.errors)


# --- historical data ------------------------------------------------------------------------

def test_historical_csv_columns_and_counts():
    with HISTORICAL_CSV.open() as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == ["study", "source_table", "hardware", "framework", "model",
                                     "batch", "measure", "value_ms", "note"]
        rows = list(reader)
    counts = pd.Series([r["study"] for r in rows]).value_counts().to_dict()
    assert counts == {"cnn-benchmarks": 348, "convnet-benchmarks": 340,
                      "Bahrampour et al. 2016": 226, "cnn-benchmarks cloud fork": 198}


def test_historical_transcription_is_self_consistent():
    hist = load_historical()
    # cnn-benchmarks and its fork print forward, backward and total to 0.01 ms
    cnn = hist[hist.study.str.startswith("cnn-benchmarks")]
    wide = cnn.pivot_table(index=["study", "source_table", "hardware", "note"],
                           columns="measure", values="value_ms", aggfunc="first")
    gap = (wide["forward"] + wide["backward"] - wide["gradient"]).abs()
    assert len(wide) == 116 + 66 and gap.max() <= 0.015
    # Bahrampour's autoencoder totals: AE1 + AE2 + AE3 (one published exception, noted)
    sae = hist[hist.model.str.contains("sae") & (hist.measure == "gradient")]
    for key, part in sae.groupby(["source_table", "hardware", "framework", "note"]):
        total = [v for m, v in zip(part.model, part.value_ms) if "pretraining" in m][0]
        parts = sum(v for m, v in zip(part.model, part.value_ms) if m.split("_")[-1]
                    in ("ae1", "ae2", "ae3"))
        assert abs(parts - total) <= 0.25 or "total as published" in key[3], key


@pytest.mark.parametrize("study,model,batch,hardware,framework,note,measure,value", [
    ("cnn-benchmarks", "resnet50", 16, "Pascal Titan X", "Torch7", "cuDNN 5.1.05", "gradient",
     103.58),
    ("cnn-benchmarks", "resnet101", 16, "CPU: Dual Xeon E5-2630 v3", "Torch7",
     "CPU (no cuDNN)", "gradient", 11306.24),
    ("cnn-benchmarks cloud fork", "resnet152", 16, "Tesla K80", "Torch7", "cuDNN 5.1.10",
     "backward", 700.15),
    ("convnet-benchmarks", "conv_l2", 128, "NVIDIA GeForce GTX Titan Black",
     "NVidia CuDNN (R2)", "cudnn.SpatialConvolution", "grad_input", 344),
    ("convnet-benchmarks", "alexnet", 128, "NVIDIA GeForce GTX Titan Black", "cuda-convnet2",
     "ConvLayer; Torch bindings", "forward", 88),
    ("Bahrampour et al. 2016", "alexnet_bvlc", 256, "GTX Titan X (Maxwell)", "Torch7",
     "cuDNN v3; GPU RAM 3.7 GB", "gradient", 390.2),
    ("Bahrampour et al. 2016", "lstm", 16, "GTX Titan X (Maxwell)", "Theano", "cuDNN v3",
     "forward", 4.66),
])
def test_historical_spot_values(study, model, batch, hardware, framework, note, measure, value):
    hist = load_historical()
    hit = hist[(hist.study == study) & (hist.model == model) & (hist.batch == batch)
               & (hist.hardware == hardware) & (hist.framework == framework)
               & (hist.note == note) & (hist.measure == measure)]
    assert list(hit.value_ms) == [value]


def test_historical_rows_sit_beside_todays(built):
    report, _, _ = built
    names = [t.title for s in report.sections for t in s.tables]
    mine = names.index("resnet50 (input 16 x 3 x 224 x 224)")
    assert names[mine + 1] == "Historical (published, not measured here): resnet50, batch 16"
    hist = find_table(report, "Historical (published, not measured here): resnet50, batch 16")
    assert row_where(hist, Hardware="Pascal Titan X", Note="cuDNN 5.1.05")[
        "Total (ms)"] == "103.58"
    cpu = row_where(hist, Study="cnn-benchmarks", Hardware="CPU: Dual Xeon E5-2630 v3")
    assert cpu["Forward (ms)"] == "2477.61"
    assert all(c.kind == "hist" for r in hist.rows for c in r)


# --- device peaks ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,device", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"), ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 (SXM4 and PCIe)"),
    ("Tesla V100-PCIE-16GB", "NVIDIA Tesla V100 PCIe"),
    ("Tesla V100-SXM2-32GB", "NVIDIA Tesla V100 SXM2"),
    ("NVIDIA GeForce GTX TITAN X", "NVIDIA GeForce GTX TITAN X (Maxwell)"),
    ("TITAN X (Pascal)", "NVIDIA TITAN X (Pascal)"),
    ("GeForce GTX 1080 Ti", "NVIDIA GeForce GTX 1080 Ti"),
    ("GeForce GTX 1080", "NVIDIA GeForce GTX 1080"), ("Tesla K80", "NVIDIA Tesla K80 (one GK210)"),
    ("Tesla K40c", "NVIDIA Tesla K40c"), ("NVIDIA L40S", None), ("", None),
])
def test_device_peaks_match_by_name(name, device):
    found = peaks.find_peak(name, peaks.load_peaks())
    assert (found.device if found else None) == device


def test_every_device_peak_has_a_source():
    table = peaks.load_peaks()
    assert all(p.source and p.tflops.get("fp32") for p in table)
    h100 = peaks.find_peak("NVIDIA H100 80GB HBM3", table)
    assert h100.tflops == {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5}


# --- bad input ------------------------------------------------------------------------------

def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    results = fx.write_results(tmp_path / "results")
    target = results / "cpubox" / "torch_cpu.jsonl"
    lines = target.read_text().count("\n")
    with target.open("a") as handle:
        handle.write('{"schema": 1, "case_id": "test/torch/cpu/resn')
    proc = run_cli(str(results), "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {target} line {lines + 1}: truncated JSON line skipped" in proc.stderr
    assert "100 rows" in (tmp_path / "out" / "summary.txt").read_text()


def test_torn_line_with_a_resumed_row_glued_on_is_recovered(tmp_path):
    row = fx.make_row("resnet50", 16, "forward", "torch", "cpu", 100.0)
    path = tmp_path / "r.jsonl"
    path.write_text('{"schema": 1, "case_id": "x/tor' + json.dumps(row) + "\n")
    loaded = load([tmp_path])
    assert len(loaded.rows) == 1 and loaded.rows[0].data["model"] == "resnet50"
    assert loaded.warnings == (f"warning: {path} line 1: torn line; recovered the row "
                               "appended to it",)


def test_unknown_schema_is_refused_with_file_and_line(tmp_path):
    rows = [fx.make_row("lenet", 64, "forward", "torch", "cpu", 1.0) for _ in range(3)]
    rows[2]["schema"] = 2
    path = tmp_path / "results" / "new.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_cli(str(tmp_path / "results"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"reports: error: {path} line 3: unknown schema version 2 (this report reads schema 1)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["empty", "missing", "blank-file"])
def test_no_rows_is_a_one_line_error(tmp_path, case):
    target = tmp_path / "results"
    if case != "missing":
        target.mkdir()
    if case == "blank-file":
        (target / "a.jsonl").write_text("\n")
    proc = run_cli(str(target), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reports: error: ")
    expected = {"empty": "no *.jsonl result files under", "missing": "no such directory",
                "blank-file": "no result rows in 1 file(s)"}[case]
    assert expected in lines[0] and str(target) in lines[0]


def test_row_without_required_fields_is_refused(tmp_path):
    row = fx.make_row("lenet", 64, "forward", "torch", "cpu", 1.0)
    del row["settings"]["precision"]
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(Exception, match=r"a.jsonl line 1: row lacks settings.precision"):
        load([tmp_path])


# --- boundaries -----------------------------------------------------------------------------

def test_reports_imports_no_framework(tmp_path):
    results = fx.write_results(tmp_path / "results")
    code = ("import sys; from pathlib import Path; from reports.render.build import build; "
            f"build([Path({str(results)!r})], Path({str(tmp_path / 'o')!r})); "
            "bad = [m for m in ('torch', 'tensorflow', 'jax', 'onnxruntime', 'onnx') "
            "if m in sys.modules]; print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    for source in (REPO / "reports").glob("*.py"):
        text = source.read_text()
        assert not re.search(r"^\s*(import|from)\s+(torch|tensorflow|jax|onnx)", text, re.M), \
            source


def test_fixture_rows_have_the_runner_row_layout():
    results = pytest.importorskip("suites.rows.results")
    settings = results.Settings("torch", "cpu", "fp32", "eager", 8, 1)
    row = results.Row(results.CaseKey("s", "lenet", 64, "forward", settings), "ok")
    theirs = row.to_json()
    ours = fx.make_row("lenet", 64, "forward", "torch", "cpu", 1.0)
    assert set(ours) == set(theirs)
    assert set(ours["settings"]) == set(theirs["settings"])
    assert theirs["schema"] == ours["schema"] == 1


def test_row_with_wrong_types_is_refused(tmp_path):
    row = fx.make_row("lenet", 64, "forward", "torch", "cpu", 1.0)
    row["batch"] = "64"
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n")
    proc = run_cli(str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"reports: error: {tmp_path / 'a.jsonl'} line 1: batch and "
                                   "settings.threads must be integers")


def test_text_summary_drops_control_characters(tmp_path):
    row = fx.make_row("evil\x1b[2Jmodel", 4, "forward", "torch", "cpu", 1.0)
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n")
    proc = run_cli(str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "evil[2Jmodel" in proc.stdout


# --- compile cache (Bahrampour Table 8) -----------------------------------------------------

def report_of(tmp_path, rows):
    fx._write(tmp_path / "r.jsonl", rows)
    return make_report(load([tmp_path]))


def test_compile_cache_table_first_compile_vs_recompile(tmp_path):
    report = report_of(tmp_path, fx.compile_cache_rows())
    f = report.frame
    torch_fwd = f[(f.framework == "torch") & (f.device == "cpu") & (f.measure == "forward")]
    assert sorted(torch_fwd.compile_cache) == ["", "cold", "warm"]     # never merged
    assert report.superseded == 0
    titles = [t.title for s in report.sections for t in s.tables if "Table 8" in t.title]
    assert titles == ["Table 8: first compile vs re-compile (s), CPU Intel(R) Xeon(R) "
                      "Platinum 8480+", "Table 8: first compile vs re-compile (s), GPU NVIDIA "
                      "H100 80GB HBM3", "Historical (published, not measured here): "
                      "Bahrampour Table 8, Theano compile times"]
    cpu = find_table(report, "Table 8: first compile vs re-compile (s), CPU")
    torch = row_where(cpu, Setting="torch compile fp32")
    assert (torch["First compile (s)"], torch["Re-compile (s)"]) == ("7.00", "1.00")
    assert torch["First compile fwd / grad (s)"] == "2.00 / 5.00"
    assert torch["Re-compile fwd / grad (s)"] == "0.30 / 0.70"
    gpu = find_table(report, "Table 8: first compile vs re-compile (s), GPU")
    assert row_where(gpu, Setting="torch compile fp32")["First compile (s)"] == "14.00"
    # forward only (ORT): the sum is what exists, and a note says so
    ort = row_where(cpu, Setting="ort ort_basic fp32")
    assert (ort["First compile (s)"], ort["Re-compile (s)"]) == ("1.50", "0.40")
    assert ort["First compile fwd / grad (s)"] == "1.50 / —"
    forward_only = [n for n in cpu.notes if n.startswith("Forward only")]
    assert len(forward_only) == 1 and "ort ort_basic fp32" in forward_only[0]
    assert "ort_all" not in forward_only[0] and "torch" not in forward_only[0]
    # a variant without a persistent cache is a failure cell with its reason, never dropped
    none = row_where(cpu, Setting="ort ort_all fp32")
    assert none["First compile (s)"] == none["Re-compile (s)"]
    # said once: both cells point to one note under the table (cells.compact_repeated_failures)
    assert none["First compile (s)"] == "unsupported [1]"
    assert [n for n in cpu.notes if n.startswith("[1] unsupported: ort variant 'ort_all' keeps no")]
    # the unmanaged run is no Table 8 row; the model table shows only the unmanaged run
    # (compile-cache rows carry a single steady-state sample: they are for Table 8)
    assert len(cpu.rows) == 3
    lenet = find_table(report, "lenet (input 64")
    variants = sorted(r[2].text for r in lenet.rows if r[1].text == "torch" and
                      r[0].text.startswith("Intel"))
    assert variants == ["compile"]
    failures = find_table(report, "Failures")
    assert {r[3].text for r in failures.rows} == {
        "ort ort_all [cache cold] fp32 · cpu 6 threads · Intel(R) Xeon(R) Platinum 8480+",
        "ort ort_all [cache warm] fp32 · cpu 6 threads · Intel(R) Xeon(R) Platinum 8480+"}
    hist = find_table(report, "Bahrampour Table 8")
    assert row_where(hist, Hardware="CPU: Xeon E5-1650 v2", Network="lenet")[
        "First compile (s)"] == "25.2"
    gpu_alexnet = row_where(hist, Hardware="GTX Titan X (Maxwell)", Network="alexnet_bvlc")
    assert (gpu_alexnet["First compile (s)"], gpu_alexnet["Re-compile (s)"]) == ("212", "6.1")


def test_historical_table8_is_in_ms():
    hist = load_historical()
    table8 = hist[hist.source_table == "Table 8"]
    assert len(table8) == 14 and set(table8.measure) == {"first_compile", "recompile"}
    lstm = table8[(table8.model == "lstm") & (table8.hardware == "GTX Titan X (Maxwell)")]
    assert dict(zip(lstm.measure, lstm.value_ms)) == {"first_compile": 283500.0,
                                                      "recompile": 19700.0}


# --- epoch (Bahrampour Table 6 over an epoch) -----------------------------------------------

def test_epoch_rows_fill_table6_over_an_epoch_per_batch(tmp_path):
    report = report_of(tmp_path, fx.epoch_rows())
    f = report.frame
    epoch = f[(f.model == "lstm") & (f.measure == "epoch_gradient") & (f.framework == "torch")]
    assert list(epoch.per_batch_median_ms) == [20.0] and list(epoch.epoch_batches) == [124]
    assert list(epoch.mean_padded_length) == [231.5] and list(epoch.median_ms) == [2480.0]
    table = find_table(report, "Table 6 over an epoch: lstm, batch 16")
    torch = row_where(table, Setting="torch eager fp32")
    assert (torch["Gradient (ms)"], torch["Forward (ms)"]) == ("20.00", "8.00")
    # the same reason in both of jax's cells: said once, in the notes
    assert row_where(table, Setting="jax jit fp32")["Gradient (ms)"] == "unsupported [1]"
    assert "[1] unsupported: no epoch of masked batches" in table.notes
    assert "One epoch: 124 batches, mean padded length 231.5 tokens." in table.notes
    # the single-batch Table 6 keeps the single-batch rows and says what it is
    single = find_table(report, "Table 6: LSTM, batch 16")
    assert row_where(single, Setting="torch eager fp32")["Gradient (ms)"] == "15.00"
    assert any("Table 6 over an epoch" in n for n in single.notes)
    # whole-epoch times are in no single-batch summary, model table or plot
    summary = find_table(report, "Summary: Total (ms), cpu")
    assert [(r[0].text, r[2].text) for r in summary.rows] == [("lstm", "15.00 (eager, 6 thr)")]
    assert row_where(find_table(report, "lstm (input 16"), Framework="torch")[
        "Total (ms)"].startswith("15.00")
    assert not any("lenet" in t.title for s in report.sections for t in s.tables
                   if not t.title.startswith("Table 6 over an epoch"))
    keys = {p.key for s in report.sections for p in s.plots}
    assert not any("lenet" in k for k in keys)
    lenet = find_table(report, "Table 6 over an epoch: lenet, batch 32")
    assert [r[3].text for r in lenet.rows] == ["160.0", "160.0"]       # 1 and 2 threads
    assert "One epoch: 10 batches." in lenet.notes


# --- profiles (Li et al. Figs. 2 and 4) -----------------------------------------------------

def shares_of(row) -> list[float]:
    return [float(row[c]) for c in ("conv %", "pool %", "ReLU %", "FC %", "concat %", "norm %",
                                    "other %")]


def test_profile_hotspot_and_top_kernel_tables(tmp_path):
    report = report_of(tmp_path, fx.profile_rows())
    section = [s for s in report.sections if s.key == "profiles"][0]
    assert section.title == "Hotspot layers and kernels (Li et al. format)"
    gpu = find_table(report, "Hotspot layers: share of profiled time per layer type, GPU")
    alexnet = row_where(gpu, Model="alexnet", Setting="torch eager fp32 · gpu")
    assert shares_of(alexnet) == [60.0, 10.0, 5.0, 20.0, 0.0, 0.0, 5.0]
    assert alexnet["Profiled (ms/iter)"] == "100.0" and alexnet["Profiled"] == "gradient"
    assert alexnet["Tool"] == "torch.profiler (CUDA kernels)"
    googlenet = row_where(gpu, Model="googlenet")
    assert sum(shares_of(googlenet)) == pytest.approx(100.0, abs=0.35)
    assert googlenet["concat %"] == "10.0"                     # 8 of 80 ms
    bold = {r[0].text: [c.text for c in r if c.emphasis == "bold"] for r in gpu.rows}
    assert bold == {"alexnet": ["60.0"], "googlenet": ["50.0"]}   # conv dominates both
    failed = row_where(gpu, Setting="tf graph fp32 · gpu")
    assert failed["conv %"] == "unsupported (tf variant 'graph' has no profiler hook)"
    cpu = find_table(report, "Hotspot layers: share of profiled time per layer type, CPU")
    cpu_shares = shares_of(row_where(cpu, Model="alexnet"))      # of 400 ms
    assert cpu_shares == [75.0, 10.0, 0.2, 12.5, 0.0, 0.0, 2.2]
    assert sum(cpu_shares) == pytest.approx(100.0, abs=0.35)

    kernels = find_table(report, "Top kernels: the 5 most expensive per model and setting, GPU")
    index = {c: i for i, c in enumerate(kernels.columns)}
    lines = list(kernels.rows)
    first = [r for r in lines if r[index["Model"]].text == "alexnet"
             and r[index["Setting"]].text == "torch eager fp32 · gpu"][0]
    start = lines.index(first)
    top = lines[start:start + 5]
    assert [r[index["#"]].text for r in top] == ["1", "2", "3", "4", "5"]
    assert [r[index["% of profiled"]].text for r in top] == ["30.0", "15.0", "12.0", "6.0",
                                                             "5.0"]
    assert top[0][index["Kernel or operation"]].title == fx.LONG_KERNEL
    assert top[0][index["Kernel or operation"]].text.endswith("…")
    assert {r[index["Kind"]].text for r in top} == {"GPU kernel"}
    after = lines[start + 5:start + 6]                        # the 6th and 7th are left out
    assert all(r[index["Model"]].text != "" for r in after)
    assert sum(1 for r in lines if r[index["Kernel or operation"]].title in (
        "softmax_kernel", "copy_kernel")) == 0
    assert row_where(kernels, Model="alexnet", Setting="tf graph fp32 · gpu")[
        "Kernel or operation"].startswith("unsupported (")
    cpu_kernels = find_table(report, "Top kernels: the 5 most expensive per model and "
                             "setting, CPU")
    assert {r[5].text for r in cpu_kernels.rows} == {"framework op"}
    keys = {p.key for p in section.plots}
    assert keys == {"hotspots_gpu_NVIDIA_H100_80GB_HBM3",
                    "hotspots_cpu_Intel_R_Xeon_R_Platinum_8480"}


def test_profile_rows_stay_out_of_timed_tables(tmp_path):
    rows = fx.profile_rows() + [fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0)]
    report = report_of(tmp_path, rows)
    f = report.frame
    assert f[f.measure == "profile"].median_ms.isna().all()
    summary = find_table(report, "Summary: Forward (ms), gpu")
    assert [r[0].text for r in summary.rows] == ["resnet50"]
    assert not any(t.title.startswith(("alexnet", "googlenet"))
                   for s in report.sections for t in s.tables)
    assert not any(m in ("alexnet", "googlenet") for m, _, _ in report.equivalence.verdicts)
    failures = find_table(report, "Failures")
    assert [(r[0].text, r[2].text, r[4].text) for r in failures.rows] == [
        ("alexnet", "profile", "unsupported")]
    from reports.sections import text
    assert "alexnet" not in text.render(report)
    assert not report.ratios


# --- transfer share (Li et al. Fig. 7) ------------------------------------------------------

def test_transfer_share_of_total(tmp_path):
    report = report_of(tmp_path, fx.transfer_rows())
    table = find_table(report, "Host → device transfer")
    assert table.columns[-1] == "Share of total"
    assert row_where(table, Model="li_conv1")["Share of total"] == "25.0%"   # 2 / (2 + 6)
    assert row_where(table, Model="li_conv2")["Share of total"] == "—"       # no gradient row
    assert row_where(table, Model="li_conv3")["Share of total"] == "—"       # gradient OOM
    assert any("Li et al. Fig. 7" in n and "one gradient computation" in n for n in table.notes)


def test_transfer_share_in_the_fixture_report(built):
    report, _, _ = built
    table = find_table(report, "Host → device transfer")
    assert row_where(table, Model="resnet50")["Share of total"] == "3.8%"    # 1.2 / 31.2


# --- kernel metrics (Li et al. Fig. 6, Table II) and kernel families ------------------------

def test_fig6_and_table2_in_the_papers_layout(tmp_path):
    report = report_of(tmp_path, fx.kernel_rows())
    section = [s for s in report.sections if s.key == "kernels"][0]
    fig6 = find_table(report, "Fig. 6: runtime and GPU metrics of the top kernels, GPU")
    torch1 = row_where(fig6, Layer="li_conv1", Setting="torch eager fp32 · gpu")
    assert torch1["Measure"] == "gradient" and torch1["Runtime (ms)"] == "6.00"
    assert (torch1["Occupancy %"], torch1["IPC"], torch1["gld eff. %"]) == ("30.0", "2.00", "40.0")
    ort1 = row_where(fig6, Layer="li_conv1", Setting="ort ort_all fp32 · gpu")
    assert ort1["Measure"] == "forward" and ort1["Runtime (ms)"] == "2.00"
    assert row_where(fig6, Layer="li_conv2", Setting="torch eager fp32 · gpu")[
        "gld eff. %"] == "—"                                   # no top kernel reported it
    assert row_where(fig6, Layer="li_conv2", Setting="ort ort_all fp32 · gpu")[
        "Occupancy %"].startswith("unsupported (the driver does not let")
    assert any("sm__warps_active" in n for n in fig6.notes)
    table2 = find_table(report, "Table II: registers per thread and shared memory per block")
    torch = row_where(table2, Implementation="torch eager fp32 · gpu")
    assert (torch["Registers"], torch["Shared Memory (KB)"]) == ("150", "60.0")  # means of 2
    assert torch["Configurations"] == "li_conv1, li_conv2"
    assert row_where(table2, Implementation="ort ort_all fp32 · gpu")["Registers"] == "64"
    published = find_table(report, "Li et al. 2016 Table II, Tesla K40c")
    assert row_where(published, Implementation="cuda-convnet2")["Registers"] == "116"
    assert [p.key for p in section.plots] == ["fig6_NVIDIA_H100_80GB_HBM3_128"]


def test_tracer_check_and_kernel_family_beside_layer_times(tmp_path):
    report = report_of(tmp_path, fx.kernel_rows())
    check = find_table(report, "Kernel tracer: per-iteration kernel time")
    tf = row_where(check, Model="conv_l2", Setting="tf graph fp32 · gpu")
    assert tf["Busy ÷ median"] == "0.98"                       # 4.1 / 4.2, no timeline
    torch = row_where(check, Model="conv_l2", Setting="torch eager fp32 · gpu")
    assert torch["Busy ÷ median"] == "0.72"                    # 12.1 / 16.8: launch gaps
    forward = find_table(report, "forward, gpu")
    assert forward.columns[-1] == "Kernel family"
    index = {c: i for i, c in enumerate(forward.columns)}
    families = {r[index["Framework"]].text: r[index["Kernel family"]].text for r in forward.rows}
    assert families["tf"] == "— / FFT" and families["torch"] == "— / iGEMM"
    assert any("iGEMM = implicit GEMM" in n for n in forward.notes)
    backward = find_table(report, "backward (total − forward), gpu")
    assert "Kernel family" not in backward.columns


def test_device_timeline_table_sets_profiled_span_beside_the_timed_median(tmp_path):
    """A forward profile with a timeline (TensorFlow on GPU): idle and transpose shares
    from the recorded per-iteration figures, the timed forward median of the same setting,
    model and batch beside them and the time outside kernels. A torch forward profile
    without a timeline joins with its kernel sum; profiles whose measure was not timed
    and that have no timeline (the fixtures' gradient profiles) stay out."""
    timeline = {"span_ms": 10.0, "busy_ms": 7.5, "idle_ms": 2.5, "kernel_ms": 8.0,
                "transpose_ms": 2.0, "kernels": 321.0}
    forward_profile = {**fx.profile(5.0, 0.5, 0.5, 0.2, 0.0, 1.0, 0.8, [("k", 5.0, 1.0)],
                                    True, tool="tf.profiler"),
                       "measure": "forward", "timeline": timeline}
    rows = fx.profile_rows() + [
        fx.make_row("resnet50", 16, "profile", "tf", "gpu", None, threads=4,
                    profile=forward_profile),
        fx.make_row("resnet50", 16, "forward", "tf", "gpu", 9.0, threads=4),
        fx.make_row("resnet50", 64, "forward", "tf", "gpu", 30.0, threads=4),
        fx.make_row("resnet50", 16, "profile", "torch", "gpu", None, threads=4,
                    profile={**fx.profile(4.0, 0.5, 0.5, 0.2, 0.0, 0.5, 0.3,
                                          [("k", 4.0, 1.0)], True), "measure": "forward"}),
        fx.make_row("resnet50", 16, "forward", "torch", "gpu", 6.5, threads=4)]
    report = report_of(tmp_path, rows)
    table = find_table(report, "Device timeline of profiled iterations")
    assert len(table.rows) == 2
    line = row_where(table, Model="resnet50", Batch="16", Setting="tf graph fp32 · gpu")
    assert line["Profiled"] == "forward" and line["Timed median (ms)"] == "9.00"
    assert line["Kernel sum (ms/iter)"] == "8.00" and line["Outside kernels (ms)"] == "1.00"
    assert line["Idle % of span"] == "25.0" and line["Transposes % of kernels"] == "25.0"
    assert line["Kernels/iter"] == "321"
    torch = row_where(table, Model="resnet50", Batch="16", Setting="torch eager fp32 · gpu")
    assert torch["Kernel sum (ms/iter)"] == "6.00" and torch["Outside kernels (ms)"] == "0.50"
    assert torch["Idle % of span"] == "—"


def test_gap_splits_a_framework_gap_into_kernels_and_time_outside_them(tmp_path, capsys):
    """reports.gap on a TF and a torch forward profile of ResNet-50 b16 with their timed
    medians: 9.0 vs 6.5 ms = +2.5 ms, of which +1.5 kernels (TF's busy time 7.5, its 8.0
    ms of summed kernels having overlapped, vs 6.0) and +1.0 outside (1.5 vs 0.5); conv
    is the largest kernel difference; the TF timeline's transposes."""
    from reports import gap
    timeline = {"span_ms": 10.0, "busy_ms": 7.5, "idle_ms": 2.5, "kernel_ms": 8.0,
                "transpose_ms": 0.4, "kernels": 321.0}
    tf_profile = {**fx.profile(5.0, 0.5, 0.5, 0.2, 0.0, 1.0, 0.8,
                               [("implicit_convolve_sgemm", 3.0, 24.0)], True,
                               tool="tf.profiler"), "measure": "forward", "timeline": timeline}
    torch_profile = {**fx.profile(4.0, 0.5, 0.5, 0.2, 0.0, 0.5, 0.3,
                                  [("sm90_xmma_fprop", 2.0, 20.0)], True), "measure": "forward"}
    rows = [fx.make_row("resnet50", 16, "profile", "tf", "gpu", None, profile=tf_profile),
            fx.make_row("resnet50", 16, "forward", "tf", "gpu", 9.0),
            fx.make_row("resnet50", 16, "profile", "torch", "gpu", None, profile=torch_profile),
            fx.make_row("resnet50", 16, "forward", "torch", "gpu", 6.5)]
    fx._write(tmp_path / "r.jsonl", rows)
    assert gap.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "gap +2.500 ms (+38%)" in text
    assert "overlaps merged): 7.500 vs 6.000 ms: +1.500 ms of the gap" in text
    assert "1.500 vs 0.500 ms: +1.000 ms of the gap" in text
    assert "tf graph: kernels summed 8.000 ms, 1.07x its busy time" in text
    assert "torch eager: kernels summed" not in text      # no timeline: sum = busy
    assert "conv 5.000 vs 4.000 (+1.000)" in text.split("by layer type")[1].split(";")[0]
    assert "layout transposes 0.400 ms (5.0% of its kernel time); GPU idle 25.0%" in text
    assert "implicit_convolve_sgemm" in text
    assert gap.main([str(tmp_path), "--measure", "gradient"]) == 2
    assert "no GPU kernel profile of gradient for tf resnet50 b16" in capsys.readouterr().err


# --- published folders and the comparison with them (reports/publish.py, compare.py) ---

def published_reference(root: Path) -> Path:
    """A published folder made by reports.publish from the GPU fixture rows."""
    from reports import publish
    source = root / "gpu-results"
    (source / "default-gpu" / "gpubox").mkdir(parents=True)
    fx._write(source / "default-gpu" / "gpubox" / "torch_gpu.jsonl", fx.gpu_rows())
    target = root / "published" / "h100-2026-01"
    assert publish.main([str(source), "--to", str(target), "--device-name", "H100"]) == 0
    return target


def users_run(root: Path) -> Path:
    env = {**fx.GPU_HOST, "host": "userbox"}
    rows = [fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.05, threads=4, env=env),
            fx.make_row("resnet50", 16, "gradient", "torch", "gpu", 45.0, threads=4, env=env),
            fx.make_row("resnet50", 8, "forward", "jax", "gpu", 12.0, threads=4, env=env),
            fx.make_row("alexnet", 16, "forward", "torch", "gpu", 1.0, threads=4, env=env)]
    rows[2]["env"]["framework_version"] = "0.12.0"
    (root / "results" / "default-gpu" / "userbox").mkdir(parents=True)
    fx._write(root / "results" / "default-gpu" / "userbox" / "mixed_gpu.jsonl", rows)
    return root / "results"


def test_a_matrix_folder_lacks_the_default_and_seed_suites_it_does_not_hold():
    from reports.publish import missing_runs

    missing = missing_runs({("default-gpu", "torch", "gpu"), ("li2016", "jax", "gpu")})
    assert ("default-gpu", "jax", "gpu") in missing and ("li2016", "ort", "gpu") in missing
    assert ("li2016", "jax", "gpu") not in missing
    assert all(device == "gpu" for _, _, device in missing)


def test_publish_stores_rows_byte_for_byte_gzipped_and_counts_them(tmp_path):
    import gzip
    target = published_reference(tmp_path)
    stored = target / "default-gpu" / "gpubox" / "torch_gpu.jsonl.gz"
    assert not stored.with_suffix("").exists()
    assert gzip.decompress(stored.read_bytes()) == (
        tmp_path / "gpu-results" / "default-gpu" / "gpubox" / "torch_gpu.jsonl").read_bytes()
    readme = (target / "README.md").read_text()
    total = len(fx.gpu_rows())
    assert f"{total} rows in 1 files" in readme
    assert "NVIDIA H100 80GB HBM3" in readme
    assert "    nox -s matrix -- --device gpu --frameworks jax torch --suites test\n" in readme
    assert f"    python -m reports results {target.as_posix()} --out report\n" in readme
    # A folder of other suites than the matrix's: the runs it lacks are its own suite's.
    missing = readme.split("Not in this folder", 1)[1].split(".\n", 1)[0]
    assert "this folder's suites" in missing and "test ort gpu" in missing
    assert "default-gpu" not in missing and "torch" not in missing and "jax" not in missing
    assert "cpu" not in missing.replace("gpu", "")   # only devices present
    # text outside the generated block survives a second run; the block is rewritten
    (target / "README.md").write_text(readme.replace("TODO: the machine", "Set up by hand"))
    from reports import publish
    assert publish.main([str(tmp_path / "gpu-results"), "--to", str(target)]) == 0
    again = (target / "README.md").read_text()
    assert "Set up by hand" in again and again.count(publish.BEGIN) == 1
    assert publish.main(["--to", str(target)]) == 0      # refresh only: nothing copied
    assert (target / "README.md").read_text() == again
    # Publishing the same rows again gives the same bytes (no time stamp, no file name).
    before = stored.read_bytes()
    assert publish.main([str(tmp_path / "gpu-results"), "--to", str(target)]) == 0
    assert stored.read_bytes() == before
    assert before[3] == 0 and before[4:8] == bytes(4)   # FLG: no FNAME; MTIME 0 (RFC 1952)


def test_publish_names_one_commit_once_and_no_unknown_beside_a_known_version(tmp_path):
    """Rows written before the runner wrote the full hash name a commit at 7 or 12 digits,
    and an unsupported case refused before the framework loaded knows no version: the
    README lists one commit, by its longest name, and one version."""
    from reports.publish import inventory

    rows = [dict(r) for r in fx.gpu_rows() if r["settings"]["framework"] == "torch"][:3]
    rows[0]["env"] = {**rows[0]["env"], "dlbench_commit": "e8a67b2"}
    rows[1]["env"] = {**rows[1]["env"], "dlbench_commit": "e8a67b2c5094"}
    rows[2]["env"] = {**rows[2]["env"], "dlbench_commit": "4eed41701e72-dirty",
                      "framework_version": None, "cuda": None, "cudnn": None}
    folder = tmp_path / "pub" / "default-gpu" / "gpubox"
    folder.mkdir(parents=True)
    fx._write(folder / "torch_gpu.jsonl", rows)
    block = inventory(tmp_path / "pub")
    assert "- dlbench commits: 4eed41701e72-dirty, e8a67b2c5094\n" in block
    version = rows[0]["env"]["framework_version"]
    assert f"- Frameworks: torch {version}\n" in block and "?" not in block.split(
        "- Frameworks:")[1].split("\n")[0]
    assert "CUDA None, cuDNN None" not in block
    # One commit and one day read as one, not as a list or a range.
    fx._write(folder / "torch_gpu.jsonl", [{**row, "started_at": "2026-11-29T10:00:00+00:00"}
                                           for row in rows[:2]])
    block = inventory(tmp_path / "pub")
    assert "- dlbench commit: e8a67b2c5094\n" in block
    assert "- Run date: 2026-11-29\n" in block


def test_a_cpu_row_s_hardware_names_its_vector_extension_where_recorded(tmp_path):
    """A row that recorded its CPU's widest vector extension is a device of its own in the
    report ("AMD EPYC (AVX-512)" is not "AMD EPYC (AVX2)"), and the published folder's hosts
    say it; rows written before it keep the bare model name."""
    from reports.publish import inventory

    rows = [dict(r) for r in fx.cpu_rows()[:2]]
    rows[0]["env"] = {**rows[0]["env"], "cpu_isa": "AVX-512"}
    folder = tmp_path / "pub" / "default-cpu" / "cpubox"
    folder.mkdir(parents=True)
    fx._write(folder / "torch_cpu.jsonl", rows)
    frame = tidy(load([tmp_path / "pub"])).frame
    model = fx.CPU_HOST["cpu_model"]
    assert set(frame["hardware"]) == {f"{model} (AVX-512)", model}
    assert f"{model} ({fx.CPU_HOST['physical_cores']} cores, AVX-512)" in inventory(tmp_path / "pub")


def test_publish_says_a_cudnn_a_framework_did_not_record_is_not_recorded(tmp_path):
    """ONNX Runtime names its CUDA but not the cuDNN it loaded: its GPU line says so, never
    "cuDNN None"."""
    from reports.publish import inventory

    row = dict(next(r for r in fx.gpu_rows() if r["settings"]["framework"] == "torch"))
    row["env"] = {**row["env"], "cuda": "13.0", "cudnn": None}
    folder = tmp_path / "pub" / "default-gpu" / "gpubox"
    folder.mkdir(parents=True)
    fx._write(folder / "torch_gpu.jsonl", [row])
    block = inventory(tmp_path / "pub")
    assert "CUDA 13.0, cuDNN not recorded)" in block and "None" not in block


def test_publish_reruns_a_serving_suite_through_the_framework_sessions_not_the_matrix():
    """The matrix runs no serving suite (LoadGen's harness runs them): a folder holding one
    says to run it through each framework's nox session, as the user guide does."""
    from reports.publish import rerun_lines

    lines = rerun_lines([("serving-cpu", "torch", "cpu"), ("serving-cpu", "jax", "cpu"),
                         ("default-cpu", "torch", "cpu"), ("transformers-cpu", "jax", "cpu")])
    assert lines == ["    nox -s jax_cpu torch_cpu -- serving-cpu",
                     "    nox -s matrix -- --device cpu --frameworks jax torch --suites "
                     "default-cpu transformers-cpu"]


def test_publish_refuses_a_torn_line(tmp_path, capsys):
    from reports import publish
    source = tmp_path / "src" / "s" / "h"
    source.mkdir(parents=True)
    (source / "torch_cpu.jsonl").write_text(json.dumps(fx.cpu_rows()[0]) + "\n{\"schema\": 1, ")
    assert publish.main([str(tmp_path / "src"), "--to", str(tmp_path / "pub")]) == 2
    assert "line 2" in capsys.readouterr().err
    assert not (tmp_path / "pub").exists()


def test_cli_compares_one_published_folder_with_another_named_by_reference(tmp_path):
    from reports import publish
    reference = published_reference(tmp_path)
    second = tmp_path / "published" / "h200-2026-01"      # a second GPU's published folder
    assert publish.main([str(users_run(tmp_path)), "--to", str(second)]) == 0
    out = tmp_path / "out"
    both = run_cli(str(second), str(reference), "--out", str(out), "--quiet")
    assert both.returncode == 0, both.stderr    # two published inputs: neither is "yours"
    assert "Compared with the reference" not in (out / "report.md").read_text()
    named = run_cli(str(second), "--reference", str(reference), "--out", str(out), "--quiet")
    assert named.returncode == 0, named.stderr
    md = (out / "report.md").read_text()
    assert "Reference: " + str(reference) in md and "batch 8 vs 16" in md


def test_compare_pairs_rows_and_names_every_differing_setting(tmp_path):
    from reports.compare import pair_rows, split

    reference = published_reference(tmp_path)
    results = users_run(tmp_path)
    loaded = load([results, reference])
    report = make_report(loaded, (reference,))
    pairs, unmatched = pair_rows(*split(loaded, (reference,)))
    by = {(p.yours["model"], p.yours["batch"], p.yours["measure"], p.yours["framework"]): p
          for p in pairs}
    same = by[("resnet50", 16, "forward", "torch")]
    assert same.reference["median_ms"] == 10.0   # fp32 like yours, not the 4.0 ms tf32 row
    assert same.differs == () and same.overlap and round(same.ratio, 3) == 1.005
    slower = by[("resnet50", 16, "gradient", "torch")]
    assert slower.ratio == 1.5 and not slower.overlap
    jax = by[("resnet50", 8, "forward", "jax")]   # no batch 8 there: the nearest setting
    assert jax.differs == ("batch 8 vs 16", "version 0.12.0 vs 0.11.2")
    assert [r["model"] for r in unmatched] == ["alexnet"]
    section = next(s for s in report.sections if s.key == "compare")
    summary = section.tables[0]
    torch_row = next(r for r in summary.rows if r[0].text == "torch")
    assert torch_row[2].text == "2" and torch_row[5].text == "2"
    # Each row names its precision: a tf32 row of a case reads apart from its fp32 row.
    beside = dict(zip(section.tables[1].columns, (c.text for c in section.tables[1].rows[0])))
    assert beside["Precision"] == "fp32" and beside["Framework"].startswith(("torch", "jax"))


def test_cli_compares_with_a_published_folder_named_among_the_inputs(tmp_path):
    reference = published_reference(tmp_path)
    results = users_run(tmp_path)
    done = run_cli(str(results), str(reference), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "Geo-mean ratio" in done.stdout and "\ntorch  gpu  2  " in done.stdout
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Compared with the reference" in md and "batch 8 vs 16" in md
    # the published folder alone is its own report; --pages writes only what a host shows
    pages = reference / "report"
    done = run_cli(str(reference), "--out", str(pages), "--quiet", "--pages")
    assert done.returncode == 0, done.stderr
    assert "Compared with the reference" not in (pages / "report.md").read_text()
    assert sorted(p.name for p in pages.iterdir()) == ["headlines.md", "plots", "report.md"]
    headline = (pages / "headlines.md").read_text()
    for title in ("Per model (cnn-benchmarks format)", "Convolution layers (convnet-benchmarks",
                  "Bahrampour et al. format", "Li et al. Fig. 3"):
        assert title in headline, title
    assert "Failures" not in headline
    for link in re.findall(r"\]\((plots/[^)]+)\)", headline):
        assert (pages / link).is_file(), link


def test_a_first_call_loaded_from_a_persistent_cache_is_marked(tmp_path):
    compiled = {"compile_s": 4.0, "persistent_cache_hits": 0, "compiles": 1}
    loaded = {"compile_s": 0.0, "persistent_cache_hits": 1, "compiles": 0}
    rows = [fx.make_row("resnet50", 16, "forward", "jax", "gpu", 20.0, threads=4,
                        first_call=5000.0, timing_extra={"compile_events": compiled}),
            fx.make_row("resnet50", 16, "gradient", "jax", "gpu", 60.0, threads=4,
                        first_call=300.0, timing_extra={"compile_events": loaded})]
    report = report_of(tmp_path, rows)
    assert list(report.frame.first_call_cache_hits) == [0.0, 1.0]
    assert list(report.frame.first_call_compile_s) == [4.0, 0.0]
    texts = [c.text for s in report.sections for t in s.tables for r in t.rows for c in r]
    assert any("5000" in t and "300" in t and t.count("(cached)") == 1 for t in texts), texts


def test_compare_keeps_both_sides_when_the_reference_host_reruns(tmp_path):
    """Your rows and the reference's from one host have identical settings: merged into one
    table the later would replace the earlier; the comparison keeps both."""
    from reports.compare import pair_rows, split

    reference = published_reference(tmp_path)
    rerun = [fx.make_row("resnet50", 16, "forward", "torch", "gpu", 10.0, threads=4,
                         started="2026-02-01T10:00:00")]
    (tmp_path / "again").mkdir()
    fx._write(tmp_path / "again" / "torch_gpu.jsonl", rerun)
    pairs, _ = pair_rows(*split(load([tmp_path / "again", reference]), (reference,)))
    assert len(pairs) == 1 and pairs[0].ratio == 1.0 and pairs[0].differs == ()


def test_a_measure_unsupported_everywhere_is_said_once(tmp_path):
    """ONNX Runtime has no gradients: its reason is one line of the failures section and
    one note per table, the cells say 'unsupported [n]'."""
    reason = "onnxruntime InferenceSession computes no gradients (needs onnxruntime-training)"
    rows = []
    for model in ("resnet50", "vgg16", "lenet"):
        rows.append(fx.make_row(model, 16, "forward", "ort", "gpu", 5.0, threads=4,
                                variant="ort_all"))
        rows.append(fx.make_row(model, 16, "gradient", "ort", "gpu", None, threads=4,
                                variant="ort_all", status="unsupported", reason=reason))
        rows.append(fx.make_row(model, 16, "forward", "torch", "gpu", 4.0, threads=4))
    report = report_of(tmp_path, rows)
    tables = [t for s in report.sections for t in s.tables]
    shared = find_table(report, "Reasons shared by several failed rows")
    assert [(r[2].text, r[5].text) for r in shared.rows] == [(reason, "3")]
    failures = find_table(report, "Failures (3 rows")
    assert {r[5].text for r in failures.rows} == {"reason 1"}
    cells_text = [c.text for t in tables if t is not shared for r in t.rows for c in r]
    assert not any(reason in text for text in cells_text)       # never the reason in a cell
    notes = [n for t in tables for n in t.notes if reason in n]
    assert notes and all(n.startswith("[") for n in notes)


def test_tracer_check_sets_busy_time_not_the_kernel_sum_against_the_median(tmp_path):
    """Kernels that ran at once on concurrent streams: 20.6 ms summed per iteration, 10.3
    ms busy with overlaps merged (TensorFlow's ResNet-34 forward on an H100 traced so by
    CUPTI and tf.profiler alike); the check sets the busy time against the 12.6 ms median."""
    profile = {**fx.tracer_profile(20.0, 0.6, 12.7, {"implicit_gemm": 20.0}, {}, "forward"),
               "timeline": {"span_ms": 12.5, "busy_ms": 10.3, "idle_ms": 2.2,
                            "kernel_ms": 20.6, "transpose_ms": 0.26, "kernels": 144.0}}
    rows = [fx.make_row("resnet34", 16, "profile", "tf", "gpu", None, threads=4,
                        profile=profile),
            fx.make_row("resnet34", 16, "forward", "tf", "gpu", 12.6, threads=4)]
    report = report_of(tmp_path, rows)
    check = find_table(report, "Kernel tracer: per-iteration kernel time")
    line = row_where(check, Model="resnet34", Setting="tf graph fp32 · gpu")
    assert (line["Kernels summed (ms/iter)"], line["Busy (ms/iter)"]) == ("20.60", "10.30")
    assert line["Busy ÷ median"] == "0.82"                     # 10.3 / 12.6: launch gaps
    assert any("concurrent streams" in note for note in check.notes)


def test_bahrampour_rows_alike_but_for_their_host_keep_one_order():
    """Two hosts' rows of one framework (a suite split over two hosts) sorted the same
    whatever order they arrive in: set order changes with the interpreter's hash seed, and a
    published page must regenerate byte for byte."""
    from dataclasses import replace

    from reports.pipeline.grouping import Setting
    from reports.sections.bahrampour import _order

    first = Setting(device="gpu", hardware="NVIDIA H200", framework="jax", variant="jit",
                    precision="fp32", threads=16, interop_threads=1, layout="", execution="",
                    host="vm-a", cpu_model="x", gpu_model="NVIDIA H200",
                    framework_version="0.11.2")
    second = replace(first, host="vm-b")
    assert sorted([second, first], key=_order) == sorted([first, second], key=_order)


def test_tracer_check_reads_why_a_ratio_is_out_of_band(tmp_path):
    """Outside ±10% the row says why, from its own figures: TensorFlow's li_conv1 gradient
    traced in another process (11.1 ms busy in 13.6 ms traced against a 6.4 ms median, an
    NVIDIA H200) ran slower kernels than the timed samples; a small convolution whose GPU
    sat idle between launches (0.26 ms busy in 1.13 ms traced against 0.44) is launch
    gaps; one inside the band reads nothing."""
    def traced(model: str, busy: float, wall: float) -> dict:
        return {**fx.tracer_profile(busy, 0.0, wall, {"fft": busy}, {}, "gradient"),
                "timeline": {"span_ms": wall, "busy_ms": busy, "idle_ms": wall - busy,
                             "kernel_ms": busy, "transpose_ms": 0.0, "kernels": 10.0}}
    rows = []
    for model, busy, wall, median in (("li_conv1", 11.1, 13.6, 6.4),
                                      ("li_conv4", 0.26, 1.13, 0.44),
                                      ("li_conv2", 3.79, 5.59, 4.13)):
        rows += [fx.make_row(model, 128, "profile", "tf", "gpu", None, threads=4,
                             profile=traced(model, busy, wall)),
                 fx.make_row(model, 128, "gradient", "tf", "gpu", median, threads=4)]
    check = find_table(report_of(tmp_path, rows), "Kernel tracer: per-iteration kernel time")
    slower = row_where(check, Model="li_conv1")
    assert slower["Busy ÷ median"] == "1.73"                   # 11.1 / 6.4
    assert slower["Reading"].startswith("traced iterations 2.12x the timed median")
    idle = row_where(check, Model="li_conv4")
    assert idle["Busy ÷ median"] == "0.59"                     # 0.26 / 0.44
    assert idle["Reading"].startswith("GPU idle 77% of the traced iterations")  # 1 - .26/1.13
    assert row_where(check, Model="li_conv2")["Reading"] == ""   # 3.79 / 4.13 = 0.92


def test_tracer_check_sets_busy_time_against_the_device_median_first(tmp_path):
    """With the case's device time beside it (torch's CUDA events here), busy time that
    matches it is idle time however far the wall median is (0.26 ms busy, 0.26 device,
    0.44 wall); busy time well under it is kernels missing from the trace, which the
    traced wall alone would have read as idle time; above it, other kernels."""
    def traced(busy: float, wall: float) -> dict:
        return {**fx.tracer_profile(busy, 0.0, wall, {"fft": busy}, {}, "gradient"),
                "timeline": {"span_ms": wall, "busy_ms": busy, "idle_ms": wall - busy,
                             "kernel_ms": busy, "transpose_ms": 0.0, "kernels": 10.0}}
    rows = []
    for model, busy, wall, median, device in (("li_conv4", 0.26, 1.13, 0.44, 0.26),
                                              ("li_conv2", 1.9, 5.6, 4.1, 3.8),
                                              ("li_conv1", 11.1, 13.6, 6.4, 6.0),
                                              ("li_conv3", 6.0, 6.6, 6.2, 6.1)):
        rows += [fx.make_row(model, 128, "profile", "torch", "gpu", None, threads=4,
                             profile=traced(busy, wall)),
                 fx.make_row(model, 128, "gradient", "torch", "gpu", median, threads=4,
                             timing_extra={"device_median_ms": device})]
    check = find_table(report_of(tmp_path, rows), "Kernel tracer: per-iteration kernel time")
    idle = row_where(check, Model="li_conv4")
    assert (idle["Busy ÷ median"], idle["Busy ÷ device"]) == ("0.59", "1.00")
    assert idle["Reading"] == ("busy matches the device median; the wall median is 1.69x "
                               "it: launch gaps, host work (the GPU idle 77% of the traced "
                               "iterations)")
    lost = row_where(check, Model="li_conv2")
    assert lost["Busy ÷ device"] == "0.50"                     # 1.9 / 3.8
    assert lost["Reading"].startswith("busy 0.50x the device median: kernels missing")
    other = row_where(check, Model="li_conv1")
    assert other["Reading"].startswith("busy 1.85x the device median: the profile ran other")
    assert row_where(check, Model="li_conv3")["Reading"] == ""   # 6.0 / 6.1 and 6.0 / 6.2


def test_tracer_reading_of_traced_iterations_faster_than_the_timed_ones():
    from suites.instruments.kernel_trace import tracer_reading
    assert tracer_reading(5.0, 5.2, 7.0) == ("traced iterations 0.74x the timed median, the "
                                             "GPU busy through them")
    assert tracer_reading(5.0, 5.2, float("nan")) == ""
    assert tracer_reading(5.0, 5.2, 4.0, 5.0) == ("busy matches the device median, 1.25x the "
                                                  "wall median: the device time is not the "
                                                  "wall samples' work")
