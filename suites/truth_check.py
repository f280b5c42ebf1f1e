"""A fingerprint row's errors against the float64 truth (``models/truth.py``).

The worker has the framework's output and gradients in hand when it writes the
fingerprint, so the comparison happens there, on whole arrays, and the row carries only
the errors (``fingerprint["vs_f64"]``), the quantities ``models/error_bounds.py`` bounds:

* ``output``: max |y − y64| / max |y64| over the inference output (the normalisation of
  the H100 measurements the bounds are checked against);
* ``loss``: |L − L64| / |L64| (a "sum" loss: / Σ|y64|, since a signed sum cancels);
* ``grad``: ‖g − g64‖₂ / ‖g64‖₂ over all trainable parameters together, where the adapter
  reports gradients in canonical layouts (``Prepared.canonical_gradient``), else None.
  A 2-norm, not a max: a max-pooling near-tie resolved differently in fp32 moves one
  gradient contribution to a neighbouring input, a sparse difference a max would magnify;
* ``grad_norms``: sqrt(Σ_p (‖g_p‖ − ‖g64_p‖)²) / ‖g64‖₂, layout-free, so every framework
  with gradients has it;
* ``per_param``: per parameter, in model order, ‖g_p − g64_p‖ / ‖g64‖₂ (or the norm
  difference over ‖g64‖₂ without canonical layouts): each parameter's share of ``grad``,
  from which the report names the first layer over the bound.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict
from typing import Any

import numpy as np

from models import truth as truth_module


def enabled() -> bool:
    return os.environ.get("DLBENCH_TRUTH", "on").lower() not in ("0", "off", "false", "no")


def _max_rel(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    diff = np.abs(np.asarray(a, dtype=np.float64) - b)
    return float(diff.max()) / scale if diff.size else 0.0


def errors(output: np.ndarray, loss: float | None, grads: dict[str, np.ndarray] | None,
           truth: truth_module.Truth, canonical: bool) -> dict[str, Any]:
    """The errors of one framework's arrays against ``truth`` (module docstring)."""
    found: dict[str, Any] = {"norm": "output: max-abs / max |y64|; gradients: 2-norm / ||g64||"}
    ref_out = truth.output
    if np.shape(output) != ref_out.shape:
        found["output"] = math.inf
        found["problem"] = f"output shape {np.shape(output)} != {ref_out.shape}"
    else:
        found["output"] = _max_rel(output, ref_out, max(float(np.abs(ref_out).max()), 1e-300))
    if loss is not None:
        found["loss"] = abs(loss - truth.loss) / max(truth.loss_scale, 1e-300)
    if grads is None:
        return found
    if set(grads) != set(truth.grads):
        found["grad_norms"] = math.inf
        found["problem"] = f"parameters differ: {sorted(set(grads) ^ set(truth.grads))[:4]}"
        return found
    order = list(truth.grads)
    ref_norms = {n: float(np.linalg.norm(truth.grads[n])) for n in order}
    total = max(math.sqrt(sum(v * v for v in ref_norms.values())), 1e-300)
    norms = {n: float(np.linalg.norm(np.asarray(grads[n], dtype=np.float64))) for n in order}
    norm_diffs = {n: abs(norms[n] - ref_norms[n]) / total for n in order}
    found["grad_norms"] = math.sqrt(sum(v * v for v in norm_diffs.values()))
    shapes_fit = all(np.shape(grads[n]) == truth.grads[n].shape for n in order)
    if canonical and shapes_fit:
        per = {n: float(np.linalg.norm(np.asarray(grads[n], dtype=np.float64)
                                       - truth.grads[n])) / total for n in order}
        found["grad"] = math.sqrt(sum(v * v for v in per.values()))
    else:
        found["grad"] = None
        per = norm_diffs
    found["per_param"] = per
    return found


def _model_order(model, names) -> list[str]:
    from models.analysis import analyse

    position = {spec.name: i for i, spec in enumerate(analyse(model).param_specs)}
    return sorted(names, key=lambda n: position.get(n, len(position)))


def fingerprint_fields(prepared, model, batch: int, seed: int, unsupported: type) -> dict:
    """The fingerprint dict of ``prepared`` (as ``Prepared.fingerprint`` makes it) with
    its errors against float64 under ``vs_f64``."""
    from adapters.base import Fingerprint

    output = prepared.forward_output()
    try:
        loss, grads = prepared.loss_and_gradients()
    except unsupported:
        loss, grads = None, None
    fields = asdict(Fingerprint.from_arrays(output, loss, grads))
    if not enabled():
        fields["vs_f64"] = {"skipped": "DLBENCH_TRUTH=off"}
        return fields
    reason = truth_module.too_expensive(model, batch)
    if reason:
        fields["vs_f64"] = {"skipped": reason}
        return fields
    try:
        truth = truth_module.load_or_compute(model, batch, seed)
    except (MemoryError, OSError, ValueError, TypeError, RuntimeError) as error:
        fields["vs_f64"] = {"skipped": f"float64 reference failed: {error}"}
        return fields
    truth = truth_module.Truth(truth.output, truth.loss, truth.loss_scale,
                               {n: truth.grads[n] for n in _model_order(model, truth.grads)},
                               truth.seconds, truth.cached)
    convert = getattr(prepared, "canonical_gradient", None)
    canonical = grads is not None and convert is not None
    if canonical:
        grads = {name: convert(name, g) for name, g in grads.items()}
    found = errors(output, loss, grads, truth, canonical)
    found["reference_s"] = round(truth.seconds, 3)
    found["reference_cached"] = truth.cached
    fields["vs_f64"] = found
    return fields


def fill_cache(pairs, seed: int, say) -> None:
    """Compute the truth of every (model name, batch) not cached yet, in the runner's
    process before any worker starts: workers are pinned to their benchmark's CPUs, the
    runner may use every core, and each truth is computed once for all frameworks."""
    from models.zoo import get_model

    if not enabled():
        return
    for name, batch in pairs:
        model = get_model(name)
        if truth_module.too_expensive(model, batch) or truth_module.is_cached(model, batch, seed):
            continue
        say(f"float64 reference for {name} at batch {batch} "
            f"({truth_module.cost_gflop(model, batch):.0f} GFLOP, once; cached in "
            f"{truth_module.cache_dir()})")
        try:
            truth_module.load_or_compute(model, batch, seed)
        except (MemoryError, OSError, ValueError, TypeError, RuntimeError) as error:
            say(f"float64 reference for {name} at batch {batch} failed: {error}")


def main(argv: list[str]) -> int:
    """``python -m suites.truth_check SUITE [--seed N]``: fill the float64 cache for every
    (model, batch) of a suite ahead of a run (the runner would do it at its start)."""
    import argparse

    from adapters.registry import load_registry
    from suites.spec import SuiteError, load_suite, resolve_suite_path

    parser = argparse.ArgumentParser(prog="python -m suites.truth_check")
    parser.add_argument("suite")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        suite = load_suite(resolve_suite_path(args.suite), load_registry())
    except SuiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pairs = dict.fromkeys((m, b) for group in suite.groups for m in group.models
                          for b in group.batches)
    fill_cache(pairs, args.seed, print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
