"""Drives the pipeline: load → tidy → throughput → equivalence, ratios → tables, plots →
the ``Report`` (sections of text, tables and figures) that ``markdown``, ``html`` and
``text`` render, and the files written to the output folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from models.measures import GENERATE, LOADGEN_MEASURES
from reports import compare
from reports.pipeline import cells, equivalence, historical, peaks, ratios, tidy, truth
from reports.pipeline.load import Loaded, load
from reports.pipeline.naming import BAHRAMPOUR_SETS
from reports.render import plots
from reports.render.table import Cell, Table
from reports.sections import bahrampour as tb
from reports.sections import conditions as tc
from reports.sections import kernels as tk
from reports.sections import layers as tl
from reports.sections import misc as tm
from reports.sections import models as tmod
from reports.sections import practice
from reports.sections import profiles as tp
from reports.sections import scaling as ts
from reports.sections import serving as tsv
from reports.sections import timeline as ttl
from reports.sections import twins as ttw

CONVENTIONS = (
    "Times are medians in milliseconds over independent repetitions of each case, with "
    "a nominal 95% prediction interval of the median (parentheses; it assumes the "
    "repetitions exchangeable, which GPU wall time across processes and hosts is not: "
    "docs/methodology.md#intervals gives the coverage measured); ⚠ marks rows whose "
    "interval is wider than ±10% (a row of one repetition: its bootstrap interval and "
    "IQR). 'Measurement conditions' gives each row's repetitions, device time and GPU "
    "clocks.",
    "Row order and ratios read wall-time medians, the figure every framework has. Bold "
    "marks follow one ranking rule (reports/pipeline/ranking.py, docs/methodology.md"
    "#intervals): on a GPU the device-time median where the case is not launch-bound, told "
    "apart only by more than 3%; wall time only where earlier runs widened the intervals; "
    "otherwise not ranked; on a CPU wall time, where the 95% intervals do not overlap. On a "
    "GPU the device's own time (its kernels' busy time per iteration) stands beside the wall "
    "time where the row has it ('dev'); † marks launch-bound rows, whose device time is "
    "under half the wall time: their wall figure depends on the host CPU.",
    "Forward = inference pass; Total = one gradient computation (forward + loss + backward "
    "for all parameters, no optimizer update; Bahrampour's 'gradient computation time'); "
    "Backward = Total − Forward (convnet-benchmarks' and cnn-benchmarks' 'backward'); "
    "Train step = one training iteration: forward, loss, backward and an SGD update with "
    "momentum.",
    "First call = the first, untimed-loop call (compile, trace, autotune). Peak memory is "
    "the framework allocator's peak on GPU ('alloc') and process RSS on CPU ('RSS').",
    "Achieved TFLOP/s = forward FLOPs per example × batch × k / median time, k = 1 for "
    "forward and 3 for a gradient computation or a training step (forward + two backward "
    "products; the update's few FLOPs per parameter are left out); FLOPs = "
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


# Every ratio compares wall-time medians: the figure every framework has, on every device
# (the bold marks' rule: reports/pipeline/ranking.py).
RATIO_FIGURE = "Ratios of wall-time medians (the figure every framework has, on every device)."
RATIO_LAUNCH_BOUND = (" Where a GPU's wall time is mostly the host's (launch-bound rows, "
                      f"{cells.LAUNCH_BOUND} in the tables), a ratio compares the hosts' CPUs "
                      "as much as the frameworks.")


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
    # Every measurement (tidy.IDENTITY), for the CSV: ``frame`` (what the tables show) and
    # the earlier measurements of its cells by other suites. None: ``frame`` is all.
    measurements: pd.DataFrame | None = field(default=None, repr=False)


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


@dataclass(frozen=True)
class Judged:
    """Every tidy row with its throughput and equivalence verdict, before any table."""

    frame: pd.DataFrame
    equiv: equivalence.Equivalence
    superseded: int                 # older rows replaced by reruns of identical settings
    practice_equiv: equivalence.Equivalence    # the practice suites' rows among themselves
    measurements: pd.DataFrame      # every measurement: ``frame`` and what tables leave out

    @property
    def core(self) -> pd.DataFrame:
        """Every row but the practice suites' (bf16 / TF32, large batches) and the serving
        suites' (LoadGen's percentiles, no median): those have sections of their own and
        never enter the strict-fp32 tables, rankings or ratios."""
        return self.frame[~self.frame["practice"]
                          & ~self.frame["measure"].isin(LOADGEN_MEASURES)].reset_index(drop=True)

    @property
    def steady(self) -> pd.DataFrame:
        """The rows the timing tables read. Compile-cache rows exist for their first calls
        (Table 8); their steady-state samples are a single one. Data-parallel rows have
        their own section (their batch is a global batch over N)."""
        frame = self.core
        return frame[(frame["compile_cache"] == "")
                     & (frame["measure"] != ts.MEASURE)].reset_index(drop=True)

    @property
    def practice(self) -> pd.DataFrame:
        """The practice suites' rows (section "Today's practice"), the transformers' left
        to their own section."""
        frame = self.frame
        return frame[frame["practice"] & (frame["compile_cache"] == "")
                     & (frame["family"] != practice.TRANSFORMER)].reset_index(drop=True)

    @property
    def serving(self) -> list[dict]:
        """The serve rows (section "Serving"), each scenario's apart."""
        return tsv.serve_rows(self.frame)

    @property
    def generation(self) -> list[dict]:
        """The generate rows (section "Serving", its generation tables)."""
        return tsv.serve_rows(self.frame, GENERATE)

    @property
    def transformers(self) -> pd.DataFrame:
        """Every transformer row (section "Transformers"): the strict suites' (fp32,
        transformers-cpu) and the practice suites' (transformers-gpu) alike."""
        frame = self.frame
        return frame[(frame["family"] == practice.TRANSFORMER)
                     & (frame["compile_cache"] == "")].reset_index(drop=True)


