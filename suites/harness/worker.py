"""The worker: runs one framework's jobs for one (device, threads) setting in its own
process, so thread settings that must precede the framework's first operation, CPU
affinity and crashes stay contained.

* ``python -m suites.harness.worker PLAN.json`` runs one plan and exits.
* ``python -m suites.harness.worker --serve`` reads plan-file paths on stdin, one a line, and runs
  each in turn on the framework it built for the first (suites/harness/pool.py keeps such a
  worker between the suites of a matrix); after each plan it announces ``plan_done`` and
  waits for the next, and it exits at the end of its input. Every plan of one process has
  the same framework, device, thread settings, phase and compilation cache, except that a
  wall phase's worker may go on with device-phase plans (never the other way round).

Each finished measurement is appended to its plan's results file at once, then announced
on stdout as an event line for the runner's progress display. Each plan's stderr goes to
its own log (``Plan.log``), the framework's C++ logging included.

A job that runs out of device memory in a process that ran other jobs before it is not
recorded as ``oom`` there: what earlier jobs left behind can refuse an allocation that a
fresh process grants. TensorFlow's allocator never gives memory back ("we do not release
memory, since it can lead to memory fragmentation": TensorFlow's GPU guide), and JAX
without preallocation (adapters/jax/__init__.py) "is more prone to GPU memory
fragmentation" (JAX docs, "GPU memory allocation"). On an H100, JAX's ResNet-50 bf16
training step at batch 1024 was refused a 38.9 GiB allocation after three other jobs and
ran alone in a fresh process (42.7 GB at the allocator's peak). The worker announces ``fresh_process``
and exits with ``FRESH_PROCESS_EXIT``; the runner gives the job's pending measures to a
fresh worker, where an ``oom`` stands, and its rows say why they were taken there
(``WorkerJob.fresh_after``).

A worker in which an ``oom`` stood ends after that job, and the next job goes on in a fresh
one: a framework's device state after a refused allocation is not trusted. In
transformers-gpu on an H200, TensorFlow's GPT-2 training step at 8192 tokens ran out of
memory in graph execution, and every later operation of that process failed ("CUDA error:
Could not synchronize CUDA stream", "Failed copying input tensor from CPU to GPU"): the
next job and the device phase of 21 jobs that had run well.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.measures import BY_NAME as MEASURE_BY_NAME
from models.measures import COUNTERS, PROFILE
from suites.harness.events import (
    CasesStarted,
    Event,
    Fatal,
    FreshProcess,
    JobStarting,
    PlanDone,
    RowWritten,
    to_line,
)
from suites.harness.job import WorkerJob
from suites.harness.kept_jobs import KeptJob, KeptJobs, KeptKey
from suites.instruments.environment import gpu_placement, host_environment, limit_cpus
from suites.rows.results import DEVICE_TIME, FINGERPRINT, CaseKey, OutputError, ResultsFile, Row, Settings

# The runner's pid: a worker whose runner dies (SIGKILL) ends too, so that no orphan goes
# on appending rows beside a resumed run.
PARENT_PID = "DLBENCH_RUNNER_PID"
# Test-only: a case whose id contains this string hangs (in a child process the worker
# waits on, so the runner's time limit has a whole process tree to kill).
INJECT_HANG = "DLBENCH_INJECT_HANG"
INTERRUPTED = threading.Event()
# The exit code of a worker that leaves a job to a fresh process (the module's docstring).
FRESH_PROCESS_EXIT = 76


class FreshProcessNeeded(Exception):
    """A job ran out of memory in a process that had run other jobs first (the module's
    docstring); the message says what was refused and after how many jobs."""


def _on_interrupt(signum, frame) -> None:
    INTERRUPTED.set()
    raise KeyboardInterrupt


def install_interrupt_handler() -> None:
    """Ctrl-C raises KeyboardInterrupt and also sets a flag the worker checks between
    measurements: an interrupt that lands inside a callback whose exceptions Python ignores
    (JAX's garbage-collection callback, for one) still stops the worker."""
    signal.signal(signal.SIGINT, _on_interrupt)


def check_interrupt() -> None:
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


@dataclass(frozen=True)
class Plan:
    suite: str
    framework: str
    device: str
    threads: int
    interop_threads: int
    results: str
    seed: int
    jobs: tuple[WorkerJob, ...]     # a mapping is read as WorkerJob.from_dict reads it
    # Where the framework's persistent compilation cache lives for this process (jobs
    # with a compile_cache setting run one to a process); "" leaves the framework's own.
    compile_cache_dir: str = ""
    # "all" (a CPU run), or on a GPU "wall" (timed measures and fingerprints; CUPTI is never
    # loaded) then "device" (device time, profile, counters): suites/harness/runner.py phases().
    phase: str = "all"
    # The log this plan's stderr goes to ("": the stderr the process was started with).
    log: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(
            WorkerJob.from_dict(job) if isinstance(job, Mapping) else job for job in self.jobs))

    def to_file(self, path: Path) -> None:
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        path.write_text(json.dumps({**data, "jobs": [job.to_dict() for job in self.jobs]}))

    @staticmethod
    def from_file(path: Path) -> Plan:
        return Plan(**json.loads(path.read_text()))


