"""How long XLA takes to compile a set of dlbench's JAX programs: one after another, or
ahead of time in a pool of threads. The measurement behind the README's "Where JAX's first
calls go" (time to result of the GPU matrix).

    python -m adapters.jax.compile_probe --device gpu                 # one after another
    python -m adapters.jax.compile_probe --device gpu --threads 16    # 16 at a time
    XLA_FLAGS=--xla_gpu_autotune_level=0 python -m adapters.jax.compile_probe --device gpu

Run each setting in a fresh process: XLA keeps autotuning results in the process, so a
second compile of the same fusions there would be cheaper than a cold one. The programs
are every job's forward and gradient step (``--jobs``, model:batch) and the LSTM's
gradient at the first padded lengths that Bahrampour et al.'s epoch reaches (``--lstm-lengths``;
each length is a program of its own, as in the ``bahrampour2016`` suite). Tracing and lowering
happen first, one after another (Python); only XLA's compile is timed, each program's own
and the wall time of all. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import adapters.jax  # noqa: F401  (XLA's environment before jax starts)
from adapters.base import CaseConfig, RunConfig
from adapters.jax.adapter import JaxAdapter
from models.inputs import make_batch, make_epoch
from models.weights import canonical_weights
from models.zoo import get_model

DEFAULT_JOBS = ("lenet:64", "alexnet:128", "sae_ae1:64", "resnet50:16")
EPOCH_BATCHES = 124   # bahrampour2016.toml's epoch: 124 batches of 16
LSTM_BATCH = 16


def lowered_programs(adapter: JaxAdapter, jobs: list[tuple[str, int]], lstm_lengths: int,
                     lstm_model: str = "lstm") -> list[tuple[str, Any]]:
    """(label, lowered step) for every job's forward and gradient and the LSTM lengths."""
    programs = []
    case = CaseConfig("fp32", "jit")
    for name, batch in jobs:
        model = get_model(name)
        prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, batch),
                                   case)
        for measure in ("forward", "gradient"):
            programs.append((f"{name} b{batch} {measure}", prepared.lowered(measure)))
    if lstm_lengths > 0:
        model = get_model(lstm_model)
        first = make_batch(model, LSTM_BATCH)
        prepared = adapter.prepare(model, canonical_weights(model), first, case)
        by_length: dict[int, Any] = {}   # the first lengths the epoch reaches, in its order
        for batch in make_epoch(model, LSTM_BATCH, EPOCH_BATCHES):
            by_length.setdefault(int(batch.x.shape[1]), batch)
            if len(by_length) == lstm_lengths:
                break
        for length in sorted(by_length):
            programs.append((f"{lstm_model} b{LSTM_BATCH} length {length} gradient",
                             prepared.lowered("gradient", by_length[length])))
    return programs


def compile_all(programs: list[tuple[str, Any]], threads: int) -> tuple[float, dict[str, float]]:
    """Wall seconds to compile every program, and each program's own seconds."""
    seconds: dict[str, float] = {}

    def compile_one(program: tuple[str, Any]) -> None:
        label, lowered = program
        started = time.perf_counter()
        lowered.compile()
        seconds[label] = time.perf_counter() - started

    started = time.perf_counter()
    if threads <= 1:
        for program in programs:
            compile_one(program)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(compile_one, programs))
    return time.perf_counter() - started, seconds


def parse_job(text: str) -> tuple[str, int]:
    name, _, batch = text.partition(":")
    get_model(name)   # an unknown model fails here, by name
    if not batch.isdigit() or int(batch) < 1:
        raise ValueError(f"job {text!r}: write model:batch, e.g. lenet:64")
    return name, int(batch)


def probe(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m adapters.jax.compile_probe",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="programs compiled at a time (1: one after another)")
    parser.add_argument("--jobs", nargs="*", default=list(DEFAULT_JOBS),
                        help="model:batch, each compiled as forward and gradient")
    parser.add_argument("--lstm-lengths", type=int, default=6,
                        help="the LSTM gradient at this many of the epoch's padded lengths")
    parser.add_argument("--lstm-model", default="lstm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    jobs = [parse_job(job) for job in args.jobs]
    adapter = JaxAdapter(RunConfig(args.device, os.cpu_count() or 1, 1))
    started = time.perf_counter()
    programs = lowered_programs(adapter, jobs, args.lstm_lengths, args.lstm_model)
    lower_s = time.perf_counter() - started
    wall_s, seconds = compile_all(programs, args.threads)
    return {"device": adapter.device.device_kind,
            "jax": importlib.metadata.version("jax"), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "threads": args.threads, "programs": len(programs),
            "build_and_lower_s": round(lower_s, 3), "compile_wall_s": round(wall_s, 3),
            "sum_of_compiles_s": round(sum(seconds.values()), 3),
            "each_s": {label: round(s, 3) for label, s in seconds.items()}}


def main(argv: list[str] | None = None) -> int:
    try:
        result = probe(sys.argv[1:] if argv is None else argv)
    except (KeyError, ValueError) as error:
        print(f"compile_probe: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
