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

from models.measures import TRAIN_STEP
from reports.pipeline import cells, ranking
from reports.pipeline.equivalence import FINGERPRINT, Equivalence
from reports.pipeline.grouping import (
    by_setting,
    extras,
    label,
    records,
    setting_of,
    variant_name,
    variant_text,
)
from reports.pipeline.naming import is_detail_model, sort_key
from reports.render.table import Cell, Table

COLUMNS = ("Hardware", "Framework", "Variant", "Precision", "Threads", "Forward (ms)",
           "Backward (ms)", "Total (ms)", "First call fwd / grad (ms)", "Peak memory",
           "TFLOP/s fwd / grad", "% of peak fwd / grad", "Equiv.")
NUMERIC = (False,) * 4 + (True,) * 8 + (False,)
# After "Total (ms)" in tables where some row has a device time (GPU).
DEVICE_COLUMNS = ("Device fwd / total (ms)",)
# After "Total (ms)" in tables where some row has a training step (forward, backward and the
# optimizer's update, models/measures.py), before the device column.
TRAIN_COLUMNS = ("Train step (ms)",)
# The summary's matrices, in this order per device, hardware and precision.
SUMMARY_MEASURES = {"gradient": "Total", TRAIN_STEP: "Train step", "forward": "Forward"}


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


def _bold(cell: Cell) -> Cell:
    return Cell(cell.text, cell.kind, cell.title, "bold")


def _unranked(cell: Cell, rows, name) -> Cell:
    """The fastest cell of a case the overlap rule leaves unranked: its hover says why."""
    why = ranking.overlap_text(rows, name)
    return Cell(cell.text, cell.kind, f"{cell.title}; {why}" if cell.title else why,
                cell.emphasis) if why else cell


