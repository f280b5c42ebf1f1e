"""``python -m suites``: run, validate and list benchmark suites.

    python -m suites run default-cpu --framework torch --device cpu [--resume] [--out results]
    python -m suites run transformers-gpu --framework jax --device gpu --models gpt2   # some models
    python -m suites run serving-cpu --framework torch [--device cpu] [--models M ...] [--resume]   # LoadGen
    python -m suites validate suites/my_suite.toml
    python -m suites list
    python -m suites compare RUN1 RUN2 [RUN3]   # do two or three runs agree? (suites/stats/compare.py)
    python -m suites interleave default-gpu --frameworks torch jax --device gpu [--blocks 2]
    python -m suites matrix --device gpu [--frameworks ...] [--suites ...] [--budget MIN] [--plan]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tomllib
from pathlib import Path

from adapters.registry import load_registry
from suites.harness.runner import Runner, RunRequest, framework_entry
from suites.harness.spec import SUITES_DIR, SuiteError, check_case_timeout, load_suite, resolve_suite_path
from suites.rows.results import OutputError, RowsFileError
from suites.stats.between_runs import load_earlier

EARLIER_HELP = ("earlier results of this machine model (folders, .jsonl or .jsonl.gz files): each "
                "case's spread over them and this run widens its interval to cover a re-run "
                "(suites/stats/between_runs.py)")


def check_earlier(folders: list[Path]) -> None:
    for folder in folders:
        if not folder.exists():
            raise SuiteError(f"--earlier: no such folder or file: {folder}")


# The serving suites (suites/serving/*.toml) run under MLPerf LoadGen by their own runner
# (python -m suites.serving), in a serving worker started with this interpreter.
SERVING_DIR = Path(__file__).resolve().parent / "serving"


def is_serving_suite(name_or_path: str) -> bool:
    """A bundled serving suite's name, or a suite file whose [[cases]] name LoadGen
    scenarios or a generation (suites/serving/__main__.py load)."""
    if (SERVING_DIR / f"{name_or_path}.toml").is_file():
        return True
    path = Path(name_or_path)
    try:
        cases = tomllib.loads(path.read_text()).get("cases") if path.suffix == ".toml" else None
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(cases, list) and any(isinstance(c, dict) and ("scenarios" in c or "generate" in c)
                                           for c in cases)


def refuse_own_runners(suites: list[str], device: str) -> None:
    """The matrix schedules the timed suites only: a serving suite (MLPerf LoadGen) or a
    data-parallel scaling suite has a runner of its own, run once per framework."""
    from parallel.spec import is_scaling_suite
    for suite in suites:
        kind = ("a serving suite (MLPerf LoadGen)" if is_serving_suite(suite) else
                "a data-parallel scaling suite" if is_scaling_suite(suite) else "")
        if kind:
            raise SuiteError(f"{suite} is {kind}, which the matrix does not schedule: run it "
                             f"once per framework, e.g. nox -s torch_{device} -- {suite}")


def run_serving(args: argparse.Namespace) -> int:
    """``run`` of a serving suite: the checks every suite's run makes (the framework, its
    device), then the serving harness, whose worker runs this interpreter and so needs the
    framework importable here (its nox session's venv: ``nox -s torch_cpu -- serving-cpu``). Its rows go where
    every suite's go (DIR/<suite>/<host>/<framework>_<device>.jsonl, LoadGen's logs in
    DIR/<suite>/<host>/loadgen/), so ``python -m reports DIR`` reads them."""
    refused = [flag for flag, given in (
        ("--rounds", args.rounds != 1), ("--earlier", args.earlier),
        ("--case-timeout", args.case_timeout is not None), ("--seed", args.seed != 0)) if given]
    try:
        if refused:
            raise SuiteError(f"a serving suite takes no {', '.join(refused)} (its "
                             "[cases.serving] tables set the seed and the durations)")
        entry = framework_entry(args.framework, args.device)
        if entry.package and importlib.util.find_spec(entry.package) is None:
            raise SuiteError(f"serving runs with this interpreter, and {entry.package} is not "
                             f"importable by {sys.executable}: run it in {args.framework}'s "
                             f"venv (nox -s {args.framework}_{args.device} -- {args.suite})")
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from suites.serving.__main__ import main as serve_suite
    return serve_suite([args.suite, "--framework", args.framework, "--device", args.device,
                        "--out", str(args.out), *(["--resume"] if args.resume else []),
                        *(["--models", *args.models] if args.models else [])])


def validate_serving(name_or_path: str) -> str:
    """A serving suite's settings (suites/serving/scenarios.py ServingConfig), models and
    scenarios checked, as one line; ``SuiteError`` naming the problem. (Run, it would make
    an unknown model or scenario a failed row and go on; validating says so first.)"""
    from models.zoo import UnknownModel, get_model
    from suites.serving.__main__ import SuiteError as ServingSuiteError
    from suites.serving.__main__ import load as load_serving
    from suites.serving.scenarios import unknown
    try:
        suite = load_serving(name_or_path)
    except ServingSuiteError as error:
        raise SuiteError(str(error)) from None
    problems = []
    for group in [*suite["groups"], *suite["cold_start"]]:
        for model in group.models:
            try:
                get_model(model)
            except UnknownModel as error:
                problems.append(str(error))
    problems += [unknown(s) for group in suite["groups"] for s in group.scenarios if unknown(s)]
    problems += generation_problems(suite["groups"])
    if problems:
        raise SuiteError(f"serving suite {suite['name']}: {'; '.join(dict.fromkeys(problems))}")
    # A generation table ([cases.generate]) has no scenarios: one case per model.
    cases = sum(len(g.models) * max(len(g.scenarios), 1) * max(len(g.precisions), 1)
                * max(len(g.variants), 1) for g in suite["groups"])
    cold = sum(len(g.models) for g in suite["cold_start"])
    return f"{name_or_path}: ok, serving suite {suite['name']}, {len(suite['groups'])} case " \
           f"tables, {cases} cases (over every framework), {cold} cold starts"


def generation_problems(groups) -> list[str]:
    """A generation group's models that would give no timed row: not a decoder, or a
    prompt + new tokens beyond the model's position table."""
    from models.families.transformer import context_length, not_a_decoder
    from models.zoo import UnknownModel, get_model
    from suites.serving.generate import GenerateConfig
    problems = []
    for group in groups:
        config = group.config
        if not isinstance(config, GenerateConfig):
            continue
        for name in group.models:
            try:
                model = get_model(name)
            except UnknownModel:
                continue   # said already
            if not_a_decoder(model):
                problems.append(not_a_decoder(model))
            elif config.length > context_length(model):
                problems.append(f"{name}: prompt {config.prompt} + {config.new_tokens} new "
                                f"tokens exceed its context of {context_length(model)}")
    return problems


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
    run.add_argument("--models", nargs="+", default=[], metavar="MODEL",
                     help="run only these of the suite's models (to share a suite out over GPUs)")
    run.add_argument("--rounds", type=int, default=1,
                     help="run every case's repetitions in this many separate processes "
                          "(suites/harness/rounds.py)")
    run.add_argument("--earlier", nargs="+", type=Path, default=[], metavar="DIR",
                     help=EARLIER_HELP)
    run.add_argument("--case-timeout", type=float, default=None, metavar="SECONDS",
                     help="time limit of one case (build + one measure); overrides the "
                          "suite's case_timeout_s (default 1800)")
    validate = commands.add_parser("validate", help="check a suite file without running it")
    validate.add_argument("suite")
    commands.add_parser("list", help="list the bundled suites")
    interleave = commands.add_parser("interleave", help="several frameworks in counterbalanced "
                                     "blocks (suites/harness/interleave.py)")
    interleave.add_argument("suite")
    interleave.add_argument("--frameworks", nargs="+", required=True)
    interleave.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    interleave.add_argument("--out", type=Path, default=Path("results"))
    interleave.add_argument("--resume", action="store_true")
    interleave.add_argument("--seed", type=int, default=0)
    interleave.add_argument("--blocks", type=int, default=2)
    order = ("frameworks in the order given, each framework's suites in the order given; on a "
             "GPU its wall pass over all suites, then its device pass")
    matrix = commands.add_parser("matrix", help="every framework x suite on one device: a plan "
                                 "up front, resumable, within a budget (suites/matrix/run.py)",
                                 description="Every framework x suite on one device: a plan up "
                                 f"front, resumable, within a budget. Order: {order}.")
    matrix.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    matrix.add_argument("--frameworks", nargs="+", default=[],
                        help="in the order they run, each framework's suites before the next "
                             "framework's; default: every framework the registry lists for the "
                             "device")
    matrix.add_argument("--suites", nargs="+", default=[],
                        help="in the order each framework runs them; default: the device's "
                             "default suite and the seeds' suites (suites/matrix/plan.py)")
    matrix.add_argument("--out", type=Path, default=Path("results"))
    matrix.add_argument("--seed", type=int, default=0)
    matrix.add_argument("--budget", type=float, default=None, metavar="MINUTES",
                        help="stop cleanly before this many minutes; run again to go on")
    matrix.add_argument("--python", action="append", default=[], metavar="FRAMEWORK=PATH",
                        help="the interpreter of a framework (default: its nox venv, if any, "
                             "else this one)")
    matrix.add_argument("--no-reuse", action="store_true",
                        help="measure every suite's cases, even those an earlier suite measured")
    matrix.add_argument("--compile-cache", default="", metavar="DIR",
                        help="persistent compilation caches (default $DLBENCH_COMPILE_CACHE or "
                             "~/.cache/dlbench/compile; 'off' for none)")
    matrix.add_argument("--history", nargs="+", type=Path, default=[], metavar="DIR",
                        help="earlier results for the estimates (default: published/)")
    matrix.add_argument("--earlier", nargs="+", type=Path, default=[], metavar="DIR",
                        help=EARLIER_HELP)
    matrix.add_argument("--case-timeout", type=float, default=None, metavar="SECONDS")
    matrix.add_argument("--rounds", type=int, default=1,
                        help="measure every case in this many rounds of separate processes, "
                             "so its interval covers a re-run in other processes "
                             "(suites/harness/rounds.py)")
    matrix.add_argument("--plan", action="store_true", help="print the plan and stop")
    matrix.add_argument("--device-name", default="", metavar="NAME",
                        help="estimate for this device model (e.g. 'NVIDIA H100 80GB HBM3') "
                             "instead of this machine's")
    matrix.add_argument("--costs", action="store_true",
                        help="print the minutes per suite and framework from the cost log")
    matrix.add_argument("--gpus", default="", metavar="N|LIST",
                        help="run on several GPUs of this host side by side: one lane per GPU, "
                             "each with CPUs of its own, taking one framework's suite at a time "
                             "(a count, or GPU indices such as 0,2; suites/matrix/lanes.py)")
    matrix.add_argument("--cpus", default="", metavar="LIST",
                        help="run on these CPUs only, e.g. 0-15 (what each lane of --gpus gets)")
    matrix.add_argument("--lane-of", type=int, default=0, help=argparse.SUPPRESS)
    compare = commands.add_parser("compare", help="compare two or three runs case by case")
    compare.add_argument("runs", nargs="+", type=Path,
                         help="result folders (or .jsonl files); run 2 back to back, run 3 "
                              "on another host")
    args = parser.parse_args(argv)
    if args.command == "run":
        from parallel.spec import is_scaling_suite
        if is_scaling_suite(args.suite):   # data-parallel scaling has its own runner
            from parallel.__main__ import main as run_scaling
            return run_scaling(["run", args.suite, "--framework", args.framework, "--device",
                                args.device, "--out", str(args.out), "--seed", str(args.seed),
                                *(["--resume"] if args.resume else []),
                                *(["--models", *args.models] if args.models else [])])
        if is_serving_suite(args.suite):   # LoadGen scenarios have their own runner
            return run_serving(args)
    try:
        if args.command in ("run", "matrix") and args.rounds < 1:
            raise SuiteError(f"--rounds must be at least 1, got {args.rounds}")
        if args.command in ("run", "matrix"):
            check_earlier(args.earlier)
        if args.command == "run" and (args.rounds != 1 or args.earlier):
            from suites.harness.rounds import run_rounds
            from suites.matrix.plan import this_machine
            machine = this_machine(args.device)
            earlier = load_earlier(args.earlier, machine)
            if args.earlier:
                print(earlier.describe(machine.label, args.earlier), file=sys.stderr)
            return run_rounds(RunRequest(args.suite, args.framework, args.device, args.out,
                                         args.resume, args.seed, args.case_timeout,
                                         models=tuple(args.models)), args.rounds,
                              earlier)
        if args.command == "run":
            # The matrix's worker pool, so that a GPU suite's device phase goes on in the
            # wall phase's worker on the jobs it kept built (suites/harness/pool.py), as the
            # published folders were measured, and not in a fresh process that builds them
            # again.
            from suites.harness.pool import WorkerPool
            with WorkerPool() as pool:
                return Runner(RunRequest(args.suite, args.framework, args.device, args.out,
                                         args.resume, args.seed, args.case_timeout,
                                         models=tuple(args.models)),
                              pool=pool).run()
        if args.command == "interleave":
            from suites.harness.interleave import run_interleaved
            if args.blocks < 1:
                raise SuiteError(f"--blocks must be at least 1, got {args.blocks}")
            return run_interleaved([RunRequest(args.suite, name, args.device, args.out,
                                               args.resume, args.seed)
                                    for name in dict.fromkeys(args.frameworks)], args.blocks)
        if args.command == "matrix":
            refuse_own_runners(args.suites, args.device)
            from suites.harness.runner import stop_on_sigterm
            from suites.matrix.run import Matrix, MatrixRequest
            stop_on_sigterm()
            if args.case_timeout is not None:
                check_case_timeout("--case-timeout", args.case_timeout)
            if args.lane_of:
                from suites.harness.worker import die_with_parent
                die_with_parent(args.lane_of)
            if args.cpus:
                from suites.matrix.lanes import confine
                confine(args.cpus)
            return Matrix(MatrixRequest(
                args.device, tuple(args.frameworks), tuple(args.suites), args.out, args.seed,
                args.budget, tuple(args.python), not args.no_reuse, args.compile_cache,
                tuple(args.history), args.plan, args.costs, args.case_timeout,
                args.device_name, args.rounds, args.gpus, args.lane_of,
                tuple(args.earlier))).run()
        if args.command == "compare":
            from suites.stats.compare import main as compare_runs
            return compare_runs(args.runs)
        if args.command == "validate":
            if is_serving_suite(args.suite):
                print(validate_serving(args.suite))
                return 0
            suite = load_suite(resolve_suite_path(args.suite), load_registry())
            print(f"{suite.path}: ok, {len(suite.groups)} case tables")
            return 0
        for path in sorted(SUITES_DIR.glob("*.toml")):
            suite = load_suite(path, load_registry())
            print(f"{suite.name:<24} {suite.description}")
        for path in sorted(SERVING_DIR.glob("*.toml")):
            validate_serving(str(path))
            description = tomllib.loads(path.read_text()).get("description", "")
            print(f"{path.stem:<24} {description} (serving, MLPerf LoadGen)")
        return 0
    except (SuiteError, OutputError, RowsFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
