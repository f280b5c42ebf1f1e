"""NCCL kernel time against compute (parallel/communication.py), from CUPTI-shaped
records: the interval arithmetic, per device, per step."""

from __future__ import annotations

import pytest

from parallel import communication
from parallel.communication import per_device, summarise
from suites.instruments.cupti_window import ActivityRecord

MS = 1_000_000   # ns


def kernel(name: str, start_ms: float, end_ms: float, device: int = 0,
           stream: int = 7) -> ActivityRecord:
    return ActivityRecord(kind=10, name=name, start_ns=int(start_ms * MS),
                          end_ns=int(end_ms * MS), device_id=device, stream_id=stream)


def overlap_ns(nccl: list[tuple[int, int]], compute: list[tuple[int, int]]) -> dict[str, int]:
    records = [ActivityRecord(kind=10, name="ncclDevKernel", start_ns=s, end_ns=e)
               for s, e in nccl] + \
        [ActivityRecord(kind=10, name="gemm", start_ns=s, end_ns=e) for s, e in compute]
    return per_device(records)[0]


def test_interval_arithmetic():
    # Overlapping and touching kernels of one kind count once.
    assert overlap_ns([(5, 7), (0, 2), (1, 3), (3, 4)], [])["nccl_ns"] == 6
    assert overlap_ns([(0, 10)], [(2, 3), (5, 12)])["overlapped_ns"] == 6
    assert overlap_ns([(0, 2), (4, 6)], [(2, 4)])["overlapped_ns"] == 0
    assert overlap_ns([], [(0, 1)])["overlapped_ns"] == 0


def test_overlapped_and_exposed_nccl_time_per_device():
    # Device 0: backward kernels 0–8 ms on one stream; the all-reduce (two NCCL kernels on
    # another stream) 6–10 ms, so 2 ms overlapped and 2 ms exposed. Device 1: the
    # all-reduce 8–10 ms after its compute ended: nothing overlapped.
    records = [kernel("sm90_xmma_gemm_f32", 0, 5), kernel("bn_bw", 5, 8),
               kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 6, 9, stream=9),
               kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 9, 10, stream=9),
               kernel("volta_scudnn_128x64_relu", 0, 8, device=1),
               kernel("_Z19ncclKernel_AllReduceILi1E", 8, 10, device=1, stream=3)]
    devices = per_device(records)
    assert devices[0] == {"nccl_ns": 4 * MS, "compute_ns": 8 * MS,
                          "overlapped_ns": 2 * MS, "busy_ns": 10 * MS}
    assert devices[1]["overlapped_ns"] == 0 and devices[1]["nccl_ns"] == 2 * MS
    summary = summarise(records, steps=2)
    # Means over the two devices, per step (two steps traced).
    assert summary["devices"] == 2 and summary["iterations"] == 2
    assert summary["nccl_kernel_ms_per_step"] == pytest.approx((4 + 2) / 2 / 2)
    assert summary["overlapped_ms_per_step"] == pytest.approx((2 + 0) / 2 / 2)
    assert summary["exposed_nccl_ms_per_step"] == pytest.approx((2 + 2) / 2 / 2)
    assert summary["overlap_share"] == pytest.approx(2 / 6)
    assert summary["all_kernel_ms_per_step"] == pytest.approx((10 + 10) / 2 / 2)


def test_no_nccl_kernels_and_no_records():
    summary = summarise([kernel("gemm", 0, 1)], steps=1)
    assert summary["nccl_kernel_ms_per_step"] == 0 and summary["overlap_share"] is None
    assert summarise([], steps=5) is None


def test_trace_without_cupti_says_why(monkeypatch):
    monkeypatch.setattr("suites.instruments.kernel_trace.unavailable_reason",
                        lambda: "CUPTI kernel tracer unavailable: no cupti-python")

    class Engine:
        def step(self):
            raise AssertionError("no step runs without a tracer")

    summary, reason = communication.trace(Engine(), 5)
    assert summary is None and "cupti-python" in reason


def traced(monkeypatch):
    """A fake CUPTI, and the traced steps timed on its simulated clock."""
    from tests.fake_cupti import FakeCupti, install

    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.instruments.kernel_trace.unavailable_reason", lambda: None)
    monkeypatch.setattr(communication, "host_clock", fake.host_clock)
    # trace() sets it: restored after each test.
    monkeypatch.setattr(communication, "DETACH_PROBLEM", "")
    return fake


