"""The matrix's plan: every suite × framework on one device, what is done, what an
earlier suite's rows cover, what is left and what it should cost (``suites/matrix/run.py``
runs it; ``python -m suites matrix --plan`` prints it and stops).

Work is ordered in two stages (``stages``): the first suite given (the comparison: by
default the device's default suite) for every framework, then each framework's other
suites. Within a stage, framework by framework in the order given, each framework's suites
in the order given; on a GPU its wall pass over the stage's suites (the runner's "wall"
phase: timed measures and fingerprints), then its device pass (the "device" phase: device
time, profiles, counters). Each (suite, framework, pass) is one item of the plan, listed in
the order it runs. So a framework's GPU work in a stage needs one worker, its wall pass's,
which goes on with the device pass (suites/harness/pool.py keeps one live GPU worker at a
time), and no two frameworks' processes ever hold device or host memory at once; a run
stopped by its budget has the comparison for every framework first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from adapters.registry import load_registry
from models import truth as truth_module
from models.zoo import get_model
from suites.harness.reuse import ReuseIndex, Source, timer_of
from suites.harness.runner import (
    RunRequest,
    case_key,
    case_of,
    device_measures,
    device_phases,
    framework_entry,
    in_phases,
    own_process,
    pending_measures,
    plan_jobs,
    process_group,
)
from suites.harness.spec import Job, SuiteError, load_suite, resolve_suite_path
from suites.instruments.environment import cpu_isa, cpu_model, nvidia_smi, usable_cpus
from suites.matrix.estimate import (
    CacheView,
    Estimate,
    History,
    Machine,
    computation_key,
    estimate_cases,
    minutes,
)
from suites.rows.results import FINGERPRINT
from suites.truth.check import finished_case_ids

# The default work of each device, in priority order: the default suite, then the seeds'
# suites, then the suites that reuse most of the others' cases (kernels-gpu is li2016's and
# convnet-benchmarks' kernel-level cases; float64-gpu's fp32 half is default-gpu's).
DEFAULT_SUITES = {
    "gpu": ("default-gpu", "cnn-benchmarks", "convnet-benchmarks", "bahrampour2016",
            "li2016", "kernels-gpu", "float64-gpu"),
    "cpu": ("default-cpu", "cnn-benchmarks-quick", "convnet-benchmarks-quick",
            "bahrampour2016-quick", "li2016-quick"),
}
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One measurement of an item: its job, measure and case id."""

    job: Job
    measure: str
    case_id: str


@dataclass(frozen=True)
class PlannedWorker:
    """A worker process an item's pending cases need: a pooled one, which the matrix's
    pool hands from suite to suite (its phase and thread setting: the pool's key within a
    framework, with its process group: suites/harness/runner.py process_group), or a compile-cache
    job's process of its own (``job`` names it)."""

    phase: str
    threads: int
    job: tuple = ()
    precision_group: str = ""

    @property
    def pooled(self) -> bool:
        return not self.job


@dataclass(frozen=True)
class Item:
    """One suite with one framework, in one pass (phase) of the runner's."""

    suite: str               # the suite's name
    source: str              # the suite as given: a bundled suite's name or a .toml path
    framework: str
    device: str
    python: str
    results: Path
    jobs: tuple[Job, ...]
    done: int = 0
    reusable: tuple[tuple[Case, tuple[Source, ...]], ...] = ()   # with where they may come from
    to_run: tuple[Case, ...] = ()
    estimate: Estimate = Estimate()
    # The worker processes the pending cases need (at least), in the order the runner
    # starts them: one per thread setting, which the matrix's pool shares with the
    # framework's other suites, and one of its own per compile-cache job.
    workers: tuple[PlannedWorker, ...] = ()
    unavailable: str = ""    # why this framework cannot run here
    phase: str = "all"       # the runner's phase this item runs (runner.device_phases())

    @property
    def label(self) -> str:
        """The item in words: its suite and framework, and on a GPU its pass."""
        return f"{self.suite} {self.framework}" + \
            (f" {self.phase} pass" if self.phase != "all" else "")

    @property
    def total(self) -> int:
        return self.done + len(self.reusable) + len(self.to_run)


