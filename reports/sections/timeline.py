"""Where a GPU iteration's time goes, per framework: the timer's median of the profiled
measure beside the profile's kernel time, and their difference, the time outside kernels
(launch and framework overhead, when the GPU waits for the host). Profiles that carry a
device timeline (suites.instruments.profiling.device_timeline) add the span from the first kernel to
the last, the part of it in which the GPU ran a kernel, the idle rest, and the layout
transposes' share of kernel time.

This answers "is framework X slower because of its kernels or because of what happens
between them": two frameworks with equal busy time and unequal medians differ in host work;
a large transpose share points at layout conversion. Profiled figures include the
profiler's overhead (more host work per op), so the idle share is an upper bound; the
timed median shows how far the profiled span strayed from an unprofiled iteration.
"""

from __future__ import annotations

import json

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import extras, label, records, setting_of
from reports.pipeline.naming import sort_key
from reports.render.table import Cell, Table

PROFILE = "profile"
COLUMNS = ("Model", "Batch", "Setting", "Profiled", "Timed median (ms)",
           "Kernel sum (ms/iter)", "Outside kernels (ms)", "Span (ms/iter)",
           "GPU busy (ms/iter)", "Idle % of span", "Transposes % of kernels", "Kernels/iter")


def timeline_of(row: dict) -> dict | None:
    text = row.get("profile_timeline") or ""
    return json.loads(text) if text else None


def _percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}" if whole > 0 else cells.MISSING


def _line(row: dict, name: str, timed: dict | None, timeline: dict | None
          ) -> tuple[Cell, ...]:
    median = timed["median_ms"] if timed and timed["status"] == "ok" else float("nan")
    kernels = row["profile_total_ms"]
    outside = median - kernels if cells.is_num(median) and cells.is_num(kernels) else None
    first = (Cell(row["model"]), Cell(str(row["batch"])), Cell(name),
             Cell(row["profile_measure"] or cells.MISSING),
             Cell(cells.fmt_ms(median), title="the timer's median, unprofiled"),
             Cell(cells.fmt_ms(kernels), title="the profile's device time per iteration"),
             Cell(cells.fmt_ms(outside) if outside is not None else cells.MISSING,
                  title="timed median − kernel sum: time the GPU is not computing"))
    if timeline is None:
        return first + (Cell(cells.MISSING, kind="muted", title="no timeline recorded"),) * 5
    return first + (
            Cell(cells.fmt_ms(timeline["span_ms"]),
                 title="first kernel start to last kernel end, per iteration"),
            Cell(cells.fmt_ms(timeline["busy_ms"])),
            Cell(_percent(timeline["idle_ms"], timeline["span_ms"])),
            Cell(_percent(timeline["transpose_ms"], timeline["kernel_ms"]),
                 title=f"{timeline['transpose_ms']:.4g} ms per iteration"),
            Cell(f"{timeline['kernels']:.0f}"))


def timeline_tables(frame: pd.DataFrame) -> list[Table]:
    """One table per GPU model: a line per kernel-level GPU profile whose measure was also
    timed in the same setting, or that has a timeline; frameworks side by side."""
    rows = records(frame)
    timed = {(setting_of(r), r["model"], r["batch"], r["measure"]): r
             for r in rows if r["measure"] != PROFILE}
    profiled = [r for r in rows if r["measure"] == PROFILE and r["status"] == "ok"
                and r["device"] == "gpu" and r["profile_kernel_level"]
                and (timeline_of(r) or (setting_of(r), r["model"], r["batch"],
                                        r["profile_measure"]) in timed)]
    out = []
    for hardware in sorted({r["hardware"] for r in profiled}):
        part = sorted(((r, setting_of(r)) for r in profiled if r["hardware"] == hardware),
                      key=lambda rs: (sort_key(rs[0]["model"]), rs[0]["batch"], rs[1]))
        extra = extras([s for _, s in part])
        body = []
        for r, s in part:
            twin = timed.get((s, r["model"], r["batch"], r["profile_measure"]))
            body.append(_line(r, label(s, extra[s], hardware=False), twin, timeline_of(r)))
        out.append(Table(
            f"device-timeline-{len(out)}", f"Device timeline of profiled iterations, {hardware}",
            COLUMNS, tuple(body), (False, True, False, False) + (True,) * 8,
            notes=("Kernel sum: the profile's device time per iteration (kernels and copies; "
                   "overlapping kernels each count). Outside kernels = timed median − "
                   "kernel sum: what an unprofiled iteration spends beyond computing, the "
                   "GPU waiting for the host to launch work. Two frameworks with equal kernel "
                   "sums and unequal medians differ in host work; unequal kernel sums point "
                   "at the kernels (see the top-kernel table). A negative difference means the "
                   "profiled kernels took longer than the timed iteration (kernels on "
                   "several streams overlapping, or the profiler slowing them): read it as "
                   "no time outside kernels.",
                   "Span: from the first kernel's start to the last kernel's end, per "
                   "profiled iteration; GPU busy: the part of it with at least one kernel "
                   "running; idle = span − busy, the GPU waiting for the host (launch and "
                   "framework overhead between kernels). Transposes: NCHW↔NHWC conversions (cuDNN's "
                   "nchwToNhwc/nhwcToNchw, TensorFlow's Transpose kernels, anything a "
                   "Transpose op launched).",
                   "Profiled iterations run with the profiler's per-op overhead, so idle "
                   "time is an upper bound; the timed median is the unprofiled iteration.")))
    return out
