"""``python -m suites matrix``: every framework × suite on one device in one command, with a
plan up front, resumable, within a time budget.

    python -m suites matrix --device gpu                       # every GPU suite, every framework
    python -m suites matrix --device gpu --frameworks torch jax --suites default-gpu li2016
    python -m suites matrix --device gpu --budget 9            # stop cleanly within 9 minutes
    python -m suites matrix --device cpu --plan                # print the plan and stop
    python -m suites matrix --device gpu --costs               # minutes per suite and framework

* **Plan** (``suites/matrix/plan.py``): the cases of every suite × framework, those already
  done, those an earlier suite's rows cover (``suites/harness/reuse.py``), those left, and the
  minutes they should take on this device model (``suites/matrix/estimate.py``), printed before
  anything runs.
* **Resumable**: rows are appended and fsynced per case, each suite × framework runs with
  ``--resume``, so the same command run again continues where a kill, a lost host or the
  budget stopped it, with no row lost or written twice. Workers die with their runner, and
  a lock keeps two matrix runs off one output folder.
* **Order** (``suites/matrix/plan.py`` ``stages``): the first suite given (the
  comparison: by default the device's default suite) for every framework, then each
  framework's other suites; within a stage frameworks in the order given, each
  framework's suites in the order given; on a GPU its wall pass over the stage's suites
  (the runner's "wall" phase: timed measures and fingerprints), then its device pass (the
  "device" phase: device time, profiles, counters, set against the wall rows already on
  disk). The pool keeps one live GPU worker at a time, since an idle one keeps GPU memory
  (suites/harness/pool.py), so this order starts one worker per framework and stage (the
  device pass goes on in the wall pass's worker, after its last wall sample, unless a
  framework's registry entry says own_device_process) where suite by suite the framework
  and phase would change at every item. The CPU runs in the same order, one pass
  ("all"): a framework's workers are closed before the next framework's start, so no
  idle process of another framework holds host memory beside the one being measured, and
  plans, budget stops and resuming read alike on both devices.
* **Budget** (``--budget MINUTES``): work runs in that order; a job whose estimate
  would pass the deadline is not started, one still running at the deadline is stopped
  with its cases left pending. The exit code is then 75 and the command says what is
  left; run again, it goes on where it stopped (between a wall pass and its device pass:
  with the device pass). A stopped run has measured the comparison suite for every
  framework before any framework's other suites.
* **Costs** (``suites/matrix/log.py``): what each suite × framework took (wall, worker
  starts, first calls, profiles, counters, fingerprints; on a GPU one record per pass)
  and what the float64 truth took.
* **Rounds** (``--rounds N``): every case measured in N rounds of fresh worker processes
  and merged into one row whose interval covers a re-run in other processes
  (``suites/harness/rounds.py``); each round file resumes like the results file.
* **Workers** (``suites/harness/pool.py``): one worker per framework interpreter, device,
  thread setting, phase, worker environment and round, started once and handed every
  suite that needs it (a TensorFlow worker takes 13-15 s to start on an H100); jobs with
  a compile-cache setting still get processes of their own (on a GPU the pass's idle
  worker is closed before each, and started again after; they run before the suite's
  other jobs, so the worker started after them keeps its jobs for the device pass). With
  ``--rounds`` on a GPU a suite's rounds follow each other within the wall pass, and each
  round's worker closes the one before, so every suite starts a wall worker per round
  (the device pass, round 1's only, still starts one).
* **Caches**: each framework's persistent compilation cache (JAX's, TensorFlow's XLA
  cache, inductor's) lives in ``$DLBENCH_COMPILE_CACHE`` (default
  ``~/.cache/dlbench/compile``) unless ``--compile-cache off``, so a re-run on the same
  host compiles nothing; the first run still compiles everything cold, on purpose, and
  its rows record that (JAX rows' ``compile_events`` say whether a first call hit the
  cache). The float64 truth is cached as before (``models/truth.py``).

* **Several GPUs** (``--gpus N``): one lane per GPU, each with CPUs of its own, each task
  (one framework on one suite) run by this matrix in a child process confined to its
  lane (``suites/matrix/lane_plan.py``, ``suites/matrix/lanes.py``); ``--cpus`` confines a one-GPU
  matrix the same way, for the control run beside it.

Each framework runs in its own interpreter: its nox virtualenv where one exists
(``.nox/<framework>_<device>``), else this one, or ``--python FRAMEWORK=PATH``. A framework
that interpreter lacks is listed as not run, and the matrix goes on with the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from adapters.registry import load_registry
from models.zoo import get_model
from parallel.topology import interconnect
from suites.harness.pool import WorkerPool
from suites.harness.reuse import REUSABLE_STATUSES, reused_row
from suites.harness.rounds import RoundsRunner
from suites.harness.runner import BUDGET_EXIT, Budget, Runner, RunRequest, case_key, phases
from suites.harness.spec import Job, SuiteError
from suites.instruments.environment import dlbench_commit, host_id
from suites.matrix import log as matrix_log
from suites.matrix.compile_cache import cache_env, cache_view, record_host
from suites.matrix.estimate import History, load_history, minutes
from suites.matrix.lane_plan import (
    Lane,
    Schedule,
    Task,
    choose_gpus,
    cpu_list_text,
    gpu_cpu_affinity,
    make_lanes,
    make_tasks,
    priorities,
    sibling_groups,
    simulate,
    visible_gpus,
)
from suites.matrix.lanes import LaneRun, confined, describe_lanes
from suites.matrix.plan import (
    DEFAULT_SUITES,
    ROOT,
    Item,
    Plan,
    case_computation,
    check_frameworks,
    describe,
    keeps_jobs,
    make_plan,
    python_table,
    resolve_suites,
    this_machine,
)
from suites.rows.results import OutputError, ResultsFile, read_rows
from suites.stats.between_runs import NO_EARLIER_RUNS, EarlierRuns, load_earlier
from suites.truth.check import fill_cache, finished_case_ids

console = Console(stderr=True)


def say(text: str) -> None:
    """One plain line on stderr (no markup, no wrapping of long paths)."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)

