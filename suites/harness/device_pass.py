"""The device phase's ``device_time`` row: the GPU's own time of each timed measure of a
job, measured in a process that takes no wall sample after it.

Why: CUPTI, once loaded and enabled in a process, slows every later
kernel launch there, also after its activity kinds are disabled and after it is detached
(``cuptiFinalize``). Measured on an H100 (``python -m suites.instruments.clock_processes``, processes
of each role in rotating order): the wall medians that followed one CUPTI device block were
1.30× those of processes that never loaded CUPTI for PyTorch's autoencoder forward
(sae_ae1, batch 64), 1.17× for LeNet's gradient and 1.29× for JAX's autoencoder forward;
detaching left 1.44×, 1.19× and 1.06×. So on a GPU the runner times wall samples and
fingerprints in a process that never loads CUPTI (the "wall" phase; PyTorch's CUDA events
still give its rows a device time there) and then, in the "device"
phase (the wall phase's worker once its wall samples are done, or a fresh process),
rebuilds each job and measures here: per timed measure, a first call and the
timer's warm-up, then ``device_blocks × repetitions`` blocks of the timer's inner-loop
length on the device clock (CUPTI's busy time and span first, the adapter's own clock
where CUPTI is missing: ``suites/instruments/device_time.py``). The profile and counters measures run
in the same phase, after it. The report joins each measure's device time to its wall row.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from models.measures import NO_DEVICE_WORK
from suites.stats.timer import TimerSettings, time_on_device

MS = 1e3


def measure_device_time(step: Callable[[], Any], sync: Callable[[Any], None], clock: Any,
                        settings: TimerSettings,
                        host_clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """One measure's device time: the first call and warm-up untimed, then the blocks."""
    sync(None)
    sync(step())
    warm = []
    for _ in range(max(1, settings.warmup)):
        started = host_clock()
        sync(step())
        warm.append(host_clock() - started)
    estimate = statistics.median(warm)
    inner = max(1, math.ceil(settings.min_block_s / max(estimate, 1e-9)))
    blocks = max(1, settings.device_blocks) * max(1, settings.repetitions)
    busy, spans = time_on_device(step, sync, clock, inner, estimate * inner, blocks)
    if not busy:
        found = {"reason": clock.reason or "the device clock gave no time"}
        if clock.recorded_nothing:
            found["recorded_nothing"] = True
        return found
    found = {"device_median_ms": statistics.median(busy) * MS,
             "device_samples_ms": [b * MS for b in busy],
             "device_span_median_ms": statistics.median(spans) * MS if spans else None,
             "blocks": len(busy), "inner_loops": inner,
             "device_time_kind": clock.kind}
    note = clock.reason
    if note:        # a clock failed in some block and the next took over
        found["device_time_note"] = note
    return found


def device_times(prepared: Any, measures: list[str], settings: TimerSettings,
                 timed_step: Callable[[str], tuple[Callable[[], Any], Any]],
                 unsupported: type) -> dict[str, dict[str, Any]]:
    """Per timed measure of the job: its device time, or why there is none."""
    from suites.instruments.device_time import device_clock_for

    clock, reason = device_clock_for(prepared, "gpu")
    found: dict[str, dict[str, Any]] = {}
    for name in measures:
        if clock is None:
            found[name] = {"reason": reason}
            continue
        try:
            step, _ = timed_step(name)
            found[name] = measure_device_time(step, prepared.sync, clock, settings)
        except unsupported as error:
            found[name] = {"unsupported": str(error)}
    return mark_idle_steps(found)


def mark_idle_steps(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A measure whose device blocks received no record at all, in a job whose other
    measures were recorded, did nothing on the device: CUPTI was seeing this process.
    Its entry says so (``no_device_work``), and the report turns its wall row into an
    error (reports/pipeline/tidy.py). TensorFlow's pageable ``transfer`` was such a step: every
    call after the first copied nothing, most likely because eager TensorFlow keeps a
    host handle's first GPU copy for later ops there (adapters/tf/adapter.py)."""
    recorded = any(entry.get("device_median_ms") is not None for entry in found.values())
    for entry in found.values():
        if recorded and entry.get("recorded_nothing"):
            entry["no_device_work"] = True
            entry["reason"] = f"{NO_DEVICE_WORK} ({entry['reason']})"
    return found


def method(settings: TimerSettings, after_wall: bool = False, kept: bool = False) -> str:
    """How the row was measured; ``after_wall``: in the wall phase's process, after its
    last wall sample (suites/harness/pool.py); ``kept``: on the job built for the wall
    samples, kept for this phase (suites/harness/kept_jobs.py), not one built again."""
    blocks = max(1, settings.device_blocks) * max(1, settings.repetitions)
    where = "in the wall phase's process after its last wall sample" if after_wall else \
        "in a process of its own"
    job = "the job its wall samples ran, kept built" if kept else "the job built again"
    return (f"{blocks} device blocks {where} (the runner's device phase) on {job}, after a "
            f"first call and {max(1, settings.warmup)} warm-up iterations; the wall samples "
            f"were taken before CUPTI was loaded")
