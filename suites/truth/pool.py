"""Computing missing float64 truths (``models/truth.py``) in parallel processes.

Why processes and not BLAS threads: the reference is numpy, and much of its time goes to
window copies (im2col), pooling and element-wise work that runs on one core whatever
BLAS's thread count (on the 2-core development machine a one-process fill used about one
core). Separate processes use every core for all of it. Each process is a fresh
interpreter (spawn: nothing inherited from a parent that may hold threads or a GPU
context) whose BLAS thread count is set through the environment before it imports
numpy, so that processes × threads is about the usable CPUs (``shape_for``).

Jobs start largest first (longest-processing-time order: the largest job, started last,
would finish last), each in a process of its own, so one job that fails — an exception,
or a process killed for memory — is reported and the others go on.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# The thread-count variables of the BLAS and OpenMP runtimes numpy may be built with
# (OpenBLAS, including scipy-openblas; MKL; BLIS; Accelerate; OpenMP), read once when the
# library loads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


@dataclass(frozen=True)
class Job:
    model: str
    batch: int
    seed: int
    gflop: float


@dataclass(frozen=True)
class Outcome:
    job: Job
    seconds: float | None    # wall seconds of the computation in its process; None: failed
    error: str = ""


@dataclass(frozen=True)
class PoolShape:
    processes: int
    threads: int             # BLAS threads per process


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which a container or taskset
    narrows), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


# Peak resident memory of a truth process per GFLOP of its job, an upper estimate from two
# measured on a 2-core AMD EPYC (/usr/bin/time -v): VGG-A at batch 32, 487 GFLOP, 2.4 GB;
# ResNet-50 at batch 16, 164 GFLOP, 0.62 GB. The float64 activations of the training
# forward over the batch grow with it as its products do.
BYTES_PER_GFLOP = 5e6


def shape_for(jobs: list[Job], cpus: int, available_bytes: float | None = None) -> PoolShape:
    """As many processes as there are CPUs and jobs, but no more than the total work over
    the largest job: past that the largest job alone sets the wall time. Threads: the
    CPUs shared out, rounded to the nearest (9 processes on 16 CPUs get 2 each: the BLAS
    part of the work is not all of it, so slightly more threads than CPUs idle less than
    fewer). Processes rather than threads: much of the reference's time is numpy's
    single-threaded window copies and element-wise work, so a job's threads help it
    little (VGG-A at batch 32 took 14.3 s with 21 threads on a 64-core H200 host, 20.0 s
    with 2 on a 2-core AMD EPYC). With ``available_bytes``, no more processes than the
    largest jobs' estimated memory (``BYTES_PER_GFLOP``) fits in 80% of it."""
    if not jobs:
        return PoolShape(0, 0)
    largest = max(job.gflop for job in jobs)
    balanced = math.ceil(sum(job.gflop for job in jobs) / largest) if largest > 0 else len(jobs)
    processes = max(1, min(cpus, len(jobs), balanced))
    if available_bytes is not None:
        biggest = sorted((job.gflop * BYTES_PER_GFLOP for job in jobs), reverse=True)
        fits = 0
        while fits < processes and sum(biggest[:fits + 1]) <= 0.8 * available_bytes:
            fits += 1
        processes = max(1, fits)
    return PoolShape(processes, max(1, round(cpus / processes)))


@contextmanager
def thread_limit(threads: int) -> Iterator[None]:
    """The BLAS thread variables set to ``threads`` while processes start (a spawned
    process inherits the environment), and restored afterwards."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def compute_into_cache(model: str, batch: int, seed: int) -> None:
    """A job's work: compute the truth and write its cache entry."""
    from models import truth
    from models.zoo import get_model

    truth.load_or_compute(get_model(model), batch, seed)


Work = Callable[[str, int, int], None]


def _child(connection, work: Work, job: Job) -> None:
    try:
        started = time.perf_counter()
        work(job.model, job.batch, job.seed)
        connection.send(("ok", time.perf_counter() - started))
    except BaseException as error:   # whatever it was, the parent reports it
        connection.send(("failed", f"{type(error).__name__}: {error}"))
    finally:
        connection.close()


@dataclass(frozen=True)
class _Running:
    job: Job
    process: multiprocessing.process.BaseProcess
    connection: multiprocessing.connection.Connection


def _outcome(running: _Running) -> Outcome:
    """Read what the process sent (a message, or end of file where it died first), then
    reap it: reading first, so a long message never waits on a full pipe."""
    try:
        message = running.connection.recv()
    except EOFError:
        message = None
    running.connection.close()
    running.process.join()
    if message is None:
        return Outcome(running.job, None, f"its process exited with code "
                                          f"{running.process.exitcode} (killed for memory?)")
    status, value = message
    if status == "ok":
        return Outcome(running.job, value)
    return Outcome(running.job, None, value)


def run(jobs: list[Job], shape: PoolShape, on_start: Callable[[Job], None],
        on_done: Callable[[Outcome], None], work: Work = compute_into_cache) -> list[Outcome]:
    """Run every job, at most ``shape.processes`` at a time, largest first; ``work`` must
    be a module-level function (the spawned process imports it)."""
    context = multiprocessing.get_context("spawn")
    pending = sorted(jobs, key=lambda job: -job.gflop)
    running: dict[multiprocessing.connection.Connection, _Running] = {}
    outcomes: list[Outcome] = []
    with thread_limit(shape.threads):
        try:
            while pending or running:
                while pending and len(running) < shape.processes:
                    job = pending.pop(0)
                    receive, send = context.Pipe(duplex=False)
                    process = context.Process(target=_child, args=(send, work, job),
                                              name=f"truth {job.model} b{job.batch}")
                    process.start()
                    send.close()   # the child holds its end
                    running[receive] = _Running(job, process, receive)
                    on_start(job)
                for ready in multiprocessing.connection.wait(list(running)):
                    outcome = _outcome(running.pop(ready))
                    outcomes.append(outcome)
                    on_done(outcome)
        finally:
            for left in running.values():   # interrupted: stop what this call started
                left.process.terminate()
                left.process.join()
    return outcomes
