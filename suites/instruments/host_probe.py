"""Two fixed probes of the host CPU, timed before each repetition's sampling: how fast one
core ran just then, and how long one core took to wake a thread on another.

Steal, load and the clock reading (``host_state.py``) can all look the same while a case
is not: on a 2-core VM, back-to-back ``default-cpu`` runs of PyTorch with two threads
differed by x1.40 in one pair and by x0.78 in another on the cases under 1 ms, with no
steal, the same clock reading and the same load (``python -m suites compare`` prints such
run shifts).

* ``core_ms``: interpreter steps and NumPy calls on a small array (dispatch, as the small
  cases spend their time), timed as one window of about 5 ms, so that a hypervisor or
  another process taking slices of the core shows as a longer window (a median of short
  runs would step around the slices).
* ``wakeup_us``: the round trip of two threads pinned to two of the worker's CPUs waking
  each other through ``threading.Event`` (a futex wake across cores, what a framework's
  thread pool does at every parallel region of a small case). None where the worker has
  one CPU or the threads could not be pinned.

On that VM, over 100 samples a second apart, the rank correlation of a 2-thread PyTorch
matmul of 0.3 ms with the wake-up probe was 0.59, with the single-core probe 0.48; two
processes taking 30% of each core moved them x1.61 and x1.10 over a whole run. They do not
explain every shift: README, "Reproducibility", has a pair whose small cases moved x0.71
while both probes stayed within 5%.
Both together take about 10 ms per repetition, outside the timed blocks.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

CORE_STEPS = 3000
WAKEUP_ROUND_TRIPS = 100
# A wake-up takes tens of microseconds; one that takes a second means the other thread is
# gone or starved, and the probe gives no figure rather than hang the worker.
WAIT_LIMIT_S = 1.0


@dataclass(frozen=True)
class ProbeReading:
    core_ms: float
    wakeup_us: float | None


def core_workload(steps: int = CORE_STEPS) -> float:
    """A fixed mix of interpreter steps and NumPy calls on a small array."""
    values = np.arange(64, dtype=np.float64)
    total = 0.0
    for step in range(steps):
        values = values * 1.0001 + 1.0
        total += float(values[step % 64]) + sum(range(step % 50))
    return total


def core_ms(clock: Callable[[], float] = time.perf_counter,
            workload: Callable[[], object] = core_workload) -> float:
    start = clock()
    workload()
    return (clock() - start) * 1e3


def wakeup_us(cpus: list[int], round_trips: int = WAKEUP_ROUND_TRIPS) -> float | None:
    """The mean round trip of two threads pinned to ``cpus[0]`` and ``cpus[1]`` waking
    each other; the calling thread's CPU mask is restored afterwards. None where there are
    fewer than two CPUs, a thread could not be pinned, or an answer took over
    ``WAIT_LIMIT_S``."""
    if len(cpus) < 2:
        return None
    ping, pong = threading.Event(), threading.Event()
    pinned = threading.Event()

    def answer() -> None:
        try:
            os.sched_setaffinity(0, {cpus[1]})  # pid 0: this thread alone (sched_setaffinity(2))
        except OSError:
            return
        pinned.set()
        for _ in range(round_trips):
            if not ping.wait(WAIT_LIMIT_S):
                return
            ping.clear()
            pong.set()
    mask = os.sched_getaffinity(0)
    helper = threading.Thread(target=answer, daemon=True)
    try:
        os.sched_setaffinity(0, {cpus[0]})
        helper.start()
        if not pinned.wait(WAIT_LIMIT_S):
            return None
        start = time.perf_counter()
        for _ in range(round_trips):
            ping.set()
            if not pong.wait(WAIT_LIMIT_S):
                return None
            pong.clear()
        return (time.perf_counter() - start) / round_trips * 1e6
    except OSError:
        return None
    finally:
        os.sched_setaffinity(0, mask)
        if helper.ident is not None:
            helper.join(WAIT_LIMIT_S)


def run_probes() -> ProbeReading:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return ProbeReading(core_ms(), wakeup_us(cpus))


# Readings behind a serving row's probe: five take about 50 ms, once per case.
SERVING_READINGS = 5


def probe_summary(readings: int = SERVING_READINGS,
                  probe: Callable[[], ProbeReading] = run_probes) -> dict[str, Any]:
    """The probes' medians over ``readings`` back-to-back readings, as a serving row keeps
    them (taken after the warm-up, before LoadGen's first run): a latency bound by one
    thread launching kernels follows the host's CPU, and two hosts' rows are read beside
    their probes (reports/sections/compare_serving.py)."""
    taken = [probe() for _ in range(readings)]
    wakeups = [r.wakeup_us for r in taken if r.wakeup_us is not None]
    return {"core_ms": statistics.median(r.core_ms for r in taken),
            "wakeup_us": statistics.median(wakeups) if wakeups else None,
            "readings": readings}
