"""Equivalence against float64 truth: each fingerprint row's errors (written by the worker,
``suites/truth/check.py``) judged against what its precision's arithmetic explains for
that network (``models/error_bounds.py``).

A row is ✓ when every error it carries is within its bound and ✗ naming the quantity
otherwise; a (model, batch, precision) is ✓ when all its rows are, else ✗ naming each
framework that is off. Where any row of a group has no float64 errors (reference skipped
as too expensive, switched off, or rows from before it existed) the group keeps the
pairwise verdict of ``reports/pipeline/equivalence.py``: the second line of evidence. Rows of
networks with ReLU or max pooling carry no gradient errors (``grad_skipped``: the float64
reference does not compute gradients that are never judged); their verdict comes from
output and loss, as it always has, and older rows that do carry them still show them.

A bf16 row is also held to a floor: its output error must not fall below the fp32 bound
of the same network. Rounding every operand (and the stored output) to bf16's 8-bit
significand leaves a relative output error of order u = 2^-8 ≈ 3.9e-3 (measured 3.6e-3
to 8.4e-3 for ResNet-50, GoogLeNet and the LSTM on an H100: tests/data), while every fp32 bound
of the default networks is below 2e-4: an error at fp32's level means the row did not
compute in bf16 (autocast not applied, a policy dropped). fp16 (u = 2^-11) would land
between the two and is not told apart by the error alone.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, replace

import pandas as pd

from models.error_bounds import Bounds, bounds
from reports.pipeline.equivalence import FINGERPRINT, Equivalence, RowCheck, Verdict
from reports.pipeline.grouping import Setting, extras, setting_of, variant_name
from reports.render.table import Table, cell

# Which bound judges each error field.
_BOUND_OF = {"output": "output", "loss": "loss", "grad": "grad", "grad_norms": "grad"}


@dataclass(frozen=True)
class RowTruth:
    source: str
    who: str                     # "torch eager/gpu"
    model: str
    batch: int
    precision: str
    errors: dict                 # the row's vs_f64
    bounds: Bounds | None
    failures: tuple[str, ...]    # "output 5.0e-04 > 9.1e-05", ...
    drift_from: str              # first parameter (model order) whose gradient is off
    setting: Setting             # the row's identity (reports/pipeline/grouping.py)

    @property
    def ok(self) -> bool:
        return self.bounds is not None and not self.failures

    @property
    def worst(self) -> float:
        return max((self.errors.get(f) or 0.0 for f in _BOUND_OF), default=0.0)


def _bounds_for(model: str, batch: int, precision: str) -> Bounds | None:
    from models.zoo import UnknownModel, get_model

    try:
        return bounds(get_model(model), batch, precision)
    except (UnknownModel, ValueError):
        return None


def bf16_floor(model: str, batch: int, precision: str) -> float | None:
    """The least output error a bf16 row can show: the network's fp32 bound (None for
    other precisions, and where the network has no bound)."""
    if precision != "bf16":
        return None
    fp32 = _bounds_for(model, batch, "fp32")
    return fp32.output if fp32 else None


def judge(errors: dict, limits: Bounds,
          floor: float | None = None) -> tuple[tuple[str, ...], str]:
    """The fields over their bound ("output 5.0e-04 > 9.1e-05"), an output error under
    ``floor`` (a bf16 row at fp32's accuracy: the module's docstring), and the first
    parameter whose gradient error exceeds the gradient bound."""
    failures = []
    output = errors.get("output")
    if floor is not None and output is not None and output < floor:
        failures.append(f"output {output:.1e} < {floor:.1e}, the fp32 bound: fp32's "
                        f"accuracy, not {limits.precision}'s")
    if limits.grad_judged and errors.get("grad_skipped") and not errors.get(
            "whole_batch_skipped"):
        # models/truth.py computes every judged gradient unless the whole batch is above
        # its cost cap (the output alone is judged then, and the row says so); a row whose
        # judged gradient was otherwise not computed cannot be proven, so it is not passed.
        failures.append("grad not computed by the float64 reference, though judged")
    for field, which in _BOUND_OF.items():
        if which == "grad" and not limits.grad_judged:
            continue   # ReLU / max-pooling crossings: reported, not judged
        value = errors.get(field)
        limit = getattr(limits, which)
        if value is not None and not (value <= limit):   # NaN fails too
            failures.append(f"{field} {value:.1e} > {limit:.1e}")
    per = (errors.get("per_param") or {}) if limits.grad_judged else {}
    drift = next((name for name, value in per.items() if not (value <= limits.grad)), "")
    return tuple(failures), drift


def _who(setting: Setting, extra: str) -> str:
    """``jax jit/gpu``; a compile-cache job's and, where one model and batch has several
    rows of one framework and variant, what tells them apart (``jit [host vm-…]``)."""
    return (f"{setting.framework} {variant_name(setting.variant, setting.compile_cache, extra)}"
            f"/{setting.device}")


def row_truths(frame: pd.DataFrame) -> list[RowTruth]:
    judged = []
    for row in frame.to_dict("records"):
        if row["status"] != "ok" or row["measure"] != FINGERPRINT:
            continue
        fingerprint = json.loads(row["fingerprint"] or "null") or {}
        errors = fingerprint.get("vs_f64")
        if errors and "output" in errors:
            judged.append((row, errors, setting_of(row)))
    # Hosts or versions that tell apart one framework's rows of a model and batch (a suite
    # split over two hosts), named only where that model and batch has several.
    by_case: dict[tuple, list[Setting]] = defaultdict(list)
    for row, _, setting in judged:
        by_case[(row["model"], row["batch"], row["precision"])].append(setting)
    told_apart = {key: extras(settings) for key, settings in by_case.items()}
    found = []
    for row, errors, setting in judged:
        extra = told_apart[(row["model"], row["batch"], row["precision"])][setting]
        limits = _bounds_for(row["model"], int(row["batch"]), row["precision"])
        failures, drift = judge(errors, limits, bf16_floor(row["model"], int(row["batch"]),
                                                           row["precision"])) \
            if limits else ((), "")
        found.append(RowTruth(row["source"], _who(setting, extra),
                              row["model"], int(row["batch"]), row["precision"], errors,
                              limits, failures, drift, setting))
    return found


def _group_verdict(rows: list[RowTruth], frameworks: tuple[str, ...]) -> Verdict:
    first = rows[0]
    bad = [r for r in rows if not r.ok]
    text = "; ".join(f"{r.who}: {', '.join(r.failures) or 'no bound for this model'}"
                     + (f" (first parameter over the bound: {r.drift_from})" if r.drift_from
                        else "") for r in bad)
    worst = max((r.worst for r in (bad or rows)), default=math.nan)
    limit = first.bounds.output if first.bounds else math.nan
    return Verdict(first.model, first.batch, first.precision, not bad, worst,
                   text or "within the float64 bound", frameworks, limit)


def prefer_truth(equiv: Equivalence, frame: pd.DataFrame) -> Equivalence:
    """``equiv`` with each (model, batch, precision) whose every fingerprint row carries
    float64 errors judged by them instead of pairwise."""
    truths = row_truths(frame)
    by_source = {t.source: t for t in truths}
    fingerprints = frame[(frame["measure"] == FINGERPRINT) & (frame["status"] == "ok")]
    verdicts = dict(equiv.verdicts)
    rows = dict(equiv.rows)
    for (model, batch, precision), group in fingerprints.groupby(
            ["model", "batch", "precision"]):
        judged = [by_source.get(s) for s in group["source"]]
        if not judged or any(t is None for t in judged):
            continue   # some row has no float64 errors: pairwise stays
        key = (model, int(batch), precision)
        frameworks = tuple(sorted(set(group["framework"])))
        verdicts[key] = _group_verdict(judged, frameworks)
        for t in judged:
            rows[t.source] = RowCheck(t.ok, t.worst, "float64")
    return replace(equiv, verdicts=verdicts, rows=rows)


def _timing(frame: pd.DataFrame, row: RowTruth, measure: str) -> str:
    """The steady-state median of the row's setting: its own host's where that host timed
    it, another host's otherwise; for a compile-cache job's fingerprint, the ordinary
    run's."""
    setting = row.setting
    same = ((frame["model"] == row.model) & (frame["batch"] == row.batch)
            & (frame["measure"] == measure) & (frame["status"] == "ok")
            & (frame["compile_cache"] == ""))
    for name in ("framework", "variant", "device", "precision"):
        same &= frame[name] == getattr(setting, name)
    own_host = same & (frame["host"] == setting.host)
    match = frame[own_host] if own_host.any() else frame[same]
    return "" if match.empty else f"{float(match['median_ms'].iloc[-1]):.3g} ms"


