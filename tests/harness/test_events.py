"""The worker's events (suites/harness/events.py): each kind round-trips through its stdout
line, the JSON on the line is the object the worker has always printed, and a malformed
event line is one line of error."""

from __future__ import annotations

import json

import pytest

from suites.harness.events import (
    EVENT_PREFIX,
    CasesStarted,
    Fatal,
    FreshProcess,
    JobStarting,
    MalformedEvent,
    PlanDone,
    RowWritten,
    parse,
    to_line,
)

CASE = "s/torch/cpu/lenet_tiny/b2/forward/fp32/eager/t1"
EVENTS = [
    JobStarting("lenet_tiny b2 fp32 eager"),
    CasesStarted((CASE, CASE.replace("forward", "gradient"))),
    CasesStarted(()),
    RowWritten(CASE, "ok", "", median_ms=1.25, unstable=False),
    RowWritten(CASE, "oom", "CUDA out of memory (in a fresh process; before that, x)"),
    PlanDone(),
    FreshProcess("RuntimeError: out of memory, in a worker that had run 2 other jobs"),
    Fatal("DeviceUnavailable: no GPU"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_each_kind_round_trips_through_its_line(event):
    line = to_line(event)
    assert line.startswith(EVENT_PREFIX) and "\n" not in line
    assert parse(line) == event
    assert parse(line + "\n") == event      # as the runner reads it off the pipe


def test_the_wire_json_is_the_object_the_worker_has_always_printed():
    # The worker's own json.dumps of the dict it emitted before events were records.
    row = {"case_id": CASE, "status": "ok", "reason": "", "median_ms": 1.25, "unstable": True}
    assert to_line(RowWritten(CASE, "ok", "", 1.25, True)) == EVENT_PREFIX + json.dumps(row)
    failed = {"case_id": CASE, "status": "failed", "reason": "boom", "median_ms": None,
              "unstable": None}
    assert to_line(RowWritten(CASE, "failed", "boom")) == EVENT_PREFIX + json.dumps(failed)
    assert to_line(JobStarting("m b2 fp32 eager")) == EVENT_PREFIX + '{"job": "m b2 fp32 eager"}'
    assert to_line(CasesStarted((CASE,))) == EVENT_PREFIX + json.dumps({"start": [CASE]})
    assert to_line(PlanDone()) == EVENT_PREFIX + '{"plan_done": true}'
    assert to_line(FreshProcess("x")) == EVENT_PREFIX + '{"fresh_process": "x"}'
    assert to_line(Fatal("y")) == EVENT_PREFIX + '{"fatal": "y"}'


def test_a_line_without_the_prefix_is_no_event():
    assert parse("preparing lenet_tiny\n") is None
    assert parse(json.dumps({"fatal": "x"})) is None


@pytest.mark.parametrize("text", [
    '{"fatal": "cut off',                                      # not JSON
    '["plan_done"]',                                           # not an object
    '{"plan_don": true}',                                      # no kind
    '{"start": "one id"}',                                     # a kind, a wrong type
    '{"case_id": "c", "status": "ok", "reason": "", "median_ms": "1", "unstable": null}',
    '{"case_id": "c", "status": "ok", "reason": ""}',          # a row with keys missing
])
def test_a_malformed_event_line_is_one_line_of_error(text):
    with pytest.raises(MalformedEvent) as raised:
        parse(EVENT_PREFIX + text + "\n")
    message = str(raised.value)
    assert message.startswith("a malformed worker event line (")
    assert "\n" not in message
    assert text[:20] in message


def test_events_are_frozen():
    with pytest.raises(AttributeError):
        RowWritten(CASE, "ok").status = "failed"
