"""The serving suite's watchdog: every case runs in a serving worker (suites/serving/worker.py),
a child process the parent can kill, and each phase of it has a deadline.

A ``serve`` that never returns (a deadlocked framework, a GPU that stopped answering) leaves
LoadGen waiting for its completions forever, and a thread stuck inside a framework's C++
cannot be stopped from Python. So the framework runs in a child: the parent reads its
events (suites/serving/worker.py) with the current phase's deadline as the time limit
(suites/serving/scenarios.py: a LoadGen run's ``max_duration_ms`` plus
``watchdog_margin_s``; preparing and warming up ``setup_timeout_s``). Past it, the parent
kills the worker with every process it started (suites/harness/process.py ``kill_tree``),
writes the failed row the worker announced for that phase ("serve did not return within
N s ...") and starts a fresh worker for the next case, which pays the framework's import
again. A LoadGen run past its deadline whose serves still return is no hang: LoadGen stops
issuing at ``max_duration_ms`` but waits for what it issued (Offline's one query, sized from
the warm-up, or Server's backlog), so the run is ended only once no serve has returned for
``watchdog_margin_s`` past its deadline (the worker's heartbeat says when serves return).
On a busy 2-core host Offline's query of a tiny model outlasted 20 s + 30 s while serving.
A worker that dies mid-case (a segfault, the OOM killer) gives a failed row naming
how it ended and the cause its stderr gives (kept in ``log``; suites/harness/process.py
``cause_in``: a FATAL line, a C++ exception's ``what()``, else the last line). One worker serves the
cases one after another while none hangs, so the framework is imported once per suite."""

from __future__ import annotations

import json
import os
import queue
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from models.measures import GENERATE, SERVE
from suites.harness.process import WorkerProcess, ended, last_words, log_size
from suites.rows.results import CaseKey, Row, Settings
from suites.serving.generate import GenerateConfig
from suites.serving.scenarios import SCENARIOS, ServingConfig, batch_size
from suites.serving.worker import PREFIX

# Seconds a fresh worker may take to import its framework and make the adapter.
READY_TIMEOUT_S = 600.0


class WorkerFatal(RuntimeError):
    """The worker could not start (its framework, its device): the reason, in one line."""


@dataclass(frozen=True)
class Case:
    """A serving case (a model in a scenario) or a generation (no scenario)."""

    model: str
    scenario: str
    config: ServingConfig | GenerateConfig

    @property
    def kind(self) -> str:
        return GENERATE if isinstance(self.config, GenerateConfig) else SERVE

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "scenario": self.scenario,
                "config": asdict(self.config)}


