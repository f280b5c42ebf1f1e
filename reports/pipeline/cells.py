"""Formatting of single table cells: times with their CI, failures, memory, throughput.

Seeds' conventions kept: times in milliseconds (all four seeds), two decimals for small
values as cnn-benchmarks prints them; failures shown in the cell, like convnet-benchmarks'
"Limitations" column and cnn-benchmarks' "did not have enough memory" notes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from models.measures import DEVICE_ABOVE_WALL_LIMIT
from reports.render.table import Cell, Table

UNSTABLE = "⚠"
LAUNCH_BOUND = "†"
DEVICE_ABOVE = "≠"
# Kernel busy time cannot exceed the wall time of the same iterations; the two are taken
# in separate phases (suites/harness/device_pass.py), whose device medians agree within about
# 0.5% across runs (README, reproducible GPU numbers). Device time above the wall median
# by more than models/measures.py allows means the phases ran different work. A compute
# measure's such figure never reaches the row (reports/pipeline/tidy.py leaves it out: TensorFlow's
# autotuning chose a 2x slower convolution in the device phase, published/h200,
# li2016's f=304); what is marked is a transfer whose pageable copy ran at another speed
# in the other phase, or a wall row's own device clock.
MISSING = "—"
REASON_CHARS = 48
LAUNCH_BOUND_NOTE = ("†: launch-bound, the GPU's kernels busy for less than half the wall "
                     "time: the wall figure measures the host CPU (launches, framework "
                     "overhead) more than the GPU, and moves with the host; its device time "
                     "is the figure that carries over to another machine.")
DEVICE_ABOVE_NOTE = ("≠: the device time is more than 5% above the wall time, which the "
                     "same iterations cannot be: the wall and device figures come from two "
                     "phases that ran different work (a copy at another speed), so neither "
                     "host overhead nor a ratio of the two is given.")
DEVICE_TIME = ("the GPU's own time per iteration (its kernels' busy time), beside the wall "
               "time where the row has it: it leaves out the host's launches and framework "
               "overhead, and reproduces across runs and hosts where wall time may not")
DEVICE_NOTE = f"dev: {DEVICE_TIME}."
DEVICE_COLUMNS_NOTE = (f"Device: {DEVICE_TIME}. Host overhead = wall − device (hover; per row in "
                       "'Measurement conditions').")


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


def time_cell(row, ci: bool = True, device: bool = False) -> Cell:
    """Median with its nominal 95% interval; ⚠ marks a row the timer flagged unstable, † a launch-bound
    one. ``device``: the GPU's own time after it, "1.67 (dev 0.27)", where the row has it
    (for tables without the interval, whose cells stay short)."""
    if row is None:
        return Cell(MISSING, kind="muted")
    if row["status"] != "ok":
        return failure_cell(row)
    text = fmt_ms(row["median_ms"])
    if ci and is_num(row["ci_low_ms"]) and is_num(row["ci_high_ms"]):
        text += f" ({fmt_ms(row['ci_low_ms'])}–{fmt_ms(row['ci_high_ms'])})"
    if device and is_num(device_ms(row)):
        text += f" (dev {fmt_ms(device_ms(row))})"
    title = (f"median {fmt_ms(row['median_ms'])} ms, {interval_name(row)} "
             f"{fmt_ms(row['ci_low_ms'])}–{fmt_ms(row['ci_high_ms'])}, IQR {fmt_ms(row['iqr_ms'])}, "
             f"{int(row['samples']) if is_num(row['samples']) else 0} samples"
             f"{repetitions_text(row)}")
    return _flag_unstable(row, text, title)


def interval_name(row) -> str:
    """What the row's interval is (its ``interval`` label, suites/stats/intervals.py; older
    rows' relabelled on reading), or "nominal 95% interval" where it has none."""
    return str(row.get("interval") or "") or "nominal 95% interval"


def device_ms(row) -> float:
    """The GPU's kernel busy time per iteration of an ok GPU row, NaN where the row has
    none (older rows, frameworks without a device clock). On a CPU host and device time
    are one, so CPU rows never show it."""
    if row is None or row["status"] != "ok" or row["device"] != "gpu":
        return math.nan
    value = row.get("device_median_ms")
    return value if is_num(value) else math.nan


def launch_bound(row) -> bool:
    """The row's device time is under half its wall time (tidy.host_columns); False where
    either is unknown."""
    if not is_num(device_ms(row)):
        return False
    value = row.get("launch_bound")
    return value is not None and value == value and bool(value)


def device_above_wall(row) -> bool:
    """The row's device time is more than ``DEVICE_ABOVE_WALL_LIMIT`` times its wall median:
    the two phases did not run the same work."""
    device = device_ms(row)
    return is_num(device) and is_num(row["median_ms"]) and \
        device > DEVICE_ABOVE_WALL_LIMIT * row["median_ms"]