# Seconds kept back from a budget for stopping a worker and writing the logs.
STOP_MARGIN_S = 10.0


@dataclass(frozen=True)
class MatrixRequest:
    device: str
    frameworks: tuple[str, ...]
    suites: tuple[str, ...]
    out: Path
    seed: int = 0
    budget_min: float | None = None
    pythons: tuple[str, ...] = ()        # "FRAMEWORK=INTERPRETER"
    reuse: bool = True
    compile_cache: str = ""              # a folder, "" for the default, "off"
    history: tuple[Path, ...] = ()       # more folders of earlier rows for the estimates
    plan_only: bool = False
    costs_only: bool = False
    case_timeout_s: float | None = None
    device_name: str = ""                # plan for this device model instead of this machine's
    rounds: int = 1                      # rounds of separate processes per case (suites/harness/rounds.py)
    gpus: str = ""                       # --gpus: a count or a list; one lane per GPU (matrix/lanes.py)
    lane_of: int = 0                     # a lane's matrix: the pid of the matrix that started it
    # Earlier runs of this machine model whose spread of each case widens its interval
    # (--earlier: suites/stats/between_runs.py)
    earlier: tuple[Path, ...] = ()


def default_frameworks(device: str) -> tuple[str, ...]:
    return tuple(name for name, entry in load_registry().items() if device in entry.devices)


def compile_cache_env(request: MatrixRequest, framework: str) -> dict[str, str]:
    """The worker environment that points a framework's persistent compilation cache at
    the matrix's cache folder (nothing with ``--compile-cache off``)."""
    return cache_env(framework, request.device, request.compile_cache)