def _equivalence(frame: pd.DataFrame) -> equivalence.Equivalence:
    """Float64 errors judge equivalence where every row has them; pairwise elsewhere."""
    return truth.prefer_truth(equivalence.check(frame), frame)


def judge(loaded: Loaded) -> Judged:
    merged = tidy.tidy(loaded)
    device_peaks = peaks.load_peaks()
    frame = peaks.add_throughput(merged.frame, device_peaks)
    frame = frame.assign(practice=frame["practice"].astype(bool))
    # Strict-fp32 suites and practice suites are judged apart: a practice fingerprint never
    # decides a strict table's verdict, nor the other way round.
    # Serve rows carry no fingerprint: their float64 check is their own (reports/sections/
    # serving.py).
    equiv = _equivalence(frame[~frame["practice"] & ~frame["measure"].isin(LOADGEN_MEASURES)])
    practice_equiv = _equivalence(frame[frame["practice"]])
    rows = {**equiv.rows, **practice_equiv.rows}

    def with_verdicts(part: pd.DataFrame) -> pd.DataFrame:
        return part.assign(
            equiv=[rows[s].text() if s in rows else "—" for s in part["source"]],
            equiv_worst_rel=[rows[s].worst if s in rows else float("nan")
                             for s in part["source"]])

    # The measurements a table leaves out are judged with the rows it shows: a verdict is
    # the shown row's (the same source), "—" for the others.
    measurements = peaks.add_throughput(merged.measurements, device_peaks)
    measurements = measurements.assign(practice=measurements["practice"].astype(bool))
    return Judged(with_verdicts(frame), equiv, merged.superseded, practice_equiv,
                  with_verdicts(measurements))