def _e(value) -> str:
    return "—" if value is None else f"{value:.1e}"


def _gradient_cell(errors: dict) -> str:
    """The gradient error; "not computed" where the float64 reference skipped the
    gradients (networks with ReLU or max pooling, whose gradients are not judged)."""
    if errors.get("grad") is not None:
        return _e(errors["grad"])
    if errors.get("grad_norms") is not None:
        return f"norms {_e(errors['grad_norms'])}"
    if errors.get("whole_batch_skipped"):
        return "not judged (output only)"
    return "not computed" if errors.get("grad_skipped") else "—"


def truth_table(frame: pd.DataFrame) -> Table | None:
    """Per model, batch and precision: each framework's errors against float64 beside its
    forward and gradient times, the bounds, and the verdict."""
    truths = row_truths(frame)
    if not truths:
        return None
    rows = []
    for t in sorted(truths, key=lambda t: (t.model, t.batch, t.precision, t.who)):
        verdict = ("✓" if t.ok else "✗ " + "; ".join(t.failures or ("no bound",))
                   + (f"; from {t.drift_from}" if t.drift_from else ""))
        e = t.errors
        b = t.bounds
        rows.append((
            cell(t.model), cell(t.batch), cell(t.precision), cell(t.who),
            cell(_e(e.get("output"))), cell(_e(e.get("loss"))),
            cell(_gradient_cell(e)),
            cell(_timing(frame, t, "forward")), cell(_timing(frame, t, "gradient")),
            cell("—" if b is None else f"{b.output:.1e} / "
                 + (f"{b.grad:.1e}" if b.grad_judged else "not judged")),
            cell(verdict, kind="" if t.ok else "fail"),
        ))
    printed = [json.loads(r["fingerprint"] or "{}").get("vs_f64", {})
               for r in frame.to_dict("records")
               if r["measure"] == FINGERPRINT and r["status"] == "ok"]
    skipped = sorted({e.get("skipped", "") for e in printed} - {""})
    output_only = sorted({e.get("whole_batch_skipped", "") for e in printed} - {""})
    notes = ("Errors against the float64 reference: output max |y − y64| / max |y64| over "
             "the batch's first examples (min(batch, 4) in rows that record "
             "output_examples: each example's inference output is independent of the "
             "others); "
             "loss |L − L64| / |L64|; gradient ‖g − g64‖₂ / ‖g64‖₂ over all trainable "
             "parameters (\"norms\": from per-parameter gradient norms only, where the "
             "adapter does not report canonical layouts). Bounds (output / gradient) follow "
             "from the network's reduction lengths and depth for the row's precision "
             "(models/error_bounds.py): 4 standard deviations of fp32 accumulation error "
             "(u=2^-24) plus operand rounding (tf32 u=2^-11, bf16 u=2^-8). Gradients of "
             "networks with ReLU or max pooling are shown but not judged: rounding moves "
             "inputs across the kinks, which changes the gradient by far more than "
             "accumulated rounding (2e-2 for PyTorch fp32 ResNet-50 on a CPU); their "
             "verdict rests on output and loss, and the float64 reference computes their "
             "gradients only with DLBENCH_TRUTH_GRADIENTS=all (\"not computed\").",
             *(f"Pairwise only: {s}" for s in skipped),
             *(f"Output only: {s}" for s in output_only))
    return Table("truth", "Equivalence against float64",
                 ("model", "batch", "precision", "framework", "output err", "loss err",
                  "gradient err", "forward", "gradient", "bound out / grad", "verdict"),
                 tuple(rows), numeric=(False, True, False, False, True, True, True, True,
                                       True, True, False), notes=notes)
