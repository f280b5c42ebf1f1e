"""cnn-benchmarks' per-model tables (seed 001: "GPU | cuDNN | Forward (ms) | Backward (ms) |
Total (ms)", one table per model at batch 16, fastest first) and the summary matrix
models × frameworks.

Here a row is a setting (hardware, framework, variant, precision, threads) instead of
(GPU, cuDNN), and each time carries its 95% CI; first-call time, peak memory, achieved
TFLOP/s, share of peak and the equivalence check follow.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from reports import cells
from reports.equivalence import FINGERPRINT, Equivalence
from reports.grouping import by_setting, extras, records, variant_name, variant_text
from reports.naming import is_detail_model, sort_key
from reports.table import Cell, Table

COLUMNS = ("Hardware", "Framework", "Variant", "Precision", "Threads", "Forward (ms)",
           "Backward (ms)", "Total (ms)", "First call fwd / grad (ms)", "Peak memory",
           "TFLOP/s fwd / grad", "% of peak fwd / grad", "Equiv.")
NUMERIC = (False,) * 4 + (True,) * 8 + (False,)


def model_batches(frame: pd.DataFrame, keep=is_detail_model) -> list[tuple[str, int]]:
    pairs = {(m, int(b)) for m, b in zip(frame["model"], frame["batch"]) if keep(m)}
    return sorted(pairs, key=lambda mb: (sort_key(mb[0]), mb[1]))


def _pair(a: str, b: str) -> str:
    if a == cells.MISSING and b == cells.MISSING:
        return cells.MISSING
    return f"{a} / {b}"


def _equiv_cell(rows, equiv: Equivalence) -> Cell:
    checks = [equiv.rows.get(r["source"]) for r in rows if r is not None]
    checks = [c for c in checks if c is not None and c.agree is not None]
    if not checks:
        return Cell("—", kind="muted", title="nothing to compare with")
    worst = max(checks, key=lambda c: c.worst)
    ok = all(c.agree for c in checks)
    return Cell("✓" if ok else f"✗ {worst.worst:.1e}", kind="" if ok else "fail",
                title=f"worst relative difference {worst.worst:.2e} vs {worst.against}")


def input_text(model_rows: list[dict], batch: int) -> str:
    shape = json.loads(model_rows[0]["input_shape"] or "[]")
    dims = " x ".join(str(d) for d in [batch, *shape])
    return f"input {dims}"


def model_table(model: str, batch: int, rows: list[dict], equiv: Equivalence) -> Table:
    groups = by_setting(rows)
    extra = extras(list(groups))
    built = []
    for setting, measures in groups.items():
        fwd, grad = measures.get("forward"), measures.get("gradient")
        if fwd is None and grad is None:
            continue
        total = cells.ok_median(grad)
        sort = (math.isnan(total), total if not math.isnan(total) else 0.0,
                cells.ok_median(fwd) if fwd else math.inf, setting)
        built.append((sort, setting, fwd, grad, measures.get(FINGERPRINT)))
    built.sort(key=lambda t: t[0])
    best = {"forward": min((cells.ok_median(b[2]) for b in built if b[2] is not None),
                           default=math.nan),
            "gradient": min((cells.ok_median(b[3]) for b in built if b[3] is not None),
                            default=math.nan)}
    body, notes = [], []
    for _, s, fwd, grad, printed in built:
        fwd_cell, grad_cell = cells.time_cell(fwd), cells.time_cell(grad)
        if fwd is not None and fwd["status"] == "ok" and fwd["median_ms"] == best["forward"]:
            fwd_cell = Cell(fwd_cell.text, fwd_cell.kind, fwd_cell.title, "bold")
        if grad is not None and grad["status"] == "ok" and grad["median_ms"] == best["gradient"]:
            grad_cell = Cell(grad_cell.text, grad_cell.kind, grad_cell.title, "bold")
        for r in (fwd, grad):
            if r is not None and r["status"] == "ok" and r["unstable"]:
                notes.append(f"⚠ {s.framework} {variant_text(s, extra[s])} {s.precision} "
                             f"{s.device} {r['measure']}: {r['unstable_reason']}")
        body.append((
            Cell(s.hardware), Cell(s.framework), Cell(variant_text(s, extra[s])),
            Cell(s.precision), Cell(str(s.threads)), fwd_cell, cells.backward_cell(grad, fwd),
            grad_cell,
            Cell(_pair(cells.first_call_cell(fwd).text, cells.first_call_cell(grad).text)),
            cells.memory_cell([fwd, grad]),
            Cell(_pair(cells.tflops_cell(fwd).text, cells.tflops_cell(grad).text)),
            Cell(_pair(cells.share_cell(fwd).text, cells.share_cell(grad).text),
                 title=cells.share_cell(grad or fwd).title),
            _equiv_cell([fwd, grad, printed], equiv),
        ))
    first = rows[0]
    info = []
    if cells.is_num(first["params"]):
        info.append(f"{first['params'] / 1e6:.3g} M parameters")
    if cells.is_num(first["flops_per_example"]):
        info.append(f"{first['flops_per_example'] / 1e9:.3g} GFLOP forward per example")
    verdicts = [f"{v.precision}: {v.text()} ({', '.join(v.frameworks)})"
                for v in equiv.for_model(model, batch)]
    if verdicts:
        info.append("equivalence " + "; ".join(verdicts))
    notes = ["Times: median (95% bootstrap CI) in ms; backward = total − forward "
             "(Bahrampour's definition); total = one gradient computation, no optimizer "
             "update. Bold: fastest."] + notes
    return Table(f"model-{model}-b{batch}", f"{model} ({input_text(rows, batch)})", COLUMNS,
                 tuple(body), NUMERIC, tuple(notes), caption=", ".join(info))


def model_tables(frame: pd.DataFrame, equiv: Equivalence) -> list[tuple[str, int, Table]]:
    rows = records(frame)
    out = []
    for model, batch in model_batches(frame):
        mine = [r for r in rows if r["model"] == model and r["batch"] == batch]
        table = model_table(model, batch, mine, equiv)
        if table.rows:
            out.append((model, batch, table))
    return out


def _best_cell(rows: list[dict]) -> tuple[Cell, float]:
    ok = [r for r in rows if r["status"] == "ok"]
    if ok:
        r = min(ok, key=lambda r: r["median_ms"])
        where = (variant_name(r["variant"], r["compile_cache"])
                 + (f", {r['threads']} thr" if r["device"] == "cpu" else ""))
        text = f"{cells.fmt_ms(r['median_ms'])} ({where})"
        if r["unstable"]:
            text += f" {cells.UNSTABLE}"
        return Cell(text, title=cells.time_cell(r).title), r["median_ms"]
    rank = {"oom": 0, "unsupported": 1, "failed": 2, "timeout": 3}
    r = min(rows, key=lambda r: rank.get(r["status"], 3))
    return cells.failure_cell(r), math.nan


def summary_tables(frame: pd.DataFrame, equiv: Equivalence) -> list[Table]:
    """One matrix per (device, hardware, precision, measure): models × frameworks, each
    framework's fastest variant (threads on CPU) with its name; failures when none ran."""
    rows = [r for r in records(frame) if r["measure"] in ("forward", "gradient")]
    keys = sorted({(r["device"], r["hardware"], r["precision"], r["measure"]) for r in rows},
                  key=lambda k: (k[0] != "gpu", k[1], k[2], k[3] != "gradient"))
    out = []
    for n, (device, hw, precision, measure) in enumerate(keys):
        part = [r for r in rows if (r["device"], r["hardware"], r["precision"],
                                    r["measure"]) == (device, hw, precision, measure)]
        frameworks = sorted({r["framework"] for r in part})
        index: dict[tuple, list[dict]] = {}
        for r in part:
            index.setdefault((r["model"], r["batch"], r["framework"]), []).append(r)
        body = []
        for model, batch in sorted({(r["model"], r["batch"]) for r in part},
                                   key=lambda mb: (sort_key(mb[0]), mb[1])):
            found = [_best_cell(index[(model, batch, fw)]) if (model, batch, fw) in index
                     else (Cell(cells.MISSING, kind="muted"), math.nan)
                     for fw in frameworks]
            fastest = min((v for _, v in found if not math.isnan(v)), default=math.nan)
            line = [Cell(cell.text, cell.kind, cell.title,
                         "bold" if v == fastest and len(frameworks) > 1 else "")
                    for cell, v in found]
            body.append((Cell(f"{model}"), Cell(str(batch)), *line,
                         Cell(equiv.model_text(model, batch, precision))))
        name = "Total" if measure == "gradient" else "Forward"
        out.append(Table(f"summary-{n}", f"Summary: {name} (ms), {device} {hw}, {precision}",
                         ("Model", "Batch", *frameworks, "Equiv."), tuple(body),
                         (False, True) + (True,) * len(frameworks) + (False,),
                         notes=("Each framework's fastest ok variant (and thread count on "
                                "CPU), median ms; bold: fastest framework.",)))
    return out
