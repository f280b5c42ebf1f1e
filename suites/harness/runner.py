"""The runner: expands a suite for one framework and device, runs it in one worker process
per thread setting, shows progress, and survives what a case can do to its process.

* ``--resume`` skips every case already in the results file.
* A worker that dies (a segfault, the kernel's OOM killer) leaves a ``failed`` row for the
  measurements it had in flight; the runner starts a new worker for the rest.
* A job that runs out of device memory in a worker that ran other jobs first goes on in a
  fresh worker (suites/harness/worker.py says why); only there does an ``oom`` row stand.
* A case (its build plus one measure) that runs past the suite's ``case_timeout_s`` (or
  ``--case-timeout``) becomes a ``timeout`` row; the worker's whole process tree is killed
  and a fresh worker goes on with the rest.
* An output location that cannot be created or written (under a regular file, read-only,
  a full disk) is one line on stderr and exit 2; finished rows stay intact.
* Ctrl-C (or SIGTERM) stops at once; every finished row is already on disk.
* A ``Budget`` (``python -m suites matrix --budget``) stops the run cleanly between jobs
  when the next job's estimated time would pass the deadline, and kills a job still
  running at the deadline; its cases stay pending for the next run (exit code
  ``BUDGET_EXIT``).
* Given a ``WorkerPool`` (suites/harness/pool.py: the matrix passes one to every runner),
  a plan goes to the live worker of its key where one waits, and the worker goes back
  once the plan is done; a worker that died, timed out, was stopped by the budget or
  interrupted is killed and never reused. Jobs with a compilation-cache setting always
  get a process of their own. On a GPU no idle worker of another key stays beside the
  one that runs (the pool closes them first: suites/harness/pool.py says why).
* ``RunRequest.phases`` runs some of the phases only: the matrix runs a framework's wall
  phase over all its suites, then its device phase (suites/matrix/run.py).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from adapters.registry import FrameworkEntry, load_registry
from models.measures import COUNTERS
from suites.harness.events import (
    CasesStarted,
    Fatal,
    FreshProcess,
    JobStarting,
    MalformedEvent,
    PlanDone,
    RowWritten,
    parse,
)
from suites.harness.job import WorkerJob
from suites.harness.pool import GPU, WorkerKey, WorkerPool
from suites.harness.process import WorkerProcess, ended, last_words, log_size
from suites.harness.spec import (
    Job,
    SuiteError,
    check_case_timeout,
    expand,
    load_suite,
    resolve_suite_path,
    suggest,
)
from suites.harness.worker import FRESH_PROCESS_EXIT, PARENT_PID, Plan
from suites.instruments.environment import host_environment, host_id, nvidia_smi, physical_cores, usable_cpus
from suites.rows.results import (
    DEVICE_PHASE,
    DEVICE_TIME,
    FINGERPRINT,
    CaseKey,
    OutputError,
    ResultsFile,
    Row,
    Settings,
    read_rows,
)
from suites.truth.check import fill_cache, finished_case_ids

console = Console(stderr=True)
# The exit code of a run that a Budget stopped (EX_TEMPFAIL: run it again to go on).
BUDGET_EXIT = 75


@dataclass(frozen=True)
class RunRequest:
    suite: str
    framework: str
    device: str
    out: Path
    resume: bool = False
    seed: int = 0
    case_timeout_s: float | None = None   # overrides the suite's case_timeout_s
    # Only these of the suite's models ("--models"; none: all of them), so that one suite
    # can be shared out over several GPUs or hosts, each running some of its networks.
    models: tuple[str, ...] = ()
    # The interpreter that runs the workers ("" = this one): the matrix runs each
    # framework in its own virtualenv while the runner itself needs none.
    python: str = ""
    # Added to the workers' environment (a persistent compilation cache's location).
    worker_env: dict[str, str] = field(default_factory=dict)
    # The phases to run (device_phases(): "all" on a CPU, "wall" and "device" on a GPU),
    # none meaning every one: the matrix runs a framework's wall phase over all its
    # suites before its device phase (suites/matrix/run.py). Counts, progress and resuming
    # cover the chosen phases' measures only.
    phases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Budget:
    """A deadline (``time.monotonic()`` seconds) and the estimated seconds of a job's
    pending measures (None where there is no estimate: such a job is started)."""

    deadline: float
    estimate: Callable[[Job, list[str]], float | None]
    worker_start_s: float = 0.0      # expected start-up of a worker, before its first job

    def allows(self, job: Job, names: list[str], starting_worker: bool = False) -> bool:
        expected = (self.estimate(job, names) or 0.0) + \
            (self.worker_start_s if starting_worker else 0.0)
        return time.monotonic() + expected <= self.deadline


def results_path(out: Path, suite: str, framework: str, device: str) -> Path:
    # host_id(): hostname plus a machine-id hash, so two hosts named alike never share a
    # file. Results written under the bare hostname by older versions still load.
    return out / suite / host_id() / f"{framework}_{device}.jsonl"


def case_key(suite: str, framework: str, device: str, job: Job, measure: str) -> CaseKey:
    return CaseKey(suite, job.model, job.batch, measure,
                   Settings(framework, device, job.precision, job.variant, job.threads,
                            job.interop_threads, compile_cache=job.compile_cache))


def compile_cache_dir(results: Path, job: Job) -> Path:
    """One cache per job: its cold run starts it empty, its warm run reads it."""
    return results.parent / "compile-cache" / results.stem / (
        f"{job.model}_b{job.batch}_{job.precision}_{job.variant}_t{job.threads}")


def framework_entry(name: str, device: str) -> FrameworkEntry:
    registry = load_registry()
    if name not in registry:
        raise SuiteError(f"unknown framework '{name}'{suggest(name, registry)}; "
                         f"frameworks: {', '.join(registry)}")
    entry = registry[name]
    if device not in entry.devices:
        raise SuiteError(f"{name} has no '{device}' device (has: {', '.join(entry.devices)})")
    return entry


def plan_jobs(request: RunRequest) -> tuple[str, Path, list[Job]]:
    """Validate everything and return the suite name, results path and jobs."""
    entry = framework_entry(request.framework, request.device)
    suite = load_suite(resolve_suite_path(request.suite), load_registry())
    if request.case_timeout_s is not None:
        check_case_timeout("--case-timeout", request.case_timeout_s)
    jobs = expand(suite, entry, request.device, usable_cpus(), physical_cores())
    if not jobs:
        raise SuiteError(f"suite '{suite.name}' has no cases for {entry.name} on {request.device}")
    jobs = only_models(jobs, request.models, suite.name)
    default_variant = entry.variants[0]
    jobs = [Job(**{**asdict(j), "variant": default_variant if j.variant == "default" else j.variant})
            for j in jobs]
    path = results_path(request.out, suite.name, entry.name, request.device)
    return suite.name, path, jobs


def only_models(jobs: list[Job], models: tuple[str, ...], suite: str) -> list[Job]:
    """``jobs`` of ``models`` only (all of them where none are named); a model that no job
    runs is a ``SuiteError`` naming the ones that do."""
    if not models:
        return jobs
    present = list(dict.fromkeys(job.model for job in jobs))
    missing = [m for m in models if m not in present]
    if missing:
        raise SuiteError(f"--models: suite {suite} runs no {', '.join(missing)} here "
                         f"(it runs {', '.join(present)})")
    return [job for job in jobs if job.model in models]


def timed_measures(measures) -> tuple[str, ...]:
    """The measures of a job that are timed (not profiles or counters)."""
    return tuple(m for m in measures if m not in DEVICE_PHASE and m != FINGERPRINT)


def device_measures(jobs: list[Job]) -> dict[tuple, tuple[str, ...]]:
    """Per case (a job without its measures), the timed measures of all its jobs: a case a
    suite splits over two jobs (other timer settings) has one "device_time" row, written
    by the job that takes the fingerprint."""
    found: dict[tuple, tuple[str, ...]] = {}
    for job in jobs:
        case = case_of(job)
        found[case] = tuple(dict.fromkeys((*found.get(case, ()), *timed_measures(job.measures))))
    return found


def own_process(entry: FrameworkEntry, job: Job) -> bool:
    """Whether ``job`` runs in a process of its own: a compile-cache job whose variant the
    framework keeps a persistent compilation cache for. One whose variant keeps none is
    recorded unsupported without any process."""
    return bool(job.compile_cache) and job.variant in entry.compile_cache_variants


def process_group(entry: FrameworkEntry, precision: str) -> str:
    """The precision whose jobs run in worker processes of their own (the framework's
    ``own_process_precisions``: a setting that does not reach what the process already
    tuned), "" for every other job."""
    return precision if precision in entry.own_process_precisions else ""


def case_of(job: Job) -> tuple:
    return (job.model, job.batch, job.device, job.threads, job.interop_threads, job.precision,
            job.variant, job.compile_cache)


def pending_measures(jobs: list[Job], key: Callable[[Job, str], CaseKey],
                     done: set[str]) -> list[tuple[Job, list[str]]]:
    """Each job with its measures (its fingerprint, and on a GPU its device time) not in
    ``done``, in order."""
    timed = device_measures(jobs)
    pending = []
    for job in jobs:
        extra = [FINGERPRINT] if job.fingerprint else []
        # Not for compile-cache jobs: they measure a first call, in a process of their own.
        if job.device == "gpu" and job.fingerprint and not job.compile_cache \
                and timed[case_of(job)]:
            extra.append(DEVICE_TIME)
        names = [m for m in (*job.measures, *extra) if key(job, m).id() not in done]
        if names:
            pending.append((job, names))
    return pending


def recorded_references(rows: dict[str, dict[str, Any]], measures: tuple[str, ...],
                        case_id: Callable[[str], str]) -> dict[str, list[float | None]]:
    """The case's timed figures already in its results file, per measure: [wall median,
    device median] in ms. A device phase whose case was timed by an earlier worker, a
    resumed run or an earlier suite of a matrix (rows copied by suites/harness/reuse.py) sets its
    profile's kernel total against them (suites/instruments/kernel_check.py)."""
    found: dict[str, list[float | None]] = {}
    for measure in measures:
        row = rows.get(case_id(measure)) or {}
        timing = row.get("timing") or {}
        if row.get("status") == "ok" and timing.get("median_ms"):
            found[measure] = [timing["median_ms"], timing.get("device_median_ms")]
    device_row = rows.get(case_id(DEVICE_TIME)) or {}
    if device_row.get("status") == "ok":
        for measure, figures in ((device_row.get("device_times") or {}).get("measures")
                                 or {}).items():
            if measure in found and figures.get("device_median_ms") is not None:
                found[measure][1] = figures["device_median_ms"]
    return found


