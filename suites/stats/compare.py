"""Do two or three runs of the same suite agree? ``python -m suites compare RUN1 RUN2 [RUN3]``

Each RUN is a results folder (every ``*.jsonl`` or ``*.jsonl.gz`` under it) or one results file. Cases are
matched by case id (suite, framework, device, model, batch, measure, precision, variant,
threads: no host name, so runs from two hosts match). For run 1 against each later run it
prints, by the first run's median (< 1 ms, 1-5 ms, >= 5 ms), the share of cases whose
medians agree within 3%, 5% and 10%, the median and largest difference, and the share of
the later run's medians that fall inside the first run's reported interval; then the
reproducibility targets (run 2 is taken as the back-to-back re-run on the same host, run 3
as the run on another host) and the cases that differ most. Where the rows carry the host
probes (suites/instruments/host_probe.py) it prints how the later run's compare with the first's,
beside the shift of the whole run: whether the host's single-core speed or its cross-core
wake-up changed with it.

On a GPU it prints the same for the device medians (the GPU's own time of each case, from
the device phase's ``device_time`` rows): bands by device median, a target for cases
>= 1 ms, host-to-device transfers on a line of their own, and the largest differences.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from models.measures import TRANSFERS, device_exceeds_wall
from suites.rows.results import DEVICE_TIME, RowsFileError, json_lines, rows_files

BANDS = (("< 1 ms", 0.0, 1.0), ("1-5 ms", 1.0, 5.0), (">= 5 ms", 5.0, math.inf))
TOLERANCES = (0.03, 0.05, 0.10)
# The GPU's own time leaves out the host (launch overhead, scheduling, the CPU's clock),
# so one limit holds back to back and across hosts with the same GPU.
DEVICE_LIMIT = 0.03
# Host-to-device copies (models.measures.TRANSFERS): their device time is the PCIe
# link's, which varies with the host's memory and bus, not the GPU's compute; they are
# reported apart from the target.
# A probe's median over a run's cases that moves by more than this between runs marks the
# host as changed: back to back on a 2-core VM the probes moved by 4-5%, with 30% of each
# core taken by other processes by 10% and 61% (README, "Reproducibility").
PROBE_SHIFT = 0.10


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
    measure: str = ""
    # The GPU's own median: the device phase's figure, else the wall row's own (PyTorch's
    # CUDA events); None where the run has none (a CPU run).
    device_median_ms: float | None = None
    # The host probes' medians while this case was sampled (suites/instruments/host_probe.py).
    host_core_probe_ms: float | None = None
    host_wakeup_us: float | None = None
    # A device phase figure too long to be this case's work (models/measures.py:
    # device_exceeds_wall), left out of the device comparison as the report leaves it out.
    device_withheld_ms: float | None = None
    # The run's own interval where earlier runs widened the row's (--earlier:
    # suites/stats/between_runs.py); None where the interval is the run's own.
    own_interval_ms: tuple[float, float] | None = None


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
    def ratio(self) -> float:
        """later / first."""
        return self.later.median_ms / self.first.median_ms

    @property
    def inside(self) -> bool:
        return self.first.ci_low_ms <= self.later.median_ms <= self.first.ci_high_ms


def positive(value: Any) -> float | None:
    """A median to divide by: a positive number, else None."""
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def device_medians(data: dict[str, Any]) -> dict[str, float]:
    """An ok ``device_time`` row's device median of each measure, by the measured case's id
    (the row's case id with the measure segment in place of "device_time")."""
    prefix, found, rest = data["case_id"].partition(f"/{DEVICE_TIME}/")
    if not found:
        return {}
    measures = (data.get("device_times") or {}).get("measures") or {}
    return {f"{prefix}/{measure}/{rest}": median for measure, figures in measures.items()
            if (median := positive((figures or {}).get("device_median_ms"))) is not None}


def load_run(path: Path) -> dict[str, Timed]:
    """Every ok, timed row of a run by case id (a case recorded twice: the last row), with
    its device median where the run has one."""
    if not path.exists():
        raise CompareError(f"no results at {path}")
    files = rows_files(path) if path.is_dir() else [path]
    rows: dict[str, Timed] = {}
    device: dict[str, float] = {}
    for file in files:
        for data in json_lines(file):   # a torn last line is skipped
            if not isinstance(data, dict) or data.get("status") != "ok":
                continue
            if data.get("measure") == DEVICE_TIME:
                device.update(device_medians(data))
                continue
            timing = data.get("timing") or {}
            if not timing.get("median_ms"):
                continue
            rows[data["case_id"]] = Timed(data["case_id"], float(timing["median_ms"]),
                                          float(timing["ci_low_ms"]), float(timing["ci_high_ms"]),
                                          int(timing.get("repetitions") or 1),
                                          bool(timing.get("unstable")),
                                          str(data.get("measure") or ""),
                                          positive(timing.get("device_median_ms")),
                                          positive(timing.get("host_core_probe_ms")),
                                          positive(timing.get("host_wakeup_us")),
                                          own_interval_ms=own_interval(timing))
    if not rows:
        raise CompareError(f"{path} holds no timed rows")
    # The device phase's figure replaces a wall row's own, as the report does
    # (reports/pipeline/tidy.py join_device_times), so that every case's device time is one clock's;
    # a figure above the wall median is withheld there and here.
    return {case: with_device_median(timed, device.get(case)) for case, timed in rows.items()}


def own_interval(timing: dict[str, Any]) -> tuple[float, float] | None:
    found = (timing.get("between_runs") or {}).get("own_interval_ms")
    return (float(found[0]), float(found[1])) if found and None not in found else None


def earlier_runs_line(pairs: list[Pair], index: int) -> str | None:
    """What ``--earlier`` did to run 1's intervals: how many it widened, how many of the
    later medians each kind of interval holds, and how wide each is in the median case."""
    widened = [p for p in pairs if p.first.own_interval_ms is not None]
    if not widened:
        return None

    def half(interval: tuple[float, float], centre: float) -> float:
        return (interval[1] - interval[0]) / 2 / centre
    own_inside = share([p.first.own_interval_ms[0] <= p.later.median_ms
                        <= p.first.own_interval_ms[1] for p in widened])
    width = statistics.median(half((p.first.ci_low_ms, p.first.ci_high_ms), p.first.median_ms)
                              for p in widened)
    own_width = statistics.median(half(p.first.own_interval_ms, p.first.median_ms)
                                  for p in widened)
    return (f"run 1's intervals from earlier runs (--earlier) for {len(widened)} of "
            f"{len(pairs)} cases: run {index + 1}'s medians inside "
            f"{percent(share([p.inside for p in widened]))} of them, inside the run's own "
            f"{percent(own_inside)}; half-width ±{width:.1%} against ±{own_width:.1%} in the "
            f"median case")


def with_device_median(timed: Timed, device_ms: float | None) -> Timed:
    if device_ms is None:
        return timed
    if device_exceeds_wall(timed.measure, device_ms, timed.median_ms):
        return replace(timed, device_withheld_ms=device_ms)
    return replace(timed, device_median_ms=device_ms)


def pair_up(first: dict[str, Timed], later: dict[str, Timed]) -> list[Pair]:
    return [Pair(first[case], later[case]) for case in sorted(first.keys() & later.keys())]


def band(median_ms: float) -> str:
    return next(name for name, low, high in BANDS if low <= median_ms < high)


def band_of(pair: Pair) -> str:
    return band(pair.first.median_ms)


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


def agreement(differences: list[float]) -> dict[str, float]:
    """The columns that wall and device tables share: cases, shares within each tolerance,
    the median and largest difference."""
    return {
        "cases": len(differences),
        **{f"within_{round(t * 100)}pct": share([d <= t for d in differences])
           for t in TOLERANCES},
        "median_difference": statistics.median(differences) if differences else math.nan,
        "max_difference": max(differences) if differences else math.nan,
    }


def band_figures(pairs: list[Pair]) -> dict[str, float]:
    return {
        **agreement([p.difference for p in pairs]),
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


# A band's shared ratio needs at least this many other cases: fewer would let a case's own
# deviation pass for the run's.
SHIFT_MIN_CASES = 4


@dataclass(frozen=True)
class RunShift:
    """How far a later run moved as a whole: per band, the median of later / first over
    its cases, and the share of the later medians inside the first run's intervals once a
    shared ratio is divided out of each. A ratio that most cases share is the host's speed
    changing between runs (minutes apart on a VM: steal, a neighbour, the host's clock),
    which no interval from one run's processes can see; what stays outside after it is
    taken out is the case's own spread. Each case's shared ratio comes from the other
    cases of its band (all other cases where its band has fewer than SHIFT_MIN_CASES), so
    that no case explains itself away."""

    ratios: dict[str, float]
    slower: float                  # the share of cases slower in the later run
    inside_after: float


def shared_ratio(pair: Pair, pairs: list[Pair]) -> float:
    others = [p for p in pairs if p is not pair]
    same_band = [p for p in others if band_of(p) == band_of(pair)]
    pool = same_band if len(same_band) >= SHIFT_MIN_CASES else others
    return statistics.median(p.ratio for p in pool) if pool else 1.0


def run_shift(pairs: list[Pair]) -> RunShift:
    ratios = {name: statistics.median(p.ratio for p in group) for name, _, _ in BANDS
              if (group := [p for p in pairs if band_of(p) == name])}
    inside = [p.first.ci_low_ms <= p.later.median_ms / shared_ratio(p, pairs)
              <= p.first.ci_high_ms for p in pairs]
    return RunShift(ratios, share([p.ratio > 1 for p in pairs]), share(inside))


def shift_line(pairs: list[Pair], index: int) -> str:
    shift = run_shift(pairs)
    ratios = ", ".join(f"{name} x{value:.3f}" for name, value in shift.ratios.items())
    return (f"run shift: run {index + 1} / run 1, median by band: {ratios}; "
            f"{percent(shift.slower)} of cases slower; inside run 1's interval with the "
            f"shift its other cases share divided out: {percent(shift.inside_after)}")


# The probes a row may carry, as compare names them.
PROBES = (("single-core speed", "host_core_probe_ms"), ("cross-core wake-up", "host_wakeup_us"))


def probe_ratio(pairs: list[Pair], field: str) -> tuple[float, int] | None:
    """The median over cases of the later run's probe over the first's, and how many
    cases carry that probe in both runs; None where none does."""
    ratios = [getattr(p.later, field) / getattr(p.first, field) for p in pairs
              if getattr(p.first, field) and getattr(p.later, field)]
    return (statistics.median(ratios), len(ratios)) if ratios else None


def probe_line(pairs: list[Pair], index: int) -> str | None:
    """The host probes' ratios, each marked where it moved beyond ``PROBE_SHIFT``."""
    parts = []
    for name, field in PROBES:
        if (found := probe_ratio(pairs, field)) is not None:
            ratio, cases = found
            moved = abs(math.log(ratio)) > math.log(1 + PROBE_SHIFT)
            parts.append(f"{name} x{ratio:.3f} ({'changed' if moved else 'steady'}, "
                         f"{cases} cases)")
    if not parts:
        return None
    return (f"host probes before each repetition, run {index + 1} / run 1 (time, so > 1 is "
            f"slower): {'; '.join(parts)}")


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


@dataclass(frozen=True)
class DevicePair:
    """One case's device medians in the first run and a later one."""

    case_id: str
    measure: str
    first_ms: float
    later_ms: float

    @property
    def difference(self) -> float:
        """|later - first| / first."""
        return abs(self.later_ms - self.first_ms) / self.first_ms

    @property
    def transfer(self) -> bool:
        return self.measure in TRANSFERS


def device_pairs(first: dict[str, Timed], later: dict[str, Timed]) -> list[DevicePair]:
    """The cases with a device median in both runs."""
    return [DevicePair(case, first[case].measure, first[case].device_median_ms,
                       later[case].device_median_ms)
            for case in sorted(first.keys() & later.keys())
            if first[case].device_median_ms and later[case].device_median_ms]


def device_figures(pairs: list[DevicePair]) -> dict[str, dict[str, float]]:
    """By the first run's device median band, and for all cases together ("all");
    transfers left out (``transfer_figures``)."""
    kept = [p for p in pairs if not p.transfer]
    result = {name: agreement([p.difference for p in kept if band(p.first_ms) == name])
              for name, _, _ in BANDS}
    result["all"] = agreement([p.difference for p in kept])
    return result


def transfer_figures(pairs: list[DevicePair]) -> dict[str, float]:
    return agreement([p.difference for p in pairs if p.transfer])


def device_target(pairs: list[DevicePair]) -> tuple[str, float, float]:
    """(what, achieved share, target share): device medians >= 1 ms agree within 3%,
    transfers left out."""
    long = [p for p in pairs if p.first_ms >= 1.0 and not p.transfer]
    return (f"device medians >= 1 ms within {DEVICE_LIMIT:.0%} (transfers apart)",
            share([p.difference <= DEVICE_LIMIT for p in long]), 0.95)


def percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


AGREEMENT_HEADER = (f"{'cases':>6}{'<=3%':>8}{'<=5%':>8}{'<=10%':>8}{'median diff':>13}"
                    f"{'max diff':>10}")


def agreement_row(name: str, row: dict[str, float], extra: str = "") -> str:
    """One band's line of a wall or device table: the ``agreement`` columns, then the
    table's own (``extra``); a band without cases shows its count only."""
    if not row["cases"]:
        return f"{name:<12}{0:>6}"
    return (f"{name:<12}{row['cases']:>6}{percent(row['within_3pct']):>8}"
            f"{percent(row['within_5pct']):>8}{percent(row['within_10pct']):>8}"
            f"{percent(row['median_difference']):>13}{percent(row['max_difference']):>10}"
            + extra)


def target_line(what: str, achieved: float, target: float) -> str:
    verdict = "n/a" if math.isnan(achieved) else ("met" if achieved >= target else "MISSED")
    return f"  {what}: {percent(achieved)} (target >= {target:.0%}) {verdict}"


def device_lines(first: dict[str, Timed], later: dict[str, Timed], index: int,
                 worst: int = 10) -> list[str]:
    """The device part of run 1 against run ``index + 1``: one line where a run has no
    device times (a CPU run), else the band table, the target, transfers and the cases
    that differ most."""
    pairs = device_pairs(first, later)
    if not pairs:
        counts = [sum(t.device_median_ms is not None for t in run.values())
                  for run in (first, later)]
        if not any(counts):
            return [f"device medians: neither run has device times (a CPU run has none); "
                    f"run 1 vs run {index + 1} compares wall medians only"]
        return [f"device medians: no case has a device time in both runs "
                f"(run 1: {counts[0]}, run {index + 1}: {counts[1]})"]
    transfers = transfer_figures(pairs)
    lines = [f"device medians, run 1 vs run {index + 1}: {len(pairs)} cases with a device "
             f"time in both, {transfers['cases']} of them transfers (on a line of their own)"]
    lines += withheld_lines(first, later, index)
    header = f"{'device band':<12}{AGREEMENT_HEADER}"
    lines += [header, "-" * len(header)]
    lines += [agreement_row(name, row) for name, row in device_figures(pairs).items()]
    lines += ["device target:", target_line(*device_target(pairs))]
    moved = [p for p in pairs if p.transfer]
    if moved:
        largest = max(moved, key=lambda p: p.difference)
        lines.append(f"  transfers ({', '.join(TRANSFERS)}), not in the table or target: "
                     f"{transfers['cases']} cases, median difference "
                     f"{percent(transfers['median_difference'])}, max "
                     f"{percent(transfers['max_difference'])} ({largest.case_id})")
    else:
        lines.append("  transfers: none with a device time in both runs")
    lines.append(f"largest device differences (device median ms, run 1 -> run {index + 1}):")
    for pair in sorted((p for p in pairs if not p.transfer), key=lambda p: -p.difference)[:worst]:
        lines.append(f"  {pair.difference:>7.1%}  {pair.first_ms:.4g} -> {pair.later_ms:.4g}"
                     f"  {pair.case_id}")
    return lines


def withheld_lines(first: dict[str, Timed], later: dict[str, Timed], index: int) -> list[str]:
    """The cases whose device phase figure exceeded their wall median, by run: left out of
    the table and the target, as the report leaves them out."""
    lines = []
    for number, run in ((1, first), (index + 1, later)):
        withheld = [t for t in run.values() if t.device_withheld_ms is not None]
        if withheld:
            lines.append(f"  run {number}: {len(withheld)} device figures left out, each above "
                         f"its wall median (the device phase timed other work):")
            lines += [f"    {t.device_withheld_ms:.4g} ms device > {t.median_ms:.4g} ms wall  "
                      f"{t.case_id}" for t in sorted(withheld, key=lambda t: t.case_id)]
    return lines


def render(runs: list[Path], loaded: list[dict[str, Timed]], worst: int = 10) -> str:
    lines = [f"run {i + 1}: {path} ({len(rows)} timed cases)"
             for i, (path, rows) in enumerate(zip(runs, loaded))]
    for index in range(1, len(loaded)):
        pairs = pair_up(loaded[0], loaded[index])
        same_host = index == 1
        lines += ["", f"run 1 vs run {index + 1} "
                  f"({'taken as back to back, same host' if same_host else 'taken as another host'}): "
                  f"{len(pairs)} cases in both"]
        header = f"{'median band':<12}{AGREEMENT_HEADER}{'inside CI':>11}{'reps':>6}"
        lines += [header, "-" * len(header)]
        lines += [agreement_row(name, row, f"{percent(row['inside_interval']):>11}"
                                           f"{row['median_repetitions']:>6.0f}")
                  for name, row in figures(pairs).items()]
        lines.append("targets:")
        lines += [target_line(*target) for target in targets(pairs, same_host)]
        if (earlier := earlier_runs_line(pairs, index)) is not None:
            lines.append(earlier)
        if pairs:
            lines.append(shift_line(pairs, index))
            if (probe := probe_line(pairs, index)) is not None:
                lines.append(probe)
        lines.append(f"largest differences (median ms, run 1 -> run {index + 1}, "
                     f"run 1's interval, repetitions):")
        for pair in sorted(pairs, key=lambda p: -p.difference)[:worst]:
            first, later = pair.first, pair.later
            lines.append(f"  {pair.difference:>7.1%}  {first.median_ms:.4g} -> "
                         f"{later.median_ms:.4g}  [{first.ci_low_ms:.4g}, {first.ci_high_ms:.4g}]"
                         f"  n={first.repetitions}/{later.repetitions}"
                         f"{'  unstable' if first.unstable else ''}  {first.case_id}")
        lines += ["", *device_lines(loaded[0], loaded[index], index, worst)]
    return "\n".join(lines)


def main(paths: list[Path]) -> int:
    if not 2 <= len(paths) <= 3:
        print("error: compare takes two or three result folders or files", file=sys.stderr)
        return 2
    try:
        loaded = [load_run(path) for path in paths]
    except (CompareError, RowsFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(render(paths, loaded))
    return 0
