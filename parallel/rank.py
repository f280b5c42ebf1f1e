"""One rank of data-parallel cases: ``python -m parallel.rank SPEC.json [SPEC.json ...]``.

Started by the launcher (directly, or by ``torch.distributed.run`` for torch). It builds
the framework's data-parallel step from the adapter's own network, times it for a fixed
number of iterations — every rank runs the same count, so no rank waits in a collective
for a peer that has stopped — then times the same step without the gradient all-reduce,
and rank 0 writes the result; then the next spec's case, in the same process. The
communication share is the time the all-reduce adds to the step: 1 − local / full
(exposed communication; what overlaps with backward is free).
On a GPU a few more steps run under CUPTI (``parallel/communication.py``): NCCL's kernel
time per step, and how much of it overlapped compute. An engine that refuses the case
(``adapters.base.Unsupported``: ONNX Runtime at bf16) makes rank 0 write the reason, and
the row is ``unsupported``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import DataParallelEngine
from parallel import communication
from parallel.spec import RankSpec

PROFILED_STEPS = 5   # steps under CUPTI, after the timed ones
# A rank's exit code when CUPTI could not be detached after a case's trace.
DETACHED_EXIT = 3


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits: set by torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or by the
    launcher (the same names) for the other engines."""

    rank: int
    world_size: int
    local_rank: int
    coordinator: str            # host:port of jax.distributed's coordinator, "" if none

    @staticmethod
    def from_environment() -> RankInfo:
        env = os.environ
        return RankInfo(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)),
                        int(env.get("LOCAL_RANK", 0)), env.get("DLBENCH_COORDINATOR", ""))


def fixed_count(run, sync, warmup: int, samples: int, fault_step: int = -1
                ) -> tuple[float, list[float]]:
    """First call, ``warmup`` untimed calls, then ``samples`` synchronised single steps."""
    sync(None)
    start = time.perf_counter()
    sync(run())
    first = time.perf_counter() - start
    for _ in range(warmup):
        sync(run())
    out = []
    for index in range(samples):
        if index == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)   # a rank dying mid-run (tests)
        start = time.perf_counter()
        sync(run())
        out.append(time.perf_counter() - start)
    return first, out


def traced_communication(engine, spec: RankSpec, communicates: bool
                         ) -> tuple[dict[str, Any] | None, str]:
    """NCCL kernel time and its overlap with compute, or None and why there is none."""
    if not communicates:
        return None, "no communication: one forward pass per independent session"
    if spec.device != "gpu":
        return None, "CPU run: no GPU kernels to trace"
    return communication.trace(engine, PROFILED_STEPS)


def engine_class(framework: str) -> type[DataParallelEngine]:
    """The framework's ``adapters.base.DataParallelEngine`` (its adapter's parallel.py)."""
    return importlib.import_module(f"adapters.{framework}.parallel").DataParallel


def done_marker(result: Path, rank: int) -> Path:
    return result.with_name(f"rank{rank}.done")


def write_result(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: the runner reads a result as soon as the file appears."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, default=str))
    os.replace(partial, path)


def main(argv: list[str]) -> int:
    """Each spec in ``argv`` in turn, in this process (the cases of one launch share its
    start: the processes, the framework's import, the collective group); the engine's
    ``finish`` ends the group after the last."""
    specs = [RankSpec.from_file(Path(path)) for path in argv]
    info = RankInfo.from_environment()
    from suites.instruments.environment import limit_cpus

    first = specs[0]
    threads = max(1, len(os.sched_getaffinity(0)) // max(1, first.processes))
    affinity = []
    if first.device == "cpu" and first.processes > 1:
        # Ranks on one CPU share it fairly: each gets its own slice of the cores.
        allowed = sorted(os.sched_getaffinity(0))
        affinity = allowed[info.local_rank * threads:(info.local_rank + 1) * threads] or allowed
        os.sched_setaffinity(0, affinity)
    elif first.device == "cpu":
        affinity = limit_cpus(threads)
    engine_type = engine_class(first.framework)
    try:
        for index, spec in enumerate(specs):
            run_case(engine_type, spec, info, threads, affinity)
            if len(specs) > 1:
                # This rank is through the case: in a shared launch its result stands only
                # once every rank is (ONNX Runtime's processes share no collective that
                # would say so; a launch of one case says it by its exit).
                done_marker(Path(spec.result), info.rank).touch()
            if communication.DETACH_PROBLEM and index + 1 < len(specs):
                # Every rank traced and sees the same: all stop, and the runner gives the
                # remaining cases processes of their own.
                print(f"CUPTI stays attached ({communication.DETACH_PROBLEM}): the "
                      f"remaining {len(specs) - index - 1} cases need fresh processes",
                      file=sys.stderr)
                return DETACHED_EXIT
    finally:
        engine_type.finish()
    return 0


def run_case(engine_type: type[DataParallelEngine], spec: RankSpec, info: RankInfo, threads: int,
             affinity: list[int]) -> None:
    """One case on this rank; rank 0 writes its result."""
    from adapters.base import Unsupported
    from suites.instruments.environment import host_environment
    from suites.rows.records import Timing
    from suites.stats.timer import TimerSettings, summarise

    try:
        engine = engine_type(spec, info, threads)
    except Unsupported as refusal:
        if info.rank == 0:
            write_result(Path(spec.result), {"unsupported": str(refusal)})
        return
    try:
        if spec.task == "gradients":
            loss, grads = engine.gradients()
            if info.rank == 0:
                np.savez(spec.result, __loss__=np.float64(loss), **grads)
            return
        fault = spec.fault_step if info.rank == info.world_size - 1 else -1
        first, full = fixed_count(engine.step(), engine.sync, spec.warmup, spec.samples, fault)
        _, local = fixed_count(engine.local_step(), engine.sync, max(1, spec.warmup // 2),
                               spec.samples)
        communicates = engine.step_kind != "forward"
        kernels, kernels_reason = traced_communication(engine, spec, communicates)
        if info.rank != 0:
            return
        settings = TimerSettings(rel_ci=0.05)
        local_timing = summarise(0.0, local, 1, settings)
        local_median = local_timing.median_s * 1e3
        timing = replace(Timing.of_run(summarise(first, full, 1, settings)),
                         local_median_ms=local_median,
                         local_ci_low_ms=local_timing.ci_low_s * 1e3,
                         local_ci_high_ms=local_timing.ci_high_s * 1e3)
        median = timing.median_ms
        write_result(Path(spec.result), {
            "timing": timing.to_dict(),
            "communication_share": max(0.0, 1.0 - local_median / median)
            if median and communicates else None,
            "communication_method": engine.communication_method,
            "communication_kernels": kernels,
            "communication_kernels_reason": kernels_reason,
            "engine": engine.engine, "backend": engine.backend,
            # The thread pools this rank's framework ran with (the row's settings).
            "threads": {"intra": engine.adapter.config.threads,
                        "inter": engine.adapter.config.interop_threads},
            "step": engine.step_kind,
            "memory": engine.peak_memory(),
            "env": {**host_environment(threads, affinity), **engine.environment()},
        })
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