@dataclass(frozen=True)
class Plan:
    device: str
    machine: Machine
    items: tuple[Item, ...]
    truth_pairs: tuple[tuple[str, int], ...]      # (model, batch) not cached yet
    truth_gflop: float
    truth_seconds: float | None                   # estimated, None without a rate
    worker_start_s: dict[str, float | None] = field(default_factory=dict)
    history_rows: int = 0
    fallback_models: tuple[str, ...] = ()         # other GPU models the estimates fell back on

    @property
    def estimate(self) -> Estimate:
        total = Estimate()
        for item in self.items:
            if not item.unavailable:
                total = total + item.estimate
        return total

    def worker_starts(self) -> list[str]:
        """The framework of each worker start the items left need, in the order they run:
        a pooled worker starts once per key and is handed from suite to suite, but on a
        GPU only while no process of another key took the GPU in between (the pool keeps
        one live GPU worker: suites/harness/pool.py); the device phase goes on in the wall
        phase's live worker of its setting, unless the framework's registry entry says
        ``own_device_process``; a compile-cache
        job's process starts for that job alone."""
        live: set[tuple[str, PlannedWorker]] = set()
        starts = []
        for item in self.items:
            if item.unavailable:
                continue
            for worker in item.workers:
                key = (item.framework, worker)
                if worker.pooled and key in live:
                    continue
                wall = (item.framework, replace(worker, phase="wall"))
                if worker.pooled and worker.phase == "device" and wall in live \
                        and not framework_entry(item.framework, self.device).own_device_process:
                    live.discard(wall)
                    live.add(key)
                    continue
                starts.append(item.framework)
                if self.device == "gpu":
                    live.clear()
                if worker.pooled:
                    live.add(key)
        return starts

    def seconds(self) -> float:
        """The estimated seconds of everything left: cases, worker starts and truth."""
        starts = sum(self.worker_start_s.get(framework) or 0.0
                     for framework in self.worker_starts())
        return self.estimate.seconds + starts + (self.truth_seconds or 0.0)


def this_machine(device: str, name: str = "") -> Machine:
    """This machine as the history knows machines; ``name`` plans for another device model
    (``--device-name``: the published rows of an H100, say, before renting one)."""
    import psutil
    cores = psutil.cpu_count(logical=True) or usable_cpus()
    if device == "gpu":
        return Machine("gpu", name or nvidia_smi("name") or "unknown GPU", cores)
    return Machine("cpu", name, cores) if name else Machine("cpu", cpu_model(), cores, cpu_isa())


def default_python(framework: str, device: str) -> str:
    """The framework's nox virtualenv where it exists, else this interpreter."""
    venv = ROOT / ".nox" / f"{framework}_{device}" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def missing_packages(python: str, packages: list[str]) -> dict[str, bool]:
    """Which of ``packages`` the interpreter lacks, found without importing them."""
    probe = ("import importlib.util, json, sys; print(json.dumps({p: importlib.util."
             "find_spec(p) is None for p in sys.argv[1:]}))")
    try:
        out = subprocess.run([python, "-c", probe, *packages], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError):
        return dict.fromkeys(packages, True)


def availability(frameworks: list[str], device: str, pythons: dict[str, str]) -> dict[str, str]:
    """framework → "" where it can run, else why not."""
    registry = load_registry()
    reasons = {}
    by_python: dict[str, list[str]] = {}
    for name in frameworks:
        entry = framework_entry(name, device)
        by_python.setdefault(pythons[name], []).append(entry.package or name)
    lacking = {python: missing_packages(python, packages) for python, packages in by_python.items()}
    for name in frameworks:
        package = registry[name].package or name
        reasons[name] = (f"'{package}' is not installed for {pythons[name]}"
                         if lacking[pythons[name]].get(package, True) else "")
    return reasons


def suite_jobs(suite: str, framework: str, device: str, out: Path, seed: int
               ) -> tuple[str, Path, list[Job]]:
    """(suite name, results file, jobs); no jobs where the suite has none for this
    framework on this device."""
    try:
        return plan_jobs(RunRequest(suite, framework, device, out, resume=True, seed=seed))
    except SuiteError as error:
        if "has no cases" not in str(error):
            raise
        name = load_suite(resolve_suite_path(suite), load_registry()).name
        return name, Path(), []


def finished_ids(path: Path) -> set[str]:
    return finished_case_ids(path) if path.name else set()


