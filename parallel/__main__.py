"""``python -m parallel``: run a data-parallel scaling suite.

    python -m parallel run scaling --framework torch --device gpu [--resume] [--out results]
    python -m parallel run scaling-quick --framework jax --device cpu
    python -m parallel list
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parallel.runner import ScalingRequest, ScalingRunner
from parallel.spec import SUITES_DIR, ScalingSuiteError, load

FRAMEWORKS = ("torch", "jax", "tf", "ort")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parallel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a scaling suite with one framework")
    run.add_argument("suite")
    run.add_argument("--framework", required=True, choices=FRAMEWORKS)
    run.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    run.add_argument("--out", type=Path, default=Path("results"))
    run.add_argument("--resume", action="store_true")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--max-devices", type=int, default=None)
    run.add_argument("--hosts", type=int, default=1,
                     help="stand several hosts in with processes on this one (multi-host path)")
    run.add_argument("--models", nargs="+", default=None,
                     help="run only these models of the suite (e.g. resnet50)")
    commands.add_parser("list", help="list the bundled scaling suites")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for path in sorted(SUITES_DIR.glob("*.toml")):
                suite = load(str(path))
                print(f"{suite.name:<24} {suite.description}")
            return 0
        suite = load(args.suite)
    except ScalingSuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return ScalingRunner(ScalingRequest(suite, args.framework, args.device, args.out,
                                        args.resume, args.seed, max_devices=args.max_devices,
                                        hosts=args.hosts, models=args.models)).run()


if __name__ == "__main__":
    sys.exit(main())
