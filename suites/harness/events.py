"""What a worker tells its runner, as typed, frozen records, written to and read from the
worker's stdout in one place.

A worker (suites/harness/worker.py) prints one event a line, ``EVENT_PREFIX`` then a JSON
object; every other line of its stdout is the framework's or the model's own output, which
the runner copies to the log (suites/harness/runner.py). The kinds, in the order a job
sends them:

* ``JobStarting``: a job is about to be built (the progress display's description);
* ``CasesStarted``: the cases whose time limit starts now (the build counts against every
  pending measure of the job, then each repetition against its own measure);
* ``RowWritten``: a row was appended to the results file (its case, status, reason and,
  for a timed row, the median and whether it was unstable);
* ``PlanDone``: a serving worker finished a plan and waits for the next;
* ``FreshProcess``: a job ran out of memory after others and goes to a fresh worker
  (the worker then exits with ``FRESH_PROCESS_EXIT``);
* ``Fatal``: the worker cannot go on (no device, no framework, the results location
  unusable).

The JSON of each kind is the object the worker has always printed: ``{"job": ...}``,
``{"start": [...]}``, ``{"case_id", "status", "reason", "median_ms", "unstable"}``,
``{"plan_done": true}``, ``{"fresh_process": ...}``, ``{"fatal": ...}``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

EVENT_PREFIX = "@@dlbench "


class MalformedEvent(ValueError):
    """A line that starts with ``EVENT_PREFIX`` but holds no event of a known kind."""


@dataclass(frozen=True)
class JobStarting:
    label: str       # "model bBATCH precision variant"


@dataclass(frozen=True)
class CasesStarted:
    case_ids: tuple[str, ...]


@dataclass(frozen=True)
class RowWritten:
    case_id: str
    status: str
    reason: str = ""
    median_ms: float | None = None     # a timed row's; None for every other row
    unstable: bool | None = None


@dataclass(frozen=True)
class PlanDone:
    pass


@dataclass(frozen=True)
class FreshProcess:
    reason: str      # what was refused, after how many jobs


@dataclass(frozen=True)
class Fatal:
    message: str


Event = JobStarting | CasesStarted | RowWritten | PlanDone | FreshProcess | Fatal

ROW_KEYS = tuple(item.name for item in fields(RowWritten))


def to_wire(event: Event) -> dict[str, Any]:
    """The JSON object of ``event`` (the module's docstring)."""
    match event:
        case JobStarting(label):
            return {"job": label}
        case CasesStarted(case_ids):
            return {"start": list(case_ids)}
        case RowWritten():
            return asdict(event)
        case PlanDone():
            return {"plan_done": True}
        case FreshProcess(reason):
            return {"fresh_process": reason}
        case Fatal(message):
            return {"fatal": message}
    raise TypeError(f"not a worker event: {event!r}")


def to_line(event: Event) -> str:
    """The stdout line of ``event``, without its newline."""
    return EVENT_PREFIX + json.dumps(to_wire(event))


def _text(data: dict[str, Any], key: str) -> str:
    if not isinstance(data[key], str):
        raise MalformedEvent(f"{key!r} is not a string")
    return data[key]


def from_wire(data: Any) -> Event:
    """The event of a JSON object; ``MalformedEvent`` where it is none of the kinds."""
    if not isinstance(data, dict):
        raise MalformedEvent("not a JSON object")
    keys = set(data)
    if keys == {"job"}:
        return JobStarting(_text(data, "job"))
    if keys == {"start"}:
        ids = data["start"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise MalformedEvent("'start' is not a list of case ids")
        return CasesStarted(tuple(ids))
    if keys == {"plan_done"}:
        if data["plan_done"] is not True:
            raise MalformedEvent("'plan_done' is not true")
        return PlanDone()
    if keys == {"fresh_process"}:
        return FreshProcess(_text(data, "fresh_process"))
    if keys == {"fatal"}:
        return Fatal(_text(data, "fatal"))
    if keys == set(ROW_KEYS):
        for key in ("case_id", "status", "reason"):
            _text(data, key)
        median, unstable = data["median_ms"], data["unstable"]
        if median is not None and (isinstance(median, bool) or not isinstance(median, (int, float))):
            raise MalformedEvent("'median_ms' is not a number")
        if unstable is not None and not isinstance(unstable, bool):
            raise MalformedEvent("'unstable' is not true or false")
        return RowWritten(**data)
    raise MalformedEvent(f"keys {sorted(keys)} are of no event kind")


def parse(line: str) -> Event | None:
    """The event on a line of a worker's stdout; None for a line that is not an event (the
    framework's own output); ``MalformedEvent``, one line, for an event line that is
    neither JSON nor any kind of event."""
    if not line.startswith(EVENT_PREFIX):
        return None
    text = line[len(EVENT_PREFIX):].strip()
    try:
        return from_wire(json.loads(text))
    except (json.JSONDecodeError, MalformedEvent) as error:
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise MalformedEvent(f"a malformed worker event line ({why}): {text[:200]!r}") from None