def _how(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    return ended(code)


class Watchdog:
    """The serving worker of one framework and device, started on demand, and the deadlines
    of the case it serves."""

    def __init__(self, framework: str, device: str, threads: int, suite: str, logs: Path,
                 log: Path, python: str = sys.executable):
        self.framework, self.device, self.threads, self.suite = framework, device, threads, suite
        self.logs, self.log, self.python = logs, log, python
        self.worker: WorkerProcess | None = None
        self.env: dict[str, Any] = {}
        self._stderr: IO[bytes] | None = None
        self._log_start = 0     # where the live worker's stderr begins on the log
        self.restarts = 0

    def _event(self, timeout: float) -> dict[str, Any] | None:
        """The worker's next event (None: its stdout closed); ``queue.Empty`` past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.worker.next_line(max(deadline - time.monotonic(), 0.0))
            if line is None:
                return None
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX):])

    def start(self) -> None:
        """A fresh worker, ready to serve; ``WorkerFatal`` where it cannot be."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = log_size(self.log)
        self._stderr = open(self.log, "ab")   # noqa: SIM115 - open while the worker lives
        command = [self.python, "-m", "suites.serving.worker", "--framework", self.framework,
                   "--device", self.device, "--threads", str(self.threads),
                   "--suite", self.suite, "--logs", str(self.logs)]
        self.worker = WorkerProcess(command, dict(os.environ), self._stderr, serve=True)
        try:
            event = self._event(READY_TIMEOUT_S)
        except queue.Empty:
            event = {"kind": "fatal", "reason": f"not ready within {READY_TIMEOUT_S:g} s"}
        if event is None:
            event = {"kind": "fatal", "reason": f"the serving worker {_how(self.worker.wait())} "
                                                f"before it was ready{self._stderr_tail()}"}
        if event.get("kind") != "ready":
            self.stop()
            raise WorkerFatal(event.get("reason", f"unexpected event {event!r}"))
        self.env = event["env"]

    def _stderr_tail(self) -> str:
        words = last_words(self.log, self._log_start)
        return f"; its last words: {words}" if words else ""

    def stop(self) -> None:
        if self.worker is not None:
            if self.worker.alive():
                self.worker.close()
            self.worker = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _kill(self) -> None:
        self.worker.kill()
        self.worker = None
        self._stderr.close()
        self._stderr = None
        self.restarts += 1

    def case_key(self, case: Case) -> CaseKey:
        """The key of the row ``case`` will have (its variant as asked: ``default`` resolved
        by the caller)."""
        settings = Settings(self.framework, self.device, case.config.precision,
                            case.config.variant, self.threads, 1)
        if case.kind == GENERATE:
            return CaseKey(self.suite, case.model, 1, GENERATE, settings)
        scenario = SCENARIOS.get(case.scenario)
        return CaseKey(self.suite, case.model,
                       batch_size(scenario, case.config) if scenario else 0, SERVE, settings,
                       case.scenario)

    def fallback_row(self, case: Case, reason: str, limit: float | None = None) -> dict[str, Any]:
        """The case's failed row where the worker announced none (it died or hung before)."""
        return Row(self.case_key(case), "failed", reason, env=self.env,
                   time_limit_s=limit).to_json()

    def run(self, case: Case, case_file: Path) -> dict[str, Any]:
        """The case's row in its JSON form: the worker's own, or the one its deadline or its
        death makes."""
        if self.worker is None:
            try:
                self.start()
            except WorkerFatal as error:
                return self.fallback_row(case, f"the serving worker could not start: {error}")
        case_file.write_text(json.dumps(case.to_json()))
        began = time.monotonic()
        margin = case.config.watchdog_margin_s
        # The phase: its deadline, whether it serves, when a serve last returned.
        seconds, what, pending = case.config.setup_timeout_s, "the case's setup", None
        due, serving, last = began + seconds, False, began
        event: dict[str, Any] | None = None
        if self.worker.send(case_file):
            while True:
                kill_at = max(due, last + margin) if serving else due
                try:
                    event = self._event(max(kill_at - time.monotonic(), 0.0))
                except queue.Empty:
                    now = time.monotonic()
                    self._kill()
                    if serving:
                        reason = (f"{what} did not return within {now - last:.1f} s, past its "
                                  f"deadline of {seconds:g} s: the watchdog killed the case's "
                                  "process")
                    else:
                        reason = (f"{what} did not return within {seconds:g} s: the watchdog "
                                  "killed the case's process")
                    row = pending or self.fallback_row(case, reason)
                    return {**row, "reason": reason, "time_limit_s": seconds,
                            "wall_s": now - began}
                if event is None or event["kind"] == "row":
                    break
                now = time.monotonic()
                if event["kind"] == "deadline":
                    # Measured from now: the phase starts as its deadline is announced.
                    seconds, what, pending = event["seconds"], event["what"], event["row"]
                    due, serving, last = now + seconds, bool(event.get("serving")), now
                elif event["kind"] == "progress":
                    last = now
        if event is not None:
            return event["row"]
        code = self.worker.wait()
        self.worker = None
        self._stderr.close()
        self._stderr = None
        self.restarts += 1
        row = pending or self.fallback_row(case, "")
        return {**row, "time_limit_s": None, "wall_s": time.monotonic() - began,
                "reason": f"the serving worker {_how(code)} during {what}{self._stderr_tail()}"}
