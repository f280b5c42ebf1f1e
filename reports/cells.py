"""Formatting of single table cells: times with their CI, failures, memory, throughput.

Seeds' conventions kept: times in milliseconds (all four seeds), two decimals for small
values as cnn-benchmarks prints them; failures shown in the cell, like convnet-benchmarks'
"Limitations" column and cnn-benchmarks' "did not have enough memory" notes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from reports.table import Cell, Table

UNSTABLE = "⚠"
MISSING = "—"
REASON_CHARS = 48


def is_num(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def fmt_ms(value: float) -> str:
    if not is_num(value):
        return MISSING
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_published(value: float) -> str:
    """Historical values exactly as the seed printed them (no added digits)."""
    return f"{value:.10g}" if is_num(value) else MISSING


def status_text(row, short: bool = False) -> str:
    """``OOM``, ``unsupported (reason)`` or ``failed (reason)``."""
    if row["status"] == "oom":
        return "OOM"
    reason = " ".join(str(row["reason"] or "").split())
    if short or not reason:
        return row["status"]
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS - 1] + "…"
    return f"{row['status']} ({reason})"


def failure_cell(row) -> Cell:
    return Cell(status_text(row), kind="fail", title=str(row["reason"] or row["status"]))


def time_cell(row, ci: bool = True) -> Cell:
    """Median with its 95% CI; ⚠ marks a row the timer flagged unstable."""
    if row is None:
        return Cell(MISSING, kind="muted")
    if row["status"] != "ok":
        return failure_cell(row)
    text = fmt_ms(row["median_ms"])
    if ci and is_num(row["ci_low_ms"]) and is_num(row["ci_high_ms"]):
        text += f" ({fmt_ms(row['ci_low_ms'])}–{fmt_ms(row['ci_high_ms'])})"
    title = (f"median {fmt_ms(row['median_ms'])} ms, 95% CI {fmt_ms(row['ci_low_ms'])}–"
             f"{fmt_ms(row['ci_high_ms'])}, IQR {fmt_ms(row['iqr_ms'])}, "
             f"{int(row['samples']) if is_num(row['samples']) else 0} samples"
             f"{repetitions_text(row)}")
    return _flag_unstable(row, text, title)


def repetitions_text(row) -> str:
    """", n independent repetitions" where the row has them (suites/repetitions.py)."""
    count = row.get("repetitions")
    return f" in {int(count)} independent repetitions" if is_num(count) else ""


def _flag_unstable(row, text: str, title: str) -> Cell:
    if row["unstable"]:
        text += f" {UNSTABLE}"
        title += f"; unstable: {row['unstable_reason']}"
    return Cell(text, title=title)


def fmt_seconds(ms: float) -> str:
    """Milliseconds shown in seconds, with fmt_ms's digits (Bahrampour Table 8 uses s)."""
    return fmt_ms(ms / 1e3) if is_num(ms) else MISSING


def per_batch_cell(row) -> Cell:
    """An epoch row's time per batch: the epoch's median ÷ its batches (Bahrampour Table 6
    averages over one epoch); the whole epoch's median and CI in the hover text."""
    if row is None:
        return Cell(MISSING, kind="muted")
    if row["status"] != "ok":
        return failure_cell(row)
    text = fmt_ms(row["per_batch_median_ms"])
    title = (f"epoch median {fmt_ms(row['median_ms'])} ms (95% CI {fmt_ms(row['ci_low_ms'])}–"
             f"{fmt_ms(row['ci_high_ms'])}) over {fmt_count(row['epoch_batches'])} batches")
    return _flag_unstable(row, text, title)


def fmt_count(value: float) -> str:
    return f"{value:.0f}" if is_num(value) else MISSING


def value_cell(value: float, title: str = "") -> Cell:
    return Cell(fmt_ms(value), title=title, kind="" if is_num(value) else "muted")


