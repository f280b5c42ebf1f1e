"""ONNX Runtime's own profiler (SessionOptions.enable_profiling) over a few runs of forward,
reduced to op-type and kernel times from the trace it writes.

The profile is a Chrome trace: a JSON list of complete events ("ph": "X") with "ts" and
"dur" in microseconds since profiling began. Per Run, ORT writes one "model_run" event
(cat "Session") and per node one "<node>_kernel_time" event (cat "Node") whose
args.op_name is the kernel's op type (FusedConv, not the node's name); older releases
also write "<node>_fence_before"/"_fence_after", the wait on other streams, no
computation (onnxruntime core/framework/sequential_executor.cc). Builds with CUDA kernel
tracing add one cat "Kernel" event per kernel, stamped with the launching node's ts and
op_name (core/common/gpu_profiler_common.cc, MergeEvents)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.base import Profile, Unsupported
from suites.instruments.profiling import WARMUP_RUNS, summarise

if TYPE_CHECKING:
    import onnxruntime as ort

    from adapters.ort.adapter import BoundBatch

# Release builds of onnxruntime-gpu leave CUDA kernel tracing (CUPTI) out: it is the build
# option --enable_cuda_profiling, off by default (onnxruntime PR #9875). Without it the
# profiler only times each node's Compute call on the host, which on the CUDA EP launches
# kernels asynchronously and returns: a launch time, not the GPU time Li et al. split.
# The GPU profile row therefore comes from the framework-neutral CUPTI kernel tracer
# (suites/instruments/kernel_profile.py), and this reason goes into its framework_profile.
NO_KERNEL_EVENTS = ("this onnxruntime build records no CUDA kernel events (built without "
                    "--enable_cuda_profiling); its node times on the CUDA EP are host-side "
                    "launch times, not GPU time")
PROFILER = "onnxruntime profiler (SessionOptions.enable_profiling)"
US_PER_MS = 1e3


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as file:
        trace = json.load(file)
    # ORT writes a bare list; the Chrome trace format also allows {"traceEvents": [...]}.
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def profiled_events(events: list[dict[str, Any]], warmup: int,
                    iterations: int) -> list[dict[str, Any]]:
    """The events of the last ``iterations`` runs: everything from the start of the first
    run after the ``warmup`` ones. A Run returns only when its work is done (ORT waits for
    the device at the end of Run), so no earlier run's kernel can start after that."""
    starts = sorted(event["ts"] for event in events
                    if event.get("cat") == "Session" and event.get("name") == "model_run")
    if len(starts) != warmup + iterations:
        raise RuntimeError(f"the profile holds {len(starts)} runs, expected "
                           f"{warmup} warm-up and {iterations} profiled")
    begin = starts[warmup]
    return [event for event in events if event.get("ts", -1) >= begin]


def totals(timed: Iterable[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """(name, µs) pairs → (name, total ms, calls)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, us in timed:
        sums[name][0] += us / US_PER_MS
        sums[name][1] += 1
    return [(name, ms, calls) for name, (ms, calls) in sums.items()]


def node_times(events: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Per op type, the nodes' compute time. Each node event is one kernel call with no
    nested nodes (these graphs have no If/Loop/Scan, whose events would hold their
    subgraphs'), so the times are self times."""
    return totals((event["args"]["op_name"], event.get("dur", 0)) for event in events
                  if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"))


def kernel_events(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event.get("cat") == "Kernel"]


def profile_from_trace(events: list[dict[str, Any]], measure: str, warmup: int,
                       iterations: int, on_gpu: bool) -> Profile:
    """On CPU, the nodes' own times per op type. On GPU, the device's time: each kernel's
    duration, attributed to the op type of the node that launched it (a kernel with no
    node, such as a copy, under its own name), and the kernels themselves for Li et al.'s
    Fig. 4; a node event there times only the launch."""
    profiled = profiled_events(events, warmup, iterations)
    if not on_gpu:
        return summarise(PROFILER, measure, iterations, node_times(profiled))
    kernels = kernel_events(profiled)
    if not kernels:
        raise Unsupported(NO_KERNEL_EVENTS)
    by_op = totals((kernel.get("args", {}).get("op_name") or kernel["name"], kernel.get("dur", 0))
                   for kernel in kernels)
    by_kernel = totals((kernel["name"], kernel.get("dur", 0)) for kernel in kernels)
    return summarise(f"{PROFILER}, CUDA kernels", measure, iterations, by_op, by_kernel)


def profile_steps(bind: Callable[[str], BoundBatch], run_options: ort.RunOptions,
                  sync: Callable[[Any], None], measure: str, iterations: int,
                  on_gpu: bool) -> Profile:
    """``bind(prefix)`` binds the batch to a new session that profiles into files named from
    ``prefix``. Profiling runs from the session's creation (the Python API has no later
    start), so the warm-up runs are traced too and left out by their "model_run" events'
    timestamps."""
    folder = tempfile.mkdtemp(prefix="ort-profile-")
    try:
        bound = bind(str(Path(folder) / "profile"))
        for _ in range(WARMUP_RUNS + iterations):
            sync(bound.run(run_options))
        events = read_trace(bound.session.end_profiling())
        del bound   # the profiled session and its device memory
        return profile_from_trace(events, measure, WARMUP_RUNS, iterations, on_gpu)
    finally:
        # The trace file exists from the session's creation on: removed also where a
        # run failed.
        shutil.rmtree(folder, ignore_errors=True)
