"""``python -m suites``: run, validate and list benchmark suites.

    python -m suites run default-cpu --framework torch --device cpu [--resume] [--out results]
    python -m suites validate suites/my_suite.toml
    python -m suites list
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adapters.registry import load_registry
from suites.results import OutputError
from suites.runner import Runner, RunRequest
from suites.spec import SUITES_DIR, SuiteError, load_suite, resolve_suite_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a suite with one framework on one device")
    run.add_argument("suite", help="a suite name from suites/ or a path to a .toml file")
    run.add_argument("--framework", required=True)
    run.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    run.add_argument("--out", type=Path, default=Path("results"))
    run.add_argument("--resume", action="store_true", help="skip cases already recorded")
    run.add_argument("--seed", type=int, default=0, help="seed of weights and inputs")
    run.add_argument("--case-timeout", type=float, default=None, metavar="SECONDS",
                     help="time limit of one case (build + one measure); overrides the "
                          "suite's case_timeout_s (default 1800)")
    validate = commands.add_parser("validate", help="check a suite file without running it")
    validate.add_argument("suite")
    commands.add_parser("list", help="list the bundled suites")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return Runner(RunRequest(args.suite, args.framework, args.device, args.out,
                                     args.resume, args.seed, args.case_timeout)).run()
        if args.command == "validate":
            suite = load_suite(resolve_suite_path(args.suite), load_registry())
            print(f"{suite.path}: ok, {len(suite.groups)} case tables")
            return 0
        for path in sorted(SUITES_DIR.glob("*.toml")):
            suite = load_suite(path, load_registry())
            print(f"{suite.name:<24} {suite.description}")
        return 0
    except (SuiteError, OutputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
