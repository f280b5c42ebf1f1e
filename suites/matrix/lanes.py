"""A matrix on several GPUs of one host (``python -m suites matrix --gpus N``): one lane per
GPU, each taking the next task (one framework on one suite, ``suites/matrix/lane_plan.py``) when
it is free, each task run by a matrix of its own in a child process.

The child is the one-GPU matrix unchanged (its pool's one live GPU worker, the wall pass
then the device pass in one worker, resume, budget, cost log), confined before it starts
anything: ``CUDA_VISIBLE_DEVICES`` names the lane's GPU and ``--cpus`` its CPUs, which every
worker, compiler job and profiler it starts inherits. Its output goes to the lane's log,
``<out>/matrix/<host>/lane-<gpu>.log``; this process prints when each task starts and ends.
The float64 truth of every suite is computed first, in one pool on all of this process's
CPUs, so that no lane measures beside it.

Every row says it was measured in a lane (``env.matrix_lanes``, ``env.cuda_visible_devices``,
``env.gpu_uuid``, ``env.cpu_affinity``): the lanes share the host's memory, PCIe and power,
so ``python -m suites compare`` against a one-lane run is how to see what that costs.

Stopping: Ctrl-C or SIGTERM is passed to each running child once (they are in sessions of
their own, so a terminal's Ctrl-C reaches this process only), and each stops as the
one-GPU matrix does, its finished rows kept; a child dies with this process if it is
killed (``PR_SET_PDEATHSIG``), its workers with it. The same command continues the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from suites.harness.runner import BUDGET_EXIT
from suites.harness.spec import SuiteError
from suites.instruments.environment import MATRIX_LANES
from suites.matrix.estimate import minutes
from suites.matrix.lane_plan import Lane, Schedule, Task, cpu_list_text, next_task, parse_cpu_list

ROOT = Path(__file__).resolve().parents[2]
INTERRUPTED = 130


def confine(cpus_text: str) -> tuple[int, ...]:
    """``--cpus``: pin this process (and so everything it starts) to these CPUs."""
    cpus = parse_cpu_list(cpus_text)
    allowed = os.sched_getaffinity(0)
    outside = [cpu for cpu in cpus if cpu not in allowed]
    if outside:
        raise SuiteError(f"--cpus {cpus_text}: CPU {cpu_list_text(tuple(outside))} is not "
                         f"among this process's CPUs ({cpu_list_text(tuple(sorted(allowed)))})")
    os.sched_setaffinity(0, cpus)
    return cpus


@contextlib.contextmanager
def confined(cpus: tuple[int, ...]) -> Iterator[None]:
    """This thread on ``cpus`` for a while: a plan made inside sees the host as a lane
    does (a GPU job's thread count is its process's CPUs)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def describe_lanes(lanes: list[Lane], tasks: list[Task], schedule: Schedule,
                   truth_seconds: float) -> list[str]:
    lines = [f"{len(lanes)} lanes, one per GPU, each with CPUs of its own: "
             + ", ".join(f"{lane.name} CPUs {cpu_list_text(lane.cpus)}" for lane in lanes)]
    for lane, taken in zip(lanes, schedule.lanes):
        spent = sum(tasks[n].seconds for n in taken)
        lines.append(f"  {lane.name}: {minutes(spent)}: "
                     + (", ".join(tasks[n].label for n in taken) or "nothing"))
    unknown = sum(task.unknown for task in tasks)
    work = sum(task.seconds for task in tasks)
    lines.append(f"estimated with {len(lanes)} lanes: {minutes(schedule.seconds + truth_seconds)}"
                 f" ({minutes(work)} of work"
                 + (f", float64 truth {minutes(truth_seconds)} first" if truth_seconds else "")
                 + (f"; {unknown} cases without an estimate" if unknown else "") + ")")
    return lines


@dataclass(frozen=True)
class LaneOutcome:
    outcome: str        # "done", "budget", "interrupted", "errors"
    code: int


