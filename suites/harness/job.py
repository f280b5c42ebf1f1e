"""What the runner sends a worker for one job: a typed, frozen record, written to and read
from the plan's JSON in one place and checked when it is made.

A suite's job (``suites.harness.spec.Job``: one build of one model and its measures) plus
what this process is to do with it: the measures still pending, whether to keep the build
for the device phase (suites/harness/kept_jobs.py), why it runs in a fresh process, the
measures whose device time the device phase takes, and figures recorded before this process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from suites.stats.timer import TimerSettings


@dataclass(frozen=True)
class WorkerJob:
    model: str
    batch: int
    precision: str
    variant: str
    pending: tuple[str, ...]                # the measures this process is to take
    timer: TimerSettings = TimerSettings()
    measures: tuple[str, ...] = ()          # the job's measures in the suite (pending or not)
    device: str = ""
    threads: int = 0
    interop_threads: int = 0
    epoch_batches: int = 124
    profile_iterations: int = 10
    compile_cache: str = ""                 # "", "cold" or "warm"
    fingerprint: bool = True
    # Kept built after the wall phase, for this process's device phase.
    keep: bool = False
    # The out-of-memory error that sent this job to a fresh process, and after how many
    # jobs ("": none; suites/harness/worker.py).
    fresh_after: str = ""
    # The timed measures whose device time the device phase takes.
    device_measures: tuple[str, ...] = ()
    # Per measure, its [wall median ms, device median ms] recorded before this process
    # (suites/harness/runner.py recorded_references).
    recorded: Mapping[str, tuple[float | None, ...]] = field(
        default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        def fail(name: str, wanted: str) -> None:
            raise ValueError(f"job {self.model!r}: '{name}' must be {wanted}, "
                             f"got {getattr(self, name)!r}")
        for name in ("model", "precision", "variant", "device", "compile_cache", "fresh_after"):
            if not isinstance(getattr(self, name), str):
                fail(name, "a string")
        for name in ("batch", "threads", "interop_threads", "epoch_batches",
                     "profile_iterations"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                fail(name, "a non-negative integer")
        if self.batch < 1:
            fail("batch", "at least 1")
        for name in ("pending", "measures", "device_measures"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                fail(name, "a list of measure names")
            object.__setattr__(self, name, tuple(value))
        if self.compile_cache not in ("", "cold", "warm"):
            fail("compile_cache", "'', 'cold' or 'warm'")
        if isinstance(self.timer, Mapping):
            known = {f.name for f in fields(TimerSettings)}
            unknown = sorted(set(self.timer) - known)
            if unknown:
                fail("timer", f"timer settings (unknown {', '.join(unknown)})")
            object.__setattr__(self, "timer", TimerSettings(**self.timer))
        if not isinstance(self.timer, TimerSettings):
            fail("timer", "timer settings")
        if not isinstance(self.recorded, Mapping):
            fail("recorded", "a mapping of measure to figures")
        object.__setattr__(self, "recorded", MappingProxyType(
            {name: tuple(figures) for name, figures in self.recorded.items()}))

    def to_dict(self) -> dict[str, Any]:
        """The job as the plan's JSON holds it."""
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        return {**data, "timer": asdict(self.timer), "recorded": dict(self.recorded)}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> WorkerJob:
        """A job read from a plan; an unknown field is an error naming it."""
        known = {f.name for f in fields(WorkerJob)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"job {data.get('model')!r}: unknown field "
                             f"{', '.join(repr(name) for name in unknown)}")
        try:
            return WorkerJob(**data)
        except TypeError as error:      # a required field missing
            raise ValueError(f"job {data.get('model')!r}: {error}") from None