def device_phases(device: str) -> tuple[str, ...]:
    """The phases of a run on ``device``, in the order they run (phases() below)."""
    return ("wall", "device") if device == "gpu" else ("all",)


def in_phases(pending: list[tuple[Job, list[str]]], device: str,
              chosen: tuple[str, ...]) -> list[tuple[Job, list[str]]]:
    """Each job with its pending measures of the ``chosen`` phases (every phase where
    none is chosen); jobs left with none are dropped."""
    if not chosen:
        return pending
    kept = []
    for job, names in pending:
        selected = [name for phase, of_phase in phases(device, names) if phase in chosen
                    for name in of_phase]
        if selected:
            kept.append((job, selected))
    return kept


def phases(device: str, names: list[str]) -> list[tuple[str, list[str]]]:
    """The worker processes a job's pending measures need, in order: on a GPU the wall
    phase (timed measures, fingerprint: CUPTI never loaded) and then the device phase
    (device time, profile, counters); on a CPU one process for all."""
    if device != "gpu":
        return [("all", names)]
    wall = [n for n in names if n not in DEVICE_PHASE]
    device_phase = [n for n in names if n in DEVICE_PHASE]
    return [(phase, chosen) for phase, chosen in (("wall", wall), ("device", device_phase))
            if chosen]


