"""A fingerprint row's errors against the float64 truth (``models/truth.py``).

The worker has the framework's output and gradients in hand when it writes the
fingerprint, so the comparison happens there, on the arrays, and the row carries only
the errors (``fingerprint["vs_f64"]``), the quantities ``models/error_bounds.py`` bounds:

* ``output``: max |y − y64| / max |y64| over the inference output of the first
  ``output_examples`` (k) examples, the ones the truth computes (``models/truth.py``:
  each example's inference output is independent of the others);
* ``loss``: |L − L64| / |L64| (a "sum" loss: / Σ|y64|, since a signed sum cancels);
* ``grad``: ‖g − g64‖₂ / ‖g64‖₂ over all trainable parameters together, where the adapter
  reports gradients in canonical layouts (``Prepared.canonical_gradient``, part of
  the contract), else None.
  A 2-norm, not a max: a max-pooling near-tie resolved differently in fp32 moves one
  gradient contribution to a neighbouring input, a sparse difference a max would magnify;
* ``grad_norms``: sqrt(Σ_p (‖g_p‖ − ‖g64_p‖)²) / ‖g64‖₂, layout-free, so every framework
  with gradients has it;
* ``per_param``: per parameter, in model order, ‖g_p − g64_p‖ / ‖g64‖₂ (or the norm
  difference over ‖g64‖₂ without canonical layouts): each parameter's share of ``grad``,
  from which the report names the first layer over the bound;
* ``grad_skipped``: where the truth has no gradients (networks with ReLU or max pooling,
  whose gradients are never judged: ``models/error_bounds.py``), why; ``grad`` and
  ``grad_norms`` are then None and ``per_param`` absent.

``fill_cache`` computes the missing truths of a suite before its first worker starts, in
a pool of processes.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from adapters.summary import HEAD_EXAMPLES, OutputSummary
from models import truth as truth_module
from models.measures import BY_NAME, GRADIENT, TRAIN_STEP
from suites.rows.results import FINGERPRINT, read_rows
from suites.truth import pool as truth_pool


def enabled() -> bool:
    return os.environ.get("DLBENCH_TRUTH", "on").lower() not in ("0", "off", "false", "no")


def _max_rel(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    diff = np.abs(np.asarray(a, dtype=np.float64) - b)
    return float(diff.max()) / scale if diff.size else 0.0


def output_error(output: np.ndarray, ref_out: np.ndarray) -> float:
    """The inference output's error against float64: max |y - y64| / max |y64| (the
    module docstring; the bound is ``models.error_bounds.bounds(...).output``)."""
    return _max_rel(output, ref_out, max(float(np.abs(ref_out).max()), 1e-300))


def _output_error(output: OutputSummary, truth: truth_module.Truth) -> dict[str, Any]:
    """The output error over the examples the truth holds: the framework's first k, from
    the output's summary (which holds at least k examples)."""
    ref_out = truth.output
    expected = (truth.batch, *ref_out.shape[1:])
    if tuple(output.shape) != expected:
        return {"output": math.inf,
                "problem": f"output shape {tuple(output.shape)} != {expected}"}
    head = output.head[:truth.output_examples]
    return {"output": output_error(head, ref_out),
            "output_examples": truth.output_examples}


def errors(output: OutputSummary, loss: float | None,
           grads: dict[str, np.ndarray] | None, truth: truth_module.Truth,
           canonical: bool) -> dict[str, Any]:
    """The errors of one framework's output (its ``OutputSummary``), loss and gradients
    against ``truth`` (module docstring)."""
    found: dict[str, Any] = {"norm": "output: max-abs / max |y64|; gradients: 2-norm / ||g64||"}
    found.update(_output_error(output, truth))
    if truth.loss_skipped:
        found["whole_batch_skipped"] = truth.loss_skipped
    elif loss is not None:
        found["loss"] = abs(loss - truth.loss) / max(truth.loss_scale, 1e-300)
    if grads is None:
        return found
    if truth.grads is None:
        found.update(grad=None, grad_norms=None, grad_skipped=truth.grad_skipped)
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


