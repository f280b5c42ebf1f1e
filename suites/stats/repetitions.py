"""Between-run variance: a case measured in several independent repetitions, and the
interval a re-run's median is expected to fall in.

One timed run's samples describe the noise inside that run; what differs between runs is
slower (clocks ramping and dropping, the host's scheduling of launch-bound work, where a
buffer sits), so a second run's median often lies outside the first run's bootstrap CI.
After pyperf's design (values from several independent runs, each with its own warm-up),
each repetition here is a fresh ``suites.stats.timer.measure``: its own warm-up, its own
inner-loop count chosen from its own estimate, its own samples. Repetitions of the job's
measures are interleaved (forward, gradient, transfer, forward, gradient, ...) so that
they are separated in time and slow drift spreads over every measure instead of lining up
with one. The row's median is the median of the repetition medians, and its interval is a
prediction interval for the median a re-run with as many repetitions would report.

Repetitions are adaptive: ``repetitions`` at least, then more (up to ``max_repetitions``
and within the case's ``budget_s``) only while the interval is wider than ``rel_spread``,
so the time goes to the cases whose spread needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from suites.rows.records import Timing as TimingRecord
from suites.stats import intervals
from suites.stats.launch_bound import overhead_fields
from suites.stats.timer import TimerSettings, Timing

# Two-sided 95% Student t quantiles t(0.975, df), df = 1..30 (any statistics table);
# beyond 30 the normal quantile is within 4% of them.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
         2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074,
         2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_975(df: int) -> float:
    return T_975[df - 1] if df <= len(T_975) else 1.960


def rerun_interval(medians: list[float]) -> tuple[float, float, float]:
    """(centre, low, high): the median of the repetition medians and a 95% prediction
    interval for the same statistic from an independent re-run of as many repetitions.

    Run-to-run changes are multiplicative (a clock 5% lower makes every kernel 5% slower),
    so the spread is taken on log times and the interval is centre * exp(±half). With the
    log medians spread with standard deviation sigma, the median of n of them has variance
    about (pi/2) sigma^2 / n (the sample median's asymptotic efficiency for a normal
    spread); the difference between this run's centre and a re-run's has twice that,
    pi sigma^2 / n. sigma is estimated by the sample standard deviation s of the n log
    medians, so half = t(0.975, n-1) * s * sqrt(pi / n). With one repetition there is no
    between-run spread to go on: low = high = centre, and the caller keeps the within-run
    interval.
    """
    values = np.asarray(medians, dtype=np.float64)
    centre = float(np.median(values))
    if len(values) < 2 or np.any(values <= 0):
        return centre, centre, centre
    logs = np.log(values)
    half = t_975(len(values) - 1) * float(logs.std(ddof=1)) * math.sqrt(math.pi / len(values))
    return centre, centre * math.exp(-half), centre * math.exp(half)


def relative_half_width(medians: list[float]) -> float:
    centre, low, high = rerun_interval(medians)
    return (high - low) / 2 / centre if centre > 0 else math.inf


def sampling_time(timing: Timing) -> float:
    """Seconds the repetition spent in timed blocks."""
    return float(sum(timing.samples_s)) * timing.inner_loops


def repetition_settings(settings: TimerSettings, index: int) -> TimerSettings:
    """One repetition's timer settings. The case's ``budget_s`` and ``min_samples`` are
    shared out over its repetitions (so repetitions cost about what one long run cost);
    a later repetition's first call is a warm call and counts as one of its warm-up
    iterations; the steady-clock wait runs only before the case's first sample (later
    repetitions follow other measures of the same job, which keep the device busy)."""
    if settings.max_repetitions <= 1 and settings.repetitions <= 1:
        return settings
    return replace(settings,
                   budget_s=settings.budget_s / max(settings.max_repetitions,
                                                    settings.repetitions),
                   min_samples=max(2, math.ceil(settings.min_samples / settings.repetitions)),
                   warmup=settings.warmup if index == 0 else max(0, settings.warmup - 1),
                   steady_max_s=settings.steady_max_s if index == 0 else 0.0)


def enough(repetitions: list[Timing], settings: TimerSettings) -> bool:
    """Whether a case has the repetitions it needs."""
    count = len(repetitions)
    if count >= max(settings.max_repetitions, settings.repetitions):
        return True
    if count < settings.repetitions:
        return False
    if sum(sampling_time(t) for t in repetitions) >= settings.budget_s:
        return True
    return relative_half_width([t.median_s for t in repetitions]) <= settings.rel_spread


def interleave(names: list[str], settings: Callable[[str], TimerSettings],
               repeat: Callable[[str, int], Timing],
               finish: Callable[[str, list[Timing]], None],
               fail: Callable[[str, BaseException], None]) -> None:
    """Run repetition k of every unfinished measure before repetition k+1 of any;
    ``finish`` is called as soon as a measure has enough repetitions (its row is written
    then), ``fail`` when a repetition raises (the measure leaves the rotation)."""
    done: dict[str, list[Timing]] = {name: [] for name in names}
    active = list(names)
    while active:
        for name in list(active):
            try:
                timing = repeat(name, len(done[name]))
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                active.remove(name)
                fail(name, error)
                continue
            done[name].append(timing)
            if enough(done[name], settings(name)):
                active.remove(name)
                finish(name, done[name])


def combined_timing(repetitions: list[Timing], settings: TimerSettings) -> TimingRecord:
    """The row's ``timing`` (milliseconds) over all repetitions: the median and interval
    from ``rerun_interval``, the unstable flag from the between-run spread, and the
    within-run figures of each repetition kept beside them."""
    ms = 1e3
    medians = [t.median_s for t in repetitions]
    samples = np.concatenate([np.asarray(t.samples_s) for t in repetitions])
    centre, low, high = rerun_interval(medians)
    count = len(repetitions)
    first = repetitions[0]
    reasons = []
    if count == 1:
        # No between-run spread: the within-run interval and flag, as one run measures them.
        low, high = first.ci_low_s, first.ci_high_s
        reasons = [first.unstable_reason] if first.unstable else []
        interval = intervals.one_repetition()
    else:
        interval = intervals.repetitions(count)
        spread = (high - low) / 2 / centre if centre > 0 else math.inf
        if spread > settings.unstable_iqr:
            reasons.append(intervals.spread(spread, f"{count} repetitions"))
    q1, q3 = np.percentile(samples, [25, 75])
    device = [np.median(t.device_samples_s) for t in repetitions if t.device_samples_s]
    spans = [np.median(t.device_span_samples_s) for t in repetitions if t.device_span_samples_s]
    device_median_ms = float(np.median(device)) * ms if device else None
    return TimingRecord(
        first_call_ms=first.first_call_s * ms,
        median_ms=centre * ms,
        iqr_ms=float(q3 - q1) * ms,
        ci_low_ms=low * ms,
        ci_high_ms=high * ms,
        mean_ms=float(samples.mean()) * ms,
        min_ms=float(samples.min()) * ms,
        samples=int(samples.size),
        samples_ms=tuple(float(s) * ms for s in samples),
        inner_loops=first.inner_loops,
        unstable=bool(reasons),
        unstable_reason="; ".join(reasons),
        repetitions=count,
        interval=interval,
        repetition_medians_ms=tuple(m * ms for m in medians),
        repetition_inner_loops=tuple(t.inner_loops for t in repetitions),
        within_run_ci_ms=tuple((t.ci_low_s * ms, t.ci_high_s * ms) for t in repetitions),
        steady_ms=first.steady_s * ms,
        # Device time (suites/instruments/device_time.py: CUPTI busy time, or CUDA events
        # behind a spin kernel), the median over repetitions, and where the clock gives it
        # the span from the first kernel's start to the last one's end; the share of wall
        # time the device was not busy is launch and host overhead
        # (suites/stats/launch_bound.py).
        device_median_ms=device_median_ms,
        device_span_median_ms=float(np.median(spans)) * ms if spans else None,
        **overhead_fields(centre * ms, device_median_ms),
    )
