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
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TimerSettings:
    warmup: int = 3            # iterations after the first call, before sampling
    min_samples: int = 5
    max_samples: int = 200
    rel_ci: float = 0.02       # stop once the 95% CI of the median is within ±2%
    budget_s: float = 10.0     # time allowed for sampling one measurement
    min_block_s: float = 0.002  # blocks shorter than this repeat the call (launch-bound cases)
    unstable_iqr: float = 0.10  # IQR / median above this flags the row as unstable


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


def bootstrap_median_ci(samples: np.ndarray, resamples: int = 500,
                        confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the median (seeded: the same samples give the same CI)."""
    if len(samples) < 2:
        return float(samples[0]), float(samples[0])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(samples), size=(resamples, len(samples)))
    medians = np.median(samples[picks], axis=1)
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


def measure(run: Callable[[], Any], sync: Callable[[Any], None],
            settings: TimerSettings = TimerSettings(),
            clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time ``run`` (one iteration of the computation under test)."""
    sync(None)
    start = clock()
    sync(run())
    first_call = clock() - start

    estimate = first_call
    spent = first_call
    for _ in range(settings.warmup):
        start = clock()
        sync(run())
        estimate = clock() - start
        spent += estimate
        if spent > settings.budget_s:
            break  # a very slow case: its warm-up already spent the budget

    inner = max(1, math.ceil(settings.min_block_s / max(estimate, 1e-9)))
    samples: list[float] = []
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
        data = np.asarray(samples)
        low, high = bootstrap_median_ci(data)
        median = float(np.median(data))
        if median > 0 and (high - low) / 2 / median <= settings.rel_ci:
            break
    return summarise(first_call, samples, inner, settings)
