"""Equivalence: do all frameworks compute the same thing? (DESIGN.md "Equivalence".)

Same canonical weights and seeded input ⇒ every adapter should give the same outputs and
gradients. Rows carry a fingerprint (first outputs, output mean/std, loss, per-parameter
gradient norms). For each (model, batch, precision, measure) all fingerprints of all rows —
any framework, device, host or session — are compared pairwise; only like precision is
compared. Relative differences are scaled so values near zero do not blow up:

* output_head: max |a−b| / max(max|a|, max|b|, output_std)
* output_mean: |a−b| / max(|a|, |b|, output_std)
* output_std, loss: |a−b| / max(|a|, |b|)
* grad_norms: per parameter, |a−b| / max(|a|, |b|, 1e-6 × largest norm), divided by
  GRADIENT_SLACK; two fingerprints whose parameter sets differ never agree
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

# fp32 accumulation-order noise is ~1e-6 relative; 1e-3 leaves room for deep nets. TF32
# keeps 10 mantissa bits (~5e-4 per product), bf16 only 7 (~4e-3): looser, by experience.
RTOL = {"fp32": 1e-3, "tf32": 1e-2, "bf16": 5e-2}
DEFAULT_RTOL = 1e-2
# Gradient norms are held to 30× the output tolerance: in deep batch-normalised networks,
# early layers' gradients come out of long chains of cancelling sums, and correct fp32
# implementations drift apart there while their outputs agree to ~1e-6. Measured on an
# H200 (jax jit vs torch eager, batch 16): worst batch-norm gradient norm 0.8% apart for
# ResNet-50, 1.5% for ResNet-101, 2.6% for ResNet-152; TF on CPU vs JAX 1.8% (ResNet-50).
# The tiny models of the conformance kit hold every adapter to 1e-3 on each norm.
GRADIENT_SLACK = 30.0
TINY = 1e-30
# The runner writes one "fingerprint" row per setting (suites/rows/results.py), after its timings;
# fingerprints on timing rows are compared too, where an adapter puts them there.
FINGERPRINT = "fingerprint"


def mark(agree: bool | None, worst: float) -> str:
    """"—" with nothing to compare, "✓" within tolerance, else "✗" and the difference."""
    if agree is None:
        return "—"
    return "✓" if agree else f"✗ {worst:.1e}"


@dataclass(frozen=True)
class Verdict:
    model: str
    batch: int
    precision: str
    agree: bool | None          # None: fewer than two fingerprints to compare
    worst: float                # worst relative difference over all pairs (nan if none)
    worst_pair: str             # "torch/gpu vs jax/gpu (loss)"
    frameworks: tuple[str, ...]
    rtol: float

    def text(self) -> str:
        return mark(self.agree, self.worst)


@dataclass(frozen=True)
class RowCheck:
    agree: bool | None
    worst: float
    against: str

    def text(self) -> str:
        return mark(self.agree, self.worst)


@dataclass(frozen=True)
class Equivalence:
    verdicts: dict      # (model, batch, precision) -> Verdict
    rows: dict          # case source ("file:line") -> RowCheck

    def for_model(self, model: str, batch: int) -> list[Verdict]:
        return [v for (m, b, _), v in sorted(self.verdicts.items()) if m == model and b == batch]

    def model_text(self, model: str, batch: int, precision: str | None = None) -> str:
        found = [v for v in self.for_model(model, batch) if v.agree is not None
                 and precision in (None, v.precision)]
        if not found:
            return mark(None, math.nan)
        bad = [v for v in found if not v.agree]
        return mark(not bad, max((v.worst for v in bad), default=0.0))


def _rel(a: float, b: float, scale: float = 0.0) -> float:
    denominator = max(abs(a), abs(b), abs(scale), TINY)
    return abs(a - b) / denominator


def compare(fa: dict, fb: dict) -> tuple[float, str]:
    """Worst relative difference between two fingerprints, and the field it came from."""
    worst, where = 0.0, ""
    std = max(abs(fa.get("output_std") or 0.0), abs(fb.get("output_std") or 0.0))

    def take(value: float, field: str) -> None:
        nonlocal worst, where
        if math.isnan(value) or value > worst:
            worst, where = (math.inf if math.isnan(value) else value), field

    ha, hb = fa.get("output_head"), fb.get("output_head")
    if ha and hb:
        n = min(len(ha), len(hb))
        scale = max([abs(x) for x in ha[:n] + hb[:n]] + [std])
        take(max(_rel(x, y, scale) for x, y in zip(ha[:n], hb[:n])) if n else 0.0,
             "output_head")
    if fa.get("output_mean") is not None and fb.get("output_mean") is not None:
        take(_rel(fa["output_mean"], fb["output_mean"], std), "output_mean")
    if fa.get("output_std") is not None and fb.get("output_std") is not None:
        take(_rel(fa["output_std"], fb["output_std"]), "output_std")
    if fa.get("loss") is not None and fb.get("loss") is not None:
        take(_rel(fa["loss"], fb["loss"]), "loss")
    ga, gb = fa.get("grad_norms") or {}, fb.get("grad_norms") or {}
    if ga and gb and set(ga) != set(gb):
        take(math.inf, "grad_norms: different parameter sets")
    common = sorted(set(ga) & set(gb))
    if common:
        floor = 1e-6 * max(max(abs(v) for v in ga.values()), max(abs(v) for v in gb.values()))
        for name in common:
            take(_rel(ga[name], gb[name], floor) / GRADIENT_SLACK, f"grad_norms[{name}]")
    return worst, where


def _who(row: dict) -> str:
    cache = f" cache {row['compile_cache']}" if row.get("compile_cache") else ""
    return f"{row['framework']} {row['variant']}{cache}/{row['device']}"


def check(frame: pd.DataFrame) -> Equivalence:
    usable = [r for r in frame.to_dict("records")
              if r["status"] == "ok" and json.loads(r["fingerprint"] or "null")]
    groups: dict[tuple, list[dict]] = {}
    for row in usable:
        groups.setdefault((row["model"], row["batch"], row["precision"], row["measure"]),
                          []).append(row)
    parts: dict[tuple, list[tuple]] = {}
    row_checks: dict[str, RowCheck] = {}
    for (model, batch, precision, measure), members in groups.items():
        rtol = RTOL.get(precision, DEFAULT_RTOL)
        prints = [json.loads(r["fingerprint"]) for r in members]
        per_row = [(0.0, "") for _ in members]
        worst, pair = math.nan, ""
        for i, j in combinations(range(len(members)), 2):
            diff, field = compare(prints[i], prints[j])
            if math.isnan(worst) or diff > worst:
                worst = diff
                pair = f"{_who(members[i])} vs {_who(members[j])} ({measure}: {field})"
            for k, other in ((i, j), (j, i)):
                if diff >= per_row[k][0]:
                    per_row[k] = (diff, _who(members[other]))
        for row, (diff, against) in zip(members, per_row):
            row_checks[row["source"]] = (RowCheck(None, math.nan, "") if len(members) < 2
                                         else RowCheck(diff <= rtol, diff, against))
        parts.setdefault((model, batch, precision), []).append(
            (worst, pair, {r["framework"] for r in members}, rtol))
    verdicts = {}
    for (model, batch, precision), found in parts.items():
        # One verdict per model, batch and precision: the worst measure decides.
        compared = [f for f in found if not math.isnan(f[0])]
        frameworks = tuple(sorted(set().union(*(f[2] for f in found))))
        rtol = found[0][3]
        if not compared:
            verdicts[(model, batch, precision)] = Verdict(model, batch, precision, None,
                                                          math.nan, "", frameworks, rtol)
            continue
        worst, pair, _, _ = max(compared, key=lambda f: f[0])
        verdicts[(model, batch, precision)] = Verdict(model, batch, precision, worst <= rtol,
                                                      worst, pair, frameworks, rtol)
    return Equivalence(verdicts, row_checks)
