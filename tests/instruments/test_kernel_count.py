"""The kernel tracer counts each kernel once (issue: on an H100, ``kernels-gpu`` with
PyTorch summed every profiled case after the first to about twice its timed median).

The double count is reproduced on stand-in CUPTI records (``tests/fake_cupti.py``): a
profiler that stopped with kinds enabled and records held, warm-up kernels recorded
because of it, every kernel delivered twice with other timestamps, and a record from
outside the window. The rule the tracer used before (window by ``cupti.get_timestamp()``,
de-duplication by name, start and end) is applied to the same records, from the dump
``DLBENCH_TRACE_DUMP`` writes, and counts them twice; the window counts each once. A
kernel total above the traced wall time fails the row."""

from __future__ import annotations

import json

import pytest

from suites.instruments.cupti_window import DUMP_ENV, ActivityRecord, select
from suites.instruments.kernel_check import KernelTotalError, TimedReference, kernel_check
from suites.instruments.kernel_profile import profile_fields
from suites.instruments.kernel_trace import KernelRecord, KernelTrace, kernel_profile, trace
from tests.fake_cupti import FakeActivity, FakeCupti, install
from tests.fake_worker import SimulatedPrepared, run_job

KERNEL = FakeCupti.ActivityKind.CONCURRENT_KERNEL
# li_conv2's gradient, in the proportions of the H100 run: three kernels, 3.13 ms of them
# per iteration, inside an iteration of 4.85 ms host time.
LI_CONV2 = (("sm90_xmma_fprop_implicit_gemm_f32f32_kernel", 950_000),
            ("sm90_xmma_dgrad_implicit_gemm_f32f32_kernel", 1_200_000),
            ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7>", 980_000))
KERNEL_MS = sum(ns for _, ns in LI_CONV2) / 1e6
ITERATION_NS = 4_850_000


def li_conv2_gradient(fake: FakeCupti):
    def run():
        started = fake.now
        for name, ns in LI_CONV2:
            fake.launch(name, ns)
            fake.idle(100_000)
        fake.idle(ITERATION_NS - (fake.now - started))
    return run


def old_rule(records: list[ActivityRecord], start_ns: int, end_ns: int) -> list[ActivityRecord]:
    """The tracer's rule before this fix: kernels inside the window, once per
    (name, start, end)."""
    seen, kept = set(), []
    for record in records:
        key = (record.name, record.start_ns, record.end_ns)
        if (record.kind == KERNEL and start_ns <= record.start_ns and record.end_ns <= end_ns
                and key not in seen):
            seen.add(key)
            kept.append(record)
    return kept


def as_trace(records, iterations: int, wall_ms: float) -> KernelTrace:
    return KernelTrace(tuple(KernelRecord(r.name, r.start_ns, r.end_ns, stream_id=r.stream_id)
                             for r in records), iterations, wall_ms)


@pytest.fixture
def after_kineto(monkeypatch, tmp_path):
    """The state the tracer met on the H100 in every case after the first."""
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setenv(DUMP_ENV, str(tmp_path / "dump"))
    previous_case = [FakeActivity(KERNEL, name, 10_000 + i * 2_000_000,
                                  10_000 + i * 2_000_000 + ns, 500 + i)
                     for i, (name, ns) in enumerate(LI_CONV2)]
    fake.leave_profiler_state(previous_case)
    step = li_conv2_gradient(fake)
    for _ in range(2):          # warm-up, recorded: the kinds were left enabled
        step()
    fake.duplicate_shift_ns = 1_500     # each kernel handed over twice, timestamps apart
    fake.late_records = [FakeActivity(KERNEL, "kernel_of_a_later_iteration",
                                      fake.now + 10**9, fake.now + 10**9 + 5_000, 9_999)]
    return fake, step, tmp_path / "dump"


def test_the_old_rule_counts_twice_and_the_window_once(after_kineto):
    fake, step, dump_dir = after_kineto
    traced = trace(step, lambda handle: None, iterations=3, label="gradient")

    # Each kernel once: 3 iterations x 3 kernels, the launched time per iteration.
    assert len(traced.records) == 9
    profile = kernel_profile(traced, "gradient")
    assert profile.total_ms == pytest.approx(KERNEL_MS)
    assert profile.wall_ms == pytest.approx(ITERATION_NS / 1e6)
    # Drained: the previous case's 3 kernels and 6 warm-up kernels, each delivered twice.
    assert traced.window == {"kept": 9, "received": 19, "drained": 18, "outside_window": 1,
                             "duplicates": 9, "untimed": 0, "ns_per_tick": 1.0}
    # The leftovers' kinds were switched off before the window and ours after it.
    assert fake.enabled == set()
    assert fake.calls.index("disable5") < fake.calls.index(f"enable{KERNEL}")

    # The dump holds every record; the old rule over what the old tracer received (all of
    # it, at its one flush) counts each traced kernel twice, as on the H100 (ratio ~2).
    [path] = dump_dir.glob("*-gradient.json")
    dump = json.loads(path.read_text())
    everything = [ActivityRecord(**r) for r in dump["drained"] + dump["received"]]
    before = old_rule(everything, dump["window_start_ns"], dump["window_end_ns"])
    doubled = kernel_profile(as_trace(before, 3, traced.wall_ms), "gradient")
    assert doubled.total_ms == pytest.approx(2 * KERNEL_MS, rel=1e-3)
    assert doubled.total_ms > doubled.wall_ms          # 6.26 ms of kernels in 4.85 ms
    # The window's rule on the same dump: once.
    kept, dropped = select([ActivityRecord(**r) for r in dump["received"]], {KERNEL},
                           dump["window_start_ns"], dump["window_end_ns"])
    assert len(kept) == 9 and dropped["duplicates"] == 9

    # The check states the doubled count against the timed device time, as a note.
    timed = TimedReference(median_ms=4.9, device_median_ms=KERNEL_MS)
    check = kernel_check(doubled, as_trace(before, 3, traced.wall_ms), timed)
    assert check["kernel_sum_ratio"] == pytest.approx(2.0, rel=1e-3)
    assert "one stream overlapped" in check["note"]
    fair = kernel_check(profile, traced, timed)
    assert fair["kernel_sum_ratio"] == pytest.approx(1.0) and fair["same_stream_overlap_ms"] == 0


def test_a_kernel_busy_time_above_the_traced_wall_time_is_an_error():
    # Two copies of each kernel, a whole kernel apart (not overlapping): busy time doubles.
    records = [KernelRecord("k", start, start + 400_000)
               for start in (0, 400_000, 1_000_000, 1_400_000)]
    traced = KernelTrace(tuple(records), iterations=2, wall_ms=1.0)
    with pytest.raises(KernelTotalError, match="exceeds the traced iterations' wall time"):
        kernel_check(kernel_profile(traced, "forward"), traced, None)


def test_records_on_another_clock_are_read_in_nanoseconds(monkeypatch, tmp_path):
    """Records and CUPTI's own timestamps on a clock ticking twice per nanosecond (what a
    timestamp callback registered by Kineto does: the H100's 1.9-2.05x kernel totals). The
    window measures its length on the host's clock too and converts the ticks, so the
    profile is the nanosecond one and the row says what unit CUPTI was in."""
    fake = install(monkeypatch, FakeCupti())
    plain = profile_fields(SimulatedPrepared(fake), "gpu", "forward", 3)["profile"]
    fake.clock_scale = 2.0
    scaled = profile_fields(SimulatedPrepared(fake), "gpu", "forward", 3)["profile"]
    assert scaled["total_ms"] == pytest.approx(plain["total_ms"], rel=1e-6)
    assert scaled["kernel_check"]["window"]["ns_per_tick"] == pytest.approx(0.5)
    assert plain["kernel_check"]["window"]["ns_per_tick"] == 1.0
    rows = run_job(tmp_path, SimulatedPrepared(fake), ["profile"])
    assert rows["profile"]["status"] == "ok"


def test_a_clock_unit_is_taken_only_where_the_clocks_disagree():
    from suites.instruments.cupti_window import ns_per_tick
    assert ns_per_tick(1_000_000, 1_004_000) == 1.0          # read back to back: agree
    assert ns_per_tick(2_000_000, 1_000_000) == pytest.approx(0.5)
    assert ns_per_tick(0, 1_000) == 1.0


def test_profile_rows_state_the_kernel_total_against_the_timed_device_time(monkeypatch,
                                                                           tmp_path):
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock)
    fake.leave_profiler_state([])
    rows = run_job(tmp_path, SimulatedPrepared(fake), ["forward", "gradient", "profile"])
    assert rows["profile"]["status"] == "ok"
    check = rows["profile"]["profile"]["kernel_check"]
    assert check["timed_reference"] == "device_median_ms"
    assert check["timed_ms"] == pytest.approx(rows["gradient"]["timing"]["device_median_ms"])
    assert check["kernel_busy_ratio"] == pytest.approx(1.0)
    assert check["busy_share_of_traced_wall"] == pytest.approx(0.8)
    # Busy time is the device time, and a fifth of the traced iterations idle: the note
    # says so, as the report's tracer table does.
    assert check["note"].startswith("busy matches the device median; the wall median is ")
    assert check["note"].endswith("launch gaps, host work (the GPU idle 20% of the traced "
                                  "iterations)")


