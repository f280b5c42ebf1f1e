"""The timer's logic, driven by a fake clock: no wall-clock assertions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from suites.timer import TimerSettings, measure, median_ci, median_ci_ranks


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


def test_median_interval_contains_the_median_and_narrows_with_more_data():
    rng = np.random.default_rng(0)
    few = rng.normal(1.0, 0.1, 10)
    many = rng.normal(1.0, 0.1, 1000)
    low_f, high_f = median_ci(few)
    low_m, high_m = median_ci(many)
    assert low_f <= np.median(few) <= high_f
    assert high_m - low_m < high_f - low_f


def test_median_interval_ranks_are_the_tables_and_cover_at_least_95_percent():
    from scipy.stats import binom

    # Conover (1999), Table A3 / any nonparametric text: n = 10 → 2nd and 9th, n = 20 →
    # 6th and 15th, n = 100 → 40th and 61st order statistics (1-based).
    assert median_ci_ranks(10) == (1, 8)
    assert median_ci_ranks(20) == (5, 14)
    assert median_ci_ranks(100) == (39, 60)
    assert median_ci_ranks(5) == (0, 4)       # no pair reaches 95%: the whole range
    for count in range(6, 401):
        low, high = median_ci_ranks(count)
        assert high == count - 1 - low
        assert 1 - 2 * binom.cdf(low, count, 0.5) >= 0.95        # covers
        assert 1 - 2 * binom.cdf(low + 1, count, 0.5) < 0.95     # and is the narrowest


def test_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    # A skewed spread (log-normal: launch-bound timings look like it); its median is 1.
    hits = sum(low <= 1.0 <= high for low, high in
               (median_ci(rng.lognormal(0.0, 0.3, 25)) for _ in range(4000)))
    # Exact coverage at n = 25 is 1 - 2 P(B <= 7) = 0.957; 4000 draws: ±0.7% (2 s.d.).
    assert 0.945 <= hits / 4000 <= 0.97


