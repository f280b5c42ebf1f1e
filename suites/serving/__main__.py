"""``python -m suites.serving``: a serving suite with one framework, one row per (model,
scenario) and one ``generate`` row per model of a generation group, appended to
results/<suite>/<host>/<framework>_<device>.jsonl as each ends; LoadGen's logs in a folder
beside it.

    python -m suites.serving serving-cpu --framework torch [--threads 2] [--out results]

Run it in the framework's virtualenv (the one ``nox -s <framework>_cpu`` builds)."""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import Any

from adapters.base import DeviceUnavailable, RunConfig
from adapters.registry import load_registry
from suites.instruments.environment import host_environment, host_id
from suites.rows.results import OutputError, ResultsFile
from suites.serving.generate import GenerateConfig
from suites.serving.scenarios import ServingConfig

SUITES = Path(__file__).resolve().parent


class SuiteError(ValueError):
    """A serving suite that cannot be read; the message names the file and the problem."""


def load(name_or_path: str) -> dict[str, Any]:
    """The suite's TOML: ``name`` (``suites/serving/<name>.toml``) or a path. Each
    ``[[cases]]`` has ``models`` and either ``scenarios`` with a ``[cases.serving]`` table
    of ``ServingConfig`` settings, or a ``[cases.generate]`` table of ``GenerateConfig``
    settings (greedy generation, one ``generate`` row per model)."""
    path = Path(name_or_path)
    if not path.is_file():
        path = SUITES / f"{name_or_path}.toml"
    try:
        suite = tomllib.loads(path.read_text())
        groups = [(list(g["models"]), [], GenerateConfig.of(g["generate"])) if "generate" in g
                  else (list(g["models"]), list(g["scenarios"]), ServingConfig.of(g.get("serving", {})))
                  for g in suite["cases"]]
    except FileNotFoundError:
        known = sorted(p.stem for p in SUITES.glob("*.toml"))
        raise SuiteError(f"no serving suite {name_or_path!r} (known: {', '.join(known)})") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
        raise SuiteError(f"{path}: {error}") from None
    return {"name": suite.get("name", path.stem), "groups": groups}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--threads", type=int, default=2,
                        help="intra-op threads, the same budget for every framework (default 2)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    registry = load_registry()
    if args.framework not in registry:
        print(f"unknown framework {args.framework!r} (known: {', '.join(registry)})", file=sys.stderr)
        return 2
    try:
        suite = load(args.suite)
    except SuiteError as error:
        print(error, file=sys.stderr)
        return 2
    import mlperf_loadgen as lg

    from suites.serving.generate import generate_case
    from suites.serving.run import serve_case
    try:
        adapter = registry[args.framework].load()(RunConfig(args.device, args.threads, 1))
    except DeviceUnavailable as error:
        print(error, file=sys.stderr)
        return 2
    folder = args.out / suite["name"] / host_id()
    results = ResultsFile(folder / f"{args.framework}_{args.device}.jsonl")
    env = {**host_environment(args.threads, []), **adapter.environment(),
           "framework": args.framework, "loadgen": lg.__version__ if hasattr(lg, "__version__") else ""}
    try:
        results.check_writable()
        logs = folder / "loadgen" / args.framework
        for models, scenarios, config in suite["groups"]:
            for model in models:
                rows = ([generate_case(lg, adapter, model, config, suite["name"], logs, env)]
                        if isinstance(config, GenerateConfig) else
                        (serve_case(lg, adapter, model, scenario, config, suite["name"], logs, env)
                         for scenario in scenarios))
                for row in rows:
                    results.append(row)
                    print(f"{row.key.id()}: {row.status} {row.reason}".rstrip(), flush=True)
    except OutputError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