def backward_cell(grad, fwd) -> Cell:
    """backward = gradient − forward (Bahrampour §3.1; convnet-benchmarks' "backward")."""
    if grad is None:
        return Cell(MISSING, kind="muted")
    if grad["status"] != "ok":   # the failure itself is shown once, in the Total cell
        return Cell(MISSING, kind="muted", title=status_text(grad))
    if fwd is None or fwd["status"] != "ok":
        return Cell(MISSING, kind="muted", title="no forward time to subtract")
    return Cell(fmt_ms(grad["median_ms"] - fwd["median_ms"]),
                title="gradient median − forward median")


def ok_median(row) -> float:
    return row["median_ms"] if row is not None and row["status"] == "ok" else math.nan


def fmt_bytes(value: float, kind: str = "") -> str:
    if not is_num(value):
        return MISSING
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = min(int(math.log(max(value, 1), 1024)), len(units) - 1)
    text = f"{value / 1024 ** power:.3g} {units[power]}"
    tag = {"allocator": "alloc", "rss": "RSS"}.get(kind, kind)
    return f"{text} ({tag})" if tag else text


def memory_cell(rows) -> Cell:
    """The largest peak among the given rows (gradient usually), with its kind: allocator
    peak on GPU, process RSS on CPU (not comparable with each other)."""
    found = [r for r in rows if r is not None and is_num(r["peak_bytes"])]
    best = max(found, key=lambda r: r["peak_bytes"], default=None)
    if best is None:
        return Cell(MISSING, kind="muted")
    return Cell(fmt_bytes(best["peak_bytes"], best["memory_kind"]),
                title=f"{best['measure']} peak, {best['memory_kind']}")


def first_call_cell(row) -> Cell:
    if row is None or row["status"] != "ok" or not is_num(row["first_call_ms"]):
        return Cell(MISSING, kind="muted")
    hits, compile_s = row.get("first_call_cache_hits"), row.get("first_call_compile_s")
    if is_num(hits) and hits > 0:
        # Loaded from a persistent compilation cache: not a compile time (README, Time to
        # result); the mark keeps it from being compared with other frameworks' compiles.
        return Cell(fmt_ms(row["first_call_ms"]) + " (cached)",
                    title=f"first call loaded {hits:g} executable(s) from a persistent "
                          f"compilation cache; {compile_s:g} s compiling")
    title = "first call: compile/trace/autotune"
    if is_num(compile_s):
        title += f" ({compile_s:g} s in XLA backend compilation)"
    return Cell(fmt_ms(row["first_call_ms"]), title=title)


def tflops_cell(row) -> Cell:
    if row is None or not is_num(row["achieved_tflops"]):
        return Cell(MISSING, kind="muted")
    return Cell(f"{row['achieved_tflops']:.3g}", title=f"{row['measure']} TFLOP/s")


def share_cell(row) -> Cell:
    if row is None or not is_num(row["peak_share"]):
        return Cell(MISSING, kind="muted")
    return Cell(f"{row['peak_share']:.1%}",
                title=f"of {row['peak_tflops']:g} TFLOP/s {row['precision']} peak "
                      f"({row['peak_device']}): {row['peak_source']}")


def compact_repeated_failures(table: Table) -> Table:
    """A failure reason that fills several cells of one table (ONNX Runtime's gradients:
    one per row) is said once, as a numbered note under the table; its cells keep the
    status and the note's number ("unsupported [1]"), the full reason on hover."""
    counts = Counter(c.title for row in table.rows for c in row if c.kind == "fail" and c.title)
    number = {reason: n for n, reason in
              enumerate((r for r, k in counts.items() if k > 1), start=1)}
    if not number:
        return table
    status: dict[str, str] = {}
    rows = []
    for row in table.rows:
        cells = []
        for c in row:
            if c.kind == "fail" and c.title in number:
                status[c.title] = c.text.split(" (", 1)[0]
                c = Cell(f"{status[c.title]} [{number[c.title]}]", c.kind, c.title, c.emphasis)
            cells.append(c)
        rows.append(tuple(cells))
    notes = tuple(f"[{n}] {status[reason]}: {reason}" for reason, n in number.items())
    return replace(table, rows=tuple(rows), notes=table.notes + notes)
