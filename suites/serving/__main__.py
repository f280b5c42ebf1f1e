"""``python -m suites.serving``: a serving suite with one framework, one row per (model,
scenario, precision, variant) and one ``generate`` row per (model, precision, variant) of a
generation table, appended to results/<suite>/<host>/<framework>_<device>.jsonl as each
ends; LoadGen's logs in a folder beside it; then the suite's cold starts.

    python -m suites.serving serving-cpu --framework torch [--threads 2] [--out results]

Run it in the framework's virtualenv (the one ``nox -s <framework>_cpu`` builds): the cases
run in a serving worker started with this interpreter, under a watchdog that ends a case
whose ``serve`` never returns (suites/serving/watchdog.py).

A suite's ``[[cases]]`` tables each name ``models`` and ``scenarios``, optionally
``frameworks`` (the table applies to those alone), ``precisions`` and ``variants`` (each
case runs under every one; the default: ``[cases.serving]``'s ``precision`` and ``variant``),
and a ``[cases.serving]`` table of ``ServingConfig`` settings; or, for greedy generation
(suites/serving/generate.py), no ``scenarios`` and a ``[cases.generate]`` table of
``GenerateConfig`` settings. Its ``[[cold_start]]``
tables each name ``models`` and optionally ``batch`` (1), ``repeats`` (3), ``precision``,
``variant``, ``frameworks`` and ``timeout_s``: that many cold starts of each model
(suites/serving/cold_start.py), written as one ``serve`` row with the scenario
``ColdStart`` (``COLD_START``), its phases' medians and every repeat in ``serving``."""

from __future__ import annotations

import argparse
import sys
import tempfile
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from adapters.registry import load_registry
from models.measures import PRECISIONS, SERVE
from suites.instruments.environment import host_environment, host_id, usable_cpus
from suites.rows.results import CaseKey, OutputError, ResultsFile, Row, Settings, read_rows
from suites.serving.generate import GenerateConfig
from suites.serving.scenarios import COLD_START, ServingConfig
from suites.serving.watchdog import Case, Watchdog, WorkerFatal

SUITES = Path(__file__).resolve().parent