def test_trace_runs_the_engines_steps_in_a_cupti_window(monkeypatch):
    fake = traced(monkeypatch)

    class Engine:
        """Each step: 3 ms of backward, an all-reduce of 2 ms on another stream starting
        1 ms before backward ends (1 ms overlapped), then the host's launch gap."""

        steps = 0

        def step(self):
            def run():
                self.steps += 1
                fake.launch("conv_bw", 3 * MS)
                fake.launch("ncclDevKernel_AllReduce", 2 * MS, stream=9,
                            overlap_previous_ns=1 * MS)
                fake.idle(MS)
            return run

        def sync(self, handle):
            pass

    engine = Engine()
    fake.launch("timed_step_before_the_window", 5 * MS)
    summary, reason = communication.trace(engine, 4)
    # One uncounted step aligns the ranks, then four counted ones.
    assert reason == "" and engine.steps == 5 and summary["iterations"] == 4
    assert summary["nccl_kernel_ms_per_step"] == pytest.approx(2.0)
    # 3 ms of backward, then 1 ms of all-reduce alone, then 1 ms with no kernel: 5 ms.
    assert summary["traced_wall_ms_per_step"] == pytest.approx(5.0)
    assert summary["all_kernel_ms_per_step"] == pytest.approx(4.0)
    assert summary["overlapped_ms_per_step"] == pytest.approx(1.0)
    assert summary["compute_kernel_ms_per_step"] == pytest.approx(3.0)
    assert not fake.enabled   # CUPTI left with nothing enabled


class SkewedRank:
    """One rank of a one-process-per-GPU engine (DDP): its first step in the window waits
    40 ms inside an NCCL kernel for a peer still attaching CUPTI; later steps are 2 ms of
    backward and 1 ms of all-reduce, 0.5 ms of it overlapped."""

    def __init__(self, fake, first_wait_ms: float = 40.0):
        self.fake, self.first_wait_ms, self.steps = fake, first_wait_ms, 0

    def step(self):
        def run():
            self.steps += 1
            self.fake.launch("conv_bw", 2 * MS)
            wait = self.first_wait_ms if self.steps == 1 else 0.0
            self.fake.launch("ncclDevKernel_AllReduce", int((1 + wait) * MS), stream=9,
                             overlap_previous_ns=MS // 2)
        return run

    def sync(self, handle):
        pass


def test_the_first_step_in_the_window_is_not_counted(monkeypatch):
    # Counted in, the 40 ms wait would make 10.8 ms of NCCL kernel time per step in steps
    # of 2.5 ms (the double-digit figures a 4× H200 run showed).
    fake = traced(monkeypatch)
    summary, reason = communication.trace(SkewedRank(fake), 4)
    assert reason == ""
    assert summary["nccl_kernel_ms_per_step"] == pytest.approx(1.0)
    assert summary["overlapped_ms_per_step"] == pytest.approx(0.5)
    assert summary["all_kernel_ms_per_step"] == pytest.approx(2.5)
    assert summary["traced_wall_ms_per_step"] == pytest.approx(2.5)


def test_kernels_busier_than_the_steps_wall_are_refused():
    records = [kernel("gemm", 0, 9), kernel("ncclDevKernel", 9, 12, stream=9)]
    summary = summarise(records, steps=1, wall_ms_per_step=10.0)
    assert "exceeds the traced steps' wall time" in communication.implausible(summary)
    assert communication.implausible(summarise(records, 1, 12.0)) == ""
    assert communication.implausible(summarise(records, 1)) == ""   # no wall: no check


def test_trace_detaches_cupti_and_says_when_it_cannot(monkeypatch):
    # Attached, CUPTI would slow the launches of the next case of a shared launch.
    fake = traced(monkeypatch)
    finalized = []
    monkeypatch.setattr(fake, "finalize", lambda: finalized.append(1), raising=False)
    summary, reason = communication.trace(SkewedRank(fake), 2)
    assert finalized == [1] and communication.DETACH_PROBLEM == ""
    monkeypatch.delattr(fake, "finalize")
    communication.trace(SkewedRank(fake), 2)
    assert "no finalize()" in communication.DETACH_PROBLEM