def make_plan(device: str, frameworks: list[str], suites: list[str], out: Path, seed: int,
              pythons: dict[str, str], history: History, machine: Machine,
              reuse: bool, worker_start_s: dict[str, float | None],
              truth_rate: float | None,
              caches: dict[str, CacheView | None] | None = None) -> Plan:
    unavailable = availability(frameworks, device, pythons)
    # Cases a framework measured for an earlier suite, in the same pass.
    indexes = {name: ReuseIndex() if reuse else None for name in frameworks}
    expanded = {name: {suite: suite_jobs(suite, name, device, out, seed) for suite in suites}
                for name in frameworks}
    items = []
    for stage in stages(frameworks, suites):     # the order items run in: stages' docstring
        for name in frameworks:
            for phase in device_phases(device):
                for suite in stage:
                    suite_name, path, jobs = expanded[name][suite]
                    if not jobs:
                        continue
                    item = plan_item(suite_name, suite, name, device, pythons[name], path,
                                     jobs, indexes[name], history, unavailable[name],
                                     (caches or {}).get(name), phase)
                    if item.total:
                        items.append(item)
    pairs = truth_pairs(items, seed)
    gflop = sum(truth_module.cost_gflop(get_model(m), b) for m, b in pairs)
    return Plan(device, machine, tuple(items), tuple(pairs), gflop,
                gflop / truth_rate if truth_rate and pairs else (0.0 if not pairs else None),
                worker_start_s, history.rows,
                history.fallback.models if history.fallback is not None else ())


def stages(frameworks: list[str], suites: list[str]) -> list[list[str]]:
    """The suites in the order the matrix runs them: the first suite for every framework,
    then each framework's other suites. Within a stage, framework by framework, each
    framework's wall pass over the stage's suites before its device pass.

    The first suite is the comparison (the default suite: every framework on the same
    networks), so a run stopped by ``--budget`` or a kill has it for every framework before
    any seed suite; framework by framework over every suite, a GPU's first 20 minutes were
    one framework's seven suites and no comparison (``h100-2026-11-budget (at 2efa0ce)``). It
    costs each framework one worker start more (its workers are closed between stages, as
    between frameworks). With one framework or one suite, one stage."""
    if len(frameworks) > 1 and len(suites) > 1:
        return [suites[:1], suites[1:]]
    return [list(suites)]


def plan_item(suite: str, source: str, framework: str, device: str, python: str, path: Path,
              jobs: list[Job], index: ReuseIndex | None, history: History,
              unavailable: str, cache: CacheView | None = None, phase: str = "all") -> Item:
    def key(job: Job, measure: str):
        return case_key(suite, framework, device, job, measure)

    done = finished_ids(path)
    timed = device_measures(jobs)
    cases = [Case(job, m, key(job, m).id())
             for job, names in in_phases(pending_measures(jobs, key, set()), device, (phase,))
             for m in names]
    pending = [c for c in cases if c.case_id not in done]
    reusable, to_run = [], []
    for case in pending:
        sources = index.candidates(framework, case.job, case.measure, timer_of(case.job), suite,
                                   timed.get(case_of(case.job), ())) \
            if index is not None else []
        if sources:
            reusable.append((case, tuple(sources)))
        else:
            to_run.append(case)
    if index is not None:
        for case in cases:
            index.add(framework, case.job, case.measure,
                      Source(suite, case.case_id, timer_of(case.job), path,
                             timed.get(case_of(case.job), ())))
    estimate = estimate_cases(history, ((c.case_id, case_computation(framework, device, c.job,
                                                                                 c.measure))
                                        for c in to_run), device, cache,
                              keeps_jobs(framework, device))
    # One worker per thread setting and process group, one more per compile-cache job that
    # runs in a process of its own (suites/harness/runner.py own_process); those first, as the
    # runner runs them.
    entry = framework_entry(framework, device)
    workers = tuple(dict.fromkeys(PlannedWorker(
        phase, c.job.threads, (suite, c.job.model, c.job.batch, c.job.precision, c.job.variant,
                               c.job.compile_cache) if c.job.compile_cache else (),
        process_group(entry, c.job.precision))
        for c in sorted(to_run, key=lambda c: not c.job.compile_cache)
        if not c.job.compile_cache or own_process(entry, c.job)))
    return Item(suite, source, framework, device, python, path, tuple(jobs), len(cases) - len(pending),
                tuple(reusable), tuple(to_run), estimate, workers, unavailable, phase)


def keeps_jobs(framework: str, device: str) -> bool:
    """Whether the framework's device pass runs on jobs its wall pass kept built
    (suites/harness/kept_jobs.py): a GPU run of a framework whose registry entry says so."""
    return device == "gpu" and framework_entry(framework, device).keeps_jobs_for_device_phase


