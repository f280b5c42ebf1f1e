"""Do two or three runs of the same suite agree? ``python -m suites compare RUN1 RUN2 [RUN3]``

Each RUN is a results folder (every ``*.jsonl`` under it) or one results file. Cases are
matched by case id (suite, framework, device, model, batch, measure, precision, variant,
threads: no host name, so runs from two hosts match). For run 1 against each later run it
prints, by the first run's median (< 1 ms, 1-5 ms, >= 5 ms), the share of cases whose
medians agree within 3%, 5% and 10%, the median and largest difference, and the share of
the later run's medians that fall inside the first run's reported interval; then the
reproducibility targets (run 2 is taken as the back-to-back re-run on the same host, run 3
as the run on another host) and the cases that differ most.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

BANDS = (("< 1 ms", 0.0, 1.0), ("1-5 ms", 1.0, 5.0), (">= 5 ms", 5.0, math.inf))
TOLERANCES = (0.03, 0.05, 0.10)


class CompareError(Exception):
    """A run that cannot be compared (no such folder, no timed rows)."""


@dataclass(frozen=True)
class Timed:
    case_id: str
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    repetitions: int
    unstable: bool


@dataclass(frozen=True)
class Pair:
    """One case in the first run and a later one."""

    first: Timed
    later: Timed

    @property
    def difference(self) -> float:
        """|later - first| / first."""
        return abs(self.later.median_ms - self.first.median_ms) / self.first.median_ms

    @property
    def inside(self) -> bool:
        return self.first.ci_low_ms <= self.later.median_ms <= self.first.ci_high_ms


def load_run(path: Path) -> dict[str, Timed]:
    """Every ok, timed row of a run by case id (a case recorded twice: the last row)."""
    if not path.exists():
        raise CompareError(f"no results at {path}")
    files = sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    rows: dict[str, Timed] = {}
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue   # a torn last line
            timing = data.get("timing") or {}
            if data.get("status") != "ok" or not timing.get("median_ms"):
                continue
            rows[data["case_id"]] = Timed(data["case_id"], float(timing["median_ms"]),
                                          float(timing["ci_low_ms"]), float(timing["ci_high_ms"]),
                                          int(timing.get("repetitions") or 1),
                                          bool(timing.get("unstable")))
    if not rows:
        raise CompareError(f"{path} holds no timed rows")
    return rows


def pair_up(first: dict[str, Timed], later: dict[str, Timed]) -> list[Pair]:
    return [Pair(first[case], later[case]) for case in sorted(first.keys() & later.keys())]


def band_of(pair: Pair) -> str:
    return next(name for name, low, high in BANDS if low <= pair.first.median_ms < high)


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


def band_figures(pairs: list[Pair]) -> dict[str, float]:
    differences = [p.difference for p in pairs]
    return {
        "cases": len(pairs),
        **{f"within_{round(t * 100)}pct": share([d <= t for d in differences])
           for t in TOLERANCES},
        "median_difference": statistics.median(differences) if differences else math.nan,
        "max_difference": max(differences) if differences else math.nan,
        "inside_interval": share([p.inside for p in pairs]),
        "median_repetitions": (statistics.median(p.first.repetitions for p in pairs)
                               if pairs else math.nan),
    }


def figures(pairs: list[Pair]) -> dict[str, dict[str, float]]:
    """By band, and for all cases together ("all")."""
    result = {name: band_figures([p for p in pairs if band_of(p) == name])
              for name, _, _ in BANDS}
    result["all"] = band_figures(pairs)
    return result


def targets(pairs: list[Pair], same_host: bool) -> list[tuple[str, float, float]]:
    """(what, achieved share, target share): the reproducibility targets. Cases >= 1 ms
    agree within 3% back to back on one host, within 5% across hosts; cases < 1 ms within
    10%; and the later run's median falls inside the first run's interval."""
    long = [p for p in pairs if p.first.median_ms >= 1.0]
    short = [p for p in pairs if p.first.median_ms < 1.0]
    limit = 0.03 if same_host else 0.05
    return [
        (f"cases >= 1 ms within {limit:.0%}", share([p.difference <= limit for p in long]), 0.95),
        ("cases < 1 ms within 10%", share([p.difference <= 0.10 for p in short]), 0.95),
        ("later medians inside the first run's interval", share([p.inside for p in pairs]), 0.90),
    ]


def percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def render(runs: list[Path], loaded: list[dict[str, Timed]], worst: int = 10) -> str:
    lines = [f"run {i + 1}: {path} ({len(rows)} timed cases)"
             for i, (path, rows) in enumerate(zip(runs, loaded))]
    for index in range(1, len(loaded)):
        pairs = pair_up(loaded[0], loaded[index])
        same_host = index == 1
        lines += ["", f"run 1 vs run {index + 1} "
                  f"({'taken as back to back, same host' if same_host else 'taken as another host'}): "
                  f"{len(pairs)} cases in both"]
        header = (f"{'median band':<12}{'cases':>6}{'<=3%':>8}{'<=5%':>8}{'<=10%':>8}"
                  f"{'median diff':>13}{'max diff':>10}{'inside CI':>11}{'reps':>6}")
        lines += [header, "-" * len(header)]
        for name, row in figures(pairs).items():
            lines.append(f"{name:<12}{row['cases']:>6}{percent(row['within_3pct']):>8}"
                         f"{percent(row['within_5pct']):>8}{percent(row['within_10pct']):>8}"
                         f"{percent(row['median_difference']):>13}"
                         f"{percent(row['max_difference']):>10}"
                         f"{percent(row['inside_interval']):>11}"
                         f"{row['median_repetitions']:>6.0f}" if row["cases"] else
                         f"{name:<12}{0:>6}")
        lines.append("targets:")
        for what, achieved, target in targets(pairs, same_host):
            verdict = "n/a" if math.isnan(achieved) else ("met" if achieved >= target else "MISSED")
            lines.append(f"  {what}: {percent(achieved)} (target >= {target:.0%}) {verdict}")
        lines.append(f"largest differences (median ms, run 1 -> run {index + 1}, "
                     f"run 1's interval, repetitions):")
        for pair in sorted(pairs, key=lambda p: -p.difference)[:worst]:
            first, later = pair.first, pair.later
            lines.append(f"  {pair.difference:>7.1%}  {first.median_ms:.4g} -> "
                         f"{later.median_ms:.4g}  [{first.ci_low_ms:.4g}, {first.ci_high_ms:.4g}]"
                         f"  n={first.repetitions}/{later.repetitions}"
                         f"{'  unstable' if first.unstable else ''}  {first.case_id}")
    return "\n".join(lines)


def main(paths: list[Path]) -> int:
    if not 2 <= len(paths) <= 3:
        print("error: compare takes two or three result folders or files", file=sys.stderr)
        return 2
    try:
        loaded = [load_run(path) for path in paths]
    except CompareError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(render(paths, loaded))
    return 0