class Runner:
    def __init__(self, request: RunRequest, budget: Budget | None = None,
                 path: Path | None = None, pool: WorkerPool | None = None,
                 pool_round: int = 0):
        """``path`` replaces the results file (one round's file: suites/harness/rounds.py).
        ``pool`` keeps serving workers for other runners (suites/harness/pool.py): this
        runner takes live ones from it and gives them back once their plan is done;
        ``pool_round`` is the round its workers belong to (rounds never share one)."""
        self.request = request
        self.budget = budget
        self.pool = pool
        self.pool_round = pool_round
        self.stopped_by_budget = False
        self.worker_start_s: list[float] = []   # spawn to first event, per worker
        self.suite, default_path, jobs = plan_jobs(request)
        self.path = path or default_path
        self.case_timeout_s = request.case_timeout_s or load_suite(
            resolve_suite_path(request.suite), load_registry()).case_timeout_s
        self.entry = load_registry()[request.framework]
        unknown = [p for p in request.phases if p not in device_phases(request.device)]
        if unknown:
            raise SuiteError(f"no phase {', '.join(map(repr, unknown))} on {request.device} "
                             f"(phases: {', '.join(device_phases(request.device))})")
        self.results = ResultsFile(self.path)
        self.results.check_writable()   # an unusable --out fails here, before anything runs
        self.fatal: str | None = None
        done = finished_case_ids(self.results.path) if request.resume else set()
        left = pending_measures(jobs, self.key, done)
        self.pending = in_phases(left, request.device, request.phases)
        self.device_measures = device_measures(jobs)
        # Cases whose job the wall phase's worker keeps built for the device phase
        # (suites/harness/kept_jobs.py), for a framework whose registry entry says so: those with
        # device time or a profile still to measure (counters run in a process of Nsight
        # Compute's; compile-cache jobs have no device phase).
        self.keep_cases = {case_of(job) for job, names in in_phases(
            left, request.device, ("device",))
            if request.device == "gpu" and self.entry.keeps_jobs_for_device_phase
            and set(names) - {COUNTERS}}
        self.skipped = sum(len(names) for _, names in in_phases(
            pending_measures(jobs, self.key, set()), request.device, request.phases)) - self.total
        self.statuses: dict[str, int] = defaultdict(int)
        self.log_path = self.path.with_suffix(".log")
        # Per case and phase: the out-of-memory error that sent its job to a fresh worker.
        self.fresh_after: dict[tuple, str] = {}
        self.fresh_reason = ""     # the last worker's fresh_process event

    @property
    def total(self) -> int:
        return sum(len(names) for _, names in self.pending)

    def key(self, job: Job, measure: str) -> CaseKey:
        return case_key(self.suite, self.request.framework, self.request.device, job, measure)

    def run(self) -> int:
        chosen = f" · {' and '.join(self.request.phases)} phase" \
            if self.request.phases and self.request.phases != device_phases(self.request.device) else ""
        console.print(f"[bold]{self.suite}[/] · {self.request.framework} on "
                      f"{self.request.device}{chosen} · {self.total} measurements"
                      + (f" ({self.skipped} already done)" if self.skipped else "")
                      + f" → {self.path}")
        # The float64 truth of every fingerprinted (model, batch), before any worker.
        fill_cache(dict.fromkeys((job.model, job.batch) for job, names in self.pending
                                 if FINGERPRINT in names), self.request.seed, console.print)
        # One worker per thread setting and process group; a job with a compile-cache
        # setting gets a fresh process of its own, so that nothing compiled earlier in the
        # process is reused. Those run first: on a GPU their processes close every idle
        # worker (suites/harness/pool.py), which would take with it the jobs a wall phase's
        # worker kept built for the device phase (suites/harness/kept_jobs.py).
        groups: dict[tuple, list[tuple[Job, list[str]]]] = defaultdict(list)
        for index, (job, names) in sorted(enumerate(self.pending),
                                          key=lambda pair: not pair[1][0].compile_cache):
            groups[(job.threads, index if job.compile_cache else -1,
                    process_group(self.entry, job.precision))].append((job, names))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("starting", total=self.total)
            try:
                for (threads, _, _), items in groups.items():
                    code = self.run_group(threads, items, progress, task)
                    if code:
                        break
                else:
                    code = 0
            except KeyboardInterrupt:
                progress.stop()
                console.print(f"[yellow]interrupted[/]: finished rows are in {self.path}; "
                              f"run again with --resume to complete the rest")
                return 130
        if code == BUDGET_EXIT:
            console.print(f"[yellow]stopped by the time budget[/]: {self.left} measurements "
                          f"left, finished rows are in {self.path}")
            return code
        if code:
            # One plain line (rich would wrap a long path over several).
            print(f"error: {self.fatal}", file=sys.stderr)
            return code
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        console.print(f"done: {counts or 'nothing to do'} → {self.path}")
        return 0

    @property
    def left(self) -> int:
        return self.total - sum(self.statuses.values())

    def run_group(self, threads: int, items, progress, task) -> int:
        remaining = list(items)
        if self.budget is not None and not self.budget.allows(
                *remaining[0], starting_worker=self.starts_worker(*remaining[0])):
            self.stopped_by_budget = True
            return BUDGET_EXIT
        cache_dir = ""
        if remaining[0][0].compile_cache:
            job, names = remaining[0]
            if not own_process(self.entry, job):
                cached = ", ".join(self.entry.compile_cache_variants) or "none"
                self.record_without_worker(job, names, "unsupported",
                                           f"{self.entry.name} variant '{job.variant}' keeps no "
                                           f"persistent compilation cache (variants that do: {cached})",
                                           progress, task)
                return 0
            directory = compile_cache_dir(self.path, job)
            if job.compile_cache == "cold":
                shutil.rmtree(directory, ignore_errors=True)
            elif not directory.is_dir() or not any(p.is_file() for p in directory.rglob("*")):
                # A warm run on an empty cache would be a second cold run under another name.
                self.record_without_worker(job, names, "failed",
                                           f"the cold run left no compilation cache in {directory}",
                                           progress, task)
                return 0
            directory.mkdir(parents=True, exist_ok=True)
            cache_dir = str(directory.resolve())
        for phase in ("all", "wall", "device"):
            selected = [(job, chosen) for job, names in items
                        for name, chosen in phases(self.request.device, names) if name == phase]
            code = self.run_phase(threads, phase, selected, cache_dir, progress, task)
            if code:
                return code
        return 0

    def run_phase(self, threads: int, phase: str, remaining, cache_dir: str, progress,
                  task) -> int:
        """One phase's worker processes, a fresh one after each death, until its jobs are done."""
        while remaining:
            recorded = read_rows(self.path) if phase == "device" else {}
            plan = Plan(self.suite, self.request.framework, self.request.device, threads,
                        remaining[0][0].interop_threads, str(self.path), self.request.seed,
                        tuple(WorkerJob(**asdict(job), pending=names,
                                        keep=phase == "wall" and case_of(job) in self.keep_cases,
                                        fresh_after=self.fresh_after.get((case_of(job), phase), ""),
                                        device_measures=self.device_measures.get(case_of(job), ()),
                                        recorded=recorded_references(
                                            recorded, self.device_measures.get(case_of(job), ()),
                                            lambda measure, job=job: self.key(job, measure).id()))
                              for job, names in remaining),
                        cache_dir, phase, str(self.log_path))
            log_start = log_size(self.log_path)
            finished, code, fatal = self.run_worker(plan, progress, task)
            if fatal:
                self.fatal = fatal
                return 2
            # A worker that Ctrl-C stopped: its own exit (130), or ended by the signal
            # itself (a framework's runtime may leave SIGINT at its default).
            if code in (130, -signal.SIGINT):
                raise KeyboardInterrupt
            if code == BUDGET_EXIT:
                self.stopped_by_budget = True
                return BUDGET_EXIT
            remaining = [(job, [n for n in names if self.key(job, n).id() not in finished])
                         for job, names in remaining]
            remaining = [(job, names) for job, names in remaining if names]
            if code == FRESH_PROCESS_EXIT and remaining \
                    and (case_of(remaining[0][0]), phase) not in self.fresh_after:
                # Out of memory after other jobs: the job goes on in a fresh worker.
                job = remaining[0][0]
                self.fresh_after[(case_of(job), phase)] = self.fresh_reason
                console.print(f"[yellow]fresh worker[/] {job.model} b{job.batch}: "
                              f"{self.fresh_reason}")
                continue
            if code != 0 and remaining:
                # The worker died inside the first unfinished job: record that, go on.
                job, names = remaining.pop(0)
                words = last_words(self.log_path, log_start)
                reason = (f"worker process died (it {ended(code)})"
                          f"{f': {words}' if words else ''}; see {self.log_path}")
                self.record_without_worker(job, names, "failed", reason, progress, task)
                console.print(f"[red]failed[/] {job.model} b{job.batch}: {reason}")
        return 0

    def record_without_worker(self, job: Job, names: list[str], status: str, reason: str,
                              progress, task, time_limit_s: float | None = None,
                              wall_s: float = 0.0) -> None:
        # The host's description, so that the report files these rows beside the ones
        # a worker wrote (the framework's version and GPU name are known only there).
        env = host_environment(job.threads, [])
        if job.device == "gpu":
            env["gpu_model"] = nvidia_smi("name")
        for name in names:
            self.results.append(Row(self.key(job, name), status, reason, env=env,
                                    time_limit_s=time_limit_s, wall_s=round(wall_s, 3),
                                    elapsed_s=round(wall_s, 3) if wall_s else None))
            self.statuses[status] += 1
            progress.advance(task)

    def worker_key(self, plan: Plan) -> WorkerKey | None:
        """The pool's key for the worker that runs ``plan``; None where the plan needs a
        process of its own (no pool, or a job measuring a first call with a compilation
        cache: nothing compiled earlier in the process may be reused)."""
        if self.pool is None or plan.compile_cache_dir or \
                any(job.compile_cache for job in plan.jobs):
            return None
        return self.pool_key(plan.threads, plan.interop_threads, plan.phase,
                             process_group(self.entry, plan.jobs[0].precision))

    def pool_key(self, threads: int, interop_threads: int, phase: str,
                 group: str = "") -> WorkerKey:
        return WorkerKey(self.request.python or sys.executable, self.request.framework,
                         self.request.device, threads, interop_threads, phase,
                         tuple(sorted(self.request.worker_env.items())), self.pool_round,
                         group, self.entry.own_device_process)

    def starts_worker(self, job: Job, names: list[str]) -> bool:
        """Whether running this job's pending measures starts a worker process first."""
        if job.compile_cache:
            return own_process(self.entry, job)
        if self.pool is None:
            return True
        phase = phases(self.request.device, names)[0][0]
        return not self.pool.has(self.pool_key(job.threads, job.interop_threads, phase,
                                               process_group(self.entry, job.precision)))

    def start_worker(self, plan_file: Path, log, serve: bool) -> WorkerProcess:
        env = {**os.environ, **self.request.worker_env, "PYTHONUNBUFFERED": "1",
               PARENT_PID: str(os.getpid())}
        command = [self.request.python or sys.executable, "-m", "suites.harness.worker",
                   "--serve" if serve else str(plan_file)]
        return WorkerProcess(command, env, log, serve)

    def run_worker(self, plan: Plan, progress, task) -> tuple[set[str], int, str | None]:
        """Run ``plan`` on a worker until it is done, the worker exits or a case passes the
        time limit. The worker is the pool's live one for its key where there is one, else
        a fresh process; it goes back to the pool only once the plan is done. Returns the
        case ids it finished (timeouts included), the worker's exit code (0 once the plan
        is done, and after a timeout: a fresh worker goes on) and a fatal error, if any."""
        finished: set[str] = set()
        fatal = None
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            plan_file = Path(handle.name)
        plan.to_file(plan_file)
        key = self.worker_key(plan)
        # In flight: the cases a timeout would cover (all of a job's pending measures while
        # it builds, then the one measure) and when they started.
        in_flight: list[str] = []
        cases = {self.key(job, name).id(): (job, name)
                 for job, names in self.pending for name in names}
        job_starting = False
        started = time.monotonic()
        spawned = None      # when this plan started a process, until its first event
        worker = None       # killed on the way out unless it exited or went back to the pool
        try:
            with self.log_path.open("ab", buffering=0) as log:
                if key is not None:
                    worker = self.pool.take(key)
                    if worker is not None and not worker.send(plan_file):
                        worker.kill()
                        worker = None
                elif self.pool is not None and self.request.device == GPU:
                    # A process of its own on the GPU: no idle worker may hold GPU memory
                    # beside it either (suites/harness/pool.py).
                    self.pool.close_gpu_workers()
                if worker is None:
                    spawned = time.monotonic()
                    worker = self.start_worker(plan_file, log, serve=key is not None)
                    if key is not None:
                        worker.send(plan_file)   # if it died already, its EOF follows
                try:
                    while True:
                        waits = [started + self.case_timeout_s - time.monotonic()] \
                            if in_flight else []
                        if self.budget is not None:
                            waits.append(self.budget.deadline - time.monotonic())
                        wait = min(waits) if waits else None
                        try:
                            line = worker.next_line(max(wait, 0.0) if wait is not None else None)
                        except queue.Empty:
                            worker.kill()
                            worker = None
                            if self.budget is not None and \
                                    time.monotonic() >= self.budget.deadline:
                                # Nothing recorded: the cases in flight stay pending.
                                return finished, BUDGET_EXIT, None
                            self.record_timeouts(in_flight, time.monotonic() - started,
                                                 progress, task)
                            finished.update(in_flight)
                            return finished, 0, None
                        if line is None:
                            break
                        try:
                            event = parse(line)
                        except MalformedEvent as error:
                            # A worker whose events the runner cannot read cannot be
                            # followed: the run stops, saying so in one line.
                            _log_write(log, line)
                            return finished, 0, str(error)
                        if event is None:
                            _log_write(log, line)
                            continue
                        if spawned is not None:
                            self.worker_start_s.append(time.monotonic() - spawned)
                            spawned = None
                        match event:
                            case Fatal(message):
                                fatal = message
                            case FreshProcess(reason):
                                self.fresh_reason = reason
                            case PlanDone():
                                self.pool.give_back(key, worker)
                                worker = None
                                return finished, 0, fatal
                            case JobStarting(label):
                                progress.update(task, description=label)
                                job_starting = True
                            case CasesStarted(case_ids):
                                if job_starting and not self.budget_allows(list(case_ids), cases):
                                    # Between jobs: nothing is in flight, so stopping loses
                                    # nothing.
                                    return finished, BUDGET_EXIT, None
                                job_starting = False
                                in_flight, started = list(case_ids), time.monotonic()
                            case RowWritten():
                                finished.add(event.case_id)
                                in_flight = []
                                self.report(event, progress)
                                progress.advance(task)
                    code = worker.wait()
                    worker = None
                except KeyboardInterrupt:
                    if worker is not None:
                        worker.interrupt()
                        worker = None
                    raise
        except OSError as error:
            if isinstance(error, OutputError):
                raise
            raise OutputError(f"cannot write the log {self.log_path}: "
                              f"{error.strerror or error}; finished rows are kept, run again "
                              f"with --resume once the location is usable") from None
        finally:
            if worker is not None:
                worker.kill()
            plan_file.unlink(missing_ok=True)
        return finished, code, fatal

    def budget_allows(self, case_ids: list[str], cases: dict[str, tuple[Job, str]]) -> bool:
        """Whether the job about to start (its pending case ids) fits in the budget."""
        if self.budget is None or case_ids[0] not in cases:
            return True
        job = cases[case_ids[0]][0]
        return self.budget.allows(job, [cases[c][1] for c in case_ids if c in cases])

    def record_timeouts(self, case_ids: list[str], wall_s: float, progress, task) -> None:
        """``timeout`` rows; ``wall_s`` is from the case's start to its worker's death."""
        by_id = {self.key(job, name).id(): (job, name) for job, names in self.pending
                 for name in names}
        limit = self.case_timeout_s
        reason = (f"ran past the case time limit of {limit:g} s; the worker's process tree "
                  f"was killed")
        for case_id in case_ids:
            job, name = by_id[case_id]
            self.record_without_worker(job, [name], "timeout", reason, progress, task,
                                       time_limit_s=limit, wall_s=wall_s)
            progress.console.print(f"[red]timeout[/] {case_id.split('/', 1)[1]}: {reason}")

    def report(self, event: RowWritten, progress) -> None:
        status = event.status
        self.statuses[status] += 1
        case = event.case_id.split("/", 1)[1]
        if status != "ok":
            progress.console.print(f"[yellow]{status}[/] {case}: {event.reason}")
        elif event.median_ms is not None:
            flag = " [yellow](unstable)[/]" if event.unstable else ""
            progress.console.print(f"ok {case}: {event.median_ms:.3f} ms{flag}")


def stop_on_sigterm() -> None:
    """SIGTERM (a batch system's or a job slot's end) stops a run as Ctrl-C does: the
    worker is stopped with it, so none goes on writing rows beside a resumed run."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)


def _log_write(log, line: str) -> None:
    # The log is diagnostic; a full disk shows up where rows are written.
    with contextlib.suppress(OSError):
        log.write(line.encode("utf-8", "replace"))