def emit(event: Event) -> None:
    """Tell the runner (suites/harness/events.py)."""
    print(to_line(event), flush=True)


def hang_if_injected(case_id: str) -> None:
    marker = os.environ.get(INJECT_HANG)
    if marker and marker in case_id:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(1e6)", marker])


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]


# A job's fields that name its case within one results file, beside what the process
# fixes (suites/harness/runner.py case_of): the key of a job kept for the device phase.
KEPT_CASE_FIELDS = ("model", "batch", "precision", "variant", "compile_cache")


def own_memory(memory, held_bytes: int | None) -> dict[str, Any]:
    """A row's ``memory``: the adapter's peak, less what was in use on the device when the
    job was built while other jobs were kept for the device phase (suites/harness/kept_jobs.py),
    which the allocator's peak counts too; that amount is recorded beside it."""
    found = asdict(memory)
    if held_bytes and found.get("peak_bytes") is not None:
        found["peak_bytes"] = max(0, found["peak_bytes"] - held_bytes)
        found["held_before_build_bytes"] = held_bytes
    return found


# What a worker fixes when it starts: every plan a serving worker runs shares them.
PROCESS_FIELDS = ("framework", "device", "threads", "interop_threads", "compile_cache_dir",
                  "phase")


def log_to(path: str) -> None:
    """Point this process's stderr (file descriptor 2, so C++ logging follows too) at the
    plan's log."""
    if not path:
        return
    sys.stderr.flush()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as error:
        raise OutputError(f"cannot write the log {path}: {error.strerror or error}") from None
    os.dup2(fd, 2)
    os.close(fd)