def model_table(model: str, batch: int, rows: list[dict], equiv: Equivalence) -> Table:
    groups = by_setting(rows)
    extra = extras(list(groups))
    built = []
    for setting, measures in groups.items():
        fwd, grad = measures.get("forward"), measures.get("gradient")
        train = measures.get(TRAIN_STEP)
        if fwd is None and grad is None and train is None:
            continue
        total = cells.ok_median(grad)
        sort = (math.isnan(total), total if not math.isnan(total) else 0.0,
                cells.ok_median(fwd) if fwd else math.inf, setting)
        built.append((sort, setting, fwd, grad, measures.get(FINGERPRINT), train))
    built.sort(key=lambda t: t[0])
    column = {"forward": [b[2] for b in built], "gradient": [b[3] for b in built],
              TRAIN_STEP: [b[5] for b in built]}
    winner = {m: ranking.clear_winner(rs) for m, rs in column.items()}
    fastest = {m: ranking.fastest(rs) for m, rs in column.items()}

    def name(r) -> str:
        return label(setting_of(r), extra[setting_of(r)])

    # Device time as a column of its own beside the wall times, fwd / total in one cell like
    # the table's other per-measure pairs: a wall cell already holds its interval and marks
    # ("7.58 (7.32–7.84) ⚠ †"), and another figure inside it would make the column
    # unreadable, while a column of its own keeps the numbers aligned in the HTML page and
    # in Markdown alike. One column, not one per measure plus host overhead: the table is
    # already as wide as the page; host overhead (wall − device) is on hover and in the
    # conditions table. Only tables with a device time get it: CPU tables are unchanged.
    with_device = any(cells.is_num(cells.device_ms(r)) for b in built for r in b[2:4])
    with_train = any(b[5] is not None for b in built)
    body, notes = [], []
    for _, s, fwd, grad, printed, train in built:
        timed = {}
        for measure, r in (("forward", fwd), ("gradient", grad), (TRAIN_STEP, train)):
            c = cells.time_cell(r)
            if r is not None and r is winner[measure]:
                c = _bold(c)
            elif r is not None and winner[measure] is None and r is fastest[measure]:
                c = _unranked(c, column[measure], name)
            timed[measure] = c
        for r in (fwd, grad, train):
            if r is not None and r["status"] == "ok" and r["unstable"]:
                notes.append(f"⚠ {s.framework} {variant_text(s, extra[s])} {s.precision} "
                             f"{s.device} {r['measure']}: {r['unstable_reason']}")
        body.append((
            Cell(s.hardware), Cell(s.framework), Cell(variant_text(s, extra[s])),
            Cell(s.precision), Cell(str(s.threads)), timed["forward"],
            cells.backward_cell(grad, fwd), timed["gradient"],
            *((timed[TRAIN_STEP],) if with_train else ()),
            *((cells.device_pair_cell(fwd, grad),) if with_device else ()),
            Cell(_pair(cells.first_call_cell(fwd).text, cells.first_call_cell(grad).text)),
            cells.memory_cell([fwd, grad]),
            Cell(_pair(cells.tflops_cell(fwd).text, cells.tflops_cell(grad).text)),
            Cell(_pair(cells.share_cell(fwd).text, cells.share_cell(grad).text),
                 title=cells.share_cell(grad or fwd).title),
            _equiv_cell([fwd, grad, printed, train], equiv),
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
    head = ["Times: wall-time median (95% interval) in ms; backward = total − forward "
            "(Bahrampour's definition); total = one gradient computation, no optimizer "
            "update. Rows by total wall time, fastest first; "
            + ranking.rule("the fastest of its column") + "."]
    if with_train:
        head.append("Train step = one training iteration: forward, loss, backward and an SGD "
                    "update with momentum (models/measures.py).")
    if with_device:
        head.append(cells.DEVICE_COLUMNS_NOTE)
    head.extend(cells.mark_notes(c.text for row in body for c in row))
    at = COLUMNS.index("Total (ms)") + 1
    added = (TRAIN_COLUMNS if with_train else ()) + (DEVICE_COLUMNS if with_device else ())
    columns = COLUMNS[:at] + added + COLUMNS[at:]
    numeric = NUMERIC[:at] + (True,) * len(added) + NUMERIC[at:]
    return Table(f"model-{model}-b{batch}", f"{model} ({input_text(rows, batch)})", columns,
                 tuple(body), numeric, tuple(head + notes), caption=", ".join(info))


def model_tables(frame: pd.DataFrame, equiv: Equivalence) -> list[tuple[str, int, Table]]:
    rows = records(frame)
    out = []
    for model, batch in model_batches(frame):
        mine = [r for r in rows if r["model"] == model and r["batch"] == batch]
        table = model_table(model, batch, mine, equiv)
        if table.rows:
            out.append((model, batch, table))
    return out


def _best_cell(rows: list[dict]) -> tuple[Cell, dict | None]:
    """A framework's cell of the summary: its fastest ok variant by wall median, as
    ``24.12 (eager, dev 22.68)``, or its failure; and the row it shows."""
    ok = [r for r in rows if r["status"] == "ok"]
    if ok:
        r = min(ok, key=lambda r: r["median_ms"])
        where = [variant_name(r["variant"], r["compile_cache"])]
        if r["device"] == "cpu":
            where.append(f"{r['threads']} thr")
        # Device time inside the cell, not as columns: here the frameworks are the columns,
        # and a device column per framework would double the table's width for a figure
        # that only some frameworks have (a column of "—" in Markdown, where no header can
        # span two columns). CPU cells have none: host and device time are one there.
        device = cells.device_ms(r)
        if cells.is_num(device):
            where.append(f"dev {cells.fmt_ms(device)}")
        text = f"{cells.fmt_ms(r['median_ms'])} ({', '.join(where)})"
        if r["unstable"]:
            text += f" {cells.UNSTABLE}"
        text += cells.device_marks(r)
        return Cell(text, title=cells.time_cell(r).title), r
    rank = {"oom": 0, "unsupported": 1, "failed": 2, "timeout": 3}
    r = min(rows, key=lambda r: rank.get(r["status"], 3))
    return cells.failure_cell(r), None


def summary_tables(frame: pd.DataFrame, equiv: Equivalence) -> list[Table]:
    """One matrix per (device, hardware, precision, measure): models × frameworks, each
    framework's fastest variant (threads on CPU) with its name; failures when none ran."""
    rows = [r for r in records(frame) if r["measure"] in SUMMARY_MEASURES]
    order = list(SUMMARY_MEASURES)
    keys = sorted({(r["device"], r["hardware"], r["precision"], r["measure"]) for r in rows},
                  key=lambda k: (k[0] != "gpu", k[1], k[2], order.index(k[3])))
    out = []
    for n, (device, hw, precision, measure) in enumerate(keys):
        part = [r for r in rows if (r["device"], r["hardware"], r["precision"],
                                    r["measure"]) == (device, hw, precision, measure)]
        frameworks = sorted({r["framework"] for r in part})
        index: dict[tuple, list[dict]] = {}
        for r in part:
            index.setdefault((r["model"], r["batch"], r["framework"]), []).append(r)
        body = []
        shown = []
        for model, batch in sorted({(r["model"], r["batch"]) for r in part},
                                   key=lambda mb: (sort_key(mb[0]), mb[1])):
            found = [_best_cell(index[(model, batch, fw)]) if (model, batch, fw) in index
                     else (Cell(cells.MISSING, kind="muted"), None)
                     for fw in frameworks]
            timed = [r for _, r in found]
            shown += [r for r in timed if r is not None]
            winner = ranking.clear_winner(timed) if len(frameworks) > 1 else None
            fastest = (ranking.fastest(timed) if len(frameworks) > 1 and winner is None
                       else None)
            line = [_bold(cell) if r is not None and r is winner
                    else _unranked(cell, timed, lambda x: x["framework"])
                    if r is not None and r is fastest else cell
                    for cell, r in found]
            body.append((Cell(f"{model}"), Cell(str(batch)), *line,
                         Cell(equiv.model_text(model, batch, precision))))
        name = SUMMARY_MEASURES[measure]
        notes = ["Each framework's fastest ok variant (and thread count on CPU), wall-time "
                 "median in ms; " + ranking.rule("the fastest framework") + "."]
        if any(cells.is_num(cells.device_ms(r)) for r in shown):
            notes.append(cells.DEVICE_NOTE)
        if any(cells.launch_bound(r) for r in shown):
            notes.append(cells.LAUNCH_BOUND_NOTE)
        if any(cells.device_above_wall(r) for r in shown):
            notes.append(cells.DEVICE_ABOVE_NOTE)
        out.append(Table(f"summary-{n}", f"Summary: {name} (ms), {device} {hw}, {precision}",
                         ("Model", "Batch", *frameworks, "Equiv."), tuple(body),
                         (False, True) + (True,) * len(frameworks) + (False,),
                         notes=tuple(notes)))
    return out