class LaneRun:
    """The lanes' run: a thread per lane hands tasks to child matrices until none is left."""

    def __init__(self, lanes: list[Lane], tasks: list[Task], rank: list[float],
                 command: Callable[[Task, Lane, float | None], list[str]], log_folder: Path,
                 deadline: float | None, say: Callable[[str], None], console: Console):
        self.lanes, self.tasks, self.rank = lanes, tasks, rank
        self.command, self.log_folder = command, log_folder
        self.deadline, self.say, self.console = deadline, say, console
        self.pending = set(range(len(tasks)))
        self.done: set[int] = set()
        self.ended: set[int] = set()          # ran and did not finish (budget, error, stop)
        self.failed_frameworks: set[str] = set()
        self.running: dict[int, subprocess.Popen | None] = {}   # None: taken, not started
        self.codes: list[int] = []
        self.stopping = False
        self.out_of_time = False
        self.cond = threading.Condition()

    # --- which task next --------------------------------------------------------------

    def take(self) -> int | None:
        with self.cond:
            while True:
                # A task stopped by the budget found its next job longer than the time left:
                # the work still pending waits for the next run, as the one-GPU matrix
                # stops at its first such job, rather than lanes starting tasks that would
                # only start a worker and stop.
                if self.stopping or self.out_of_time:
                    return None
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    self.out_of_time = True
                    return None
                blocked = {n for n in self.pending
                           if self.tasks[n].framework in self.failed_frameworks
                           or any(m in self.ended for m in self.tasks[n].needs)}
                ready = [n for n in self.pending - blocked
                         if all(m in self.done for m in self.tasks[n].needs)]
                if ready:
                    chosen = next_task(ready, self.rank)
                    self.pending.discard(chosen)
                    # Running from now on, so that another lane waits for it rather than
                    # finding nothing ready, nothing running, and leaving.
                    self.running[chosen] = None
                    return chosen
                if not self.running:
                    return None       # nothing left that could become ready
                self.cond.wait(timeout=1.0)

    def finish(self, n: int, code: int) -> None:
        with self.cond:
            self.running.pop(n, None)
            self.codes.append(code)
            if code == 0:
                self.done.add(n)
            else:
                self.ended.add(n)
                if code == BUDGET_EXIT:
                    self.out_of_time = True
                elif code == INTERRUPTED:
                    self.stopping = True
                else:
                    self.failed_frameworks.add(self.tasks[n].framework)
            self.cond.notify_all()

    # --- running -------------------------------------------------------------------------

    def run_task(self, lane: Lane, n: int, progress, row) -> int:
        task = self.tasks[n]
        budget_min = None
        if self.deadline is not None:
            budget_min = (self.deadline - time.monotonic()) / 60
            if budget_min <= 0:
                return BUDGET_EXIT
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": lane.gpu, MATRIX_LANES: str(len(self.lanes)),
               "PYTHONUNBUFFERED": "1"}
        log = self.log_folder / f"lane-{lane.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        estimate = minutes(task.seconds) + (f", {task.unknown} cases without estimate"
                                            if task.unknown else "")
        progress.update(row, description=f"{lane.name}: {task.label} (planned {estimate})")
        self.say(f"{lane.name}: {task.label} started: {task.cases} cases (planned {estimate})")
        with log.open("ab") as handle:
            handle.write(f"\n=== {task.label} on {lane.name} ===\n".encode())
            handle.flush()
            with self.cond:
                if self.stopping:
                    return INTERRUPTED
                proc = subprocess.Popen(self.command(task, lane, budget_min), cwd=ROOT,
                                        stdin=subprocess.DEVNULL, stdout=handle,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
                self.running[n] = proc
            code = proc.wait()
        words = {0: "done", BUDGET_EXIT: "stopped by the budget",
                 INTERRUPTED: "interrupted"}.get(code, f"failed (exit {code}; see {log})")
        self.say(f"{lane.name}: {task.label} {words} after {minutes(time.monotonic() - started)}")
        progress.update(row, description=f"{lane.name}: idle")
        return code

    def lane_loop(self, lane: Lane, progress, overall, row) -> None:
        while (n := self.take()) is not None:
            code = self.run_task(lane, n, progress, row)
            self.finish(n, code)
            progress.advance(overall)

    def interrupt(self, signum: int) -> None:
        with self.cond:
            self.stopping = True
            for proc in self.running.values():
                if proc is not None and proc.poll() is None:
                    with contextlib.suppress(OSError):
                        proc.send_signal(signum)
            self.cond.notify_all()

    def run(self) -> LaneOutcome:
        received = {"signal": signal.SIGINT}

        def on_sigterm(signum, frame):
            received["signal"] = signal.SIGTERM
            raise KeyboardInterrupt
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        try:
            with Progress(*columns, console=self.console, transient=False) as progress:
                overall = progress.add_task("tasks", total=len(self.tasks))
                threads = []
                for lane in self.lanes:
                    row = progress.add_task(f"{lane.name}: idle", total=None)
                    threads.append(threading.Thread(target=self.lane_loop,
                                                    args=(lane, progress, overall, row),
                                                    name=lane.name, daemon=True))
                for thread in threads:
                    thread.start()
                try:
                    while any(thread.is_alive() for thread in threads):
                        for thread in threads:
                            thread.join(timeout=0.5)
                except KeyboardInterrupt:
                    self.say("stopping: each lane's running task is asked to stop")
                    self.interrupt(received["signal"])
                    for thread in threads:
                        thread.join()
                    self.stopping = True
        finally:
            signal.signal(signal.SIGTERM, previous)
        if self.stopping:
            return LaneOutcome("interrupted", INTERRUPTED)
        if any(code not in (0, BUDGET_EXIT, INTERRUPTED) for code in self.codes):
            return LaneOutcome("errors", 2)
        if self.out_of_time or self.pending:
            return LaneOutcome("budget", BUDGET_EXIT)
        return LaneOutcome("done", 0)
