"""One CUDA kernel tracer for every framework: CUPTI's activity API (``cupti-python``)
records each kernel that runs in the process, whoever launched it (PyTorch, TensorFlow,
XLA or ONNX Runtime's CUDA EP), so per-kernel times, layer-type shares, top kernels and
kernel families are measured the same way for all of them.

CUPTI delivers activity records through one buffer-completed callback per process; the
frameworks' own profilers (Kineto, TensorFlow's and XLA's device tracers) use the same
API, so the tracer runs in its own pass, never nested inside a framework profiler's. The
worker calls it after the framework profiler has stopped (``suites/kernel_profile.py``).

``cupti`` is imported lazily: a machine without it (a CPU host, CI) gets the reason from
``unavailable_reason`` and the profile row says it.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from adapters.base import Profile
from adapters.profiling import device_timeline, layer_type, summarise

TOOL = "CUPTI activity API (cupti-python, CONCURRENT_KERNEL records)"
NS_PER_MS = 1e6
BUFFER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class KernelRecord:
    """One kernel execution as CUPTI recorded it (times in ns on the GPU's clock)."""

    name: str
    start_ns: int
    end_ns: int
    registers_per_thread: int = 0
    static_shared_bytes: int = 0
    dynamic_shared_bytes: int = 0

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_MS


@dataclass(frozen=True)
class KernelTrace:
    records: tuple[KernelRecord, ...]
    iterations: int
    wall_ms: float          # host time of the traced iterations, synced at both ends


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
    """Per-iteration kernel times by layer type (kernel names → ``adapters.profiling``'s
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
        from cupti import cupti  # noqa: F401  (the bindings load libcupti)
    except ImportError as error:
        return (f"CUPTI kernel tracer unavailable: cupti-python cannot be imported ({error}); "
                f"it needs cupti-python==13.4.0, pyelftools and a CUDA 13 CUPTI library")
    except Exception as error:   # the package is there, libcupti (or the driver) is not
        return f"CUPTI kernel tracer unavailable: {type(error).__name__}: {error}"
    return None


def _record(activity: Any) -> KernelRecord:
    return KernelRecord(
        name=str(activity.name), start_ns=int(activity.start), end_ns=int(activity.end),
        registers_per_thread=int(getattr(activity, "registers_per_thread", 0)),
        static_shared_bytes=int(getattr(activity, "static_shared_memory", 0)),
        dynamic_shared_bytes=int(getattr(activity, "dynamic_shared_memory", 0)))


def trace(run: Callable[[], Any], sync: Callable[[Any], None],
          iterations: int) -> KernelTrace:
    """``iterations`` synced runs under CUPTI's CONCURRENT_KERNEL activity. The caller has
    warmed the step up (compilation, autotuning and allocation stay outside the trace)."""
    from cupti import cupti

    records: list[KernelRecord] = []
    kernel_kind = int(cupti.ActivityKind.CONCURRENT_KERNEL)

    def buffer_requested():
        return BUFFER_BYTES, 0      # 0: as many records as fit

    def buffer_completed(activities: list) -> None:
        records.extend(_record(a) for a in activities if int(a.kind) == kernel_kind)

    # Drop what earlier runs left in CUPTI's buffers, then register ours: a framework
    # profiler that ran before registered its own callbacks.
    cupti.activity_register_callbacks(buffer_requested, buffer_completed)
    sync(None)
    cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
    try:
        window_start = cupti.get_timestamp()
        started = time.perf_counter()
        for _ in range(iterations):
            sync(run())
        wall_ms = (time.perf_counter() - started) * 1e3
        window_end = cupti.get_timestamp()
    finally:
        cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
        cupti.activity_flush_all(int(cupti.ActivityFlag.FLUSH_FORCED))
    records = in_window(records, window_start, window_end)
    if not records:
        raise RuntimeError("CUPTI recorded no kernels over the traced iterations")
    return KernelTrace(tuple(records), iterations, wall_ms)


def in_window(records: Iterable[KernelRecord], start_ns: int, end_ns: int) -> list[KernelRecord]:
    """The kernels that ran inside the traced iterations, each once. Another CUPTI client
    in the process (Kineto, TensorFlow's or XLA's profiler, run before the tracer) can
    leave its kernel activity enabled and its records in CUPTI's buffers; the flush then
    hands them to this tracer too. Measured on an H100: PyTorch's traced gradients summed
    to 2.0x their timed median until records outside the window were dropped. CUPTI's
    activity timestamps and cupti.get_timestamp() share one clock."""
    seen: set[tuple[str, int, int]] = set()
    kept = []
    for record in records:
        key = (record.name, record.start_ns, record.end_ns)
        if start_ns <= record.start_ns and record.end_ns <= end_ns and key not in seen:
            seen.add(key)
            kept.append(record)
    return kept
