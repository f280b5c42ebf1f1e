"""One window of CUPTI activity: what ran on the GPU between two points of the host's
program, each record once. Shared by the kernel tracer (``suites/instruments/kernel_trace.py``, the
``profile`` measure) and the CUPTI device clock (``suites/instruments/cupti_clock.py``, device time of
timed rows), so both see CUPTI the same way.

CUPTI's activity API has one pair of buffer callbacks per process; the frameworks' own
profilers (Kineto, TensorFlow's and XLA's device tracers) are CUPTI clients too and may
leave activity kinds enabled and records in CUPTI's buffers when they stop. Measured on an
H100: after Kineto had profiled one case, every later case's traced kernels summed to about
twice the timed median. A window therefore

1. registers its callbacks in a draining state and disables the kinds a profiler enables,
2. flushes: whatever CUPTI still held is handed over and discarded (kept for the dump),
3. switches to collecting, enables its own kinds, and reads ``cupti.get_timestamp()``;
4. on ``close`` (after the caller's sync) reads the timestamp again, disables its kinds,
   flushes, and keeps the records that started and ended between the two readings, each
   once: the key is CUPTI's correlation id (the launching API call; unique per launch)
   with the device, context, stream and graph node, not the name and times, so a record
   delivered twice with different timestamps still counts once.

``DLBENCH_TRACE_DUMP=<dir>`` writes every record received (kind, name, start, end,
correlation, stream, device, context ids) and the window's timestamps as JSON, one file
per window, so a GPU run can show what was counted and what was dropped.

The ``cupti`` module is passed in (``load_cupti``) so tests drive the window with a
stand-in; names follow cupti-python 13.x (``cupti.cupti``: ``activity_register_callbacks``,
``activity_enable``/``activity_disable``, ``activity_flush_all``, ``get_timestamp``,
``ActivityKind``, ``ActivityFlag``; record fields are the C API's in snake case:
docs.nvidia.com/cupti-python, "bindings"). Optional record fields are read with getattr.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

DUMP_ENV = "DLBENCH_TRACE_DUMP"
# How far CUPTI's ticks over a window may differ from the host's nanoseconds before they
# are taken for another unit: the two clocks are read back to back at both ends of a
# window of milliseconds, so a real nanosecond clock agrees far closer than this.
CLOCK_UNIT_TOLERANCE = 0.05
# The host clock the window's CUPTI timestamps are calibrated against (tests replace it).
host_ns = time.monotonic_ns
BUFFER_BYTES = 8 * 1024 * 1024
# Kinds a framework profiler enables (Kineto: kernels, copies, sets, runtime and driver API,
# synchronisation, CUDA events, external correlation, overhead). Disabled before a window
# opens: left enabled, they cost every later launch CUPTI's per-call overhead and fill the
# buffers with records. KERNEL (the serialising kind) is among them: enabled, it would also
# serialise the kernels being timed.
PROFILER_KINDS = ("KERNEL", "CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MEMSET", "RUNTIME",
                  "DRIVER", "SYNCHRONIZATION", "CUDA_EVENT", "EXTERNAL_CORRELATION",
                  "OVERHEAD")
_dump_counter = itertools.count()


@dataclass(frozen=True)
class ActivityRecord:
    """One CUPTI activity record as received (times in ns on CUPTI's clock)."""

    kind: int
    name: str
    start_ns: int
    end_ns: int
    correlation_id: int = 0
    stream_id: int = 0
    device_id: int = 0
    context_id: int = 0
    graph_node_id: int = 0
    registers_per_thread: int = 0
    static_shared_bytes: int = 0
    dynamic_shared_bytes: int = 0

    def identity(self) -> tuple:
        """What makes two records one execution. A correlation id belongs to one launching
        API call; kernels of one CUDA graph launch share it and differ by graph node
        (JAX's command buffers, CUDA-graph modes). Records without a correlation id (0:
        CUPTI could not attribute the launch) fall back to name and times."""
        if self.correlation_id:
            return (self.kind, self.device_id, self.context_id, self.stream_id,
                    self.correlation_id, self.graph_node_id, self.name)
        return (self.kind, self.device_id, self.stream_id, self.name, self.start_ns, self.end_ns)


@dataclass(frozen=True)
class WindowRecords:
    """A closed window: the records it keeps and what it dropped, counted."""

    kept: tuple[ActivityRecord, ...]   # wanted kinds, timed, inside the window, each once
    start_ns: int
    end_ns: int
    received: int                      # records handed over while collecting
    drained: int                       # records discarded before the window opened
    outside: int                       # wanted records outside the window
    duplicates: int                    # second deliveries of one execution
    untimed: int                       # records without timestamps (start or end 0)
    # Host nanoseconds per CUPTI tick over the window (1.0: CUPTI counted nanoseconds);
    # ``kept``, ``start_ns`` and ``end_ns`` are already converted by it.
    ns_per_tick: float = 1.0


def _int(activity: Any, name: str) -> int:
    try:
        return int(getattr(activity, name, 0) or 0)
    except (TypeError, ValueError):
        return 0


def to_record(activity: Any) -> ActivityRecord:
    """A cupti-python activity object as plain data (copied at once: the bindings' objects
    may view a buffer CUPTI reuses after the callback returns)."""
    kind = _int(activity, "kind")
    return ActivityRecord(
        kind=kind, name=str(getattr(activity, "name", "") or f"kind {kind}"),
        start_ns=_int(activity, "start"), end_ns=_int(activity, "end"),
        correlation_id=_int(activity, "correlation_id"), stream_id=_int(activity, "stream_id"),
        device_id=_int(activity, "device_id"), context_id=_int(activity, "context_id"),
        graph_node_id=_int(activity, "graph_node_id"),
        registers_per_thread=_int(activity, "registers_per_thread"),
        static_shared_bytes=_int(activity, "static_shared_memory"),
        dynamic_shared_bytes=_int(activity, "dynamic_shared_memory"))


def select(records: Iterable[ActivityRecord], kinds: set[int], start_ns: int,
           end_ns: int) -> tuple[list[ActivityRecord], dict[str, int]]:
    """The records of ``kinds`` that started and ended inside [start_ns, end_ns], each
    execution once (``ActivityRecord.identity``), and how many were dropped for what."""
    seen: set[tuple] = set()
    kept: list[ActivityRecord] = []
    dropped = {"outside": 0, "duplicates": 0, "untimed": 0}
    for record in records:
        if record.kind not in kinds:
            continue
        if record.start_ns <= 0 or record.end_ns < record.start_ns:
            dropped["untimed"] += 1
        elif not (start_ns <= record.start_ns and record.end_ns <= end_ns):
            dropped["outside"] += 1
        elif record.identity() in seen:
            dropped["duplicates"] += 1
        else:
            seen.add(record.identity())
            kept.append(record)
    return kept, dropped


def busy_and_span_ns(records: Iterable[ActivityRecord]) -> tuple[int, int]:
    """(busy, span) in ns: the time at least one record's interval was running (overlapping
    intervals merged: kernels on several streams count once) and the time from the first
    start to the last end. (0, 0) without records."""
    intervals = sorted((r.start_ns, r.end_ns) for r in records)
    if not intervals:
        return 0, 0
    busy = 0
    covered_until = intervals[0][0]
    for start, end in intervals:
        if end > covered_until:
            busy += end - max(start, covered_until)
            covered_until = end
    return busy, max(end for _, end in intervals) - intervals[0][0]


def ns_per_tick(ticks: int, host_elapsed_ns: int) -> float:
    """Host nanoseconds per CUPTI tick over one window, or 1.0 where they agree.

    CUPTI stamps records with its own nanosecond clock unless a client has registered a
    timestamp callback (``cuptiActivityRegisterTimestampCallback``); then records and
    ``cupti.get_timestamp()`` count whatever that callback returns, in every later window
    of the process. Measured on an H100: once PyTorch's profiler (Kineto, a CUPTI client)
    had run in a worker, every later window's kernels added up to 1.9–2.05 times their
    timed medians and more than the traced wall time, with no record delivered twice and
    none outside the window: the ticks ran about twice as fast as nanoseconds, as a CPU
    timestamp counter at about 2 GHz would. Measuring the window on both clocks turns
    ticks back into nanoseconds whatever the unit."""
    if ticks <= 0 or host_elapsed_ns <= 0:
        return 1.0
    ratio = host_elapsed_ns / ticks
    return 1.0 if abs(ratio - 1.0) <= CLOCK_UNIT_TOLERANCE else ratio


def in_nanoseconds(record: ActivityRecord, origin: int, scale: float) -> ActivityRecord:
    """A record's times as nanoseconds from the window's origin (its tick count kept)."""
    if scale == 1.0:
        return record
    return replace(record, start_ns=origin + round((record.start_ns - origin) * scale),
                   end_ns=origin + round((record.end_ns - origin) * scale))


def detach(cupti: Any) -> str:
    """Detach CUPTI from the process (``cuptiFinalize``); "" when done, else why not.

    Once CUPTI has been enabled in a process, the driver keeps routing every CUDA API call
    through it after its activity kinds are disabled: on an H100, PyTorch's launch-bound
    autoencoder forward (sae_ae1, batch 64) ran 70% slower on the wall clock after one
    traced block than before any (``python -m suites.instruments.clock_check``). CUPTI's dynamic
    detach removes it; the next window attaches CUPTI again. Call it only with the device
    synced and the window flushed, so no record is in flight."""
    finalize = getattr(cupti, "finalize", None)
    if finalize is None:
        return "this cupti-python has no finalize()"
    try:
        finalize()
    except Exception as error:
        return f"cuptiFinalize failed: {type(error).__name__}: {error}"[:300]
    return ""


def load_cupti() -> Any:
    """cupti-python's bindings (``from cupti import cupti``); ImportError without them."""
    from cupti import cupti
    return cupti


def kind_value(cupti: Any, name: str) -> int | None:
    kind = getattr(cupti.ActivityKind, name, None)
    return None if kind is None else int(kind)


class CuptiWindow:
    """``open()`` before the first launch, ``close()`` after the caller's sync."""

    def __init__(self, cupti: Any, kinds: tuple[str, ...], label: str):
        self.cupti = cupti
        self.label = label
        self.kind_names = {kind_value(cupti, name): name for name in kinds}
        self.kind_names.pop(None, None)
        self.collecting = False
        self.drained: list[ActivityRecord] = []
        self.received: list[ActivityRecord] = []
        self.start_ns = 0
        self.host_start_ns = 0

    # CUPTI's callbacks: one registration, two states (draining, then collecting).
    def _requested(self):
        return BUFFER_BYTES, 0      # 0: as many records as fit

    def _completed(self, activities: list) -> None:
        target = self.received if self.collecting else self.drained
        target.extend(to_record(a) for a in activities)

    def open(self) -> None:
        cupti = self.cupti
        cupti.activity_register_callbacks(self._requested, self._completed)
        for name in PROFILER_KINDS:
            kind = getattr(cupti.ActivityKind, name, None)
            if kind is None:
                continue
            # A kind this CUPTI or device does not know, or one never enabled.
            with contextlib.suppress(Exception):
                cupti.activity_disable(kind)
        cupti.activity_flush_all(int(cupti.ActivityFlag.FLUSH_FORCED))
        self.collecting = True
        try:
            for kind in self.kind_names:
                cupti.activity_enable(kind)
            self.host_start_ns = host_ns()
            self.start_ns = int(cupti.get_timestamp())
        except BaseException:
            # Never leave a kind enabled behind a failed open: the next wall samples would
            # be traced.
            for kind in self.kind_names:
                with contextlib.suppress(Exception):
                    cupti.activity_disable(kind)
            raise

    def close(self) -> WindowRecords:
        cupti = self.cupti
        end_ns = int(cupti.get_timestamp())
        host_end_ns = host_ns()
        try:
            for kind in self.kind_names:
                cupti.activity_disable(kind)
        finally:
            cupti.activity_flush_all(int(cupti.ActivityFlag.FLUSH_FORCED))
            self.collecting = False
        kept, dropped = select(self.received, set(self.kind_names), self.start_ns, end_ns)
        scale = ns_per_tick(end_ns - self.start_ns, host_end_ns - self.host_start_ns)
        kept = [in_nanoseconds(r, self.start_ns, scale) for r in kept]
        window = WindowRecords(tuple(kept), self.start_ns,
                               self.start_ns + round((end_ns - self.start_ns) * scale),
                               len(self.received), len(self.drained), **dropped,
                               ns_per_tick=scale)
        dump(self, window, host_end_ns)
        return window


def dump(window: CuptiWindow, closed: WindowRecords, host_end_ns: int) -> Path | None:
    """Every record of the window as JSON under $DLBENCH_TRACE_DUMP, if set."""
    folder = os.environ.get(DUMP_ENV)
    if not folder:
        return None
    label = re.sub(r"[^A-Za-z0-9._-]", "_", window.label)
    path = Path(folder) / f"{os.getpid()}-{next(_dump_counter):05d}-{label}.json"
    data = {
        "label": window.label, "window_start_ns": closed.start_ns,
        "window_end_ns": closed.end_ns,
        # The host's monotonic clock beside CUPTI's: tells whether records and window share
        # a clock when another client has registered a timestamp callback.
        "host_monotonic_start_ns": window.host_start_ns, "host_monotonic_end_ns": host_end_ns,
        "kinds": {str(k): v for k, v in window.kind_names.items()},
        "ns_per_tick": closed.ns_per_tick,
        "counts": {"kept": len(closed.kept), "received": closed.received,
                   "drained": closed.drained, "outside": closed.outside,
                   "duplicates": closed.duplicates, "untimed": closed.untimed},
        "received": [asdict(r) for r in window.received],
        "drained": [asdict(r) for r in window.drained],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path