def make_report(loaded: Loaded, reference: tuple[Path, ...] = (),
                twins: tuple[Table, ...] = ()) -> Report:
    """The report; with ``reference`` (published folders among the inputs) a section puts
    the other rows beside the reference rows (reports/compare.py); ``twins``: the twins
    section's tables (reports/sections/twins.py), read beside the rows."""
    judged = judge(loaded)
    frame, equiv, steady, core = judged.frame, judged.equiv, judged.steady, judged.core
    hist = historical.load_historical()
    found = ratios.framework_ratios(steady) + ratios.device_ratios(steady)

    hosts = sorted(set(frame["host"]))
    overview = [
        f"{len(frame)} result rows from {len(loaded.files)} file(s), {len(hosts)} host(s); "
        f"frameworks: {', '.join(sorted(set(frame['framework'])))}; hardware: "
        f"{'; '.join(sorted(set(frame['hardware'])))}.",
    ]
    if judged.superseded:
        overview.append(f"{judged.superseded} older row(s) superseded by reruns of identical "
                        "settings (the latest row is kept).")
    not_shown = len(judged.measurements) - len(frame)
    if not_shown:
        overview.append(f"{not_shown} row(s) measured the same setting as a later row of "
                        "another suite: the tables show the later one; both are in "
                        "results_tidy.csv.")
    overview += list(loaded.warnings)
    sections = [Section("overview", "Overview", tuple(overview) + CONVENTIONS,
                        tables=(environment_table(frame),))]
    summary = tuple(tmod.summary_tables(steady, equiv))
    if summary or not len(judged.practice):   # a practice-only run has no strict matrix
        sections.append(Section("summary", "Summary: models × frameworks", tables=summary))
    if reference:
        text, tables = compare.section_parts(loaded, reference)
        sections.insert(1, Section("compare", "Compared with the reference", text,
                                   tables=tables))
    practice_tables = practice.practice_tables(judged.practice, judged.practice_equiv)
    if practice_tables:
        sections.append(Section("practice", "Today's practice", practice.PARAGRAPHS,
                                tables=tuple(practice_tables),
                                plots=tuple(plots.practice_plots(judged.practice))))
    # A row's source is its own: the strict and practice verdicts merge without clashing.
    both = equivalence.Equivalence({}, {**judged.equiv.rows, **judged.practice_equiv.rows})
    transformer_tables = practice.practice_tables(judged.transformers, both, "transformers")
    if transformer_tables:
        sections.append(Section("transformers", "Transformers", practice.TRANSFORMER_PARAGRAPHS,
                                tables=tuple(transformer_tables)))
    sentences = tuple(r.sentence() + "." for r in found)
    ratio_tables = tuple(t for t in (tm.ratio_table(found, "framework"),
                                     tm.ratio_table(found, "device")) if t is not None)
    if sentences:
        bound = any(cells.launch_bound(r) for r in steady.to_dict("records"))
        sections.append(Section("ratios", "Ratios",
                                (RATIO_FIGURE + (RATIO_LAUNCH_BOUND if bound else ""),),
                                bullets=sentences, tables=ratio_tables))
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
            + tb.sae_tables(steady, hist) + tb.compile_tables(core, hist))
    if bahr:
        sections.append(Section("bahrampour", "Bahrampour et al. format", tables=tuple(bahr)))
    misc = [t for t in (tm.sweep_table(steady), tm.transfer_table(steady)) if t is not None]
    if misc:
        sections.append(Section("layers-misc", "Single layers and transfers",
                                tables=tuple(misc)))
    conditions = tc.conditions_table(steady)
    if conditions is not None:
        sections.append(Section("conditions", "Measurement conditions", tables=(conditions,)))
    profiles = (tp.hotspot_tables(steady) + tp.top_kernel_tables(steady)
                + ttl.timeline_tables(steady))
    if profiles:
        sections.append(Section("profiles", "Hotspot layers and kernels (Li et al. format)",
                                tables=tuple(profiles), plots=tuple(plots.profile_plots(steady))))
    tracer = tk.tracer_check_table(steady)
    kernel_tables = (tk.fig6_tables(steady) + tk.table2_tables(steady)
                     + ([tracer] if tracer is not None else []))
    if kernel_tables:
        sections.append(Section("kernels", "GPU kernel metrics (Li et al. Fig. 6, Table II)",
                                tables=tuple(kernel_tables),
                                plots=tuple(plots.fig6_plots(steady))))
    figures = plots.all_plots(steady)
    if figures:
        sections.append(Section("figures", "Figures", plots=tuple(figures)))
    truth_table = truth.truth_table(core)
    if truth_table is not None:
        sections.append(Section("truth", "Equivalence against float64", tables=(truth_table,)))
    scaling = ts.scaling_rows(loaded)
    scaling_table = ts.scaling_table(scaling)
    if scaling_table is not None:
        scaling_plot = ts.efficiency_plot(scaling)
        sections.append(Section("scaling", "Data-parallel scaling",
                                ts.interconnect_lines(scaling),
                                tables=tuple(t for t in (scaling_table, ts.loss_table(scaling))
                                             if t is not None),
                                plots=(scaling_plot,) if scaling_plot else ()))
    serving, generation = judged.serving, judged.generation
    if serving or generation:
        sections.append(Section("serving", tsv.TITLE,
                                tsv.PARAGRAPHS + (tsv.GENERATION_PARAGRAPH if generation else ()),
                                tables=(*tsv.serving_tables(serving),
                                        *tsv.generation_tables(generation)),
                                plots=tuple(tsv.serving_plots(serving))))
    if twins:
        sections.append(Section("twins", ttw.TITLE, ttw.PARAGRAPHS, tables=twins))
    failures = tm.failure_tables(core)
    if failures:
        sections.append(Section("failures", "Failures", tables=tuple(failures)))
    peak = peaks_table(frame)
    studies = hist.groupby("study").size()
    sections.append(Section(
        "reference", "Reference data",
        ("Historical rows: " + ", ".join(f"{s} ({n} values)" for s, n in studies.items())
         + " — reports/data/historical.csv, transcribed from the seed studies.",),
        tables=(peak,) if peak is not None else ()))
    # A reason repeated down a column is said once under its table (cells.compact_...);
    # a table with a launch-bound cell (†) says what that means.
    sections = [replace(s, tables=tuple(cells.note_launch_bound(cells.compact_repeated_failures(t))
                                        for t in s.tables))
                for s in sections]
    return Report("dlbench report", tuple(sections), frame, loaded.warnings,
                  judged.superseded, tuple(found), equiv, judged.measurements)


