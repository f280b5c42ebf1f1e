"""One CUDA kernel tracer for every framework: CUPTI's activity API (``cupti-python``)
records each kernel that runs in the process, whoever launched it (PyTorch, TensorFlow,
XLA or ONNX Runtime's CUDA EP), so per-kernel times, layer-type shares, top kernels and
kernel families are measured the same way for all of them.

CUPTI delivers activity records through one buffer-completed callback per process; the
frameworks' own profilers (Kineto, TensorFlow's and XLA's device tracers) use the same
API, so the tracer runs in its own pass, never nested inside a framework profiler's
(``suites/instruments/kernel_profile.py`` runs it first), and each trace is a ``CuptiWindow``
(``suites/instruments/cupti_window.py``) that discards what earlier clients left in CUPTI before it
collects, and counts each kernel once.

``cupti`` is imported lazily: a machine without it (a CPU host, CI) gets the reason from
``unavailable_reason`` and the profile row says it.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from adapters.base import Profile
from suites.instruments.cupti_window import ActivityRecord, CuptiWindow, WindowRecords, load_cupti
from suites.instruments.profiling import device_timeline, layer_type, summarise

TOOL = "CUPTI activity API (cupti-python, CONCURRENT_KERNEL records)"
NS_PER_MS = 1e6
KERNEL_KINDS = ("CONCURRENT_KERNEL",)


@dataclass(frozen=True)
class KernelRecord:
    """One kernel execution as CUPTI recorded it (times in ns on the GPU's clock)."""

    name: str
    start_ns: int
    end_ns: int
    registers_per_thread: int = 0
    static_shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    stream_id: int = 0      # CUPTI's stream id (0 in recorded traces that lack it)

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_MS


@dataclass(frozen=True)
class KernelTrace:
    records: tuple[KernelRecord, ...]
    iterations: int
    wall_ms: float          # host time of the traced iterations, synced at both ends
    # What the CUPTI window received and dropped (``window_counts``); empty for recorded
    # traces.
    window: dict[str, float] = field(default_factory=dict)


# --- kernel families: which algorithm a convolution ran ------------------------------------
# cuDNN and its engines name kernels after the algorithm: legacy kernels
# (implicit_convolve_sgemm, precomputed_convolve_sgemm, explicit_convolve_sgemm,
# fft2d_r2c_*, winograd_*), cuDNN 8/9 engines (sm80_xmma_fprop_implicit_gemm_*,
# sm90_xmma_dgrad_implicit_gemm_*, cutlass ... _conv_ ...), and
# CUDNN_CONVOLUTION_*_ALGO_0/1 engines (wgrad_alg0_engine, dgrad_engine). Order matters:
# "fft" and "winograd" kernels may also carry "gemm" in their names.
_FAMILIES = (
    ("fft", re.compile(r"fft|flip_filter|cgemm")),
    ("winograd", re.compile(r"winograd")),
    ("implicit GEMM", re.compile(r"implicit|precomputed_convolve|xmma_(fprop|dgrad|wgrad)|"
                                 r"cutlass.*conv|conv.*cutlass|nchwkcrs|nhwckrsc")),
    ("explicit GEMM (im2col)", re.compile(r"explicit_convolve|im2col|col2im")),
    ("direct", re.compile(r"direct|depthwise|alg[01]_engine|dgrad_engine|wgrad_engine|"
                          r"convolve_common_engine")),
)


def kernel_family(name: str) -> str:
    """The convolution algorithm a kernel's name tells, or "other"."""
    text = name.lower()
    for family, pattern in _FAMILIES:
        if pattern.search(text):
            return family
    return "other"


def conv_families(kernels: Iterable[tuple[str, float]]) -> dict[str, float]:
    """ms per kernel family over the kernels whose layer type is conv (FFT's helper
    kernels, such as cuDNN's flip/transpose ones, are conv by name only when they say so)."""
    families: dict[str, float] = defaultdict(float)
    for name, ms in kernels:
        family = kernel_family(name)
        if family != "other" or layer_type(name) == "conv":
            families[family] += ms
    return dict(sorted(families.items(), key=lambda item: -item[1]))


def dominant_family(families: dict[str, float]) -> str:
    """The family holding most of the convolution time ("" when there is none)."""
    named = {k: v for k, v in families.items() if k != "other"} or families
    return max(named, key=named.get) if named else ""


# --- the reduction, shared by recorded traces and the tests ---------------------------------

def kernel_profile(trace: KernelTrace, measure: str) -> Profile:
    """Per-iteration kernel times by layer type (kernel names → ``suites.instruments.profiling``'s
    patterns), the top kernels, the conv kernel families, and the traced wall time."""
    rows = [(r.name, r.ms, 1.0) for r in trace.records]
    profile = summarise(TOOL, measure, trace.iterations, rows, rows)
    families = conv_families((r.name, r.ms / trace.iterations) for r in trace.records)
    # The same timeline the framework profilers give (span, busy, idle, transposes), so
    # the report's device-timeline table reads every framework's GPU profile alike.
    timeline = device_timeline(((r.start_ns / NS_PER_MS, r.end_ns / NS_PER_MS, r.name, "")
                                for r in trace.records), trace.iterations) \
        if trace.records else None
    return replace(profile, wall_ms=trace.wall_ms / trace.iterations,
                   conv_families=families, timeline=timeline)


# --- CUPTI ------------------------------------------------------------------------------------

def unavailable_reason() -> str | None:
    """Why the tracer cannot run here, or None."""
    try:
        load_cupti()    # the bindings load libcupti
    except ImportError as error:
        return (f"CUPTI kernel tracer unavailable: cupti-python cannot be imported ({error}); "
                f"it needs cupti-python==13.0.1 (adapters/registry.toml), pyelftools and a "
                f"CUDA 13 CUPTI library")
    except Exception as error:   # the package is there, libcupti (or the driver) is not
        return f"CUPTI kernel tracer unavailable: {type(error).__name__}: {error}"
    return None


def kernel_record(record: ActivityRecord) -> KernelRecord:
    return KernelRecord(record.name, record.start_ns, record.end_ns,
                        record.registers_per_thread, record.static_shared_bytes,
                        record.dynamic_shared_bytes, record.stream_id)


def same_stream_overlap_ns(records: Iterable[KernelRecord]) -> int:
    """How long kernels on one stream ran at the same time, summed over streams. A stream
    runs its kernels in order, so this is near zero unless records were duplicated (or
    programmatic dependent launch let a kernel start before its predecessor ended)."""
    by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for record in records:
        by_stream[record.stream_id].append((record.start_ns, record.end_ns))
    overlap = 0
    for intervals in by_stream.values():
        intervals.sort()
        covered_until = intervals[0][0]
        for start, end in intervals:
            overlap += max(0, min(end, covered_until) - start)
            covered_until = max(covered_until, end)
    return overlap


# The host clock the traced iterations are timed on (a module attribute, so tests can put
# a stand-in's clock beside a stand-in CUPTI's).
host_clock: Callable[[], float] = time.perf_counter


def trace(run: Callable[[], Any], sync: Callable[[Any], None], iterations: int,
          label: str = "trace") -> KernelTrace:
    """``iterations`` synced runs under CUPTI's CONCURRENT_KERNEL activity, in a window
    that first discards whatever CUPTI still holds (``suites/instruments/cupti_window.py``: another
    client's leftovers, this process's warm-up) and keeps each kernel once. The caller has
    warmed the step up (compilation, autotuning and allocation stay outside the trace).
    ``wall_ms`` is the host time from before the first launch to after the last sync, so
    every kept kernel ran inside it."""
    window = CuptiWindow(load_cupti(), KERNEL_KINDS, label)
    clock = host_clock
    sync(None)
    window.open()
    try:
        started = clock()
        for _ in range(iterations):
            sync(run())
        wall_ms = (clock() - started) * 1e3
    finally:
        closed = window.close()
    if not closed.kept:
        where = (f"; {closed.outside} kernel records lay outside the window "
                 f"({closed.start_ns}..{closed.end_ns} ns): do they share CUPTI's clock?"
                 if closed.outside else "")
        raise RuntimeError(f"CUPTI recorded no kernels over the traced iterations{where}")
    return KernelTrace(tuple(kernel_record(r) for r in closed.kept), iterations, wall_ms,
                       window_counts(closed))


def window_counts(closed: WindowRecords) -> dict[str, float]:
    """What the window received and dropped, and the unit CUPTI's ticks were in (host ns
    per tick: 1.0 unless another client changed CUPTI's clock), for the row's check."""
    return {"kept": len(closed.kept), "received": closed.received, "drained": closed.drained,
            "outside_window": closed.outside, "duplicates": closed.duplicates,
            "untimed": closed.untimed, "ns_per_tick": closed.ns_per_tick}


# The band inside which a traced profile's busy time per iteration reads as the timed
# kernels; outside it, the profile row (suites/instruments/kernel_check.py) and the report's tracer
# table (reports/sections/kernels.py) say why, in the same words (``tracer_reading``).
TRACER_BAND = 0.10


def finite_ratio(part: float | None, whole: float | None) -> float:
    """part / whole, or NaN where either is missing or not finite, or whole is not > 0."""
    if part is None or whole is None or not (math.isfinite(part) and math.isfinite(whole)) \
            or whole <= 0:
        return math.nan
    return part / whole


def tracer_reading(busy_ms: float, traced_wall_ms: float, median_ms: float | None,
                   device_median_ms: float | None = None) -> str:
    """Why a traced profile's busy time is more than ``TRACER_BAND`` away from the timed
    figures, from the row's own numbers. The device median (the case's device time, timed
    apart from the trace) decides first where the row has one: busy time above it is other
    kernels than the timed samples', below it kernels missing from the trace (or other
    ones), and a busy time that matches it but not the wall median is the GPU idle inside
    the iterations (launch gaps, host work). Without a device median the traced
    iterations' own wall time tells the same two apart, less surely: a trace that lost
    kernels reads as idle time there.

    Seen on an NVIDIA H200 (h200x4-2026-11-all (at 2efa0ce)): TensorFlow's li_conv1 gradient
    traced in a process of its own, 11.1 ms busy in 13.6 ms of traced wall against a 6.4
    ms median and a 6.0 ms device median, its forward convolution in implicit-GEMM kernels
    (6.85 ms); traced in the process that timed it, 6.1 ms, the forward in FFT kernels
    (1.57 ms). Every other profile of that run: busy ÷ device median 0.95–1.04. Empty
    where busy time agrees with the timed figures, or a figure is missing."""
    ratio = finite_ratio(busy_ms, median_ms)
    to_device = finite_ratio(busy_ms, device_median_ms)
    slower = finite_ratio(traced_wall_ms, median_ms)
    idle = 1 - finite_ratio(busy_ms, traced_wall_ms)
    if math.isfinite(to_device):
        if to_device > 1 + TRACER_BAND:
            return (f"busy {to_device:.2f}x the device median: the profile ran other kernels "
                    f"than the timed samples")
        if to_device < 1 - TRACER_BAND:
            return (f"busy {to_device:.2f}x the device median: kernels missing from the trace, "
                    f"or other kernels than the timed samples")
        if math.isfinite(ratio) and ratio < 1 - TRACER_BAND:
            idle_share = (f" (the GPU idle {idle:.0%} of the traced iterations)"
                          if math.isfinite(idle) else "")
            return (f"busy matches the device median; the wall median is {1 / ratio:.2f}x "
                    f"it: launch gaps, host work{idle_share}")
        if math.isfinite(ratio) and ratio > 1 + TRACER_BAND:
            return (f"busy matches the device median, {ratio:.2f}x the wall median: the "
                    f"device time is not the wall samples' work")
        return ""
    if not (math.isfinite(ratio) and math.isfinite(slower)) or abs(ratio - 1) <= TRACER_BAND:
        return ""
    if ratio > 1 and slower > 1 + TRACER_BAND:
        return (f"traced iterations {slower:.2f}x the timed median: the profile ran other "
                f"kernels than the timed samples")
    if idle > TRACER_BAND:
        return (f"GPU idle {idle:.0%} of the traced iterations: launch gaps, host work (no "
                f"device median to rule out kernels missing from the trace)")
    # Busy for most of the traced iterations, yet both well off the timed median: the
    # timed samples ran at another speed than the traced iterations.
    return f"traced iterations {slower:.2f}x the timed median, the GPU busy through them"