def _truth_of(model, batch: int, seed: int) -> tuple[truth_module.Truth | None, str]:
    """The float64 truth of (model, batch, seed), or None and why it is skipped."""
    if not enabled():
        return None, "DLBENCH_TRUTH=off"
    try:
        reason = truth_module.too_expensive(model, batch)
        if reason:
            return None, reason
        truth = truth_module.load_or_compute(model, batch, seed)
    except (MemoryError, OSError, ValueError, TypeError, RuntimeError) as error:
        # A bad setting ($DLBENCH_TRUTH_GRADIENTS) lands here too: the row is still written.
        return None, f"float64 reference failed: {error}"
    if truth.grads is not None:
        truth = replace(truth, grads={n: truth.grads[n]
                                      for n in _model_order(model, truth.grads)})
    return truth, ""


def finished_case_ids(path: Path) -> set[str]:
    """The case ids of a results file that a resumed run skips: every recorded case but a
    fingerprint whose float64 check was skipped for its cost and that the truth now
    judges (``judgeable_now``), which a resumed run takes again; a torn last line is
    ignored."""
    return {case_id for case_id, row in read_rows(path).items() if not judgeable_now(row)}


def judgeable_now(row: dict[str, Any]) -> bool:
    """Whether ``row`` is a fingerprint written without float64 errors because its truth
    was above the cost cap, which the truth now computes (the first examples' output
    where the whole batch is still above it: models/truth.py), so that ``--resume`` takes
    it again rather than keep a pairwise-only row."""
    skipped = ((row.get("fingerprint") or {}).get("vs_f64") or {}).get("skipped", "")
    if row.get("measure") != FINGERPRINT or row.get("status") != "ok" \
            or not skipped.startswith(truth_module.SKIPPED_FOR_COST) or not enabled():
        return False
    from models.zoo import UnknownModel, get_model

    try:
        return truth_module.too_expensive(get_model(row["model"]), int(row["batch"])) is None
    except (UnknownModel, KeyError, TypeError, ValueError):
        return False


def gradients_of(measures) -> str:
    """Whose gradients a job's fingerprint checks: those of the program it timed, so that
    no gradient program is compiled for the fingerprint alone (in the published
    transformers-gpu run, fingerprints with those compiles took 6.9 of its 41 GPU-minutes:
    docs/engineering-notes.md). A gradient pass's
    ("gradient") where the job times a backward pass; else the training step's own
    (``Prepared.train_step_gradient_summary``) where it times ``train_step``; else none
    (""): a job that times only forward passes or copies is fingerprinted by its output."""
    phases = {BY_NAME[m].phase for m in measures if m in BY_NAME}
    if "backward" in phases:
        return GRADIENT
    return TRAIN_STEP if TRAIN_STEP in measures else ""


def fingerprint_fields(prepared, model, batch: int, seed: int, unsupported: type,
                       gradients: str = GRADIENT) -> dict:
    """The fingerprint dict of ``prepared`` (``adapters.base.Fingerprint``) with its errors
    against float64 under ``vs_f64``, and ``gradients_of``: the program whose gradients it
    holds (``gradients``: "gradient", "train_step" or "" for none: ``gradients_of``). The adapter
    summarises its output and gradients (``adapters/summary.py``); the gradient arrays reach
    the host only where the truth judges them element by element."""
    from adapters.base import Fingerprint

    truth, skipped = _truth_of(model, batch, seed)
    output = prepared.output_summary(HEAD_EXAMPLES)
    hook = {GRADIENT: "gradient_summary", TRAIN_STEP: "train_step_gradient_summary"}.get(gradients)
    summary = None
    if hook is not None:
        with contextlib.suppress(unsupported):
            summary = getattr(prepared, hook)(
                keep_arrays=truth is not None and truth.grads is not None)
    fields = asdict(Fingerprint.from_summaries(output, summary))
    if summary is not None:
        fields["gradients_of"] = gradients
    if truth is None:
        fields["vs_f64"] = {"skipped": skipped}
        return fields
    if summary is None:
        loss, grads = None, None
    elif summary.grads is None:
        # Norms only: the truth holds no gradients for this network (errors() says why).
        loss, grads = summary.loss, {}
    else:
        loss, grads = summary.loss, summary.grads
        grads = {name: prepared.canonical_gradient(name, g) for name, g in grads.items()}
    found = errors(output, loss, grads, truth, canonical=True)
    found["reference_s"] = round(truth.seconds, 3)
    found["reference_cached"] = truth.cached
    fields["vs_f64"] = found
    return fields


