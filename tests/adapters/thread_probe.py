"""CPU time per OS thread while an adapter repeats one step, for the thread-control tests.

    python -m tests.adapters.thread_probe FRAMEWORK THREADS MEASURE

prints ``{"per_thread_ns": [...], "extra": {...}}``: nanoseconds each thread spent on a CPU
(proc(5), schedstat), largest first, and the prepared case's recorded settings. Unlike wall
time, a thread's CPU time does not depend on other processes competing for the cores, so
"a second thread did a real share of the work" is a structural check on a shared machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A 3×3 convolution on a 32×32 map: enough work per call for the intra-op pool to split.
MODEL = "conv:c=64,i=32,f=64,k=3,p=1"


def cpu_ns_per_thread() -> dict[str, int]:
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as handle:
                times[tid] = int(handle.read().split()[0])
        except OSError:
            pass
    return times


def probe(framework: str, threads: int, measure: str) -> dict:
    from adapters.base import CaseConfig, RunConfig
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.weights import canonical_weights
    from models.zoo import get_model

    adapter = load_registry()[framework].load()(RunConfig("cpu", threads, 1))
    model = get_model(MODEL)
    prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, 16),
                               CaseConfig())
    step = prepared.step(measure)
    prepared.sync(step())
    before, start, runs = cpu_ns_per_thread(), time.perf_counter(), 0
    while runs < 5 or time.perf_counter() - start < 1.0:
        prepared.sync(step())
        runs += 1
    after = cpu_ns_per_thread()
    used = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    return {"per_thread_ns": used, "extra": prepared.extra}


def thread_shares(framework: str, threads: int, measure: str,
                  timeout: float = 300) -> tuple[list[float], dict]:
    """Each OS thread's share of the CPU time, largest first, measured in a fresh process
    (thread settings must precede a framework's first operation), and the case's extra."""
    done = subprocess.run([sys.executable, "-m", "tests.adapters.thread_probe", framework,
                           str(threads), measure], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    used = result["per_thread_ns"]
    assert sum(used) > 0
    return [u / sum(used) for u in used], result["extra"]


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], int(sys.argv[2]), sys.argv[3]), default=str))
