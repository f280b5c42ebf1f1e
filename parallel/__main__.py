"""``python -m parallel``: run a data-parallel scaling suite.

    python -m parallel run scaling --framework torch --device gpu [--resume] [--out results]
    python -m parallel run scaling-short --framework tf --device gpu --precisions bf16
    python -m parallel run scaling-quick --framework jax --device cpu
    python -m parallel run scaling --framework torch --device gpu --devices 2 4
    python -m parallel run scaling-short --framework tf --device gpu --plan   # minutes, no run
    python -m parallel list
    python -m parallel spec --framework torch --device gpu --model resnet50 --batch 64 \
        --devices 16 --processes 8 --out spec.json     # one case, for a multi-host launch
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parallel.runner import ScalingRequest, ScalingRunner
from parallel.spec import PRECISIONS, SUITES_DIR, RankSpec, ScalingSuiteError, load
from suites.rows.results import RowsFileError

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
    run.add_argument("--precisions", nargs="+", default=None, choices=PRECISIONS,
                     help="run only these precisions of the suite")
    run.add_argument("--devices", nargs="+", type=int, default=None, metavar="N",
                     help="device counts to run instead of the suite's (N = 1, every "
                          "efficiency's baseline, runs too)")
    run.add_argument("--compile-cache", default="", metavar="DIR|off",
                     help="the frameworks' persistent compilation cache (default "
                          "~/.cache/dlbench/compile, as the matrix's; off: none)")
    run.add_argument("--plan", action="store_true",
                     help="print the cases and the minutes they are expected to take "
                          "(from earlier rows on this GPU model), then stop")
    commands.add_parser("list", help="list the bundled scaling suites")
    spec = commands.add_parser("spec", help="write one case's rank spec (multi-host launch)")
    spec.add_argument("--framework", required=True, choices=FRAMEWORKS)
    spec.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    spec.add_argument("--model", required=True)
    spec.add_argument("--batch", type=int, required=True, help="per-device batch")
    spec.add_argument("--devices", type=int, required=True, help="devices over all hosts")
    spec.add_argument("--processes", type=int, default=1, help="processes on each host")
    spec.add_argument("--warmup", type=int, default=10)
    spec.add_argument("--samples", type=int, default=50)
    spec.add_argument("--result", default="result.json", help="where rank 0 writes its result")
    spec.add_argument("--out", type=Path, default=Path("spec.json"))
    check = commands.add_parser("check", help="all-reduced gradient vs the one-device one")
    check.add_argument("--framework", required=True, choices=FRAMEWORKS)
    check.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    check.add_argument("--models", nargs="+", default=["alexnet_tiny", "lstm_tiny"])
    check.add_argument("--devices", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "check":
        from parallel.correctness import RTOL, compare
        worst = {m: compare(args.framework, m, args.device, args.devices) for m in args.models}
        for model, value in worst.items():
            verdict = "ok" if value <= RTOL else "DIFFERS"
            print(f"{args.framework} {args.device} {model} N={args.devices}: worst relative "
                  f"difference {value:.2e} (rtol {RTOL:g}) {verdict}")
        return 0 if all(v <= RTOL for v in worst.values()) else 1
    if args.command == "spec":
        RankSpec(args.framework, args.device, args.model, args.batch, args.devices, "weak",
                 args.warmup, args.samples, result=args.result,
                 processes=args.processes).to_file(args.out)
        print(f"wrote {args.out}")
        return 0
    try:
        if args.command == "list":
            for path in sorted(SUITES_DIR.glob("*.toml")):
                suite = load(str(path))
                print(f"{suite.name:<24} {suite.description}")
            return 0
        if args.command == "run" and args.devices and min(args.devices) < 1:
            raise ScalingSuiteError(f"--devices {' '.join(map(str, args.devices))}: device "
                                    "counts must be positive")
        suite = load(args.suite)
        in_suite = {model for group in suite.groups for model in group["models"]}
        unknown = sorted(set(args.models or ()) - in_suite)
        if unknown:
            raise ScalingSuiteError(f"--models {' '.join(unknown)}: not in suite "
                                    f"'{suite.name}' (it has {', '.join(sorted(in_suite))})")
    except ScalingSuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        return ScalingRunner(ScalingRequest(suite, args.framework, args.device, args.out,
                                            args.resume, args.seed, max_devices=args.max_devices,
                                            hosts=args.hosts, models=args.models,
                                            precisions=args.precisions,
                                            device_counts=args.devices,
                                            plan_only=args.plan,
                                            compile_cache=args.compile_cache)).run()
    except RowsFileError as error:   # a torn or corrupt published file, read for the plan
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