class SuiteError(ValueError):
    """A serving suite that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class Group:
    """One ``[[cases]]`` table."""

    models: tuple[str, ...]
    scenarios: tuple[str, ...]        # none for a generation table
    config: ServingConfig | GenerateConfig
    frameworks: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()

    def cases(self, framework: str) -> list[Case]:
        if self.frameworks and framework not in self.frameworks:
            return []
        return [Case(model, scenario, replace(self.config, precision=precision, variant=variant))
                for precision in self.precisions or (self.config.precision,)
                for variant in self.variants or (self.config.variant,)
                for model in self.models for scenario in self.scenarios or ("",)]


@dataclass(frozen=True)
class ColdStartGroup:
    """One ``[[cold_start]]`` table."""

    models: tuple[str, ...]
    batch: int = 1
    repeats: int = 3
    precision: str = "fp32"
    variant: str = "default"
    frameworks: tuple[str, ...] = ()
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.batch < 1 or self.repeats < 1 or not self.timeout_s > 0:
            raise ValueError("cold_start: batch, repeats and timeout_s must be positive")
        if self.precision not in PRECISIONS:
            raise ValueError(f"cold_start: unknown precision {self.precision!r}")


def _names(table: dict[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of names")
    return tuple(value)


def _group(table: dict[str, Any]) -> Group:
    extra = sorted(set(table) - {"models", "scenarios", "frameworks", "precisions", "variants",
                                 "serving", "generate"})
    if extra:
        raise ValueError(f"unknown case settings {extra}")
    if "generate" in table and ("scenarios" in table or "serving" in table):
        raise ValueError("a [cases.generate] table takes no scenarios or [cases.serving]")
    config = GenerateConfig.of(table["generate"]) if "generate" in table \
        else ServingConfig.of(table.get("serving", {}))
    scenarios = () if "generate" in table else tuple(table["scenarios"])
    group = Group(tuple(table["models"]), scenarios, config, _names(table, "frameworks"),
                  _names(table, "precisions"), _names(table, "variants"))
    bad = [p for p in group.precisions if p not in PRECISIONS]
    if bad:
        raise ValueError(f"unknown precisions {bad} (known: {', '.join(PRECISIONS)})")
    return group


def _cold_start(table: dict[str, Any]) -> ColdStartGroup:
    known = {"models", "batch", "repeats", "precision", "variant", "frameworks", "timeout_s"}
    extra = sorted(set(table) - known)
    if extra:
        raise ValueError(f"unknown cold_start settings {extra} (known: {sorted(known)})")
    return ColdStartGroup(**{**table, "models": tuple(table["models"]),
                             "frameworks": _names(table, "frameworks")})


def load(name_or_path: str) -> dict[str, Any]:
    """The suite's TOML: ``name`` (``suites/serving/<name>.toml``) or a path (the module's
    docstring says what its tables hold)."""
    path = Path(name_or_path)
    if not path.is_file():
        path = SUITES / f"{name_or_path}.toml"
    try:
        suite = tomllib.loads(path.read_text())
        groups = [_group(g) for g in suite["cases"]]
        cold = [_cold_start(g) for g in suite.get("cold_start", [])]
        registry = load_registry()
        unknown = sorted({f for g in [*groups, *cold] for f in g.frameworks if f not in registry})
        if unknown:
            raise ValueError(f"unknown frameworks {unknown} (known: {', '.join(registry)})")
    except FileNotFoundError:
        known = sorted(p.stem for p in SUITES.glob("*.toml"))
        raise SuiteError(f"no serving suite {name_or_path!r} (known: {', '.join(known)})") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
        raise SuiteError(f"{path}: {error}") from None
    return {"name": suite.get("name", path.stem), "groups": groups, "cold_start": cold}


def default_threads(device: str) -> int:
    """Two on the CPU (the budget of the CPU suites' default); on a GPU the CPUs this process
    may run on, as a GPU job of the other suites has (its lane's, under a matrix)."""
    return usable_cpus() if device == "gpu" else 2


def only_models(suite: dict[str, Any], models: list[str]) -> dict[str, Any]:
    """The suite cut to ``models`` (all of it when none are named); a model the suite does not
    serve is a ``SuiteError``."""
    if not models:
        return suite
    served = {m for g in [*suite["groups"], *suite["cold_start"]] for m in g.models}
    missing = [m for m in models if m not in served]
    if missing:
        raise SuiteError(f"--models: suite {suite['name']} serves no {', '.join(missing)} "
                         f"(it serves {', '.join(sorted(served))})")
    keep = set(models)
    cut = lambda groups: [replace(g, models=tuple(m for m in g.models if m in keep))
                          for g in groups if keep & set(g.models)]
    return {**suite, "groups": cut(suite["groups"]), "cold_start": cut(suite["cold_start"])}


def resolved(case: Case, default_variant: str) -> Case:
    """``case`` with the variant ``default`` named: the framework's first."""
    if case.config.variant != "default":
        return case
    return replace(case, config=replace(case.config, variant=default_variant))


def cold_start_key(suite: str, framework: str, device: str, threads: int,
                   group: ColdStartGroup, model: str, default_variant: str) -> CaseKey:
    """The id a cold-start row of ``group`` will have (its variant resolved as the
    framework's default), so that ``--resume`` can skip it."""
    variant = default_variant if group.variant == "default" else group.variant
    settings = Settings(framework, device, group.precision, variant, threads, 1)
    return CaseKey(suite, model, group.batch, SERVE, settings, COLD_START)


def cold_start_row(key: CaseKey, group: ColdStartGroup, env: dict[str, Any]) -> Row:
    """``group.repeats`` cold starts of ``key``'s model (``cold_start_key``), each a fresh
    process of this interpreter (suites/serving/cold_start.py), as one row: ok only if every
    repeat answered correctly."""
    from suites.serving.cold_start import Setting, cold_starts, summarise
    s = key.settings
    setting = Setting(s.framework, key.model, group.batch, s.device, group.precision,
                      group.variant, s.threads)
    records = cold_starts(setting, group.repeats, group.timeout_s)
    summary = summarise(records)
    execution = next((r.execution for r in records if r.execution), "")
    key = replace(key, settings=replace(s, execution=execution))
    wall = sum(r.total_s or 0.0 for r in records)
    return Row(key, summary.status, summary.reason, env=env, wall_s=wall,
               time_limit_s=group.timeout_s,
               serving={"cold_start": summary.to_dict(),
                        "repeats": [r.to_dict() for r in records],
                        "timing": "seconds from the parent's clock just before each fresh "
                                  "process was started to the end of each phase"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads, the same budget for every framework (default: "
                             "2 on the CPU; on a GPU, the CPUs this process may run on)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--models", nargs="+", default=[], metavar="MODEL",
                        help="serve only these of the suite's models (its cases, generations "
                             "and cold starts), e.g. to share a suite out over several GPUs")
    parser.add_argument("--resume", action="store_true",
                        help="skip the cases and cold starts already in the results file")
    args = parser.parse_args(argv)
    registry = load_registry()
    if args.framework not in registry:
        print(f"unknown framework {args.framework!r} (known: {', '.join(registry)})", file=sys.stderr)
        return 2
    try:
        suite = load(args.suite)
        threads = default_threads(args.device) if args.threads is None else args.threads
        if threads < 1:
            raise SuiteError(f"--threads must be at least 1, got {threads}")
        suite = only_models(suite, args.models)
    except SuiteError as error:
        print(error, file=sys.stderr)
        return 2
    folder = args.out / suite["name"] / host_id()
    results = ResultsFile(folder / f"{args.framework}_{args.device}.jsonl")
    logs = folder / "loadgen" / args.framework
    watchdog = Watchdog(args.framework, args.device, threads, suite["name"], logs,
                        logs / f"worker-{args.device}.log")
    # "default" is the framework's first variant, resolved here as the harness's runner
    # does, so that a resumed run knows a case's row id before it runs.
    default_variant = registry[args.framework].variants[0]
    try:
        done = set(read_rows(results.path)) if args.resume else set()
        every = [resolved(case, default_variant)
                 for group in suite["groups"] for case in group.cases(args.framework)]
        cases = [case for case in every if watchdog.case_key(case).id() not in done]
        if len(cases) < len(every):
            print(f"resuming: {len(every) - len(cases)} cases already recorded in "
                  f"{results.path}", flush=True)
        if cases:
            watchdog.start()   # a framework that cannot start writes no rows file
        results.check_writable()
        with tempfile.TemporaryDirectory(prefix="dlbench-serving-") as plans:
            for number, case in enumerate(cases):
                row = watchdog.run(case, Path(plans) / f"case-{number}.json")
                results.append_json(row)
                print(f"{row['case_id']}: {row['status']} {row['reason']}".rstrip(), flush=True)
        watchdog.stop()
        env = watchdog.env or {**host_environment(threads, []), "framework": args.framework}
        for group in suite["cold_start"]:
            if group.frameworks and args.framework not in group.frameworks:
                continue
            for model in group.models:
                key = cold_start_key(suite["name"], args.framework, args.device, threads,
                                     group, model, default_variant)
                if key.id() in done:
                    continue
                row = cold_start_row(key, group, env)
                results.append(row)
                print(f"{row.key.id()}: {row.status} {row.reason}".rstrip(), flush=True)
    except WorkerFatal as error:
        print(error, file=sys.stderr)
        return 2
    except OutputError as error:
        print(error, file=sys.stderr)
        return 2
    finally:
        watchdog.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
