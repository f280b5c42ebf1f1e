"""The serving worker: one process per framework and device that makes the adapter once and
serves the cases its parent (suites/serving/watchdog.py) sends, one at a time, under LoadGen.

    python -m suites.serving.worker --framework torch --device cpu --threads 2 \\
        --suite serving-cpu --logs results/serving-cpu/<host>/loadgen/torch

It reads case-file paths on its stdin, one a line (a JSON object: ``kind``, ``serve`` or
``generate``, ``model``, ``scenario`` and ``config``, the ``ServingConfig``'s or the
``GenerateConfig``'s fields), and writes its events on stdout, each one JSON
line behind ``PREFIX`` (a framework's own prints to stdout pass by unread):

* ``ready`` once the adapter is made, with the environment every row carries; ``fatal``
  with the reason where it cannot be (a device the framework cannot see), then it exits;
* ``deadline`` before each phase of a case that might not end (suites/serving/run.py
  ``serve_case``'s ``watch``): its seconds, the phase in words, whether it serves, and the
  failed row that stands for the case if the watchdog ends it;
* ``progress`` while a phase serves: the count of serve calls returned, sent by a heartbeat
  thread each ``BEAT_S`` when it changed (off LoadGen's threads: a serve pays nothing for
  it);
* ``row``: the case's row, whatever its status.

LoadGen runs in this process, as its Python bindings require (``StartTest`` blocks the
calling thread until the run ends), so a ``serve`` that never returns stops the whole
process: only its parent can end the case, by killing it."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

PREFIX = "DLBENCH_SERVING "
BEAT_S = 0.5
_EMITTING = threading.Lock()


def emit(kind: str, **values: Any) -> None:
    line = PREFIX + json.dumps({"kind": kind, **values}, default=str)
    with _EMITTING:
        print(line, flush=True)


class Heartbeat:
    """A daemon thread that sends ``progress`` each ``BEAT_S`` while the watched phase's
    count of returned serves moves."""

    def __init__(self) -> None:
        self.progress: Callable[[], int] | None = None
        self.last: int | None = None     # the count last reported (or at the phase's start)
        threading.Thread(target=self._beat, name="serving-heartbeat", daemon=True).start()

    def watch(self, seconds: float, late: Any, what: str,
              progress: Callable[[], int] | None) -> None:
        self.last = progress() if progress is not None else None
        self.progress = progress
        emit("deadline", seconds=seconds, what=what, serving=progress is not None,
             row=late.to_json())

    def _beat(self) -> None:
        stop = threading.Event()
        while not stop.wait(BEAT_S):
            progress = self.progress
            count = progress() if progress is not None else None
            if count is not None and count != self.last:
                self.last = count
                emit("progress", calls=count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.serving.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--logs", type=Path, required=True)
    args = parser.parse_args(argv)

    from suites.instruments.environment import gpu_placement, host_environment, limit_cpus
    # Pinned before a framework starts, as the suites' workers are: JAX on a CPU obeys only
    # its affinity mask, and one mask for every framework keeps their thread budgets equal.
    affinity = limit_cpus(args.threads) if args.device == "cpu" else []
    from adapters.base import DeviceUnavailable, RunConfig
    from adapters.registry import load_registry
    from suites.serving.sut import one_line
    try:
        import mlperf_loadgen as lg
        adapter = load_registry()[args.framework].load()(RunConfig(args.device, args.threads, 1))
    except (ImportError, DeviceUnavailable) as error:
        emit("fatal", reason=one_line(error))
        return 2
    env = {**host_environment(args.threads, affinity), **adapter.environment(),
           "framework": args.framework, "loadgen": getattr(lg, "__version__", "")}
    if args.device == "gpu":
        # Which GPU and CPUs served: two frameworks on one host's two GPUs share its CPUs'
        # caches and memory, and a launch-bound serve follows the CPU it runs on.
        from suites.instruments.device_state import open_monitor
        env.update(gpu_placement(open_monitor(args.device)[0]))
    emit("ready", env=env)

    from suites.serving.generate import GenerateConfig, generate_case
    from suites.serving.run import serve_case
    from suites.serving.scenarios import ServingConfig
    heartbeat = Heartbeat()
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(Path(line.strip()).read_text())
        if case.get("kind") == "generate":
            row = generate_case(lg, adapter, case["model"], GenerateConfig.of(case["config"]),
                                args.suite, args.logs, env, watch=heartbeat.watch)
        else:
            row = serve_case(lg, adapter, case["model"], case["scenario"],
                             ServingConfig.of(case["config"]), args.suite, args.logs, env,
                             watch=heartbeat.watch)
        heartbeat.progress = None
        emit("row", row=row.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