def case_computation(framework: str, device: str, job: Job, measure: str) -> tuple:
    """The history's key for a case measured in any suite (``estimate.computation_key``)."""
    return computation_key({"settings": {"framework": framework, "device": device,
                                         "precision": job.precision, "variant": job.variant,
                                         "threads": job.threads,
                                         "compile_cache": job.compile_cache},
                            "model": job.model, "batch": job.batch, "measure": measure})


def truth_pairs(items: list[Item], seed: int) -> list[tuple[str, int]]:
    """(model, batch) whose float64 truth a pending fingerprint needs and the cache lacks."""
    from suites.truth.check import enabled
    if not enabled():
        return []
    pairs = dict.fromkeys((c.job.model, c.job.batch) for item in items if not item.unavailable
                          for c in item.to_run if c.measure == FINGERPRINT)
    return [(m, b) for m, b in pairs
            if not truth_module.too_expensive(get_model(m), b)
            and not truth_module.is_cached(get_model(m), b, seed)]


def describe(plan: Plan) -> list[str]:
    """The plan as lines of text: one per item, then the truth and the total."""
    # On a GPU each suite and framework has two items, its wall pass and its device pass.
    passes = plan.device == "gpu"
    lines = [f"{'suite':<22} {'framework':<9} " + (f"{'pass':<6} " if passes else "")
             + f"{'cases':>6} {'done':>6} {'reused':>6} {'to run':>6}  estimate"]
    for item in plan.items:
        if item.unavailable:
            continue
        estimate = item.estimate.text() if item.to_run else "nothing to run"
        lines.append(f"{item.suite:<22} {item.framework:<9} "
                     + (f"{item.phase:<6} " if passes else "")
                     + f"{item.total:>6} {item.done:>6} {len(item.reusable):>6} "
                       f"{len(item.to_run):>6}  {estimate}")
    if plan.truth_pairs:
        truth = f"{plan.truth_seconds / 60:.1f} min" if plan.truth_seconds is not None \
            else "no estimate (no earlier truth run on this machine)"
        lines.append(f"float64 truth: {len(plan.truth_pairs)} (model, batch) pairs, "
                     f"{plan.truth_gflop:.0f} GFLOP: {truth}")
    for framework, reason in dict.fromkeys((i.framework, i.unavailable) for i in plan.items
                                           if i.unavailable):
        count = sum(i.total for i in plan.items if i.framework == framework)
        lines.append(f"not run: {framework} ({count} cases): {reason}")
    measured = {f: s for f, s in plan.worker_start_s.items() if s is not None}
    starts = len(plan.worker_starts())
    total = plan.estimate
    source = f"from {plan.history_rows} earlier rows of this device model"
    if total.from_other_device:
        source += (f"; {total.from_other_device} cases from rows of "
                   f"{', '.join(plan.fallback_models)}, as this model has none")
    if total.cases and total.unknown == total.cases:
        lines.append(f"estimated: no estimate for any of the {total.cases} cases to run on "
                     f"{plan.machine.label} ({source})")
        return lines
    unknown = f"; {total.unknown} cases without an estimate" if total.unknown else ""
    lines.append(f"estimated: {minutes(plan.seconds())} on {plan.machine.label} "
                 f"(cases {minutes(total.seconds)}, {starts} worker starts "
                 f"{'measured' if measured else 'unknown'}{unknown}; {source})")
    return lines


def python_table(frameworks: list[str], device: str, given: list[str]) -> dict[str, str]:
    """framework → interpreter, from ``--python FW=PATH`` and the defaults."""
    pythons = {}
    for spec in given:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SuiteError(f"--python takes FRAMEWORK=INTERPRETER, got '{spec}'")
        if name not in frameworks:
            raise SuiteError(f"--python names '{name}', which is not among the frameworks "
                             f"({', '.join(frameworks)})")
        if not Path(path).exists():
            raise SuiteError(f"--python {name}: no interpreter at {path}")
        pythons[name] = path
    return {name: pythons.get(name) or default_python(name, device) for name in frameworks}


def check_frameworks(frameworks: list[str], device: str) -> list[str]:
    for name in frameworks:
        framework_entry(name, device)       # unknown framework or device: SuiteError
    return list(dict.fromkeys(frameworks))


def resolve_suites(suites: list[str]) -> list[str]:
    for suite in suites:
        resolve_suite_path(suite)           # unknown suite: SuiteError
    return list(dict.fromkeys(suites))