def test_a_window_that_fails_to_open_leaves_no_kind_enabled(monkeypatch):
    from suites.instruments.cupti_window import CuptiWindow

    fake = install(monkeypatch, FakeCupti())
    enable = fake.activity_enable

    def refuse_the_second(kind):
        if fake.enabled:
            raise RuntimeError("CUPTI_ERROR_INVALID_KIND")
        enable(kind)
    monkeypatch.setattr(fake, "activity_enable", refuse_the_second)
    window = CuptiWindow(fake, ("CONCURRENT_KERNEL", "MEMCPY"), "test")
    with pytest.raises(RuntimeError, match="INVALID_KIND"):
        window.open()
    assert fake.enabled == set()


def test_a_trace_that_lost_kernels_says_so_in_its_row():
    """Half of each iteration's kernels missing from the trace (d81667a's TensorFlow
    runs lost more): busy time 0.5x the device median timed in the same job, although
    the traced iterations' wall time is the timed one; the row's note says so, where the
    traced wall alone would read it as idle time."""
    records = [KernelRecord("k", start, start + 500_000) for start in (0, 2_000_000)]
    traced = KernelTrace(tuple(records), iterations=2, wall_ms=4.0)   # 2 ms an iteration
    profile = kernel_profile(traced, "forward")
    check = kernel_check(profile, traced, TimedReference(median_ms=2.0, device_median_ms=1.0))
    assert check["kernel_busy_ratio"] == pytest.approx(0.5)
    assert "busy 0.50x the device median: kernels missing from the trace" in check["note"]
    launch_gaps = kernel_check(profile, traced, TimedReference(median_ms=2.0,
                                                               device_median_ms=0.5))
    assert launch_gaps["note"] == ("busy matches the device median; the wall median is "
                                   "4.00x it: launch gaps, host work (the GPU idle 75% of "
                                   "the traced iterations)")