class Worker:
    last_row: float | None = None   # when the previous row was written (perf_counter)
    # The seconds the previous job took after its last row (its release: the jobs kept for
    # the device phase offered it, its memory freed, a garbage collection), billed to the
    # next job's first row (run_job).
    release_s = 0.0
    after_wall = False              # device plans that follow this process's wall plans
    # Jobs this process has started (every plan of a serving process), and the one
    # running: an out-of-memory error after others goes to a fresh process.
    jobs_started = 0
    job: WorkerJob | None = None
    oom_stood = ""                  # an out-of-memory error recorded as oom in this process
    # Jobs built for the wall phase and kept for this process's device phase
    # (suites/harness/kept_jobs.py), and what they held on the device when the running job was
    # built (its rows' peak memory leaves that out).
    kept: KeptJobs = KeptJobs(lambda: None)
    held_bytes: int | None = None
    job_was_kept = False

    def __init__(self, plan: Plan):
        self.plan = plan
        self.affinity = limit_cpus(plan.threads) if plan.device == "cpu" else []
        # Imported only now: the affinity mask must be in place before a framework starts.
        from adapters.base import RunConfig
        from adapters.registry import load_registry
        self.entry = load_registry()[plan.framework]
        if plan.compile_cache_dir:
            # Before the framework is imported: some read their cache settings only then.
            for name, value in self.entry.compile_cache_env.items():
                os.environ[name] = value.replace("{dir}", plan.compile_cache_dir)
        self.adapter = self.entry.load()(RunConfig(plan.device, plan.threads, plan.interop_threads))
        self.env = {**host_environment(plan.threads, self.affinity), **self.adapter.environment()}
        self.results = ResultsFile(Path(plan.results))
        self.last_row = time.perf_counter()
        from suites.instruments.device_state import open_monitor
        from suites.instruments.host_state import HostMonitor
        self.gpu_monitor, self.gpu_state_reason = open_monitor(plan.device) \
            if self.adapter.monitors_gpu else (None, f"{plan.framework} puts nothing on a GPU")
        if plan.device == "gpu":
            self.env.update(gpu_placement(self.gpu_monitor))
        # The host CPU's state beside the GPU's (suites/instruments/host_state.py): sampled in the
        # background on a GPU run, read only before and after sampling on a CPU run.
        self.host_monitor = HostMonitor(periodic=plan.device == "gpu")
        # The job's timed figures per measure, for its profile row's kernel check.
        self.timed: dict[str, Any] = {}
        self.kept = KeptJobs(self.gpu_memory_used)

    def gpu_memory_used(self) -> float | None:
        """The share of the GPU's memory that live arrays hold: the framework allocator's
        bytes in use against the device's (NVML); NVML's own figure, which counts the
        framework's pool of freed blocks too, where the framework gives none; the
        adapter's reading where there is no NVML (a stand-in framework)."""
        if self.gpu_monitor is None:
            return self.adapter.memory_used_fraction()
        found = self.gpu_monitor.memory()
        if found is None:
            return None
        used, total = found
        in_use = self.adapter.bytes_in_use()
        return (in_use if in_use is not None else used) / total

    def write(self, key: CaseKey, status: str, reason: str = "", started: float = 0.0,
              **fields: Any) -> None:
        """Append one row; ``timing``, where given, is a suites.rows.records.Timing."""
        now = time.perf_counter()
        fresh_after = self.job.fresh_after if self.job else ""
        if fresh_after and status != "ok":
            reason = f"{reason} (in a fresh process; before that, {fresh_after})"
        timing = fields.pop("timing", None)
        if fresh_after and timing is not None:
            timing = replace(timing, fresh_process_after=fresh_after)
        row = Row(key=key, status=status, reason=reason, env=self.env,
                  started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                  wall_s=round(now - started, 3) if started else 0.0,
                  elapsed_s=round(now - self.last_row, 3) if self.last_row else None,
                  timing=timing.to_dict() if timing is not None else None, **fields)
        self.last_row = now
        self.results.append(row)
        emit(RowWritten(key.id(), status, reason,
                        median_ms=timing.median_ms if timing is not None else None,
                        unstable=timing.unstable if timing is not None else None))

    def run_job(self, job: WorkerJob) -> None:
        # Each row's elapsed_s is the worker's time since the previous row: the job's build
        # counted into its first, and so is the previous job's release, which no row of its
        # own follows. A worker's rows thus sum to its time between its first job's start
        # and its last job's last row (the matrix's estimates, suites/matrix/estimate.py), what it
        # spent waiting for the runner apart.
        self.last_row = time.perf_counter() - self.release_s
        try:
            self.build_and_measure(job)
        finally:
            self.release_s = time.perf_counter() - self.last_row
        if self.oom_stood:
            # The module's docstring: after a refused allocation the process is retired.
            raise FreshProcessNeeded(f"{job.model} b{job.batch} {job.precision} {job.variant} "
                                     f"ran out of device memory in the worker before "
                                     f"({self.oom_stood}), whose device state is not "
                                     f"trusted after that")

    def build_and_measure(self, job: WorkerJob) -> None:
        from adapters.base import CaseConfig, Unsupported
        from models.analysis import analyse
        from models.inputs import make_batch
        from models.weights import canonical_weights
        from models.zoo import get_model
        from suites.instruments.kernel_check import TimedReference

        self.jobs_started += 1
        self.job = job
        case = CaseConfig(job.precision, job.variant)
        settings = Settings(self.plan.framework, self.plan.device, job.precision,
                            job.variant, self.plan.threads, self.plan.interop_threads,
                            compile_cache=job.compile_cache)
        model = get_model(job.model)
        stats = analyse(model)
        info = {"family": model.family, "params": stats.params,
                "trainable_params": stats.trainable_params,
                "flops_per_example": stats.flops, "input_shape": list(stats.input_shape)}

        def key(measure_name: str) -> CaseKey:
            return CaseKey(self.plan.suite, job.model, job.batch, measure_name, settings)

        pending = list(job.pending)
        # Figures of this case recorded before this process (suites/harness/runner.py
        # recorded_references); a measure timed here replaces its entry.
        self.timed = {name: TimedReference(*figures)
                      for name, figures in job.recorded.items()}
        emit(JobStarting(f"{job.model} b{job.batch} {job.precision} {job.variant}"))
        # The runner's per-case time limit: the build counts against every pending measure.
        emit(CasesStarted(tuple(key(name).id() for name in pending)))
        started = time.perf_counter()
        kept_key = KeptKey(self.plan.results, tuple(getattr(job, name) for name in KEPT_CASE_FIELDS))
        kept_job = self.kept.take(kept_key) if self.plan.phase == "device" else None
        prepared = kept_job.prepared if kept_job is not None else None
        self.job_was_kept = kept_job is not None
        try:
            settings = Settings(**{**asdict(settings),
                                   "execution": self.adapter.describe(case)})
            if kept_job is not None:
                info.update(kept_job.info)
                self.adapter.reapply(case)
            else:
                # What jobs kept for the device phase hold now is not this job's memory.
                self.held_bytes = self.adapter.bytes_in_use() if len(self.kept) else None
                weights = canonical_weights(model, self.plan.seed)
                batch = make_batch(model, job.batch, self.plan.seed)
                if batch.lengths is not None:
                    info["seq_len"] = int(batch.x.shape[1])
                self.adapter.check_precision(case)
                prepared = self.adapter.prepare(model, weights, batch, case)
                del weights
        except BaseException as error:  # the whole job fails the same way
            if prepared is not None:
                prepared.close()
            if isinstance(error, (KeyboardInterrupt, OutputError)):
                raise
            status, reason = self.classify(error, Unsupported)
            for name in pending:
                self.write(key(name), status, reason, started, model_info=info)
            return
        kept = False
        try:
            timed = [name for name in pending
                     if name not in (FINGERPRINT, PROFILE, COUNTERS, DEVICE_TIME)]
            self.time_measures(prepared, timed, model, job, key, info)
            # The device time first: the profile's kernel check reads it.
            for name in sorted((n for n in pending if n not in timed),
                               key=lambda n: n != DEVICE_TIME):
                check_interrupt()
                emit(CasesStarted((key(name).id(),)))
                hang_if_injected(key(name).id())
                started = time.perf_counter()
                if name == FINGERPRINT:
                    self.fingerprint_row(prepared, key(name), info, started, Unsupported,
                                         model, job)
                    continue
                if name == DEVICE_TIME:
                    self.device_time_row(prepared, key(name), info, started, model, job)
                    continue
                try:
                    if name == PROFILE:
                        from suites.instruments.kernel_profile import profile_fields
                        measure_name = self.profiled_measure(job)
                        fields = profile_fields(prepared, self.plan.device, measure_name,
                                                job.profile_iterations,
                                                self.timed.get(measure_name))
                    else:   # COUNTERS
                        from suites.instruments.counters import counters_fields
                        fields = counters_fields(self.plan, job.to_dict(), self.profiled_measure(job))
                    self.write(key(name), "ok", "", started, model_info=info, **fields)
                except (KeyboardInterrupt, OutputError):
                    raise
                except BaseException as error:
                    status, reason = self.classify(error, Unsupported)
                    self.write(key(name), status, reason, started, model_info=info)
            if self.plan.phase == "wall" and job.keep:
                kept = self.kept.offer(kept_key, KeptJob(prepared, {
                    name: info[name] for name in ("seq_len",) if name in info}))
                if not kept:
                    print(f"{job.model} b{job.batch} not kept for the device phase: "
                          f"{self.kept.declined}", file=sys.stderr, flush=True)
        finally:
            if not kept:
                prepared.close()
            del prepared
            gc.collect()

    def time_measures(self, prepared, names: list[str], model, job: WorkerJob, key,
                      info: dict[str, Any]) -> None:
        """The job's timed measures in interleaved independent repetitions
        (suites/stats/repetitions.py), with the GPU's and the host's state read during
        sampling (suites/instruments/device_state.py and host_state.py) and the device's own
        time beside the wall time (suites/instruments/device_time.py); each measure's row is
        written once it has enough."""
        from adapters.base import Unsupported
        from suites.instruments.device_state import empty_state, energy_fields, summarise_readings
        from suites.instruments.device_time import (
            COMPILE_CACHE_JOB,
            WALL_PHASE,
            device_clock_for,
            device_time_method,
        )
        from suites.instruments.host_state import summarise_host
        from suites.instruments.kernel_check import TimedReference
        from suites.stats.repetitions import combined_timing, interleave, repetition_settings
        from suites.stats.timer import measure

        settings = job.timer
        # The wall phase never loads CUPTI (suites/harness/device_pass.py says why); its device
        # time comes from the device phase, or here from the adapter's own clock.
        # A compile-cache job gets no device phase (suites/harness/runner.py pending_measures).
        without_cupti = "" if self.plan.phase != "wall" else \
            COMPILE_CACHE_JOB if job.compile_cache else WALL_PHASE
        device_clock, device_reason = device_clock_for(prepared, self.plan.device,
                                                       without_cupti=without_cupti)
        started = {name: time.perf_counter() for name in names}
        steps: dict[str, Any] = {}
        first: dict[str, dict[str, Any]] = {}     # memory and extra fields of repetition 1
        readings: dict[str, list] = {name: [] for name in names}   # one list per window
        host_runs: dict[str, list] = {name: [] for name in names}

        def repeat(name: str, index: int):
            check_interrupt()
            # The runner's time limit covers each repetition of the measure being timed,
            # so a hang in one measure times out that measure alone and a fresh worker
            # goes on with the job's others.
            emit(CasesStarted((key(name).id(),)))
            if name not in steps:
                hang_if_injected(key(name).id())
                started[name] = time.perf_counter()
                steps[name] = self.timed_step(prepared, name, model, job)
                prepared.reset_peak_memory()
            step, _ = steps[name]
            clock = device_clock if index < settings.repetitions else None
            monitor = self.gpu_monitor
            if monitor is not None:
                monitor.begin_steady()
                monitor.start_sampling()
            self.host_monitor.start_sampling()
            try:
                timing = measure(step, prepared.sync, repetition_settings(settings, index),
                                 steady=monitor.steady if monitor is not None else None,
                                 device_clock=clock)
            finally:
                host_runs[name].append(self.host_monitor.stop_sampling())
                if monitor is not None:
                    readings[name].append(list(monitor.stop_sampling()))
            if index == 0:
                first[name] = {"memory": own_memory(prepared.peak_memory(), self.held_bytes),
                               "extra": dict(prepared.extra)}
            return timing

        def finish(name: str, repetitions) -> None:
            timing = combined_timing(repetitions, settings)
            median_s = timing.median_ms / 1e3
            state = (summarise_readings([r for window in readings[name] for r in window],
                                        self.gpu_monitor.sm_max_mhz)
                     | energy_fields(readings[name], median_s)
                     if self.gpu_monitor is not None else empty_state(self.gpu_state_reason))
            clock_reason = device_clock.reason if device_clock is not None else ""
            if timing.device_median_ms is None:
                clock = {"device_time_reason": (device_reason or clock_reason
                                                or "no device time was taken")}
            else:
                clock = {"device_time_kind": device_clock.kind,
                         "device_time_method": device_time_method(settings),
                         # a clock failed in some block and the next took over
                         "device_time_note": clock_reason or None}
            timing = replace(timing, adapter=first[name]["extra"], **steps[name][1](median_s),
                             **state, **summarise_host(host_runs[name]), **clock)
            self.timed[name] = TimedReference(timing.median_ms, timing.device_median_ms)
            self.write(key(name), "ok", "", started[name], timing=timing,
                       memory=first[name]["memory"], model_info=info)

        def fail(name: str, error: BaseException) -> None:
            status, reason = self.classify(error, Unsupported)
            self.write(key(name), status, reason, started[name], model_info=info)

        interleave(names, lambda name: settings, repeat, finish, fail)

    def timed_step(self, prepared, name: str, model, job: WorkerJob):
        """The callable to time, and the extra timing fields its row gets."""
        declared = MEASURE_BY_NAME[name]
        if declared.driver != "epoch":
            return prepared.step(name), lambda median_s: {}
        from models.inputs import make_epoch

        count = job.epoch_batches
        batches = make_epoch(model, job.batch, count, self.plan.seed)
        step = prepared.epoch_step(declared.over, batches)
        padded = [int(b.x.shape[1]) for b in batches] if batches[0].lengths is not None else []
        del batches

        def extra(median_s: float) -> dict[str, Any]:
            # Bahrampour et al. report the epoch's time per batch (Table 6); the names are
            # the measure's declared timing fields (models/measures.py).
            return {"epoch_batches": count, "per_batch_median_ms": median_s * 1e3 / count,
                    **({"mean_padded_length": sum(padded) / len(padded)} if padded else {})}
        return step, extra

    def device_time_row(self, prepared, case_key: CaseKey, info, started, model,
                        job: WorkerJob) -> None:
        """The job's ``device_time`` row (suites/harness/device_pass.py), in the device phase."""
        from adapters.base import Unsupported
        from suites.harness.device_pass import device_times, method
        from suites.instruments.kernel_check import TimedReference
        settings = job.timer
        try:
            found = device_times(prepared, list(job.device_measures), settings,
                                 lambda name: self.timed_step(prepared, name, model, job),
                                 Unsupported)
        except (KeyboardInterrupt, OutputError):
            raise
        except BaseException as error:
            status, reason = self.classify(error, Unsupported)
            self.write(case_key, status, reason, started, model_info=info)
            return
        for name, figures in found.items():
            if figures.get("device_median_ms") is not None:
                # The wall median recorded before this phase stays: without it a profile's
                # busy time that matches the device median cannot say the wall median is
                # launch gaps and host work (suites/instruments/kernel_check.py).
                wall = self.timed.get(name, TimedReference()).median_ms
                self.timed[name] = TimedReference(wall, figures["device_median_ms"])
        timed = [f for f in found.values() if f.get("device_median_ms") is not None]
        if timed:
            status, reason = "ok", ""
        elif found and all("unsupported" in f for f in found.values()):
            status, reason = "unsupported", "no timed measure of the job runs here"
        else:
            status = "failed"
            reason = "; ".join(dict.fromkeys(f.get("reason", "") for f in found.values()
                                             if f.get("reason"))) or "no device time taken"
        self.write(case_key, status, reason, started, model_info=info,
                   device_times={"method": method(settings, self.after_wall,
                                                  self.job_was_kept),
                                 "measures": found})

    def profiled_measure(self, job: WorkerJob) -> str:
        """What a job's profile and counters measure: the training iteration (forward and
        backward), as Li et al. profile, unless the job times the forward pass without
        the gradient (gpu-forward-profile: its profiles explain the forward medians beside
        them) or the framework is an inference engine."""
        # A job carries its group's measures (suites.harness.spec.Job); a job made by hand may
        # name only the measures pending in this process.
        measures = job.measures or job.pending
        forward_only = "forward" in measures and "gradient" not in measures
        return "gradient" if "gradient" in self.entry.measures and not forward_only \
            else "forward"

    def fingerprint_gradients(self, job: WorkerJob) -> str:
        """Whose gradients the job's fingerprint holds (suites/truth/check.py
        ``gradients_of``): those of what it measured, a profile or counters standing for
        the measure it profiles."""
        from suites.truth.check import gradients_of

        return gradients_of([self.profiled_measure(job) if name in (PROFILE, COUNTERS)
                             else name for name in job.measures or job.pending])

    def fingerprint_row(self, prepared, case_key: CaseKey, info, started, unsupported,
                        model, job: WorkerJob) -> None:
        from suites.truth.check import fingerprint_fields

        try:
            # The fingerprint and its errors against the float64 truth (suites/truth/check.py).
            fingerprint = fingerprint_fields(prepared, model, job.batch, self.plan.seed,
                                             unsupported, self.fingerprint_gradients(job))
            self.write(case_key, "ok", "", started, fingerprint=fingerprint,
                       model_info=info)
        except (KeyboardInterrupt, OutputError):
            raise
        except BaseException as error:
            status, reason = self.classify(error, unsupported)
            self.write(case_key, status, reason, started, model_info=info)

    def classify(self, error: BaseException, unsupported: type) -> tuple[str, str]:
        if isinstance(error, unsupported):
            return "unsupported", str(error)
        if self.adapter.is_out_of_memory(error):
            earlier = self.jobs_started - 1
            if earlier and not (self.job and self.job.fresh_after):
                raise FreshProcessNeeded(
                    f"{one_line(error)}, in a worker that had run {earlier} other "
                    f"job{'s' if earlier > 1 else ''}")
            self.oom_stood = one_line(error)
            return "oom", self.oom_stood
        traceback.print_exc(file=sys.stderr)
        return "failed", one_line(error)

    def switch_to(self, plan: Plan) -> None:
        """The next plan of a serving process: another suite's jobs and results file, run
        on the framework this process already started."""
        changed = [name for name in PROCESS_FIELDS
                   if getattr(plan, name) != getattr(self.plan, name)]
        if changed == ["phase"] and (self.plan.phase, plan.phase) == ("wall", "device"):
            # The device phase may follow this process's wall samples, never precede
            # them: CUPTI slows every later launch in a process (suites/harness/device_pass.py;
            # suites/harness/pool.py hands the wall worker on).
            self.after_wall = True
            changed = []
        if changed:
            raise ValueError(f"a plan with another {', '.join(changed)} was sent to a worker "
                             f"started for {self.plan.framework} on {self.plan.device}")
        self.plan = plan
        self.results = ResultsFile(Path(plan.results))

    def run(self) -> None:
        for job in self.plan.jobs:
            check_interrupt()
            self.run_job(job)


