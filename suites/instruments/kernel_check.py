"""The check every traced ``profile`` row carries: is the kernel total plausible?

On an H100 the kernel tracer once summed PyTorch's kernels to about twice their timed
median in every case after the first (li_conv2: 6.26 ms of kernels inside 4.85 ms of
traced wall time), and the rows looked fine. So each traced profile now states its kernel
total against the traced iterations' host time and against the case's timed median
(device time where the row has it), and a kernel busy time (overlaps merged, so concurrent
streams cannot explain it) above the traced wall time is an error: the row becomes
``failed`` with the figures, never an ``ok`` row with a count no GPU can produce. More
than 10% away from the timed figures, the note says why
(``suites.instruments.kernel_trace.tracer_reading``): kernels missing from the trace, other kernels
than the timed samples', or the GPU idle inside the traced iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.base import Profile
from suites.instruments.kernel_trace import NS_PER_MS, KernelTrace, same_stream_overlap_ns, tracer_reading

# Host and CUPTI clocks tick at one rate; the allowance covers the readings' granularity
# (timer resolution, the sync's return), not a real excess.
WALL_REL_TOLERANCE = 1e-3
WALL_ABS_TOLERANCE_MS = 1e-3
# Same-stream overlap above this share of the kernel sum is reported (not failed: with
# programmatic dependent launch a kernel may start while its predecessor still runs).
SAME_STREAM_NOTE = 0.05


class KernelTotalError(RuntimeError):
    """The traced kernels add up to more than the host time they ran in."""


@dataclass(frozen=True)
class TimedReference:
    """The job's timed figures of the profiled measure, where it was timed in this job."""

    median_ms: float | None = None
    device_median_ms: float | None = None


def kernel_check(profile: Profile, trace: KernelTrace,
                 timed: TimedReference | None) -> dict[str, Any]:
    """The row's ``profile.kernel_check`` object for ``trace``'s ``profile``; raises
    ``KernelTotalError`` when the kernel busy time per iteration exceeds the traced wall
    time per iteration."""
    window = trace.window
    timeline = profile.timeline or {}
    busy = float(timeline.get("busy_ms", profile.total_ms))
    wall = float(profile.wall_ms or 0.0)
    if busy > wall * (1 + WALL_REL_TOLERANCE) + WALL_ABS_TOLERANCE_MS:
        raise KernelTotalError(
            f"kernel busy time {busy:.3f} ms per iteration exceeds the traced iterations' wall "
            f"time {wall:.3f} ms ({profile.measure}, {profile.iterations} iterations; kernel "
            f"sum {profile.total_ms:.3f} ms; window {window}): kernels counted more than once "
            f"or timed on another clock; DLBENCH_TRACE_DUMP=<dir> writes every record")
    reference, timed_ms = "", None
    if timed is not None and timed.device_median_ms:
        reference, timed_ms = "device_median_ms", timed.device_median_ms
    elif timed is not None and timed.median_ms:
        reference, timed_ms = "median_ms", timed.median_ms
    notes = [] if reference else [f"{profile.measure} was not timed in this job: no timed "
                                  f"median to set the kernel total against"]
    if profile.total_ms > wall > 0:
        notes.append(f"kernel sum {profile.total_ms:.3f} ms exceeds the traced wall time "
                     f"{wall:.3f} ms: kernels overlapped (concurrent streams)")
    overlap = same_stream_overlap_ns(trace.records) / NS_PER_MS / trace.iterations \
        if trace.records else 0.0
    if overlap > SAME_STREAM_NOTE * profile.total_ms:
        notes.append(f"kernels on one stream overlapped for {overlap:.3f} ms per iteration: "
                     f"duplicated records, or programmatic dependent launch")
    ratio = busy / timed_ms if timed_ms else None
    # Outside the band, why: the report's tracer table reads it in the same words, there
    # against the case's timed row wherever it was measured.
    reading = tracer_reading(busy, wall, timed.median_ms if timed else None,
                             timed.device_median_ms if timed else None)
    if reading:
        notes.append(reading)
    return {
        "kernel_busy_ms": busy,
        "kernel_sum_ms": profile.total_ms,
        "traced_wall_ms": wall,
        "busy_share_of_traced_wall": busy / wall if wall > 0 else None,
        "timed_reference": reference,
        "timed_ms": timed_ms,
        "kernel_busy_ratio": ratio,
        "kernel_sum_ratio": profile.total_ms / timed_ms if timed_ms else None,
        "same_stream_overlap_ms": overlap,
        "window": dict(window),
        "note": "; ".join(notes),
    }
