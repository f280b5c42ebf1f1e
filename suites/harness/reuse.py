"""One measurement for every suite of a matrix run that asks for the same case.

The GPU suites overlap: ``float64-gpu``'s fp32 cases are ``default-gpu``'s networks at its
batches, ``kernels-gpu`` holds ``li2016``'s and ``convnet-benchmarks``' kernel-level cases,
``cnn-benchmarks`` times most of ``default-gpu``'s networks at batch 16. In a matrix run
(``python -m suites matrix``) a case already measured for an earlier suite is copied into
a later one instead of being measured again, when

* it is the same computation: framework, device, model, batch, measure, precision,
  variant, threads and inter-op threads (and the epoch length of an epoch measure, the
  traced iterations of ``profile`` and ``counters``);
* the earlier suite's timer is at least as thorough as the later one's (``covers``), so
  the copy is never a weaker measurement than the later suite asked for;
* it is not a compile-cache case (``cold``/``warm``: those measure a process's state);
* the earlier row is ``ok``, ``unsupported`` or ``oom``; a ``failed`` or ``timeout`` row
  is measured again.

The copy keeps every field of the measured row (its timing, environment, commit and
start time) under the later suite's name and case id, and says where it came from in
``reused_from``: the case id it was measured as. Reused rows cost no device time, so the
matrix's estimates leave them out of the cost history (``suites/matrix/estimate.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from models.measures import COUNTERS, EPOCH_MEASURES, PROFILE
from suites.harness.spec import Job
from suites.rows.results import DEVICE_TIME
from suites.stats.timer import TimerSettings

REUSABLE_STATUSES = ("ok", "unsupported", "oom")
REUSED_FROM = "reused_from"

# Timer fields where a larger value means a more thorough measurement, and those where a
# smaller one does (the stopping targets).
_MORE_IS_THOROUGH = ("warmup", "min_samples", "max_samples", "budget_s", "repetitions",
                     "max_repetitions", "device_blocks")
_LESS_IS_THOROUGH = ("rel_ci", "rel_spread")


@dataclass(frozen=True)
class Source:
    """Where a case was (or will be) measured in this matrix run."""

    suite: str
    case_id: str
    timer: TimerSettings
    results: Path
    # A device_time case: the timed measures it takes device time for (the suite's timed
    # measures of that model, batch and setting: suites/harness/runner.py device_measures).
    device_measures: tuple[str, ...] = ()


def signature(framework: str, job: Job, measure: str) -> tuple | None:
    """What makes two suites' cases the same computation, or None where a case must
    always be measured in its own suite."""
    if job.compile_cache:
        return None
    detail: tuple = ()
    if measure in EPOCH_MEASURES:
        detail = (job.epoch_batches,)
    elif measure in (PROFILE, COUNTERS):
        detail = (job.profile_iterations,)
    return (framework, job.device, job.model, job.batch, measure, job.precision, job.variant,
            job.threads, job.interop_threads, *detail)


def covers(source: TimerSettings, target: TimerSettings) -> bool:
    """Whether a measurement under ``source`` is at least as thorough as ``target`` asks."""
    return all(getattr(source, name) >= getattr(target, name) for name in _MORE_IS_THOROUGH) \
        and all(getattr(source, name) <= getattr(target, name) for name in _LESS_IS_THOROUGH)


class ReuseIndex:
    """The cases of the suites run so far in a matrix, by signature, in run order."""

    def __init__(self) -> None:
        self.sources: dict[tuple, list[Source]] = {}

    def add(self, framework: str, job: Job, measure: str, source: Source) -> None:
        key = signature(framework, job, measure)
        if key is not None:
            self.sources.setdefault(key, []).append(source)

    def candidates(self, framework: str, job: Job, measure: str, timer: TimerSettings,
                   suite: str, device_measures: tuple[str, ...] = ()) -> list[Source]:
        """Earlier suites' cases this one may be copied from, first measured first. A
        device_time case only from one that timed every measure it needs: bahrampour2016's
        LSTM at batch 16 adds the epoch measures to default-gpu's forward and gradient."""
        key = signature(framework, job, measure)
        if key is None:
            return []
        # The fingerprint is the same function whatever the timer measured beforehand.
        return [s for s in self.sources.get(key, ()) if s.suite != suite and
                (measure == "fingerprint" or covers(s.timer, timer)) and
                (measure != DEVICE_TIME or set(device_measures) <= set(s.device_measures))]


def reused_row(row: dict[str, Any], suite: str, case_id: str) -> dict[str, Any]:
    """The measured row as the later suite's row."""
    return {**row, "suite": suite, "case_id": case_id, REUSED_FROM: row["case_id"]}


def timer_of(job: Job) -> TimerSettings:
    """A job's timer settings (jobs that went through JSON carry them as a dict)."""
    timer = job.timer
    if isinstance(timer, dict):
        known = {f.name for f in fields(TimerSettings)}
        return TimerSettings(**{k: v for k, v in timer.items() if k in known})
    return timer
