"""TensorFlow's profiler (tf.profiler.experimental) over a few iterations of one measure,
reduced to op and kernel times from the XPlane trace it writes.

tf.profiler.experimental writes one XSpace protobuf (<logdir>/plugins/profile/<run>/
<host>.xplane.pb), the format TensorBoard's profile plugin reads. Its own reduction to
per-op times (xprof's "framework_op_stats", in tensorflow.python.profiler.internal)
sees nothing of eager ops and only one op per XLA cluster on the CPU in TF 2.21, so the
events are reduced here. What the events look like (read from traces of this adapter):
* the host plane ("/host:CPU") has a line per thread. A graph op is an event named
  "<op name>:<op type>" whose metadata's display name is the op type (TraceMe's
  TraceMeOpOverride); an eager op is an "EagerExecute" event with the op type in its
  "eager_op" stat; an XLA:CPU thunk carries an "hlo_op" stat and is named after its
  HLO instruction ("convolution.7", "wrapped_reduce-window.3"). A thunk's completion is
  a second event, "end: <instruction>", linked to it by a flow id (stats "_p", "_c"):
  nested in it where the thunk ran synchronously, later and often on another thread
  where it handed its work to the intra-op pool (convolutions, dots), so such a
  thunk's own event times only the hand-off.
* a GPU plane ("/device:GPU:<n>") has a line per CUDA stream ("Stream #<id>...",
  cupti_collector.cc) whose events are kernels and copies, each with a "tf_op" stat
  ("<op name>:<op type>", the TensorFlow op that launched it) or, under XLA, "hlo_op"."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import tensorflow as tf

from adapters.base import Profile
from suites.instruments.profiling import device_timeline, summarise

HOST_PLANE = "/host:CPU"
GPU_PLANE_PREFIX = "/device:GPU:"
STREAM_LINE_PREFIX = "Stream #"
PS_PER_MS = 1e9
# Ops that only call other ops, each traced as its own event: counting the caller too
# would count the same time twice. Traced functions are ops named "__inference_<name>_<n>"
# (and "__forward_"/"__backward_" for their gradients): registered op types never start
# with "__".
CALLER_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile",
                        "If", "StatelessIf", "Case", "StatelessCase", "XlaLaunch", "XlaLaunchV2",
                        "_XlaRun"})
# HLO instruction names end in ".<unique id>"; the rest names the instruction's kind.
HLO_ID = re.compile(r"\.\d+$")

Times = list[tuple[str, float, float]]   # (name, total ms, calls), as summarise takes them


def read_xplanes(logdir: Path) -> list[Any]:
    # The XSpace protobuf module ships inside the tensorflow package (tsl/profiler/protobuf).
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    planes = []
    for path in sorted(logdir.glob("plugins/profile/*/*.xplane.pb")):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        planes.extend(space.planes)
    return planes


def _stats(plane: Any, metadata: Any, event: Any) -> dict[str, Any]:
    """An event's stats by name, its metadata's first; references resolved to strings."""
    values: dict[str, Any] = {}
    for stat in (*metadata.stats, *event.stats):
        kind = stat.WhichOneof("value")
        value = getattr(stat, kind) if kind else None
        if kind == "ref_value":
            value = plane.stat_metadata[value].name
        values[plane.stat_metadata[stat.metadata_id].name] = value
    return values


def _events(plane: Any, line: Any) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    for event in line.events:
        metadata = plane.event_metadata[event.metadata_id]
        yield event, metadata, _stats(plane, metadata, event)


def host_op_type(name: str, display_name: str, stats: dict[str, Any]) -> str | None:
    """The op one host event runs (its type; an XLA instruction's kind), or None where
    the event is not one op's own work (runtime bookkeeping, a call of other ops)."""
    if stats.get("hlo_op"):
        return HLO_ID.sub("", name)
    if name == "EagerExecute":
        op = stats.get("eager_op")
        return op if op and not stats.get("is_func") else None   # a function: its ops count
    if display_name and name.endswith(f":{display_name}"):
        return None if display_name.startswith("__") or display_name in CALLER_OPS else display_name
    return None


def self_times(spans: Iterable[tuple[int, int, str]]) -> Iterator[tuple[str, float]]:
    """(op, self ms) for the (start ps, end ps, op) spans of one thread: each span less
    the spans nested in it, so that nested events are not counted twice."""
    open_spans: list[list] = []   # [end, op, self ps], innermost last

    def close_until(time_ps: float) -> Iterator[tuple[str, float]]:
        while open_spans and open_spans[-1][0] <= time_ps:
            _, op, own = open_spans.pop()
            yield op, own / PS_PER_MS

    for start, end, op in sorted(spans, key=lambda span: (span[0], -span[1])):
        yield from close_until(start)
        if open_spans:
            open_spans[-1][2] -= end - start
        open_spans.append([end, op, end - start])
    yield from close_until(float("inf"))


def thunk_completions(plane: Any) -> dict[int, tuple[int, int]]:
    """Flow id -> (line id, end ps) of every XLA:CPU "end: <instruction>" event."""
    return {stats["_c"]: (line.id, event.offset_ps + event.duration_ps)
            for line in plane.lines for event, metadata, stats in _events(plane, line)
            if metadata.name.startswith("end: ") and "_c" in stats}


def host_op_times(plane: Any) -> Times:
    """Ops' self times per thread; an XLA thunk that completed asynchronously counts from
    its start to its completion (busy time, as concurrent ops on two threads both count)
    and stays out of its thread's nesting, since that thread went on with other work."""
    completions = thunk_completions(plane)
    times = []
    for line in plane.lines:
        spans = []
        for event, metadata, stats in _events(plane, line):
            op = host_op_type(metadata.name, metadata.display_name, stats)
            if op is None:
                continue
            start, end = event.offset_ps, event.offset_ps + event.duration_ps
            done_line, done = completions.get(stats.get("_p"), (line.id, end))
            if done_line != line.id or done > end:
                times.append((op, (done - start) / PS_PER_MS, 1))
            else:
                spans.append((start, end, op))
        times += [(op, ms, 1) for op, ms in self_times(spans)]
    return times


def device_op_type(kernel: str, stats: dict[str, Any]) -> str:
    """The op a GPU kernel belongs to: its XLA instruction, or the type of the TensorFlow
    op that launched it, or else the kernel itself (a copy outside any op, or a kernel
    whose outermost annotation, the one "tf_op" keeps, names a function, not an op)."""
    if stats.get("hlo_op"):
        return HLO_ID.sub("", str(stats["hlo_op"]).split(",")[0])
    op_type = str(stats.get("tf_op") or "").rpartition(":")[2]
    return op_type if op_type and not op_type.startswith("__") else kernel


def device_times(plane: Any) -> tuple[Times, Times]:
    """(ops, kernels) of one GPU plane. Kernels on one stream run one after another, so
    their times add up without overlap; the derived lines xprof adds (TensorFlow ops,
    XLA modules, steps) repeat the same time and are left out."""
    ops, kernels = [], []
    for line in plane.lines:
        if not line.name.startswith(STREAM_LINE_PREFIX):
            continue
        for event, metadata, stats in _events(plane, line):
            ms = event.duration_ps / PS_PER_MS
            kernels.append((metadata.name, ms, 1))
            ops.append((device_op_type(metadata.name, stats), ms, 1))
    return ops, kernels


def kernel_intervals(planes: list[Any]) -> list[tuple[float, float, str, str]]:
    """(start ms, end ms, kernel, launching op) of every event on the GPU planes' streams,
    on one clock: an event's offset counts from its line's start (XLine.timestamp_ns)."""
    intervals = []
    for plane in planes:
        if not plane.name.startswith(GPU_PLANE_PREFIX):
            continue
        for line in plane.lines:
            if not line.name.startswith(STREAM_LINE_PREFIX):
                continue
            origin_ps = line.timestamp_ns * 1000
            for event, metadata, stats in _events(plane, line):
                start = (origin_ps + event.offset_ps) / PS_PER_MS
                intervals.append((start, start + event.duration_ps / PS_PER_MS,
                                  metadata.name, device_op_type(metadata.name, stats)))
    return intervals


def profiled_times(planes: list[Any], on_gpu: bool) -> tuple[Times, Times | None]:
    """(ops, kernels) for summarise. On a GPU both come from the device: the host's op
    events there only time the launches (Li et al. 2016 split GPU time)."""
    if not on_gpu:
        ops = [time for plane in planes if plane.name == HOST_PLANE for time in host_op_times(plane)]
        if not ops:
            raise RuntimeError("TensorFlow's profiler recorded no op events on the host")
        return ops, None
    ops, kernels = [], []
    for plane in planes:
        if plane.name.startswith(GPU_PLANE_PREFIX):
            plane_ops, plane_kernels = device_times(plane)
            ops += plane_ops
            kernels += plane_kernels
    if not kernels:
        raise RuntimeError("TensorFlow's profiler recorded no GPU kernels (is CUPTI loadable? "
                           "tensorflow[and-cuda] installs it)")
    return ops, kernels


def profile_steps(step: Callable[[], Any], sync: Callable[[Any], None], measure: str,
                  iterations: int, on_gpu: bool) -> Profile:
    """``iterations`` runs of a warmed-up step under tf.profiler.experimental, as a Profile."""
    with tempfile.TemporaryDirectory() as logdir:
        # host_tracer_level 2 records every TensorFlow op (1: user annotations only);
        # the device tracer (CUPTI) records GPU kernels (tf.profiler.experimental docs).
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
        tf.profiler.experimental.start(logdir, options)
        try:
            handle = None
            for _ in range(iterations):
                handle = step()
            sync(handle)
        finally:
            tf.profiler.experimental.stop()
        planes = read_xplanes(Path(logdir))
    ops, kernels = profiled_times(planes, on_gpu)
    timeline = device_timeline(kernel_intervals(planes), iterations) if on_gpu else None
    return summarise("tf.profiler", measure, iterations, ops, kernels, timeline)
