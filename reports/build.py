"""Drives the pipeline: load → tidy → throughput → equivalence, ratios → tables, plots →
the ``Report`` (sections of text, tables and figures) that ``markdown``, ``html`` and
``text`` render, and the files written to the output folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from reports import equivalence, historical, peaks, plots, ratios, tidy
from reports import tables_bahrampour as tb
from reports import tables_layers as tl
from reports import tables_misc as tm
from reports import tables_models as tmod
from reports import tables_profiles as tp
from reports import tables_timeline as ttl
from reports.load import Loaded, load
from reports.naming import BAHRAMPOUR_SETS
from reports.table import Cell, Table

CONVENTIONS = (
    "Times are medians of per-iteration samples in milliseconds, with a 95% bootstrap "
    "confidence interval in parentheses; ⚠ marks rows the timer flagged unstable (CI wider "
    "than ±2% or IQR above 10% of the median).",
    "Forward = inference pass; Total = one gradient computation (forward + loss + backward "
    "for all parameters, no optimizer update; Bahrampour's 'gradient computation time'); "
    "Backward = Total − Forward (convnet-benchmarks' and cnn-benchmarks' 'backward').",
    "First call = the first, untimed-loop call (compile, trace, autotune). Peak memory is "
    "the framework allocator's peak on GPU ('alloc') and process RSS on CPU ('RSS').",
    "Achieved TFLOP/s = forward FLOPs per example × batch × k / median time, k = 1 for "
    "forward and 3 for a gradient computation (forward + two backward products); FLOPs = "
    "2 × multiply-accumulates of convolutions, dense and LSTM matrix products. % of peak "
    "uses the datasheet peak for the row's precision (fp32, tf32 or bf16); CPUs: blank.",
    "Equivalence compares the fingerprints (outputs, loss, gradient norms) of every row of a "
    "model and batch at the same precision, across frameworks, devices and sessions: ✓ "
    "within rtol (fp32 1e-3, tf32 1e-2, bf16 5e-2; gradient norms 30× looser, as deep "
    "batch-normalised networks amplify rounding there), else ✗ with the worst relative "
    "difference.",
    "Rows whose settings differ (precision, variant, threads, layout, hardware, framework "
    "version, compile-cache state, …) are never merged or averaged; reruns of identical "
    "settings keep the latest. [cache cold] / [cache warm] after a variant: a fresh process "
    "with an empty / a filled persistent compilation cache (Bahrampour Table 8).",
)


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    paragraphs: tuple[str, ...] = ()
    bullets: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    plots: tuple[plots.Plot, ...] = ()


@dataclass(frozen=True)
class Report:
    title: str
    sections: tuple[Section, ...]
    frame: pd.DataFrame = field(repr=False)
    warnings: tuple[str, ...] = ()
    superseded: int = 0
    ratios: tuple[ratios.Ratio, ...] = ()
    equivalence: equivalence.Equivalence | None = None


def environment_table(frame: pd.DataFrame) -> Table:
    cols = ("host", "os", "python", "cpu_model", "physical_cores", "gpu_model", "gpu_driver",
            "cuda", "cudnn", "framework", "framework_version", "dlbench_commit")
    seen = frame[list(cols)].drop_duplicates().sort_values(list(cols))
    body = tuple(tuple(Cell(str(v) if str(v) else "—") for v in row)
                 for row in seen.itertuples(index=False))
    return Table("environment", "Environments", ("Host", "OS", "Python", "CPU", "Cores", "GPU",
                                                 "Driver", "CUDA", "cuDNN", "Framework",
                                                 "Version", "Commit"), body)


def peaks_table(frame: pd.DataFrame) -> Table | None:
    used = frame[frame["peak_device"] != ""][["hardware", "peak_device", "precision",
                                              "peak_tflops", "peak_source"]].drop_duplicates()
    unknown = sorted(set(frame.loc[(frame["device"] == "gpu") & (frame["peak_device"] == ""),
                                   "hardware"]))
    body = [(Cell(r.hardware), Cell(r.peak_device), Cell(r.precision),
             Cell(f"{r.peak_tflops:g}" if r.peak_tflops == r.peak_tflops else "—"),
             Cell(r.peak_source)) for r in used.sort_values(["hardware", "precision"])
            .itertuples(index=False)]
    body += [(Cell(hw), Cell("not in device_peaks.csv", kind="muted"), Cell(""), Cell("—"),
              Cell("")) for hw in unknown]
    if not body:
        return None
    return Table("peaks", "Device peaks used for % of peak",
                 ("Hardware", "Matched", "Precision", "Peak TFLOP/s", "Source"), tuple(body),
                 (False, False, False, True, False))


def make_report(loaded: Loaded) -> Report:
    merged = tidy.tidy(loaded)
    frame = peaks.add_throughput(merged.frame, peaks.load_peaks())
    equiv = equivalence.check(frame)
    frame = frame.assign(
        equiv=[equiv.rows[s].text() if s in equiv.rows else "—" for s in frame["source"]],
        equiv_worst_rel=[equiv.rows[s].worst if s in equiv.rows else float("nan")
                         for s in frame["source"]])
    hist = historical.load_historical()
    # Compile-cache rows exist for their first calls (Table 8); their steady-state samples
    # are a single one, so every other table reads the rows without a cache state.
    steady = frame[frame["compile_cache"] == ""].reset_index(drop=True)
    found = ratios.framework_ratios(steady) + ratios.device_ratios(steady)

    hosts = sorted(set(frame["host"]))
    overview = [
        f"{len(frame)} result rows from {len(loaded.files)} file(s), {len(hosts)} host(s); "
        f"frameworks: {', '.join(sorted(set(frame['framework'])))}; hardware: "
        f"{'; '.join(sorted(set(frame['hardware'])))}.",
    ]
    if merged.superseded:
        overview.append(f"{merged.superseded} older row(s) superseded by reruns of identical "
                        "settings (the latest row is kept).")
    overview += list(loaded.warnings)
    sections = [Section("overview", "Overview", tuple(overview) + CONVENTIONS,
                        tables=(environment_table(frame),))]
    sections.append(Section("summary", "Summary: models × frameworks",
                            tables=tuple(tmod.summary_tables(steady, equiv))))
    sentences = tuple(r.sentence() + "." for r in found)
    ratio_tables = tuple(t for t in (tm.ratio_table(found, "framework"),
                                     tm.ratio_table(found, "device")) if t is not None)
    if sentences:
        sections.append(Section("ratios", "Ratios", bullets=sentences, tables=ratio_tables))
    model_tables = []
    bahrampour_models = {m for models in BAHRAMPOUR_SETS.values() for m in models}
    for model, batch, table in tmod.model_tables(steady, equiv):
        model_tables.append(table)
        if model in bahrampour_models:
            continue   # its published numbers sit beside the Bahrampour-format table
        hist_table = historical.table_for(hist, model, batch, f"{table.key}-hist")
        if hist_table is not None:
            model_tables.append(hist_table)
    if model_tables:
        sections.append(Section("models", "Per model (cnn-benchmarks format)",
                                tables=tuple(model_tables)))
    layer = tl.layer_tables(steady, hist)
    if layer:
        sections.append(Section("layers", "Convolution layers (convnet-benchmarks format)",
                                tables=tuple(layer)))
    bahr = (tb.bahrampour_tables(steady, hist) + tb.epoch_tables(steady, hist)
            + tb.sae_tables(steady, hist) + tb.compile_tables(frame, hist))
    if bahr:
        sections.append(Section("bahrampour", "Bahrampour et al. format", tables=tuple(bahr)))
    misc = [t for t in (tm.sweep_table(steady), tm.transfer_table(steady)) if t is not None]
    if misc:
        sections.append(Section("layers-misc", "Single layers and transfers",
                                tables=tuple(misc)))
    profiles = (tp.hotspot_tables(steady) + tp.top_kernel_tables(steady)
                + ttl.timeline_tables(steady))
    if profiles:
        sections.append(Section("profiles", "Hotspot layers and kernels (Li et al. format)",
                                tables=tuple(profiles), plots=tuple(plots.profile_plots(steady))))
    figures = plots.all_plots(steady)
    if figures:
        sections.append(Section("figures", "Figures", plots=tuple(figures)))
    failures = tm.failures_table(frame)
    if failures is not None:
        sections.append(Section("failures", "Failures", tables=(failures,)))
    peak = peaks_table(frame)
    studies = hist.groupby("study").size()
    sections.append(Section(
        "reference", "Reference data",
        ("Historical rows: " + ", ".join(f"{s} ({n} values)" for s, n in studies.items())
         + " — reports/data/historical.csv, transcribed from the seed studies.",),
        tables=(peak,) if peak is not None else ()))
    return Report("dlbench report", tuple(sections), frame, loaded.warnings,
                  merged.superseded, tuple(found), equiv)


TIDY_DROP = ("order",)


def write_tidy(frame: pd.DataFrame, out: Path) -> list[Path]:
    data = frame.drop(columns=list(TIDY_DROP))
    written = [out / "results_tidy.csv"]
    data.to_csv(written[0], index=False)
    try:
        import pyarrow  # noqa: F401  (optional: Parquet only when available)
    except ImportError:
        return written
    path = out / "results_tidy.parquet"
    data.to_parquet(path, index=False)
    return written + [path]


def build(paths: list[Path], out: Path) -> tuple[Report, list[Path]]:
    from reports import html as html_out
    from reports import markdown as md_out
    from reports import text as text_out

    report = make_report(load(paths))
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    written = []
    for section in report.sections:
        for plot in section.plots:
            path = out / "plots" / f"{plot.key}.png"
            path.write_bytes(plot.png)
            written.append(path)
    for name, content in (("report.md", md_out.render(report)),
                          ("report.html", html_out.render(report)),
                          ("summary.txt", text_out.render(report))):
        (out / name).write_text(content, encoding="utf-8")
        written.append(out / name)
    written += write_tidy(report.frame, out)
    (out / "ratios.json").write_text(json.dumps([asdict(r) for r in report.ratios],
                                                indent=1, default=list), encoding="utf-8")
    return report, written