# The seeds' formats a visitor looks for first (README "Published results"): cnn-benchmarks'
# per-model tables, convnet-benchmarks' L1-L5, Bahrampour's Tables 3-8, Li's Fig. 2 (hotspot
# layers), Fig. 3 (the input-size sweep) and Fig. 7 (host-to-device copies); and today's
# practice (bf16 / TF32 training steps at large batches), which the seeds predate.
HEADLINE_SECTIONS = ("summary", "practice", "models", "layers", "bahrampour", "layers-misc",
                     "profiles")
HEADLINE_FIGURES = ("Li et al. Fig. 3", "Li et al. Fig. 7")


def headlines(report: Report) -> Report:
    """The headline tables of ``report`` (a published folder's headlines.md)."""
    kept = [s for s in report.sections if s.key in HEADLINE_SECTIONS]
    figures = tuple(p for s in report.sections if s.key == "figures" for p in s.plots
                    if any(fig in p.caption for fig in HEADLINE_FIGURES))
    if figures:
        kept.append(Section("figures", "Figures (Li et al. Fig. 3 and 7)", plots=figures))
    intro = Section("about", "About these tables",
                    ("The seeds' headline formats, every framework measured; the full report "
                     "(failures, equivalence, environments, all figures) is report.md beside "
                     "this file.",))
    return replace(report, title="dlbench headline tables", sections=(intro, *kept))


TIDY_DROP = ("order",)


def write_tidy(frame: pd.DataFrame, out: Path) -> list[Path]:
    """The tidy table as CSV only: pandas reads it back (``pd.read_csv``), and Parquet would
    need pyarrow, a large dependency for a table of a few thousand rows."""
    path = out / "results_tidy.csv"
    frame.drop(columns=list(TIDY_DROP)).to_csv(path, index=False)
    return [path]


def build(paths: list[Path], out: Path, reference: tuple[Path, ...] = (),
          pages: bool = False) -> tuple[Report, list[Path]]:
    """Write the report of ``paths`` to ``out``; ``pages``: only what a repository host
    shows (report.md and plots/*.png), for a published folder's checked-in report."""
    from reports.render import html as html_out
    from reports.render import markdown as md_out
    from reports.sections import text as text_out
    report = make_report(load(paths), reference, tuple(ttw.twin_tables(paths)))
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    if pages:   # a checked-in folder holds this build's figures only
        for stale in (out / "plots").glob("*.png"):
            stale.unlink()
    written = []
    for section in report.sections:
        for plot in section.plots:
            path = out / "plots" / f"{plot.key}.png"
            path.write_bytes(plot.png)
            written.append(path)
    (out / "report.md").write_text(md_out.render(report), encoding="utf-8")
    written.append(out / "report.md")
    if pages:
        (out / "headlines.md").write_text(md_out.render(headlines(report)), encoding="utf-8")
        return report, written + [out / "headlines.md"]
    for name, content in (("report.html", html_out.render(report)),
                          ("summary.txt", text_out.render(report))):
        (out / name).write_text(content, encoding="utf-8")
        written.append(out / name)
    written += write_tidy(report.frame if report.measurements is None
                          else report.measurements, out)
    (out / "ratios.json").write_text(json.dumps([asdict(r) for r in report.ratios],
                                                indent=1, default=list), encoding="utf-8")
    return report, written
