"""The timer: first call apart, warm-up, synchronised timed blocks, raw samples, median,
IQR and a bootstrap confidence interval, repeated until the interval is tight or the time
budget is spent (after pyperf and ``torch.utils.benchmark``'s adaptive measurement).

The callable under test must return a handle that ``sync`` waits on (a CUDA synchronise,
``block_until_ready``); the device is synchronised before a block starts and after it ends,
so asynchronous frameworks are timed for the work, not for the launch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:   # the contract's clock (adapters/base.py), for annotations only
    from adapters.base import DeviceClock


@dataclass(frozen=True)
class TimerSettings:
    warmup: int = 3            # iterations after the first call, before sampling
    min_samples: int = 5
    max_samples: int = 200
    rel_ci: float = 0.02       # stop once the 95% CI of the median is within ±2%
    budget_s: float = 10.0     # time allowed for sampling one measurement
    min_block_s: float = 0.002  # blocks shorter than this repeat the call (launch-bound cases)
    # One repetition: IQR / median above this flags the row as unstable; several: a re-run
    # interval (suites/stats/repetitions.py) wider than ± this does.
    unstable_iqr: float = 0.10
    # Between-run variance (suites/stats/repetitions.py): every case is measured in at least
    # ``repetitions`` independent repetitions (each with its own warm-up, inner-loop count
    # and samples), interleaved with the job's other measures; more, up to
    # ``max_repetitions``, while a re-run's median could still differ by more than
    # ``rel_spread``. ``budget_s`` is then the case's whole sampling budget.
    repetitions: int = 3
    max_repetitions: int = 6
    rel_spread: float = 0.03
    # Longest time spent running the case before its first sample until the device reports
    # steady clocks (suites/instruments/device_state.py); 0 turns the check off. Only GPUs are checked.
    steady_max_s: float = 1.0
    device_blocks: int = 1     # blocks timed on the device clock, where there is one


@dataclass(frozen=True)
class Timing:
    first_call_s: float
    samples_s: tuple[float, ...]   # seconds per iteration, one per timed block
    inner_loops: int               # iterations per timed block
    median_s: float
    iqr_s: float
    ci_low_s: float
    ci_high_s: float
    mean_s: float
    min_s: float
    unstable: bool
    unstable_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # The device's own time per iteration (``time_on_device``), where a device clock was
    # given; empty otherwise. Spans (first kernel start to last kernel end, per iteration)
    # where the clock gives them (CUPTI's; CUDA events give none).
    device_samples_s: tuple[float, ...] = ()
    device_span_samples_s: tuple[float, ...] = ()
    steady_s: float = 0.0          # time spent bringing the device to steady clocks


# The stopping rule's interval is computed again after every 1/CHECK_GROWTH more samples.
CHECK_GROWTH = 20


def bootstrap_median_ci(samples: np.ndarray, resamples: int = 500,
                        confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the median (seeded: the same samples give the same CI).

    Each resample's median is found by counting, not by sorting: a resample's values are
    the samples at its drawn indices, so its median is the sample whose rank (in the
    sorted samples) is the middle of the drawn ranks, and the middle of drawn ranks is
    where their running count crosses half the resample. The same medians as
    ``np.median(samples[picks], axis=1)`` to the bit (tests/stats/test_timer.py), in linear
    time: the stopping rule asks for this interval many times while the device waits, and
    sorting 500 resamples took 21 of the 378 s of TensorFlow's worker over ``default-gpu``
    and ``li2016``'s sweeps on an H100."""
    count = len(samples)
    if count < 2:
        return float(samples[0]), float(samples[0])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, count, size=(resamples, count))
    order = np.argsort(samples, kind="stable")
    ordered = samples[order]
    rank = np.empty(count, dtype=np.intp)
    rank[order] = np.arange(count)
    # Row r's ranks offset by r * count, so one bincount counts every resample at once.
    ranks = rank[picks] + (np.arange(resamples) * count)[:, None]
    drawn = np.bincount(ranks.ravel(), minlength=resamples * count).reshape(resamples, count)
    at_or_below = np.cumsum(drawn, axis=1)   # drawn values of rank <= j, per resample
    upper = np.argmax(at_or_below > count // 2, axis=1)
    if count % 2:
        medians = ordered[upper]
    else:
        lower = np.argmax(at_or_below > count // 2 - 1, axis=1)
        medians = (ordered[lower] + ordered[upper]) / 2
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def summarise(first_call_s: float, samples: list[float], inner: int,
              settings: TimerSettings) -> Timing:
    data = np.asarray(samples, dtype=np.float64)
    median = float(np.median(data))
    q1, q3 = np.percentile(data, [25, 75])
    low, high = bootstrap_median_ci(data)
    reasons = []
    half_width = (high - low) / 2 / median if median > 0 else math.inf
    if half_width > settings.rel_ci:
        reasons.append(f"95% CI ±{half_width:.1%} > ±{settings.rel_ci:.0%} "
                       f"after {len(data)} samples")
    if median > 0 and (q3 - q1) / median > settings.unstable_iqr:
        reasons.append(f"IQR {(q3 - q1) / median:.1%} of median")
    return Timing(first_call_s, tuple(float(s) for s in data), inner, median, float(q3 - q1),
                  low, high, float(data.mean()), float(data.min()), bool(reasons),
                  "; ".join(reasons))


# The host clock wall times are read from when the caller gives none (a module attribute,
# so a test can time a simulated device on the simulation's clock).
host_clock: Callable[[], float] = time.perf_counter


def measure(run: Callable[[], Any], sync: Callable[[Any], None],
            settings: TimerSettings = TimerSettings(),
            clock: Callable[[], float] | None = None,
            steady: Callable[[], bool] | None = None,
            device_clock: DeviceClock | None = None) -> Timing:
    """Time ``run`` (one iteration of the computation under test).

    ``steady`` (suites/instruments/device_state.py) is asked after each warm-up iteration whether the
    device has reached its working clocks; the case keeps running, untimed, until it says
    so or ``steady_max_s`` has passed. ``device_clock`` times ``device_blocks`` further
    blocks on the device (``time_on_device``).
    """
    clock = clock or host_clock
    sync(None)
    start = clock()
    sync(run())
    first_call = clock() - start

    warm: list[float] = []
    spent = first_call
    for _ in range(settings.warmup):
        start = clock()
        sync(run())
        warm.append(clock() - start)
        spent += warm[-1]
        if spent > settings.budget_s:
            break  # a very slow case: its warm-up already spent the budget

    steady_started = clock()
    if steady is not None and settings.steady_max_s > 0:
        while not steady() and clock() - steady_started < settings.steady_max_s:
            start = clock()
            sync(run())
            warm.append(clock() - start)
    steady_s = clock() - steady_started

    # The inner-loop count from the median of the warm iterations, not the last one: one
    # slow or fast iteration made the count (and with it the median) differ between runs.
    estimate = float(np.median(warm)) if warm else first_call
    inner = max(1, math.ceil(settings.min_block_s / max(estimate, 1e-9)))
    samples: list[float] = []
    next_check = settings.min_samples
    sampling_started = clock()
    while len(samples) < settings.max_samples:
        start = clock()
        handle = None
        for _ in range(inner):
            handle = run()
        sync(handle)
        samples.append((clock() - start) / inner)
        if len(samples) < settings.min_samples:
            continue
        if clock() - sampling_started > settings.budget_s:
            break
        # The interval is asked for again once the sample count has grown by 5%: a
        # bootstrap after every block (500 resampled medians each) kept the host busy and
        # the device idle for 14.7 of the 180 s PyTorch's default-gpu worker took on an
        # H100. It can stop at most 5% of the samples later than checking every block would.
        if len(samples) < next_check:
            continue
        next_check = len(samples) + max(1, len(samples) // CHECK_GROWTH)
        data = np.asarray(samples)
        low, high = bootstrap_median_ci(data)
        median = float(np.median(data))
        if median > 0 and (high - low) / 2 / median <= settings.rel_ci:
            break
    timing = summarise(first_call, samples, inner, settings)
    device, spans = ([], []) if device_clock is None else time_on_device(
        run, sync, device_clock, inner, timing.median_s * inner, settings.device_blocks)
    return replace(timing, device_samples_s=tuple(device), device_span_samples_s=tuple(spans),
                   steady_s=steady_s)


def time_on_device(run: Callable[[], Any], sync: Callable[[Any], None], device_clock: DeviceClock,
                  inner: int, block_s: float, blocks: int) -> tuple[list[float], list[float]]:
    """Device seconds per iteration for ``blocks`` extra blocks, after the timed ones, and
    the blocks' spans per iteration where the clock gives them. They are never host
    samples: a held device would add its hold to the wall time, and a tracing clock its
    tracing overhead."""
    result: list[float] = []
    spans: list[float] = []
    for _ in range(blocks):
        sync(None)
        # Long enough for the host to queue the whole block: its wall time plus margin,
        # capped at 25 ms: a block that long is compute-bound, its launches are queued
        # within a fraction of it (1,500 launches at ~5 µs take 7.5 ms), and an uncapped
        # hold would add its whole length per block. Launches left unqueued when the hold
        # ends only count their gaps into the device time, which errs toward the wall time.
        device_clock.hold(min(1.5 * block_s + 0.001, 0.025))
        device_clock.start()
        try:
            handle = None
            for _ in range(inner):
                handle = run()
            device_clock.end()
            sync(handle)
        except BaseException:
            # A tracing clock must not stay on for whatever runs next.
            device_clock.abort()
            raise
        elapsed = device_clock.elapsed()
        if elapsed is None:
            return [], []
        result.append(elapsed / inner)
        span = device_clock.span()
        if span is not None:
            spans.append(span / inner)
    return result, spans