def _jobs(pairs, seed: int, say) -> tuple[list[truth_pool.Job], dict[tuple[str, int], float]]:
    """The (model, batch) pairs still to compute, and those already cached (0 seconds).
    Pairs beyond the cost limit are left to the workers, which record why."""
    from models.zoo import UnknownModel, get_model

    jobs, cached = [], {}
    for name, batch in pairs:
        try:
            model = get_model(name)
            if truth_module.too_expensive(model, batch):
                continue
            if truth_module.is_cached(model, batch, seed):
                cached[(name, batch)] = 0.0
                continue
            jobs.append(truth_pool.Job(name, batch, seed, truth_module.cost_gflop(model, batch)))
        except (UnknownModel, ValueError, TypeError) as error:
            say(f"float64 reference for {name} at batch {batch} failed: {error}")
    return jobs, cached


def fill_cache(pairs, seed: int, say, cpus: int | None = None) -> dict[tuple[str, int], float]:
    """Compute the truth of every (model name, batch) not cached yet, before any worker
    starts (workers are pinned to their benchmark's CPUs; this may use every core), once
    for all frameworks, in parallel processes (``suites/truth/pool.py``). Returns the
    seconds each pair's truth took (0 for one already cached; a pair that failed or is
    beyond the cost limit is absent), for the caller to record what the truth cost.

    The processes are spawned, so they import the caller's main script again: a script
    that calls this needs multiprocessing's ``if __name__ == "__main__":`` guard
    (``python -m suites`` and ``python -m suites.truth.check`` have it)."""
    if not enabled():
        return {}
    jobs, seconds = _jobs(pairs, seed, say)
    if not jobs:
        return seconds
    import psutil

    shape = truth_pool.shape_for(jobs, cpus or truth_pool.usable_cpus(),
                                 psutil.virtual_memory().available)
    say(f"float64 reference: {len(jobs)} (model, batch) pairs, "
        f"{sum(job.gflop for job in jobs):.0f} GFLOP, in {shape.processes} processes × "
        f"{shape.threads} BLAS threads (cached in {truth_module.cache_dir()})")

    def started(job: truth_pool.Job) -> None:
        say(f"float64 reference for {job.model} at batch {job.batch} "
            f"({job.gflop:.3g} GFLOP) started")

    def done(outcome: truth_pool.Outcome) -> None:
        job = outcome.job
        if outcome.seconds is None:
            say(f"float64 reference for {job.model} at batch {job.batch} failed: "
                f"{outcome.error}")
        else:
            seconds[(job.model, job.batch)] = outcome.seconds
            say(f"float64 reference for {job.model} at batch {job.batch}: "
                f"{outcome.seconds:.1f} s")

    truth_pool.run(jobs, shape, started, done)
    return seconds


def main(argv: list[str]) -> int:
    """``python -m suites.truth.check SUITE [--seed N]``: fill the float64 cache for every
    (model, batch) of a suite ahead of a run (the runner would do it at its start)."""
    import argparse

    from adapters.registry import load_registry
    from suites.harness.spec import SuiteError, load_suite, resolve_suite_path

    parser = argparse.ArgumentParser(prog="python -m suites.truth.check")
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
    started = time.perf_counter()
    seconds = fill_cache(pairs, args.seed, print)
    computed = [s for s in seconds.values() if s > 0]
    print(f"float64 reference: {len(computed)} computed ({sum(computed):.0f} s in their "
          f"processes), {len(seconds) - len(computed)} cached, "
          f"{len(pairs) - len(seconds)} skipped or failed; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
