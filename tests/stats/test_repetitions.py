"""Between-run repetitions, the re-run interval, the steady-clock wait, device time, GPU
state and the run comparison: driven by recorded or scripted data, no wall-clock bounds."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from adapters.base import DeviceClock
from suites.instruments.device_state import GpuMonitor, Reading, clocks_settled, empty_state, open_monitor
from suites.instruments.host_state import HostMonitor, HostReading
from suites.stats import compare
from suites.stats.repetitions import (
    combined_timing,
    enough,
    interleave,
    repetition_settings,
    rerun_interval,
)
from suites.stats.timer import TimerSettings, Timing, measure, summarise


def timing(median: float, samples: int = 5, inner: int = 1) -> Timing:
    return summarise(0.1, [median] * samples, inner, TimerSettings())


def test_rerun_interval_covers_a_rerun_of_a_simulated_noisy_case():
    """Repetition medians drawn with 5% log-normal spread: a second run's median falls in
    the first run's 95% prediction interval about 95% of the time (the derivation in
    rerun_interval); far below 95% would mean the interval describes one run only."""
    rng = np.random.default_rng(7)
    trials, n, hits = 2000, 5, 0
    for _ in range(trials):
        first = np.exp(rng.normal(0, 0.05, n))
        second = np.exp(rng.normal(0, 0.05, n))
        _, low, high = rerun_interval(list(first))
        hits += low <= np.median(second) <= high
    assert 0.90 <= hits / trials <= 0.995


def test_rerun_interval_is_a_point_for_one_repetition_and_positive_for_wide_spread():
    assert rerun_interval([2.0]) == (2.0, 2.0, 2.0)
    centre, low, high = rerun_interval([1.0, 10.0, 100.0])
    assert centre == 10.0 and 0 < low < 1.0 and high > 100.0


def test_enough_needs_the_minimum_then_stops_when_tight_or_budget_spent():
    settings = TimerSettings(repetitions=3, max_repetitions=6, rel_spread=0.03, budget_s=100.0)
    same = [timing(0.01)] * 2
    assert not enough(same, settings)
    assert enough(same + [timing(0.01)], settings)              # identical: tight at once
    spread = [timing(0.01), timing(0.012), timing(0.009)]
    assert not enough(spread, settings)                         # wide: more repetitions
    assert enough(spread * 2, settings)                         # the maximum
    poor = TimerSettings(repetitions=3, max_repetitions=6, rel_spread=0.03, budget_s=0.01)
    assert enough(spread, poor)                                  # budget spent


def test_repetitions_share_the_budget_and_only_the_first_waits_for_steady_clocks():
    settings = TimerSettings(warmup=3, min_samples=10, budget_s=6.0, repetitions=3,
                             max_repetitions=6, steady_max_s=1.0)
    first, later = repetition_settings(settings, 0), repetition_settings(settings, 1)
    assert first.budget_s == pytest.approx(1.0) and first.min_samples == 4
    assert first.steady_max_s == 1.0 and later.steady_max_s == 0.0
    assert first.warmup == 3 and later.warmup == 2
    single = TimerSettings(repetitions=1, max_repetitions=1)
    assert repetition_settings(single, 0) == single


def test_interleave_alternates_measures_and_isolates_a_failure():
    order, finished, failed = [], {}, {}
    medians = {"forward": itertools.cycle([0.010, 0.011, 0.009]),
               "gradient": itertools.repeat(0.030)}

    def repeat(name, index):
        order.append((name, index))
        if name == "transfer":
            raise RuntimeError("no copy engine")
        return timing(next(medians[name]))

    settings = TimerSettings(repetitions=3, max_repetitions=4, rel_spread=0.03)
    interleave(["forward", "gradient", "transfer"], lambda name: settings, repeat,
               lambda name, reps: finished.setdefault(name, len(reps)),
               lambda name, error: failed.setdefault(name, str(error)))
    assert order[:5] == [("forward", 0), ("gradient", 0), ("transfer", 0),
                         ("forward", 1), ("gradient", 1)]
    assert finished == {"gradient": 3, "forward": 4}   # forward's spread asks for more
    assert failed == {"transfer": "no copy engine"}


def test_combined_timing_take_median_interval_and_flag_from_between_run_spread():
    settings = TimerSettings(unstable_iqr=0.10)
    # Each repetition is tight inside itself; the repetitions disagree by ±30%.
    reps = [timing(0.010), timing(0.013), timing(0.007)]
    fields = combined_timing(reps, settings)
    assert fields.repetitions == 3 and fields.median_ms == pytest.approx(10.0)
    assert fields.ci_low_ms < 7.0 and fields.ci_high_ms > 13.0
    assert fields.unstable and "3 repetitions" in fields.unstable_reason
    assert all(not r.unstable for r in reps)
    steady = combined_timing([timing(0.010)] * 3, settings)
    assert not steady.unstable and steady.device_median_ms is None
    # Null device time is written (measured, none found), not left out.
    assert steady.to_dict()["device_median_ms"] is None


class FakeDevice:
    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)

    def clock(self):
        return self.now

    def run(self):
        self.now += next(self.durations)

    def sync(self, handle):
        pass


def test_measure_runs_until_steady_before_sampling_and_takes_device_time():
    device = FakeDevice(itertools.repeat(0.001))
    answers = iter([False] * 7 + [True])

    class Clock(DeviceClock):
        held, blocks = [], 0

        def hold(self, seconds):
            self.held.append(seconds)

        def elapsed(self):
            Clock.blocks += 1
            return 0.0015   # the block's kernels on the device, launch gaps removed

    clock = Clock()
    result = measure(device.run, device.sync,
                     TimerSettings(warmup=1, min_samples=3, min_block_s=0.002, device_blocks=2),
                     device.clock, steady=lambda: next(answers), device_clock=clock)
    assert result.steady_s == pytest.approx(0.007)       # seven untimed runs until steady
    assert result.device_samples_s == pytest.approx((0.00075, 0.00075))  # per iteration
    assert Clock.blocks == 2 and all(0.002 < h <= 0.025 for h in clock.held)


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, sm):
        self.sm = iter(sm)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return next(self.sm) if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, handle):
        return 350_000

    def nvmlDeviceGetTemperature(self, handle, kind):
        raise RuntimeError("not supported")


def test_gpu_monitor_waits_for_the_clock_ramp_and_summarises_readings():
    now = itertools.count(0.0, 0.011)
    monitor = GpuMonitor(FakeNvml(itertools.chain([345, 900, 1500, 1700, 1500, 1650],
                                                  itertools.repeat(1980))),
                         handle=None, clock=lambda: next(now))
    monitor.begin_steady()
    answers = [monitor.steady() for _ in range(8)]
    assert answers[:7] == [False] * 7 and answers[7]   # two readings near 1980 MHz
    monitor.start_sampling()
    fields = monitor.stop_sampling()
    from suites.instruments.device_state import summarise_readings
    state = summarise_readings(fields, monitor.sm_max_mhz)
    assert state["gpu_sm_clock_mhz_median"] == 1980 and state["gpu_power_w_median"] == 350
    assert state["gpu_temperature_c_max"] is None and state["gpu_state_reason"] == ""


def test_clocks_settled_needs_a_window_of_readings():
    flat = [Reading(i * 0.01, 1980, 2619, None, None) for i in range(4)]
    assert clocks_settled(flat)
    assert not clocks_settled(flat[:2])
    close = [Reading(i * 0.001, 1980, 2619, None, None) for i in range(4)]
    assert not clocks_settled(close)       # three readings within 2 ms: too close to tell
    ramp = [Reading(i * 0.01, 1000 + 300 * i, 2619, None, None) for i in range(4)]
    assert not clocks_settled(ramp)


def test_no_gpu_state_on_cpu_or_without_nvml():
    monitor, reason = open_monitor("cpu")
    assert monitor is None and "cpu" in reason
    state = empty_state("nvidia-ml-py (pynvml) is not installed")
    assert state["gpu_sm_clock_mhz_median"] is None and "pynvml" in state["gpu_state_reason"]


def write_run(path, medians, low=0.95, high=1.05):
    path.mkdir(parents=True)
    lines = [json.dumps({"case_id": f"s/torch/gpu/m{i}/b1/forward", "status": "ok",
                         "timing": {"median_ms": m, "ci_low_ms": m * low, "ci_high_ms": m * high,
                                    "repetitions": 3, "unstable": False}})
             for i, m in enumerate(medians)]
    lines.append(json.dumps({"case_id": "s/torch/gpu/x/b1/forward", "status": "oom"}))
    (path / "torch_gpu.jsonl").write_text("\n".join(lines) + "\n{\"torn")


def test_compare_figures_by_band(tmp_path):
    write_run(tmp_path / "a", [0.5, 0.5, 2.0, 10.0])
    write_run(tmp_path / "b", [0.54, 0.6, 2.02, 10.9])
    first, second = compare.load_run(tmp_path / "a"), compare.load_run(tmp_path / "b")
    pairs = compare.pair_up(first, second)
    table = compare.figures(pairs)
    assert table["< 1 ms"]["cases"] == 2 and table["< 1 ms"]["within_10pct"] == 0.5
    assert table["1-5 ms"]["within_3pct"] == 1.0 and table[">= 5 ms"]["within_5pct"] == 0.0
    assert table["all"]["inside_interval"] == pytest.approx(0.25)   # only 2.0 -> 2.02
    assert table[">= 5 ms"]["max_difference"] == pytest.approx(0.09)
    goals = dict((what, achieved) for what, achieved, _ in compare.targets(pairs, True))
    assert goals["cases >= 1 ms within 3%"] == 0.5
    text = compare.render([tmp_path / "a", tmp_path / "b"], [first, second])
    assert "MISSED" in text and "m3/b1" in text


def test_compare_rejects_missing_or_empty_runs(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert compare.main([tmp_path / "empty", tmp_path / "nothing"]) == 2
    assert compare.main([tmp_path / "empty"]) == 2
    assert "error" in capsys.readouterr().err
    assert math.isnan(compare.share([]))


def test_interleaved_blocks_run_in_abba_order():
    from suites.harness.interleave import block_order
    assert block_order(["torch", "jax"], 2) == [(0, "torch"), (0, "jax"), (1, "jax"),
                                                (1, "torch")]


def test_worker_rows_carry_repetitions_gpu_state_and_device_time(tmp_path):
    """The worker's GPU path with a scripted NVML and device clock: each timed row gets its
    repetitions, the clock readings and the device time; a failing measure leaves the
    rotation as an unsupported row while the others finish."""
    from adapters.base import Memory, Unsupported
    from suites.harness.job import WorkerJob
    from suites.harness.worker import Plan, Worker
    from suites.rows.results import CaseKey, ResultsFile, Settings

    class Prepared:
        extra: dict = {}

        def step(self, name):
            if name == "transfer_pinned":
                raise Unsupported("no pinned memory here")
            return lambda: None

        def sync(self, handle):
            pass

        def reset_peak_memory(self):
            pass

        def peak_memory(self):
            return Memory(1024, "allocator")

        def device_clock(self):
            class Clock(DeviceClock):
                kind = "scripted"

                def elapsed(self):
                    return 1e-6
            return Clock()

    class Adapter:
        def is_out_of_memory(self, error):
            return False

    path = tmp_path / "rows.jsonl"
    worker = Worker.__new__(Worker)
    worker.plan = Plan("s", "torch", "gpu", 1, 1, str(path), 0, [])
    worker.env, worker.results, worker.adapter = {}, ResultsFile(path), Adapter()
    worker.gpu_monitor = GpuMonitor(FakeNvml(itertools.repeat(1980)), handle=None)
    worker.gpu_state_reason = ""
    worker.host_monitor = HostMonitor(periodic=False, read=lambda: HostReading(
        0.0, 1000.0 + len(worker.host_monitor.readings), 5.0, 0.5, 2400.0))
    worker.timed = {}
    settings = Settings("torch", "gpu", "fp32", "eager", 1, 1)

    def key(name):
        return CaseKey("s", "m", 1, name, settings)

    timer = {"warmup": 1, "min_samples": 3, "budget_s": 0.05, "steady_max_s": 0.2,
             "repetitions": 3, "max_repetitions": 4}
    worker.time_measures(Prepared(), ["forward", "transfer_pinned", "gradient"], None,
                         WorkerJob("m", 1, "fp32", "eager", pending=(), timer=timer), key, {})
    rows = {r["measure"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert rows["transfer_pinned"]["status"] == "unsupported"
    for name in ("forward", "gradient"):
        timing = rows[name]["timing"]
        assert rows[name]["status"] == "ok" and timing["repetitions"] >= 3
        assert timing["gpu_sm_clock_mhz_median"] == 1980 and timing["gpu_readings"] >= 2
        assert timing["device_median_ms"] is not None and timing["device_time_kind"] == "scripted"
        assert "after the wall samples" in timing["device_time_method"]
        assert timing["host_overhead_ms"] == pytest.approx(timing["median_ms"]
                                                           - timing["device_median_ms"])
        assert timing["device_span_median_ms"] is None     # CUDA events give no span
        assert timing["host_cpu_mhz_median"] == 2400.0 and timing["host_load_1m"] == 0.5
        assert timing["host_readings"] == 2 * timing["repetitions"]
        assert rows[name]["memory"]["peak_bytes"] == 1024
    assert set(worker.timed) == {"forward", "gradient"}


class EnergyNvml(FakeNvml):
    """A GPU whose energy counter gains 400 mJ per reading (readings 10 ms apart: 40 W)."""

    def __init__(self):
        super().__init__(itertools.repeat(1980))
        self.millijoules = itertools.count(1_000_000, 400)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return next(self.millijoules)


def test_energy_of_an_iteration_from_the_energy_counter_over_the_sampling_windows():
    from suites.instruments.device_state import energy_fields
    now = itertools.count(0.0, 0.01)
    monitor = GpuMonitor(EnergyNvml(), handle=None, clock=lambda: next(now))
    windows = []
    for _ in range(2):
        monitor.start_sampling()
        windows.append(list(monitor.stop_sampling()))
    fields = energy_fields(windows, median_s=0.002)
    assert fields["gpu_energy_power_w"] == pytest.approx(40.0)
    assert fields["energy_per_iteration_j"] == pytest.approx(0.08)
    assert "energy counter" in fields["energy_source"]


def test_without_an_energy_counter_the_power_readings_stand_in_and_say_so():
    from suites.instruments.device_state import energy_fields
    now = itertools.count(0.0, 0.01)
    monitor = GpuMonitor(FakeNvml(itertools.repeat(1980)), handle=None, clock=lambda: next(now))
    monitor.start_sampling()
    fields = energy_fields([list(monitor.stop_sampling())], median_s=0.002)
    assert fields["gpu_energy_power_w"] == pytest.approx(350.0)
    assert fields["energy_per_iteration_j"] == pytest.approx(0.7)
    assert "no energy counter" in fields["energy_source"]
    empty = energy_fields([], median_s=0.002)
    assert empty["energy_per_iteration_j"] is None and empty["energy_source"]
