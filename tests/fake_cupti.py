"""A stand-in for cupti-python's ``cupti.cupti`` (the slice dlbench calls: names and
signatures of the 13.x bindings), with the behaviours that made the kernel tracer count
PyTorch's kernels twice on an H100 available as switches:

- another CUPTI client (Kineto) that stopped with activity kinds still enabled and
  records still in CUPTI's buffers (``leave_profiler_state``);
- kernels of warm-up iterations recorded because those kinds were still enabled;
- each kernel record delivered twice, the second copy with other timestamps
  (``duplicate_shift_ns``);
- records of work outside the window handed over at a later flush (``late_records``);
- record timestamps on another clock than the host's (``clock_scale``: what a timestamp
  callback registered by another client would do).

Time is simulated: ``now`` (ns) advances only through ``launch`` and ``idle``, and
``host_clock`` reads it in seconds, so nothing depends on the machine's speed.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass


@dataclass
class FakeActivity:
    """Shaped like cupti-python's activity objects (snake-case C field names)."""

    kind: int
    name: str
    start: int
    end: int
    correlation_id: int = 0
    stream_id: int = 7
    device_id: int = 0
    context_id: int = 1
    graph_node_id: int = 0
    registers_per_thread: int = 64
    static_shared_memory: int = 1024
    dynamic_shared_memory: int = 0


class FakeCupti:
    class ActivityKind:     # the C enum's values (cupti_activity.h)
        MEMCPY = 1
        MEMSET = 2
        KERNEL = 3
        DRIVER = 4
        RUNTIME = 5
        CONCURRENT_KERNEL = 10
        OVERHEAD = 13

    class ActivityFlag:
        FLUSH_FORCED = 1

    def __init__(self):
        self.now = 1_000_000_000          # ns
        self.enabled: set[int] = set()
        self.pending: list[FakeActivity] = []
        self.completed = None
        self.calls: list[str] = []
        self.correlation = 0
        self.duplicate_shift_ns: int | None = None
        self.late_records: list[FakeActivity] = []
        self.late_after_flushes = 1       # late records come with the flush after this many
        self.clock_scale = 1.0
        self.launches_while_enabled = 0
        self.refuse = ""                  # an error message: CUPTI refuses to register

    # --- the simulated program ---------------------------------------------------------
    def host_clock(self) -> float:
        return self.now / 1e9

    def idle(self, ns: int) -> None:
        self.now += ns

    def launch(self, name: str, duration_ns: int, kind: int | None = None,
               stream: int = 7, overlap_previous_ns: int = 0) -> None:
        """One kernel (or copy) of ``duration_ns``, recorded if its kind is enabled;
        ``overlap_previous_ns`` starts it that long before the clock (another stream)."""
        kind = self.ActivityKind.CONCURRENT_KERNEL if kind is None else kind
        self.correlation += 1
        start = self.now - overlap_previous_ns
        self.now = max(self.now, start + duration_ns)
        if kind in self.enabled:
            self.launches_while_enabled += 1
            scale = self.clock_scale
            self.pending.append(FakeActivity(kind, name, int(start * scale),
                                             int((start + duration_ns) * scale),
                                             self.correlation, stream))

    def leave_profiler_state(self, leftovers: list[FakeActivity]) -> None:
        """What a profiler that stopped untidily leaves: kinds enabled, records held."""
        self.enabled |= {self.ActivityKind.CONCURRENT_KERNEL, self.ActivityKind.RUNTIME,
                         self.ActivityKind.MEMCPY}
        self.pending.extend(leftovers)

    # --- cupti.cupti -------------------------------------------------------------------
    def activity_register_callbacks(self, requested, completed):
        if self.refuse:
            raise RuntimeError(self.refuse)
        size, max_records = requested()
        assert size > 0 and max_records == 0
        self.completed = completed
        self.calls.append("register")

    def activity_enable(self, kind):
        self.enabled.add(int(kind))
        self.calls.append(f"enable{int(kind)}")

    def activity_disable(self, kind):
        self.enabled.discard(int(kind))
        self.calls.append(f"disable{int(kind)}")

    def get_timestamp(self):
        return int(self.now * self.clock_scale)

    def activity_flush_all(self, flag):
        records = list(self.pending)
        if self.duplicate_shift_ns is not None:
            shift = self.duplicate_shift_ns
            records += [FakeActivity(r.kind, r.name, r.start + shift, r.end + shift,
                                     r.correlation_id, r.stream_id)
                        for r in self.pending if r.kind == self.ActivityKind.CONCURRENT_KERNEL]
        if self.late_after_flushes > 0:
            self.late_after_flushes -= 1
        else:
            records += self.late_records
            self.late_records = []
        self.pending = []
        if self.completed is not None and records:
            self.completed(records)
        self.calls.append("flush")


def install(monkeypatch, fake: FakeCupti) -> FakeCupti:
    """Make ``from cupti import cupti`` return ``fake`` and time the tracer's host side on
    the fake's clock."""
    from suites.instruments import kernel_trace
    package = types.ModuleType("cupti")
    package.cupti = fake
    monkeypatch.setitem(sys.modules, "cupti", package)
    monkeypatch.setitem(sys.modules, "cupti.cupti", fake)
    monkeypatch.setattr(kernel_trace, "host_clock", fake.host_clock)
    monkeypatch.setattr("suites.instruments.cupti_window.host_ns", lambda: fake.now)
    return fake
