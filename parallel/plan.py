"""What a scaling run will cost, said before it starts: a multi-GPU host is the dearest
machine a benchmark rents, and a lease is planned around the minutes each engine takes.

A row's ``wall_s`` is what its case cost (``parallel/runner.py``): the build, the first
call, warm-up, the timed, local and traced steps, and for the first case of a launch the
launch's start (processes, the framework's import, the collective group). Rows from runs
of one launch per case (before the cases of one N shared a launch) carry a start each, so
an estimate from them overstates a run today; the newest rows win. The estimate of a
pending case is the newest earlier row of the same computation (framework, model, mode,
batch per device and in all, N, precision; from any scaling suite, whose timers differ by
a few steps that a launch's start-up outweighs) on the same GPU model, else on another GPU
model (the plan says how many), else none (counted, never guessed). History: the scaling
suites' results under the run's own output folder and the published reference data.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from parallel.spec import SUITES_DIR, ScalingCase
from suites.matrix.estimate import Estimate
from suites.rows.results import json_lines, rows_files
from suites.rows.scaling import Key, row_key

MEASURE = "data_parallel"
PUBLISHED = Path(__file__).resolve().parent.parent / "published"


def case_key(framework: str, device: str, case: ScalingCase) -> Key:
    return (framework, device, case.model, case.mode, case.per_device_batch,
            case.global_batch, case.devices, case.precision)


def scaling_folder(path: Path) -> bool:
    suite = path.parent.parent.name
    return suite.startswith("scaling") or (SUITES_DIR / f"{suite}.toml").exists()


def history(folders: Iterable[Path], device_name: str | None
            ) -> tuple[dict[Key, float], dict[Key, float]]:
    """(this device model's costs, other device models' costs): the newest ``wall_s`` of
    each computation among the scaling rows under ``folders``."""
    newest: tuple[dict[Key, tuple[str, float]], dict[Key, tuple[str, float]]] = ({}, {})
    for folder in folders:
        if not folder.exists():
            continue
        # Results files sit at <suite>/<host>/<framework>_<device>.jsonl (.gz in published/):
        # only scaling suites' folders are read (a matrix folder holds hundreds of other rows).
        for path in (p for p in rows_files(folder) if scaling_folder(p)):
            for row in json_lines(path):
                key = row_key(row) if row.get("measure") == MEASURE else None
                if key is None or not row.get("wall_s"):
                    continue
                model = (row.get("env") or {}).get("gpu_model") \
                    if key[1] == "gpu" else (row.get("env") or {}).get("cpu_model")
                same = newest[0] if device_name and model == device_name else newest[1]
                when = str(row.get("started_at") or "")
                if key not in same or same[key][0] <= when:
                    same[key] = (when, float(row["wall_s"]))
    return tuple({k: cost for k, (_, cost) in table.items()} for table in newest)


def estimate(cases: Iterable[ScalingCase], framework: str, device: str,
             device_name: str | None, folders: Iterable[Path]) -> Estimate:
    same, other = history(folders, device_name)
    total = Estimate()
    for case in cases:
        key = case_key(framework, device, case)
        if key in same:
            total += Estimate(same[key], 1)
        elif key in other and device == "gpu":   # a CPU's cost does not carry over
            total += Estimate(other[key], 1, from_other_device=1)
        else:
            total += Estimate(0.0, 1, unknown=1)
    return total


def plan_line(pending: list[ScalingCase], cases: int, framework: str, device: str,
              device_name: str | None, folders: Iterable[Path]) -> str:
    """The line a run prints before its first launch."""
    where = device_name or device.upper()
    if not pending:
        return f"plan: nothing to run ({cases} case{'s' if cases != 1 else ''} done)"
    guess = estimate(pending, framework, device, device_name, folders)
    done = cases - len(pending)
    cost = f"about {guess.text()}" if guess.unknown < guess.cases else \
        "no estimate (no earlier row of these cases)"
    return (f"plan: {len(pending)} case{'s' if len(pending) != 1 else ''}"
            + (f" ({done} of {cases} done)" if done else "") + f" on {where}, {cost}")
