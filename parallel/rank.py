"""One rank of a data-parallel case: ``python -m parallel.rank SPEC.json``.

Started by the launcher (directly, or by ``torch.distributed.run`` for torch). It builds
the framework's data-parallel step from the adapter's own network, times it for a fixed
number of iterations — every rank runs the same count, so no rank waits in a collective
for a peer that has stopped — then times the same step without the gradient all-reduce,
and rank 0 writes the result. The communication share is the time the all-reduce adds to
the step: 1 − local / full (exposed communication; what overlaps with backward is free).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parallel import communication
from parallel.spec import RankSpec

PROFILED_STEPS = 5   # steps under CUPTI, after the timed ones


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


def engine_module(framework: str):
    return importlib.import_module(f"adapters.{framework}.parallel")


def main(argv: list[str]) -> int:
    spec = RankSpec.from_file(Path(argv[0]))
    info = RankInfo.from_environment()
    from suites.environment import host_environment, limit_cpus
    from suites.results import timing_fields
    from suites.timer import TimerSettings, summarise

    threads = max(1, len(os.sched_getaffinity(0)) // max(1, spec.processes))
    affinity = []
    if spec.device == "cpu" and spec.processes > 1:
        # Ranks on one CPU share it fairly: each gets its own slice of the cores.
        allowed = sorted(os.sched_getaffinity(0))
        affinity = allowed[info.local_rank * threads:(info.local_rank + 1) * threads] or allowed
        os.sched_setaffinity(0, affinity)
    elif spec.device == "cpu":
        affinity = limit_cpus(threads)
    from adapters.base import Unsupported
    try:
        engine = engine_module(spec.framework).DataParallel(spec, info, threads)
    except Unsupported as refusal:
        if info.rank == 0:
            Path(spec.result).write_text(json.dumps({"unsupported": str(refusal)}))
        return 0
    try:
        if spec.task == "gradients":
            loss, grads = engine.gradients()
            if info.rank == 0:
                np.savez(spec.result, __loss__=np.float64(loss), **grads)
            return 0
        fault = spec.fault_step if info.rank == info.world_size - 1 else -1
        first, full = fixed_count(engine.step(), engine.sync, spec.warmup, spec.samples, fault)
        _, local = fixed_count(engine.local_step(), engine.sync, max(1, spec.warmup // 2),
                               spec.samples)
        communicates = getattr(engine, "step_kind", "gradient") != "forward"
        kernels, kernels_reason = traced_communication(engine, spec, communicates)
        if info.rank != 0:
            return 0
        settings = TimerSettings(rel_ci=0.05)
        timing = timing_fields(summarise(first, full, 1, settings))
        local_timing = summarise(0.0, local, 1, settings)
        median, local_median = timing["median_ms"], local_timing.median_s * 1e3
        result: dict[str, Any] = {
            "timing": {**timing, "local_median_ms": local_median,
                       "local_ci_low_ms": local_timing.ci_low_s * 1e3,
                       "local_ci_high_ms": local_timing.ci_high_s * 1e3},
            "communication_share": max(0.0, 1.0 - local_median / median)
            if median and communicates else None,
            "communication_method": engine.communication_method,
            "communication_kernels": kernels,
            "communication_kernels_reason": kernels_reason,
            "engine": engine.engine, "backend": engine.backend,
            "step": getattr(engine, "step_kind", "gradient"),
            "memory": engine.peak_memory(),
            "env": {**host_environment(threads, affinity), **engine.environment()},
        }
        Path(spec.result).write_text(json.dumps(result, default=str))
        return 0
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
