"""Today's practice: the rows of the practice suites (suites/practice-gpu.toml,
practice-cpu.toml: bf16 mixed precision and TF32 beside fp32 strict, batches that fill the
device, forward and a whole training step), in tables of their own.

Per hardware and model, one line per batch, precision, framework, variant and measure: the
wall median, examples per second (batch ÷ median: images, or sequences for the LSTM), the
model FLOP utilisation (achieved model TFLOP/s ÷ the device's peak for the row's precision,
reports/pipeline/peaks.py: a training step counts 3 × forward), the peak memory, the energy per
example (the GPU's energy of one iteration ÷ batch, suites/instruments/device_state.py) and the job's
error against float64 from its fingerprint row with its verdict (reports/pipeline/truth.py; where
the float64 reference was skipped, the pairwise verdict, and the cell says so). A row that
did not run (OOM, unsupported and why) is a row too.

These rows never enter the strict-fp32 tables, rankings or ratios: ``reports/render/build.py``
keeps them apart by suite (``tidy.PRACTICE_SUITES``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import pandas as pd

from models.measures import TRAIN_STEP
from reports.pipeline import cells, modes
from reports.pipeline.equivalence import FINGERPRINT, Equivalence, mark
from reports.pipeline.grouping import records, setting_of
from reports.pipeline.naming import sort_key
from reports.pipeline.truth import RowTruth, row_truths
from reports.render.table import Cell, Table

MEASURES = ("forward", "gradient", TRAIN_STEP)
MEASURE_NAMES = {"forward": "forward", "gradient": "gradient", TRAIN_STEP: "train step"}
# Today's practice first: mixed precision, then TF32, then fp32 strict.
PRECISION_ORDER = ("bf16", "tf32", "fp32")
# The energy counter's source text starts so (suites/instruments/device_state.py energy_fields); any
# other source (the median power reading × time) is marked in the cell.
COUNTER_SOURCE = "NVML total energy counter"
NOT_COUNTER = "‡"

PARAGRAPHS = (
    "Rows of the practice suites only (suites/practice-gpu.toml, practice-cpu.toml): "
    "training as it is done today, in bf16 mixed precision (bf16 compute, fp32 master "
    "weights) and TF32 beside fp32 strict, at batches that fill the device, the forward "
    "pass and a whole training step (forward, loss, backward and an SGD update with "
    "momentum 0.9, the same in every framework). They are never mixed into the other "
    "sections' tables, rankings and ratios, which compare fp32 strict.",
    "Per second = batch ÷ wall-time median (images, or sequences for the LSTM). "
    "Utilisation (MFU) = the model's FLOPs per iteration ÷ the median ÷ the device's "
    "datasheet peak for the row's precision (Reference data); a training step counts 3 × "
    "the forward FLOPs (the update's 4 FLOPs per parameter are negligible beside them). "
    "Energy per example = the GPU's energy of one iteration (NVML's energy counter over the "
    "sampling windows × the median) ÷ batch. vs float64: the job's worst error against the "
    "float64 reference (output, loss, gradient; the cell's hover has each) and its verdict "
    "against the bound the precision's arithmetic explains for the network "
    "(models/error_bounds.py); 'pairwise' where the float64 reference was skipped (the note "
    "says why): agreement with the other frameworks' fingerprints instead. A batch that did "
    "not run (OOM) or a measure a framework lacks (unsupported, and why) is a row too.",
)

# models/families/transformer.py's family: GPT-2, BERT and ViT rows have a section of their
# own (reports/render/build.py), whichever suite measured them.
TRANSFORMER = "transformer"
TRANSFORMER_PARAGRAPHS = (
    "GPT-2, BERT and ViT (models/families/transformer.py), from every suite that ran them "
    "(transformers-gpu: bf16, TF32 and fp32 strict at the batch × sequence users train at "
    "and a sequence-length sweep; transformers-cpu: fp32 strict). Tokens/s = batch × T ÷ "
    "wall median, T the length the step computes: a padded batch's padding counts (BERT "
    "with IMDB-like lengths, padded to its longest), since the kernels run over it; ViT "
    "counts images/s. J/token (J/image) = the GPU's energy of one iteration ÷ the tokens "
    "(images) of the batch.",
    "Utilisation is the model FLOP utilisation (MFU; Chowdhery et al. 2022, PaLM, appendix "
    "B): the definition's matrix-product FLOPs (2 per multiply-accumulate, the tied LM "
    "head's included; LayerNorm, GELU, softmax and gathers left out) × 3 for a gradient or "
    "training step, ÷ the wall median ÷ the GPU's datasheet peak for the row's precision. "
    "Attention is counted: Q·Kᵀ and P·V, 2·T²·d each per sequence and layer, the causal "
    "mask's unused half counted too, as PaLM's 6N + 12·L·H·Q·T per token counts it. Flash "
    "and memory-efficient kernels skip the masked blocks, PyTorch's math backend and "
    "einsum attention compute them: MFU counts model FLOPs, not the FLOPs a kernel ran "
    "(reports/pipeline/peaks.py).",
    "Attention: the implementation that ran, as the adapter recorded it: PyTorch's "
    "scaled_dot_product_attention backend (flash, efficient, cudnn or math), found by a "
    "profiled forward when the job was prepared or forced by an sdpa_* variant; JAX's "
    "jax.nn.dot_product_attention implementation argument (xla: XLA's choice); "
    "TensorFlow's einsum and masked softmax; ONNX Runtime's MatMul and Softmax graph as "
    "its optimizer fused it.",
)

COMPILED_NOTE = ("(compiled): a compiled mode (JAX jit, torch.compile, TensorFlow XLA), set "
                 "here beside uncompiled ones (eager, TensorFlow graph, ONNX Runtime session): "
                 "compiled vs uncompiled, a comparison of execution modes as much as of "
                 "frameworks (reports/pipeline/modes.py; docs/methodology.md#fairness).")


def _precision_rank(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER \
        else len(PRECISION_ORDER)


def _measure_rank(measure: str) -> int:
    return MEASURES.index(measure) if measure in MEASURES else len(MEASURES)


def unit(row: dict) -> str:
    """What the row's throughput counts (reports/pipeline/peaks.py ``rate_of``): tokens
    (transformers fed tokens), images, sequences (the LSTM) or examples."""
    return row["rate_unit"]


def per_second(row: dict) -> float:
    """Items (the row's unit) per second of an ok timed row: batch × items per example ÷
    wall median (reports/pipeline/peaks.py)."""
    return math.nan if row is None else row["items_per_s"]


def joules_per_example(row: dict) -> float:
    """The GPU's energy of one iteration per item of the row's unit (J/token, J/image)."""
    return math.nan if row is None else row["joules_per_item"]


def _from_counter(row: dict) -> bool:
    return str(row.get("energy_source") or "").startswith(COUNTER_SOURCE)


def fmt_rate(value: float) -> str:
    if not cells.is_num(value):
        return cells.MISSING
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _muted(title: str = "") -> Cell:
    return Cell(cells.MISSING, kind="muted", title=title)


def rate_cell(row: dict) -> Cell:
    value = per_second(row)
    if not cells.is_num(value):
        return _muted()
    items = (f"{row['batch']} × {row['items_per_step'] / row['batch']:g} {row['rate_unit']}"
             if row["rate_unit"] == "tokens" else f"{row['batch']}")
    return Cell(fmt_rate(value), title=f"{items} / {cells.fmt_ms(row['median_ms'])} ms")


def utilisation_cell(row: dict) -> Cell:
    if row["status"] != "ok":
        return _muted()
    if not cells.is_num(row["peak_share"]):
        why = ("no datasheet peak for a CPU" if row["device"] == "cpu"
               else f"no {row['precision']} peak for {row['hardware']} in device_peaks.csv")
        return _muted(why)
    return cells.share_cell(row)


def memory_cell(row: dict) -> Cell:
    if row["status"] != "ok" or not cells.is_num(row["peak_bytes"]):
        return _muted()
    kind = {"allocator": "the framework allocator's peak", "rss": "the process's RSS"}.get(
        row["memory_kind"], row["memory_kind"])
    return Cell(f"{row['peak_bytes'] / 2**30:.3g}", title=kind)


def energy_cell(row: dict) -> Cell:
    value = joules_per_example(row)
    source = str(row.get("energy_source") or "") if row is not None else ""
    if not cells.is_num(value):
        return _muted(source)
    text = f"{value:.3g}" + ("" if _from_counter(row) else f" {NOT_COUNTER}")
    return Cell(text, title=f"{row['energy_per_iteration_j']:.3g} J per iteration ÷ "
                            f"{row['items_per_step']:g} {row['rate_unit']}; {source}")


def _errors(row: dict) -> dict:
    return (json.loads(row["fingerprint"] or "null") or {}).get("vs_f64") or {}


def truth_cell(printed: dict | None, truths: dict[str, RowTruth], equiv: Equivalence) -> Cell:
    """The job's error against float64 and its verdict, from its fingerprint row; the
    pairwise verdict where the row carries no float64 errors, marked as such."""
    if printed is None:
        return _muted("no fingerprint row for this job")
    if printed["status"] != "ok":
        return cells.failure_cell(printed)
    truth = truths.get(printed["source"])
    if truth is not None:
        e, b = truth.errors, truth.bounds
        parts = [f"{name} {e[name]:.1e}" for name in ("output", "loss", "grad")
                 if e.get(name) is not None]
        bound = (f"; bound: output {b.output:.1e}, gradient "
                 + (f"{b.grad:.1e}" if b.grad_judged else "not judged")) if b else ""
        if e.get("whole_batch_skipped"):
            bound += f"; {e['whole_batch_skipped']}"
        if truth.ok:
            return Cell(f"{truth.worst:.1e} ✓", title=", ".join(parts) + bound)
        return Cell(f"{truth.worst:.1e} ✗", kind="fail",
                    title="; ".join(truth.failures or ("no bound for this model",)) + bound)
    skipped = _errors(printed).get("skipped") or "no float64 errors in the row"
    check = equiv.rows.get(printed["source"])
    if check is None or check.agree is None:
        return Cell("pairwise: —", kind="muted", title=f"{skipped}; no other fingerprint "
                                                       "of this model, batch and precision")
    return Cell(f"pairwise {mark(check.agree, check.worst)}", kind="" if check.agree
                else "fail", title=f"{skipped}; worst relative difference "
                                   f"{check.worst:.1e} vs {check.against}")


def time_cell(row: dict) -> Cell:
    """The wall median (the GPU's own time beside it where the row has it), or the row's
    status: OOM, unsupported and why."""
    return cells.time_cell(row, ci=False, device=True)


@dataclass(frozen=True)
class Job:
    """The rows of one practice job: its timed measures and its fingerprint row."""

    timed: tuple[dict, ...]
    fingerprint: dict | None


def jobs(frame: pd.DataFrame) -> list[Job]:
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for row in records(frame):
        groups[(row["model"], row["batch"], setting_of(row))][row["measure"]] = row
    out = []
    for measures in groups.values():
        timed = tuple(sorted((r for m, r in measures.items() if m in MEASURES),
                             key=lambda r: _measure_rank(r["measure"])))
        if timed:
            out.append(Job(timed, measures.get(FINGERPRINT)))
    return out


def row_order(row: dict) -> tuple:
    return (_precision_rank(row["precision"]), row["batch"], row["framework"], row["variant"],
            _measure_rank(row["measure"]))


COLUMNS = ("Batch", "Precision", "Framework", "Variant", "Measure", "Median (ms)", "{unit}/s",
           "Utilisation", "Peak memory (GiB)", "J/{one}", "vs float64")
NUMERIC = (True, False, False, False, False, True, True, True, True, True, False)
ONE = {"images": "image", "sequences": "sequence", "examples": "example", "tokens": "token"}
CPU_BLANK = (COLUMNS.index("Utilisation"), COLUMNS.index("J/{one}"))


def attention_cell(row: dict) -> Cell:
    """The attention implementation the adapter recorded for the row (reports/pipeline/tidy.py
    ``attention``)."""
    text = str(row.get("attention") or "")
    return Cell(text) if text else _muted("not recorded")


def practice_tables(frame: pd.DataFrame, equiv: Equivalence, key: str = "practice") -> list[Table]:
    """One table per hardware (GPUs first) and model; an Attention column where any of its
    rows recorded one (the transformers)."""
    truths = {t.source: t for t in row_truths(frame)}
    found = jobs(frame)
    keys = sorted({(j.timed[0]["device"], j.timed[0]["hardware"], j.timed[0]["model"])
                   for j in found}, key=lambda k: (k[0] != "gpu", k[1], sort_key(k[2])))
    out = []
    for n, (device, hardware, model) in enumerate(keys):
        mine = [(row, j.fingerprint) for j in found for row in j.timed
                if (row["device"], row["hardware"], row["model"]) == (device, hardware, model)]
        mine.sort(key=lambda rf: row_order(rf[0]))
        what = unit(mine[0][0])
        body = tuple((Cell(str(r["batch"])), Cell(r["precision"]), Cell(r["framework"]),
                      Cell(modes.marked(r["framework"], r["variant"])),
                      Cell(MEASURE_NAMES.get(r["measure"], r["measure"])),
                      time_cell(r), rate_cell(r), utilisation_cell(r), memory_cell(r),
                      energy_cell(r), truth_cell(printed, truths, equiv))
                     for r, printed in mine)
        columns = tuple(c.format(unit=what.capitalize(), one=ONE[what]) for c in COLUMNS)
        numeric = NUMERIC
        if any(r.get("attention") for r, _ in mine):
            body = tuple((*line[:5], attention_cell(r), *line[5:])
                         for line, (r, _) in zip(body, mine))
            columns, numeric = ((*columns[:5], "Attention", *columns[5:]),
                                (*numeric[:5], False, *numeric[5:]))
        notes = _notes([r for r, _ in mine], [p for _, p in mine])
        keep = range(len(columns))
        if device == "cpu":     # no datasheet peak, no energy counter: two empty columns
            blank = {columns.index(COLUMNS[i].format(unit="", one=ONE[what]))
                     for i in CPU_BLANK}
            keep = [i for i in keep if i not in blank]
            notes = (*notes, "CPUs: no utilisation (device_peaks.csv has GPUs only) and no "
                             "energy per example (no energy counter is read on a CPU).")
        out.append(Table(f"{key}-{n}", f"{model} on {hardware}",
                         tuple(columns[i] for i in keep),
                         tuple(tuple(row[i] for i in keep) for row in body),
                         tuple(numeric[i] for i in keep), notes=notes,
                         caption=_caption(mine[0][0])))
    return out


def _caption(row: dict) -> str:
    info = []
    if cells.is_num(row["params"]):
        info.append(f"{row['params'] / 1e6:.3g} M parameters")
    if cells.is_num(row["flops_per_example"]):
        info.append(f"{row['flops_per_example'] / 1e9:.3g} GFLOP forward per example "
                    "(a training step: 3 ×)")
    return ", ".join(info)


def _notes(rows: list[dict], printed: list[dict | None]) -> tuple[str, ...]:
    notes = []
    if modes.mixes_compiled((r["framework"], r["variant"]) for r in rows):
        notes.append(COMPILED_NOTE)
    if any(cells.is_num(cells.device_ms(r)) for r in rows):
        notes.append(cells.DEVICE_NOTE)
    sources = sorted({str(r.get("energy_source")) for r in rows
                      if cells.is_num(joules_per_example(r)) and not _from_counter(r)})
    if sources:
        notes.append(f"{NOT_COUNTER}: energy not from NVML's energy counter: "
                     + "; ".join(sources) + ".")
    skipped = sorted({_errors(p).get("skipped", "") for p in printed
                      if p is not None and p["status"] == "ok"} - {""})
    notes += [f"pairwise: {s}" for s in skipped]
    optimizers = sorted({f"{r['framework']}: {r['optimizer']}" for r in rows
                         if r["measure"] == "train_step" and r.get("optimizer")})
    if optimizers:
        notes.append("Training step's optimizer (models/optimizers.py): "
                     + "; ".join(optimizers) + ".")
    if any(r["memory_kind"] == "rss" for r in rows):
        notes.append("Peak memory on a CPU is the process's resident set (RSS), on a GPU the "
                     "framework allocator's peak.")
    return tuple(notes)


# --- the README's table (reports/readme_tables.py) ----------------------------------------

README_MODEL, README_BATCH, README_PRECISION = "resnet50", 256, "bf16"
# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md,
# "Training performance: NVIDIA DGX A100 (8x A100 80GB)", 1 GPU, pytorch-21.03 container.
DLE = ("https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/"
       "ConvNets/resnet50v1.5")
REFERENCE = (f"For scale: NVIDIA DeepLearningExamples' [ResNet-50 v1.5 for PyTorch]({DLE}) "
             "trains at 938 img/s in TF32 and 2470 img/s in mixed precision on one A100 80GB "
             "(DGX A100, pytorch-21.03 container): a whole training loop with its data "
             "pipeline, label smoothing and weight decay, quoted for scale, not measured here.")
README_COLUMNS = ("GPU", "Framework", "Variant", "Train step (img/s)", "Forward (img/s)",
                  "Utilisation (train step)", "J/image (train step)")


@dataclass(frozen=True)
class ReadmeLine:
    """One framework on one GPU of a published folder: its fastest variant's training step
    (by throughput) beside that variant's forward pass."""

    folder: str
    hardware: str
    framework: str
    variant: str
    train: dict | None
    forward: dict | None


def readme_lines(frame: pd.DataFrame, folder: str) -> list[ReadmeLine]:
    rows = [r for r in records(frame) if r["model"] == README_MODEL
            and r["batch"] == README_BATCH and r["precision"] == README_PRECISION
            and r["device"] == "gpu" and r["measure"] in ("forward", TRAIN_STEP)]
    groups: dict[tuple, dict[tuple, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        groups[(r["hardware"], r["framework"])][(r["variant"], setting_of(r))][r["measure"]] = r
    out = []
    for (hardware, framework), variants in sorted(groups.items()):
        def speed(item, measure):
            value = per_second(item[1].get(measure))
            return value if cells.is_num(value) else -1.0
        (variant, _), measures = max(variants.items(),
                                     key=lambda i: (speed(i, TRAIN_STEP), speed(i, "forward")))
        # that variant's forward, else the framework's fastest (its variant named in the cell)
        forward = measures.get("forward") or max(
            (m["forward"] for m in variants.values() if "forward" in m),
            key=lambda r: (per_second(r) if cells.is_num(per_second(r)) else -1.0), default=None)
        out.append(ReadmeLine(folder, hardware, framework, variant, measures.get(TRAIN_STEP),
                              forward))
    return out


def _readme_rate(row: dict | None, variant: str) -> Cell:
    if row is None:
        return _muted()
    if row["status"] != "ok":
        return cells.failure_cell(row)
    other = f" ({row['variant']})" if row["variant"] != variant else ""
    return Cell(fmt_rate(per_second(row)) + other)


def readme_table(lines: list[ReadmeLine]) -> Table:
    body = tuple((Cell(f"{line.hardware} ([{line.folder}]({line.folder}/report/report.md))"),
                  Cell(line.framework), Cell(modes.marked(line.framework, line.variant)),
                  _readme_rate(line.train, line.variant), _readme_rate(line.forward, line.variant),
                  utilisation_cell(line.train) if line.train else _muted(),
                  energy_cell(line.train) if line.train else _muted())
                 for line in lines)
    notes = ["Each framework's fastest variant by training-step throughput, its forward "
             "pass beside it (another variant's, named, where it has none); img/s = batch ÷ "
             "wall median; utilisation = model FLOPs ÷ time ÷ the GPU's bf16 datasheet peak "
             "(a training step counts 3 × forward); J/image: the GPU's energy of one step ÷ "
             "batch. The folder's report.md has every row (section 'Today's practice')."]
    if modes.mixes_compiled((line.framework, line.variant) for line in lines):
        notes.append(COMPILED_NOTE)
    if any(c.text.endswith(NOT_COUNTER) for row in body for c in row):
        notes.append(f"{NOT_COUNTER}: energy from the power readings, the GPU having no energy "
                     "counter.")
    return Table("practice-readme", f"{README_MODEL}, batch {README_BATCH}, "
                 f"{README_PRECISION} mixed precision", README_COLUMNS, body,
                 (False, False, False, True, True, True, True), tuple(notes))


def readme_part(lines: list[ReadmeLine]) -> list[str]:
    """The README block's practice part: its heading, the table or one line saying there
    is none yet, and the reference figures."""
    out = ["#### Today's practice: ResNet-50, batch 256, bf16 mixed precision", ""]
    if not lines:
        out += ["No published `practice-gpu` rows yet (`suites/practice-gpu.toml`).", ""]
    else:
        from reports.render.table import to_markdown

        out.append(to_markdown(readme_table(lines), level=5))
    out += [REFERENCE, ""]
    return out
