"""The serving worker: one process per framework and device that makes the adapter once and
serves the cases its parent (suites/serving/watchdog.py) sends, one at a time, under LoadGen.

    python -m suites.serving.worker --framework torch --device cpu --threads 2 \\
        --suite serving-cpu --logs results/serving-cpu/<host>/loadgen/torch

It reads case-file paths on its stdin, one a line (a JSON object: ``model``, ``scenario`` and
``config``, the ``ServingConfig``'s fields), and writes its events on stdout, each one JSON
line behind ``PREFIX`` (a framework's own prints to stdout pass by unread):

* ``ready`` once the adapter is made, with the environment every row carries; ``fatal``
  with the reason where it cannot be (a device the framework cannot see), then it exits;
* ``deadline`` before each phase of a case that might not end (suites/serving/run.py
  ``serve_case``'s ``watch``): its seconds, the phase in words and the failed row that
  stands for the case if the phase outlives them;
* ``row``: the case's row, whatever its status.

LoadGen runs in this process, as its Python bindings require (``StartTest`` blocks the
calling thread until the run ends), so a ``serve`` that never returns stops the whole
process: only its parent can end the case, by killing it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PREFIX = "DLBENCH_SERVING "


def emit(kind: str, **values: Any) -> None:
    print(PREFIX + json.dumps({"kind": kind, **values}, default=str), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.serving.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--logs", type=Path, required=True)
    args = parser.parse_args(argv)

    from adapters.base import DeviceUnavailable, RunConfig
    from adapters.registry import load_registry
    from suites.instruments.environment import host_environment
    from suites.serving.sut import one_line
    try:
        import mlperf_loadgen as lg
        adapter = load_registry()[args.framework].load()(RunConfig(args.device, args.threads, 1))
    except (ImportError, DeviceUnavailable) as error:
        emit("fatal", reason=one_line(error))
        return 2
    env = {**host_environment(args.threads, []), **adapter.environment(),
           "framework": args.framework, "loadgen": getattr(lg, "__version__", "")}
    emit("ready", env=env)

    from suites.serving.run import serve_case
    from suites.serving.scenarios import ServingConfig
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(Path(line.strip()).read_text())
        config = ServingConfig.of(case["config"])
        row = serve_case(lg, adapter, case["model"], case["scenario"], config, args.suite,
                         args.logs, env,
                         watch=lambda seconds, late, what: emit("deadline", seconds=seconds,
                                                                what=what, row=late.to_json()))
        emit("row", row=row.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
