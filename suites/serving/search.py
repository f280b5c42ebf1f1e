"""Server's QPS search: the largest target QPS whose LoadGen run is VALID under the latency
bound, found in a bounded number of LoadGen runs (probes), every probe kept.

LoadGen has a search of its own (``TestMode.FindPeakPerformance``, 5.0.18), but it writes
one summary for the whole search, its last run's, so the probes' p99 latencies and verdicts
are not in the logs; its number of runs is set only indirectly by a precision; and in a
trial its first 144-query run, which PerformanceOnly calls INVALID for early stopping, was
taken as a pass. Here each probe is one PerformanceOnly run with its own logs, and the rule
is LoadGen's verdict: VALID (the 99th percentile under the target latency, the minimums
met, early stopping met) passes, anything else fails.

The search starts at ``START_FRACTION`` of the warm-up's throughput at the full batch (the
Offline-like capacity), doubles while probes pass and divides by four while they fail,
then bisects (geometrically) between the largest passing and the smallest failing target
until they are within ``RESOLUTION`` of each other or the runs are used. Every passing
target is below every failing one by construction, so the answer is the largest passing
target. A step down that would land within ``RESOLUTION`` of the floor goes to the floor:
runs there are the search's longest, and a run just above the floor that fails is followed
by the floor's own, two runs a few per cent apart (seen on an H200: 36.7 then 36.3 QPS, 55 s
each). It runs no probe when a sample alone, unloaded, already misses the bound (the
fastest warm-up serve of the smallest prepared batch: no load can help), and stops when the
floor, the lowest target whose ``min_query_count`` queries fit in ``max_duration_ms``,
failed, and when ``serve`` raised. A budget of LoadGen seconds bounds it too: a run lasts
about ``min_query_count`` / target or ``min_duration_ms``, whichever is longer
(``run_seconds``), so a search at thousands of QPS can afford runs enough to close its
bracket in a few seconds, where one near the floor, a minute a run, stops before the next
run would pass the budget. A probe's fastest sample is no such bound: under a load
beyond capacity the queue never empties, and every sample waits (seen on an H200: BERT's
fastest sample 401 ms at 88 QPS, its lone serve 15 ms)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

START_FRACTION = 0.5
UP = 2.0
DOWN = 4.0
RESOLUTION = 1.1


@dataclass(frozen=True)
class Probe:
    """One LoadGen run of the search. ``valid``: LoadGen's verdict; ``reason``: why INVALID;
    ``error``: what ``serve`` raised (the search stops); latencies in ms, rates per second."""

    target_qps: float
    valid: bool
    reason: str = ""
    achieved_qps: float | None = None    # LoadGen's completed samples per second
    scheduled_qps: float | None = None
    p99_ms: float | None = None
    min_ms: float | None = None
    query_count: int | None = None
    logs: str = ""
    batching: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    gc: dict[str, Any] = field(default_factory=dict)   # collector.GcPauses during the run

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Search:
    """The probes in the order run, the answer (the passing probe with the largest target,
    None when none passed) and why the search stopped."""

    probes: tuple[Probe, ...]
    answer: Probe | None
    stopped: str

    def to_dict(self) -> dict[str, Any]:
        return {"probes": [p.to_dict() for p in self.probes],
                "answer_qps": None if self.answer is None else self.answer.target_qps,
                "stopped": self.stopped}


# Poisson arrivals at exactly n = min_query_count per max_duration fall short of n about
# half the time (seen: 655 of 662 queries in 5 s at 132.4 QPS, LoadGen 5.0.18). A run of T
# seconds at (n + FLOOR_SIGMAS * sqrt(n)) / T QPS falls short with a chance of about 3e-5
# (the count is Poisson, about normal with standard deviation sqrt(n)).
FLOOR_SIGMAS = 4.0


def floor_qps(min_query_count: int, max_duration_ms: int) -> float:
    """The lowest target worth a run: below about min_query_count / max_duration LoadGen's
    max duration cuts the run before its minimum query count, and the run is INVALID
    whatever the latency."""
    n = min_query_count
    return (n + FLOOR_SIGMAS * math.sqrt(n)) / (max_duration_ms / 1e3)


def run_seconds(target_qps: float, min_query_count: int, min_duration_ms: int,
                max_duration_ms: int) -> float:
    """About how long LoadGen's Server run at ``target_qps`` lasts: its minimum query count
    at that rate or its minimum duration, whichever is longer, within its cap."""
    seconds = max(min_query_count / target_qps, min_duration_ms / 1e3)
    return min(seconds, max_duration_ms / 1e3)


def search(probe: Callable[[float], Probe], start_qps: float, runs: int, bound_ms: float,
           floor: float, alone_ms: float = 0.0, budget_s: float = math.inf,
           seconds: Callable[[float], float] = lambda target: 0.0) -> Search:
    """Run at most ``runs`` probes (``probe(target_qps)``) from ``start_qps``; ``alone_ms``:
    a lone sample's unloaded latency (none is run when it is over ``bound_ms``);
    ``budget_s``: no run starts after the first that would take the runs' total, by
    ``seconds(target)``, past it."""
    if alone_ms > bound_ms:
        return Search((), None, f"a sample alone takes {alone_ms:.3g} ms, over the "
                                f"{bound_ms:g} ms bound: no QPS can meet it")
    probes: list[Probe] = []
    passed: Probe | None = None      # the largest passing target so far
    failed: Probe | None = None      # the smallest failing target so far
    target = max(start_qps, floor)
    spent = 0.0
    while True:
        if len(probes) == runs:
            return Search(tuple(probes), passed, f"the {runs} runs of the search were used")
        if probes and spent + seconds(target) > budget_s:
            return Search(tuple(probes), passed,
                          f"the next run, at {target:.4g} QPS, would take about "
                          f"{seconds(target):.3g} s, past the search's {budget_s:g} s "
                          f"({spent:.3g} s spent)")
        spent += seconds(target)
        found = probe(target)
        probes.append(found)
        if found.error:
            return Search(tuple(probes), passed, f"serve raised: {found.error}")
        if found.valid:
            passed = found if passed is None or found.target_qps > passed.target_qps else passed
        else:
            failed = found if failed is None or found.target_qps < failed.target_qps else failed
        if passed is None:
            if failed.target_qps <= floor:
                return Search(tuple(probes), None, f"the floor of {floor:.4g} QPS failed")
            target = max(failed.target_qps / DOWN, floor)
            if target < floor * RESOLUTION:
                target = floor   # one run near the floor, not two (each its longest)
        elif failed is None:
            target = passed.target_qps * UP
        elif failed.target_qps <= passed.target_qps * RESOLUTION:
            return Search(tuple(probes), passed,
                          f"bracketed within {RESOLUTION:g}x: {passed.target_qps:.4g} passed, "
                          f"{failed.target_qps:.4g} failed")
        else:
            target = math.sqrt(passed.target_qps * failed.target_qps)