def device_marks(row) -> str:
    """" †" for a launch-bound row, " ≠" for one whose device time is above its wall time,
    "" otherwise (the two cannot both hold)."""
    if launch_bound(row):
        return f" {LAUNCH_BOUND}"
    return f" {DEVICE_ABOVE}" if device_above_wall(row) else ""


def host_overhead_ms(row) -> float:
    """Wall − device time; NaN without device time, or where the device time is above the
    wall time by more than two processes' runs differ (``device_above_wall``). Device time
    is timed in blocks of its own, so where the host adds next to nothing it can come out
    a little above the wall median: shown as 0 then."""
    if not is_num(device_ms(row)) or not is_num(row.get("host_overhead_ms")) or \
            device_above_wall(row):
        return math.nan
    return max(0.0, row["host_overhead_ms"])


def device_notes(rows) -> tuple[str, ...]:
    """The "dev" note for a table that shows any of ``rows``' device times inline."""
    return (DEVICE_NOTE,) if any(is_num(device_ms(r)) for r in rows) else ()


def device_title(row) -> str:
    """The device figures for a hover text: busy time, span, host overhead, how taken."""
    device = device_ms(row)
    if not is_num(device):
        reason = row.get("device_time_reason") if row is not None else ""
        return f"no device time: {reason}" if reason else ""
    text = f"device {fmt_ms(device)} ms (kernel busy time)"
    span = row.get("device_span_median_ms")
    if is_num(span):
        text += f", span {fmt_ms(span)} ms (first kernel start to last kernel end)"
    overhead = host_overhead_ms(row)
    if is_num(overhead) and is_num(row["median_ms"]) and row["median_ms"] > 0:
        text += (f", host overhead {fmt_ms(max(0.0, overhead))} ms "
                 f"({max(0.0, overhead) / row['median_ms']:.0%} of wall)")
    if row.get("device_time_kind"):
        text += f"; {row['device_time_kind']}"
    if launch_bound(row):
        text += "; launch-bound: device < ½ wall"
    if device_above_wall(row):
        text += "; device above wall: the two phases ran different work"
    return text


def device_pair_cell(fwd, grad) -> Cell:
    """"device fwd / total" for a table with forward and total columns, "—" on a side
    without device time; host overhead, span and how it was taken on hover."""
    device = (device_ms(fwd), device_ms(grad))
    if not any(is_num(v) for v in device):
        reason = next((r["device_time_reason"] for r in (fwd, grad) if r is not None
                       and r["status"] == "ok" and r.get("device_time_reason")), "")
        return Cell(MISSING, kind="muted", title=reason)
    title = "; ".join(f"{r['measure']}: {device_title(r)}" for r in (fwd, grad)
                      if r is not None and is_num(device_ms(r)))
    return Cell(" / ".join(fmt_ms(v) if is_num(v) else MISSING for v in device), title=title)


def repetitions_text(row) -> str:
    """", n independent repetitions" where the row has them (suites/stats/repetitions.py)."""
    count = row.get("repetitions")
    return f" in {int(count)} independent repetitions" if is_num(count) else ""


def _flag_unstable(row, text: str, title: str) -> Cell:
    """⚠ for an unstable row, † for a launch-bound one (the wall time is the host's), ≠
    for one whose device time is above its wall time (two processes, different work)."""
    if row["unstable"]:
        text += f" {UNSTABLE}"
        title += f"; unstable: {row['unstable_reason']}"
    text += device_marks(row)
    if is_num(device_ms(row)):
        title += f"; {device_title(row)}"
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
    title = (f"epoch median {fmt_ms(row['median_ms'])} ms ({interval_name(row)} "
             f"{fmt_ms(row['ci_low_ms'])}–"
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
                title=f"{row['achieved_tflops']:.3g} TFLOP/s of {row['peak_tflops']:g} "
                      f"TFLOP/s {row['precision']} peak ({row['peak_device']}): "
                      f"{row['peak_source']}")


MARK_NOTES = ((LAUNCH_BOUND, LAUNCH_BOUND_NOTE), (DEVICE_ABOVE, DEVICE_ABOVE_NOTE))


def mark_notes(texts) -> tuple[str, ...]:
    """The notes of the device marks (†, ≠) that end any of these cell texts."""
    texts = list(texts)
    return tuple(note for mark, note in MARK_NOTES
                 if any(text.endswith(f" {mark}") for text in texts))


def note_launch_bound(table: Table) -> Table:
    """A table with a launch-bound (†) or device-above-wall (≠) cell says what the mark
    means, once."""
    notes = mark_notes(c.text for row in table.rows for c in row)
    return replace(table, notes=table.notes + tuple(n for n in notes if n not in table.notes))


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