def plan_paths() -> Iterator[str]:
    """The lines of stdin, each as it arrives; stdin itself becomes /dev/null, so that no
    process this one starts (a compiler, Nsight Compute's child) reads a plan meant for it."""
    plans = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return iter(plans.readline, "")


def serve(lines: Iterable[str]) -> None:
    """Run the plan of each path in ``lines`` in this process, the framework started once."""
    worker = None
    for line in lines:
        path = line.strip()
        if not path:
            continue
        plan = Plan.from_file(Path(path))
        log_to(plan.log)
        if worker is None:
            worker = Worker(plan)
        else:
            worker.switch_to(plan)
        worker.run()
        emit(PlanDone())


def die_with_parent(expected: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG),
    then check the parent is still the process ``expected`` (it may have died first).
    A worker's parent is its runner; a lane's matrix's is the matrix of the lanes
    (suites/matrix/lanes.py)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != expected:
        os._exit(137)


def die_with_runner() -> None:
    expected = os.environ.get(PARENT_PID)
    if expected:
        die_with_parent(int(expected))


def main(argv: list[str]) -> int:
    die_with_runner()
    install_interrupt_handler()
    try:
        if argv[:1] == ["--serve"]:
            serve(plan_paths())
        else:
            plan = Plan.from_file(Path(argv[0]))
            log_to(plan.log)
            Worker(plan).run()
    except KeyboardInterrupt:
        return 130
    except FreshProcessNeeded as needed:
        emit(FreshProcess(str(needed)))
        return FRESH_PROCESS_EXIT
    except OutputError as error:   # the results location became unusable (a full disk)
        emit(Fatal(str(error)))
        return 3
    except Exception as error:  # the adapter could not start: no device, no framework
        from adapters.base import DeviceUnavailable
        if isinstance(error, (DeviceUnavailable, ImportError)):
            emit(Fatal(one_line(error)))
            return 3
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
