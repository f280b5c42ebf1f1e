"""The timer's logic, driven by a fake clock: no wall-clock assertions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from suites.stats.timer import TimerSettings, bootstrap_median_ci, measure


class FakeDevice:
    """A clock that advances by a scripted duration per call, and counts syncs."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0
        self.syncs = 0

    def clock(self) -> float:
        return self.now

    def run(self):
        self.calls += 1
        self.now += next(self.durations)
        return self.calls

    def sync(self, handle):
        self.syncs += 1


def test_first_call_is_kept_apart_from_the_steady_state():
    device = FakeDevice(itertools.chain([5.0], itertools.repeat(0.010)))
    timing = measure(device.run, device.sync, TimerSettings(warmup=2, min_samples=5), device.clock)
    assert timing.first_call_s == pytest.approx(5.0)
    assert timing.median_s == pytest.approx(0.010)
    assert all(s == pytest.approx(0.010) for s in timing.samples_s)
    assert not timing.unstable


def test_stops_once_the_interval_is_tight():
    device = FakeDevice(itertools.repeat(0.010))
    settings = TimerSettings(warmup=1, min_samples=5, max_samples=100, rel_ci=0.02)
    timing = measure(device.run, device.sync, settings, device.clock)
    assert len(timing.samples_s) == 5  # identical samples: the CI is tight at once


def test_the_interval_is_asked_for_again_only_as_the_samples_grow(monkeypatch):
    import suites.stats.timer as timer

    asked: list[int] = []
    real = timer.bootstrap_median_ci

    def counting(samples, *args, **kwargs):
        asked.append(len(samples))
        return real(samples, *args, **kwargs)

    monkeypatch.setattr(timer, "bootstrap_median_ci", counting)
    rng = np.random.default_rng(2)
    device = FakeDevice(0.01 * (1 + rng.uniform(-0.5, 0.5)) for _ in itertools.count())
    settings = TimerSettings(warmup=1, min_samples=10, max_samples=200, rel_ci=0.0,
                             budget_s=100.0)
    measure(device.run, device.sync, settings, device.clock)
    checks = asked[:-1]                     # the last call is the summary's
    assert checks[:3] == [10, 11, 12]       # below 40 samples, every block
    assert all(later - earlier == max(1, earlier // timer.CHECK_GROWTH)
               for earlier, later in zip(checks, checks[1:], strict=False))
    # The work (resampled values) is a fraction of asking after every block.
    assert sum(checks) < sum(range(10, 200)) / 4


def test_noisy_samples_run_to_the_budget_and_are_flagged_unstable():
    rng = np.random.default_rng(1)
    noisy = (0.01 * (1 + rng.uniform(-0.5, 0.5)) for _ in itertools.count())
    device = FakeDevice(noisy)
    settings = TimerSettings(warmup=1, min_samples=5, max_samples=30, rel_ci=0.001,
                             budget_s=100.0)
    timing = measure(device.run, device.sync, settings, device.clock)
    assert len(timing.samples_s) == 30
    assert timing.unstable and "CI" in timing.unstable_reason
    assert timing.ci_low_s <= timing.median_s <= timing.ci_high_s


def test_short_calls_are_repeated_inside_one_synchronised_block():
    device = FakeDevice(itertools.repeat(0.0001))
    settings = TimerSettings(warmup=1, min_samples=5, min_block_s=0.002)
    timing = measure(device.run, device.sync, settings, device.clock)
    assert timing.inner_loops == 20
    assert timing.median_s == pytest.approx(0.0001)
    # one sync before the first call, one per call before sampling, one per block
    assert device.syncs == 1 + 1 + settings.warmup + len(timing.samples_s)


def test_budget_bounds_a_slow_case():
    device = FakeDevice(itertools.repeat(2.0))
    settings = TimerSettings(warmup=3, min_samples=3, budget_s=5.0, rel_ci=0.0)
    timing = measure(device.run, device.sync, settings, device.clock)
    assert len(timing.samples_s) == 3  # min_samples is honoured, then the budget stops it
    assert device.calls == 1 + 2 + 3    # warm-up cut short once first call + one exceed it


def sorted_bootstrap(samples, resamples=500, confidence=0.95):
    """The textbook percentile bootstrap: every resample sorted for its median."""
    picks = np.random.default_rng(0).integers(0, len(samples), size=(resamples, len(samples)))
    medians = np.median(samples[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


@pytest.mark.parametrize("count", [*range(2, 41), 99, 100, 301, 1000])
@pytest.mark.parametrize("kind", ["continuous", "ties", "constant", "outliers"])
def test_the_counting_bootstrap_gives_the_sorting_bootstraps_interval_to_the_bit(count, kind):
    rng = np.random.default_rng(count)
    samples = rng.lognormal(0.0, 0.1, count)
    if kind == "ties":          # a coarse clock: many equal samples
        samples = np.round(samples, 1)
    elif kind == "constant":
        samples = np.full(count, 0.125)
    elif kind == "outliers":
        samples[::7] *= 50.0
    assert bootstrap_median_ci(samples) == sorted_bootstrap(samples)


def test_bootstrap_interval_contains_the_median_and_narrows_with_more_data():
    rng = np.random.default_rng(0)
    few = rng.normal(1.0, 0.1, 10)
    many = rng.normal(1.0, 0.1, 1000)
    low_f, high_f = bootstrap_median_ci(few)
    low_m, high_m = bootstrap_median_ci(many)
    assert low_f <= np.median(few) <= high_f
    assert high_m - low_m < high_f - low_f
