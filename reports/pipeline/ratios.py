"""Speed ratios with their range over models, in the cloud fork's words (seed 002: "Across
all models, the Quadro P5000 is 2.2x to 2.5x faster").

* Between frameworks: same hardware, precision, measure (and thread count on CPU); each
  framework's fastest ok variant per model and batch.
* Between devices: same framework, variant, precision and measure; each device's fastest
  ok row (over thread counts) per model and batch.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

import pandas as pd


@dataclass(frozen=True)
class Ratio:
    kind: str              # "framework" or "device"
    fast: str              # the side faster by median ratio
    slow: str
    context: str           # "forward, gpu NVIDIA H100 80GB HBM3, fp32"
    low: float             # min over models of time(slow) / time(fast)
    high: float
    median: float
    models: tuple[str, ...]
    values: tuple[float, ...]   # per model, same order

    def sentence(self) -> str:
        n = len(self.models)
        distinct = len({m.rsplit(" b", 1)[0] for m in self.models})
        across = f"across {distinct} model{'s' if distinct != 1 else ''}"
        if distinct != n:
            across += f" ({n} model/batch pairs)"
        span = (f"{self.low:.2f}×" if abs(self.high - self.low) < 0.005
                else f"{self.low:.2f}×–{self.high:.2f}×")
        if self.low >= 1:
            return f"{self.fast} is {span} faster than {self.slow} {across} ({self.context})"
        wins = sum(1 for v in self.values if v > 1)
        return (f"{self.fast} is {span} as fast as {self.slow} (median {self.median:.2f}×, "
                f"faster on {wins} of {n}) {across} ({self.context})")


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["status"] == "ok") & (frame["median_ms"] > 0)]


def _pairs(times: dict[str, dict[str, float]], kind: str, context: str) -> list[Ratio]:
    out = []
    for a, b in combinations(sorted(times), 2):
        common = sorted(set(times[a]) & set(times[b]))
        if not common:
            continue
        ratio = [times[b][m] / times[a][m] for m in common]   # > 1: a is faster
        median = statistics.median(ratio)
        if median < 1:
            a, b, ratio, median = b, a, [1 / r for r in ratio], 1 / median
        out.append(Ratio(kind, a, b, context, min(ratio), max(ratio), median, tuple(common),
                         tuple(ratio)))
    return out


def _model_key(row) -> str:
    return f"{row['model']} b{row['batch']}"


def framework_ratios(frame: pd.DataFrame) -> list[Ratio]:
    ok = _ok(frame)
    groups: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in ok.to_dict("records"):
        threads = row["threads"] if row["device"] == "cpu" else None
        key = (row["measure"], row["device"], row["hardware"], row["precision"], threads)
        best = groups[key][row["framework"]]
        name = _model_key(row)
        best[name] = min(best.get(name, float("inf")), row["median_ms"])
    out = []
    for (measure, device, hw, precision, threads), times in sorted(groups.items(),
                                                                   key=lambda kv: str(kv[0])):
        where = f"{device} {hw}" + (f", {threads} threads" if threads is not None else "")
        out += _pairs(times, "framework", f"{measure}, {where}, {precision}")
    return out


def device_ratios(frame: pd.DataFrame) -> list[Ratio]:
    ok = _ok(frame)
    groups: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in ok.to_dict("records"):
        key = (row["measure"], row["framework"], row["variant"], row["precision"])
        side = f"{row['device']} {row['hardware']}"
        best = groups[key][side]
        name = _model_key(row)
        best[name] = min(best.get(name, float("inf")), row["median_ms"])
    out = []
    for (measure, fw, variant, precision), times in sorted(groups.items()):
        for r in _pairs(times, "device", f"{fw} {variant}, {measure}, {precision}"):
            out.append(r)
    return out