@contextlib.contextmanager
def exclusive(out: Path, host: str) -> Iterator[None]:
    """One matrix run at a time writes to an output folder (for this host)."""
    path = out / "matrix" / host / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise SuiteError(f"another matrix run is writing to {out} (pid "
                             f"{handle.read().strip() or 'unknown'}); wait for it or use "
                             f"another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield


class Matrix:
    def __init__(self, request: MatrixRequest):
        self.request = request
        self.frameworks = check_frameworks(list(request.frameworks
                                                or default_frameworks(request.device)),
                                           request.device)
        self.suites = resolve_suites(list(request.suites or DEFAULT_SUITES[request.device]))
        self.pythons = python_table(self.frameworks, request.device, list(request.pythons))
        if request.budget_min is not None and not request.budget_min > 0:
            raise SuiteError(f"--budget must be a positive number of minutes, got "
                             f"{request.budget_min:g}")
        self.machine = this_machine(request.device, request.device_name)
        self.host = host_id()
        self.log = matrix_log.log_path(request.out, self.host, request.device)
        folders = [request.out, *(request.history or [ROOT / "published"])]
        self.records = matrix_log.load([self.log, *folders[1:]])
        self.history: History = load_history(folders, self.machine)
        self.earlier: EarlierRuns = NO_EARLIER_RUNS
        if request.earlier and not (request.plan_only or request.costs_only):
            self.earlier = load_earlier(request.earlier, self.machine)
            say(self.earlier.describe(self.machine.label, request.earlier))
        self.caches = {name: cache_view(compile_cache_env(request, name), self.host, name)
                       for name in self.frameworks}
        self.lanes: list[Lane] = self.make_lanes() \
            if request.gpus and not request.costs_only else []

    def make_lanes(self) -> list[Lane]:
        if self.request.device != "gpu":
            raise SuiteError("--gpus runs GPU lanes: use it with --device gpu")
        allowed = tuple(sorted(os.sched_getaffinity(0)))
        visible = visible_gpus()
        if not visible and self.request.plan_only and self.request.gpus.isdigit():
            # Planning for GPUs this machine lacks (with --device-name): lanes on its CPUs.
            return [Lane(str(n), allowed) for n in range(max(1, int(self.request.gpus)))]
        gpus = choose_gpus(self.request.gpus, visible)
        topology = (interconnect() or {}).get("matrix", "")
        return make_lanes(gpus, allowed, gpu_cpu_affinity(topology),
                          sibling_groups(allowed))

    def device_names(self) -> list[str]:
        """This device model, then the other GPU models whose rows the estimates fall back
        on (suites/matrix/estimate.py): where worker start-ups and the float64 truth's rate come
        from when this model has no cost log yet."""
        fallback = self.history.fallback
        return [self.machine.name, *(fallback.models if fallback is not None else ())]

    def first_known(self, figure) -> float | None:
        return next((found for name in self.device_names()
                     if (found := figure(name)) is not None), None)

    def plan(self) -> Plan:
        # With lanes, planned as a lane sees the host: a GPU job's thread count, and so
        # its case id, is its process's CPUs.
        with confined(self.lanes[0].cpus) if self.lanes else contextlib.nullcontext():
            return self.plan_here()

    def plan_here(self) -> Plan:
        starts = {f: self.first_known(lambda name, f=f: matrix_log.worker_start_s(
            self.records, f, name)) for f in self.frameworks}
        return make_plan(self.request.device, self.frameworks, self.suites, self.request.out,
                         self.request.seed, self.pythons, self.history, self.machine,
                         self.request.reuse, starts,
                         self.first_known(lambda name: matrix_log.truth_rate(self.records, name)),
                         self.caches)

    def run(self) -> int:
        if self.request.costs_only:
            return self.print_costs()
        plan = self.plan()
        for line in describe(plan):
            say(line)
        if self.lanes:
            tasks = make_tasks(plan)
            schedule = simulate(tasks, len(self.lanes))
            for line in describe_lanes(self.lanes, tasks, schedule, plan.truth_seconds or 0.0):
                say(line)
        if self.request.plan_only:
            return 0
        if self.request.lane_of:        # the matrix that started this one holds the lock
            return self.execute(plan)
        with exclusive(self.request.out, self.host):
            self.log_unlogged_rows(plan)
            if self.lanes:
                return self.execute_lanes(plan, tasks, schedule)
            return self.execute(plan)

    def log_unlogged_rows(self, plan: Plan) -> None:
        """Log the rows an earlier invocation wrote but could not log, killed before it
        got there (suites/matrix/log.py ``unlogged_item``), so that the cost log, and the
        minutes ``--costs`` prints from it, cover every row of a run killed and resumed."""
        records = matrix_log.load([self.log])
        found = 0
        for item in plan.items:
            if item.unavailable or not item.results.exists():
                continue
            rows = [row for row in read_rows(item.results).values()
                    if "reused_from" not in row and "measure" in row
                    and phases(item.device, [row["measure"]])[0][0] == item.phase]
            record = matrix_log.unlogged_item(records, rows, item.suite, item.framework,
                                              item.device, self.machine.name, item.phase)
            if record is not None:
                matrix_log.append(self.log, record.record())
                found += record.measured
        if found:
            say(f"costs: {found} rows an earlier run wrote but did not log (it was killed) "
                f"are logged now, with their own time")

    def print_costs(self) -> int:
        records = matrix_log.load([self.log])
        if not records:
            say(f"no matrix cost log at {self.log}")
            return 0
        header, rows = matrix_log.minutes_table(records)
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            say("  ".join(str(c).rjust(w) for c, w in zip(row, widths)))
        return 0

    def execute(self, plan: Plan) -> int:
        started = time.monotonic()
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        deadline = started + self.request.budget_min * 60 - STOP_MARGIN_S \
            if self.request.budget_min else None
        outcome, code = "done", 0
        skip: set[str] = set()      # frameworks whose worker could not start at all
        self.fill_truth(plan)
        # One worker per key for the whole run, handed from suite to suite; closed however
        # the run ends (done, budget, error, Ctrl-C).
        with WorkerPool() as pool:
            framework = None
            for item in plan.items:
                if item.unavailable or item.framework in skip:
                    continue
                if item.framework != framework:
                    # The items run framework by framework within a stage: no worker of
                    # the one before is needed before the next stage, and none keeps
                    # memory beside the next one's.
                    pool.close()
                    framework = item.framework
                if deadline is not None and time.monotonic() >= deadline:
                    outcome, code = "budget", BUDGET_EXIT
                    break
                result = self.run_item(item, deadline, pool)
                if result == BUDGET_EXIT:
                    outcome, code = "budget", BUDGET_EXIT
                    break
                if result == 130:
                    outcome, code = "interrupted", 130
                    break
                if result:
                    skip.add(item.framework)
                    outcome, code = "errors", 2
        matrix_log.append(self.log, {
            "kind": "run", "started_at": started_at, "commit": dlbench_commit(),
            "device": self.request.device, "device_name": self.machine.name,
            "wall_s": round(time.monotonic() - started, 3), "budget_min": self.request.budget_min,
            "stopped": outcome, "estimated_s": round(plan.seconds(), 1),
            **({"lane": os.environ.get("CUDA_VISIBLE_DEVICES")} if self.request.lane_of else {})})
        planned = "no estimate" if plan.estimate.cases and \
            plan.estimate.unknown == plan.estimate.cases else minutes(plan.seconds())
        say(f"matrix {outcome} after {minutes(time.monotonic() - started)} (planned: {planned}); "
            f"costs: {self.log}")
        if outcome != "done":
            self.print_left()
        return code

    def execute_lanes(self, plan: Plan, tasks: list[Task], schedule: Schedule) -> int:
        """The plan's tasks over the lanes (suites/matrix/lanes.py), the float64 truth of every
        suite first, on all of this process's CPUs."""
        started = time.monotonic()
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        deadline = started + self.request.budget_min * 60 - STOP_MARGIN_S \
            if self.request.budget_min else None
        self.fill_truth(plan)
        run = LaneRun(self.lanes, tasks, priorities(tasks), self.lane_command,
                      self.log.parent, deadline, say, console)
        outcome = run.run()
        estimated = schedule.seconds + (plan.truth_seconds or 0.0)
        matrix_log.append(self.log, {
            "kind": "run", "started_at": started_at, "commit": dlbench_commit(),
            "device": self.request.device, "device_name": self.machine.name,
            "wall_s": round(time.monotonic() - started, 3), "budget_min": self.request.budget_min,
            "stopped": outcome.outcome, "estimated_s": round(estimated, 1),
            "lanes": [{"gpu": lane.gpu, "cpus": cpu_list_text(lane.cpus)} for lane in self.lanes]})
        say(f"matrix {outcome.outcome} after {minutes(time.monotonic() - started)} on "
            f"{len(self.lanes)} lanes (planned: {minutes(estimated)}); costs: {self.log}; "
            f"each lane's output: {self.log.parent}/lane-*.log")
        if outcome.outcome != "done":
            self.print_left()
        return outcome.code

    def lane_command(self, task: Task, lane: Lane, budget_min: float | None) -> list[str]:
        """The matrix a lane runs for one task: this one's settings, the task's framework
        and suites, the lane's CPUs (its GPU comes in CUDA_VISIBLE_DEVICES)."""
        request = self.request
        command = [sys.executable, "-m", "suites", "matrix", "--device", request.device,
                   "--frameworks", task.framework, "--suites", *task.sources,
                   "--out", str(request.out), "--seed", str(request.seed),
                   "--cpus", cpu_list_text(lane.cpus), "--lane-of", str(os.getpid()),
                   "--rounds", str(request.rounds)]
        if request.compile_cache:
            command += ["--compile-cache", request.compile_cache]
        command += [f"--python={spec}" for spec in request.pythons
                    if spec.partition("=")[0] == task.framework]
        if not request.reuse:
            command.append("--no-reuse")
        if request.history:
            command += ["--history", *map(str, request.history)]
        if request.earlier:
            command += ["--earlier", *map(str, request.earlier)]
        if request.case_timeout_s is not None:
            command += ["--case-timeout", str(request.case_timeout_s)]
        if request.device_name:
            command += ["--device-name", request.device_name]
        if budget_min is not None:
            command += ["--budget", f"{budget_min:.3f}"]
        return command

    def print_left(self) -> None:
        left = [item for item in self.plan().items if item.to_run or item.reusable]
        if not left:
            return
        say("left (run the same command again to continue):")
        for item in left:
            say(f"  {item.label}: {len(item.to_run)} to run "
                f"({item.estimate.text()}), {len(item.reusable)} to copy")

    def fill_truth(self, plan: Plan) -> None:
        """The float64 truth of every suite the plan runs, before any framework: one pool
        for all of them (suites/truth/pool.py), so that no suite's largest job leaves the
        CPUs idle while the next suite waits (a pool per suite took 2.2 of the 18.8
        minutes of h200x4-2026-11-kept (at 2efa0ce) on its 64 cores: each suite waited for
        its largest job, its pool at most 4 processes wide)."""
        pairs = list(plan.truth_pairs)     # every available item's, and not cached yet
        if not pairs:
            return
        suites = list(dict.fromkeys(item.suite for item in plan.items if not item.unavailable))
        started = time.monotonic()
        fill_cache(pairs, self.request.seed, say)
        from models import truth as truth_module
        matrix_log.append(self.log, {
            "kind": "truth", "suite": " ".join(suites), "pairs": len(pairs),
            "gflop": round(sum(truth_module.cost_gflop(get_model(m), b) for m, b in pairs), 1),
            "seconds": round(time.monotonic() - started, 3), "device_name": self.machine.name,
            "commit": dlbench_commit()})

    def copy_reused(self, item: Item) -> int:
        """Write the rows an earlier suite measured for this item's reusable cases."""
        if not item.reusable:
            return 0
        results = ResultsFile(item.results)
        done = finished_case_ids(results.path)
        sources: dict[Path, dict] = {}
        copied = 0
        for case, candidates in item.reusable:
            if case.case_id in done:
                continue
            for source in candidates:
                rows = sources.setdefault(source.results, read_rows(source.results))
                row = rows.get(source.case_id)
                if row is not None and row.get("status") in REUSABLE_STATUSES:
                    results.append_json(reused_row(row, item.suite, case.case_id))
                    copied += 1
                    break
        return copied

    def estimate_job(self, item: Item):
        def estimate(job: Job, names: list[str]) -> float | None:
            found = []
            for name in names:
                case_id = case_key(item.suite, item.framework, item.device, job, name).id()
                computation = case_computation(item.framework, item.device, job, name)
                found.append(self.history.case_seconds(
                    case_id, computation, item.device, self.caches.get(item.framework),
                    keeps_jobs(item.framework, item.device))[0])
            known = [f for f in found if f is not None]
            return sum(known) if known else None
        return estimate

    def run_item(self, item: Item, deadline: float | None, pool: WorkerPool) -> int:
        started = time.monotonic()
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        before = set(read_rows(item.results)) if item.results.exists() else set()
        reused = self.copy_reused(item)
        worker_env = compile_cache_env(self.request, item.framework)
        record_host(worker_env, self.host, item.framework)
        request = RunRequest(item.source, item.framework, item.device, self.request.out,
                             resume=True, seed=self.request.seed,
                             case_timeout_s=self.request.case_timeout_s, python=item.python,
                             worker_env=worker_env, phases=(item.phase,))
        start = self.first_known(lambda name: matrix_log.worker_start_s(
            self.records, item.framework, name))
        budget = Budget(deadline, self.estimate_job(item), start or 0.0) \
            if deadline is not None else None
        code = 0
        runner = None
        try:
            runner = RoundsRunner(request, self.request.rounds, budget, pool, self.earlier) \
                if self.request.rounds > 1 or self.earlier.centres \
                else Runner(request, budget, pool=pool)
            if runner.total:
                code = runner.run()
        except KeyboardInterrupt:
            code = 130
        except (SuiteError, OutputError) as error:
            say(f"error: {item.suite} {item.framework}: {error}")
            code = 2
        new_rows = [row for case_id, row in read_rows(item.results).items()
                    if case_id not in before]
        measured = [row for row in new_rows if "reused_from" not in row]
        spent = matrix_log.rows_cost(measured)
        stopped = {0: "done", BUDGET_EXIT: "budget", 130: "interrupted"}.get(code, "error")
        matrix_log.append(self.log, matrix_log.ItemCost(
            item.suite, item.framework, item.device, self.machine.name, dlbench_commit(),
            started_at, round(time.monotonic() - started, 3),
            len(runner.worker_start_s) if runner else 0,
            round(sum(runner.worker_start_s), 3) if runner else 0.0,
            len(measured), reused, spent.get("first_calls_s", 0.0),
            spent.get("profile_s", 0.0), spent.get("counters_s", 0.0),
            spent.get("fingerprint_s", 0.0), stopped, spent.get("device_time_s", 0.0),
            item.phase).record())
        return code
