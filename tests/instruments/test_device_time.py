"""Device time for every framework from CUPTI's activity records, the clock order, host
overhead and the launch-bound flag: on a simulated GPU (tests/fake_cupti.py), no
wall-clock bounds."""

from __future__ import annotations

import math

import pytest

from adapters.base import DeviceClock
from suites.instruments.cupti_clock import CuptiClock
from suites.instruments.cupti_window import ActivityRecord, busy_and_span_ns
from suites.instruments.device_time import CLOCK_ENV, FirstWorkingClock, device_clock_for
from suites.stats.launch_bound import overhead_fields
from suites.stats.timer import TimerSettings, measure
from tests.fake_cupti import FakeCupti, install
from tests.fake_worker import SimulatedPrepared, run_job

KERNEL = FakeCupti.ActivityKind.CONCURRENT_KERNEL


def test_busy_time_merges_overlaps_and_leaves_gaps_out():
    records = [ActivityRecord(KERNEL, "a", 0, 300), ActivityRecord(KERNEL, "b", 200, 500),
               ActivityRecord(KERNEL, "c", 900, 1000)]
    assert busy_and_span_ns(records) == (600, 1000)
    assert busy_and_span_ns([]) == (0, 0)


def test_the_cupti_clock_times_kernels_and_copies_of_the_block_only(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    clock = CuptiClock(fake)
    fake.launch("before_the_block", 50_000)      # not enabled yet: never recorded
    clock.hold(0.01)                              # nothing to hold
    clock.start()
    fake.launch("memcpy HtoD", 20_000, kind=FakeCupti.ActivityKind.MEMCPY)
    fake.launch("kernel", 100_000)
    fake.launch("kernel_on_a_second_stream", 100_000, stream=8, overlap_previous_ns=50_000)
    fake.idle(300_000)                            # the host's launch gap
    fake.launch("kernel", 100_000)
    clock.end()
    busy = clock.elapsed()
    assert busy == pytest.approx((20_000 + 150_000 + 100_000) / 1e9)
    assert clock.span() == pytest.approx((20_000 + 150_000 + 300_000 + 100_000) / 1e9)
    assert fake.enabled == set() and clock.reason == ""


def test_a_refusing_cupti_gives_no_time_and_says_why(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    fake.refuse = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    clock = CuptiClock(fake)
    clock.start()
    assert clock.elapsed() is None and "MULTIPLE_SUBSCRIBERS" in clock.reason


class EventClock(DeviceClock):
    kind = "CUDA events"

    def elapsed(self):
        return 0.001


class Prepared:
    def __init__(self, clock=None):
        self.clock = clock

    def device_clock(self):
        return self.clock


def no_cupti():
    return None, "CUPTI device clock unavailable: cupti-python cannot be imported"


def test_cupti_comes_first_then_the_adapters_clock_then_the_reason(monkeypatch):
    fake = FakeCupti()
    with_cupti = lambda: (CuptiClock(fake), "")  # noqa: E731
    clock, reason = device_clock_for(Prepared(EventClock()), "gpu", with_cupti)
    assert isinstance(clock, FirstWorkingClock) and clock.kind.startswith("CUPTI")
    clock, reason = device_clock_for(Prepared(None), "gpu", with_cupti)
    assert isinstance(clock, CuptiClock)
    clock, reason = device_clock_for(Prepared(EventClock()), "gpu", no_cupti)
    assert clock.kind == "CUDA events" and reason == ""
    clock, reason = device_clock_for(Prepared(None), "gpu", no_cupti)
    assert clock is None and "cupti-python" in reason and "no device clock" in reason
    assert device_clock_for(Prepared(EventClock()), "cpu", with_cupti)[0] is None
    monkeypatch.setenv(CLOCK_ENV, "adapter")
    assert device_clock_for(Prepared(EventClock()), "gpu", with_cupti)[0].kind == "CUDA events"
    monkeypatch.setenv(CLOCK_ENV, "off")
    assert device_clock_for(Prepared(EventClock()), "gpu", with_cupti) == (None, f"{CLOCK_ENV}=off")
    monkeypatch.setenv(CLOCK_ENV, "sometimes")
    with pytest.raises(ValueError, match=CLOCK_ENV):
        device_clock_for(Prepared(EventClock()), "gpu", with_cupti)


def test_when_cupti_fails_the_adapters_clock_times_the_next_blocks(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    fake.refuse = "CUPTI_ERROR_NOT_INITIALIZED"
    clock = FirstWorkingClock([CuptiClock(fake), EventClock()])
    run = lambda: fake.launch("k", 100_000)  # noqa: E731
    settings = TimerSettings(warmup=1, min_samples=2, device_blocks=2)
    first = measure(run, lambda h: None, settings, fake.host_clock, device_clock=clock)
    assert first.device_samples_s == ()            # CUPTI refused this repetition's blocks
    second = measure(run, lambda h: None, settings, fake.host_clock, device_clock=clock)
    assert len(second.device_samples_s) == 2 and clock.kind == "CUDA events"
    assert "NOT_INITIALIZED" in clock.reason


def test_every_framework_gets_device_time_with_untraced_wall_samples(monkeypatch, tmp_path):
    """A framework without a device clock of its own (JAX, ONNX Runtime, TensorFlow) gets
    the CUPTI busy time; its wall samples ran with CUPTI disabled: the only launches
    recorded are those of the device blocks."""
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock)
    rows = run_job(tmp_path, SimulatedPrepared(fake, kernel_ns=400_000, gap_ns=100_000),
                   ["forward"], framework="ort")
    timing = rows["forward"]["timing"]
    assert timing["device_time_kind"].startswith("CUPTI")
    assert "after the wall samples" in timing["device_time_method"]
    assert timing["median_ms"] == pytest.approx(0.5)
    assert timing["device_median_ms"] == pytest.approx(0.4)
    inner = timing["inner_loops"]            # 2 ms blocks of 0.5 ms iterations
    assert timing["device_span_median_ms"] == pytest.approx((inner * 0.5 - 0.1) / inner)
    assert timing["host_overhead_ms"] == pytest.approx(0.1)
    assert timing["launch_bound"] is False
    assert fake.launches_while_enabled == inner * timing["repetitions"]


def test_a_launch_bound_row_says_its_wall_time_depends_on_the_host(monkeypatch, tmp_path):
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock)
    rows = run_job(tmp_path, SimulatedPrepared(fake, kernel_ns=50_000, gap_ns=150_000),
                   ["forward"], framework="tf")
    timing = rows["forward"]["timing"]
    assert timing["device_median_ms"] == pytest.approx(0.05)
    assert timing["host_overhead_ms"] == pytest.approx(0.15)
    assert timing["launch_bound"] is True and "host CPU" in timing["launch_bound_reason"]


def test_without_cupti_the_reason_names_both_clocks(tmp_path):
    from suites.instruments.kernel_trace import unavailable_reason
    if unavailable_reason() is None:
        pytest.skip("CUPTI is installed here")
    rows = run_job(tmp_path, SimulatedPrepared(FakeCupti()), ["forward"], framework="jax")
    timing = rows["forward"]["timing"]
    assert timing["device_median_ms"] is None and timing["host_overhead_ms"] is None
    assert timing["launch_bound"] is None
    assert "cupti-python" in timing["device_time_reason"]
    assert "no device clock of its own" in timing["device_time_reason"]


def test_overhead_fields():
    assert overhead_fields(1.0, 0.9) == {"host_overhead_ms": pytest.approx(0.1),
                                         "launch_bound": False, "launch_bound_reason": ""}
    bound = overhead_fields(1.0, 0.2)
    assert bound["launch_bound"] and "20%" in bound["launch_bound_reason"]
    assert overhead_fields(1.0, None)["host_overhead_ms"] is None


def test_merged_rounds_recompute_overhead_and_keep_spans_and_host_state():
    from suites.harness.rounds import merge_rows
    from tests.harness.test_rounds import ONE_RUN

    def row(medians, device, span, steal):
        timing = {**ONE_RUN, "median_ms": medians[0], "repetition_medians_ms": medians,
                  "samples_ms": medians, "repetition_inner_loops": [1] * len(medians),
                  "within_run_ci_ms": [[m, m] for m in medians], "first_call_ms": 5.0,
                  "device_median_ms": device, "device_span_median_ms": span,
                  **overhead_fields(medians[0], device),
                  "host_steal_pct_median": steal, "host_steal_pct_max": steal * 2,
                  "host_load_1m": 1.0, "host_cpu_mhz_median": 2000.0, "host_readings": 4,
                  "host_state_reason": ""}
        return {"case_id": "c", "status": "ok", "timing": timing, "wall_s": 1.0}

    merged = merge_rows([row([1.0, 1.0], 0.3, 0.8, 1.0), row([1.2, 1.2], 0.3, 1.0, 3.0)], 0.5)
    timing = merged["timing"]
    # Two processes: the median of their medians is their geometric mean (log times).
    assert timing["median_ms"] == pytest.approx(math.sqrt(1.0 * 1.2))
    assert timing["host_overhead_ms"] == pytest.approx(math.sqrt(1.2) - 0.3)
    assert timing["launch_bound"]
    assert timing["device_span_median_ms"] == pytest.approx(0.9)
    assert timing["host_steal_pct_median"] == pytest.approx(2.0)
    assert timing["host_steal_pct_max"] == pytest.approx(6.0) and timing["host_readings"] == 8


def test_a_block_that_raises_leaves_cupti_off(monkeypatch):
    from suites.stats.timer import time_on_device

    fake = install(monkeypatch, FakeCupti())
    calls = []

    def run():
        calls.append(1)
        fake.launch("k", 1_000)
        if len(calls) == 2:
            raise MemoryError("CUDA out of memory")
    with pytest.raises(MemoryError):
        time_on_device(run, lambda h: None, FirstWorkingClock([CuptiClock(fake), EventClock()]),
                       inner=3, block_s=0.001, blocks=1)
    assert fake.enabled == set()


def test_the_cupti_clock_can_detach_after_each_block(monkeypatch):
    from suites.instruments.cupti_clock import CuptiClock
    from tests.fake_cupti import FakeCupti, install

    fake = install(monkeypatch, FakeCupti())
    finalized = []
    fake.finalize = lambda: finalized.append(fake.now)
    clock = CuptiClock(fake, detach_after_block=True)
    for _ in range(2):
        clock.start()
        fake.launch("k", 100_000)
        clock.end()
        assert clock.elapsed() == pytest.approx(100e-6)
    assert len(finalized) == 2
    # A CUPTI that cannot detach: the block gives no time and the clock says why.
    del fake.finalize
    broken = CuptiClock(fake, detach_after_block=True)
    broken.start()
    fake.launch("k", 100_000)
    assert broken.elapsed() is None and "no finalize()" in broken.reason


def test_recorded_nothing_is_the_last_blocks_and_never_an_earlier_ones(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    clock = CuptiClock(fake)
    clock.start()
    assert clock.elapsed() is None and clock.recorded_nothing       # an empty block
    fake.refuse = "CUPTI_ERROR_NOT_INITIALIZED"                      # the next cannot open
    clock.start()
    assert clock.elapsed() is None and not clock.recorded_nothing
    assert "NOT_INITIALIZED" in clock.reason
