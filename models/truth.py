"""The float64 truth for one (model, batch size, seed): what the judgement of a fingerprint
row needs from the numpy reference, for the canonical weights and the seeded batch,
computed once and cached on disk.

Every framework's fingerprint row is judged against this (``suites/truth/check.py``,
``reports/pipeline/truth.py``). The numpy reference was chosen over a float64 build of one of the
benchmarked frameworks so that the truth shares no kernel, layout or autodiff code with
anything it judges.

What it computes (``Plan``), and why no judged row loses anything:

* the **inference output of the first k = min(batch, OUTPUT_EXAMPLES) examples**. In
  inference every example's output depends on that example alone (batch norm uses its
  running statistics, dropout is the identity, the LSTM runs each sequence under its own
  mask), so the first k examples are judged exactly as they would be inside the whole
  batch, and the output bound (``models/error_bounds.py``) depends on reduction lengths,
  not on how many examples are compared;
* the **training-mode loss over the whole batch**: batch norm's statistics couple the
  examples. Without batch norm that training forward is the inference forward too, and
  the k examples are taken from it; with batch norm they get their own inference pass;
* **gradients only where they are judged**: ``error_bounds.grad_judged`` is False for
  networks with ReLU or max pooling, whose gradient errors are shown but never judged,
  so their reference backward (twice a forward's work) is skipped unless
  ``DLBENCH_TRUTH_GRADIENTS=all``;
* for a **single convolution under the "sum" loss**, loss and gradients in closed form
  from box sums of the input (``models/closed_form.py``), so no full convolution runs;
* where the whole batch's passes would cost more than ``MAX_GFLOP`` (VGG-16 at batch
  128, ResNet-50's bf16 batch sweep), the **output alone**: the k examples' inference
  pass, which judges the output exactly as above; the loss and gradients of such a pair
  are not judged (the rows say why), where before the pair had no float64 check at all.

The cache key hashes the model's IR (its frozen dataclasses' repr names every layer and
setting), the batch size, the seed, the plan, and the source of every module that decides
the numbers (this one, the reference, its gradients, the closed form, weights, inputs,
parameter specs, the IR): a changed model, initialiser, rule or plan misses the cache,
and no entry written by an older version passes as a new one. The directory is
``$DLBENCH_TRUTH_CACHE``, else ``~/.cache/dlbench/truth``.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models import closed_form, inputs, ir, params, reference, reference_grad, weights
from models.analysis import analyse
from models.error_bounds import grad_judged

# Beyond this many GFLOP of reference passes per (model, batch) (``cost_gflop``: what the
# plan runs, not the model's full training step) the truth holds the k examples' output
# alone (``Plan.whole_batch``), and beyond it even for those the report falls back to
# pairwise agreement. float64 numpy runs these networks at 6 to 15 GFLOP
# per CPU-second (measured on a 2-core AMD EPYC: GoogLeNet 5.9, ResNet-50 9.6, VGG-16
# 14.7; 3-channel 11x11 convolutions 6.6), so 3 TFLOP is at most about 8 CPU-minutes,
# once. Since only judged quantities are computed, every pair of the GPU suites is below
# it (the largest, AlexNet without LRN at batch 512, is 1.2 TFLOP: 81 CPU-seconds).
# Override with $DLBENCH_TRUTH_MAX_GFLOP.
MAX_GFLOP = 3_000.0

# Inference outputs are compared on the first k = min(batch, OUTPUT_EXAMPLES) examples.
# Each example's inference output is independent of the others (module docstring), so a
# wrong kernel, layout or precision shows on any example it touches; the output bound
# is per element and does not grow with the number of examples; and four examples of
# ResNet-50 are 4,000 logits, of a convolution layer millions of values. More examples
# would add cost (and cache: the output of conv_l1 at batch 128 is 1.4 GB) without
# judging anything new.
OUTPUT_EXAMPLES = 4

# $DLBENCH_TRUTH_GRADIENTS: "judged" (default) computes float64 gradients only where
# models/error_bounds.py judges them; "all" computes them for every network.
GRADIENTS_ENV = "DLBENCH_TRUTH_GRADIENTS"
GRADIENT_MODES = ("judged", "all")
GRAD_SKIPPED = ("not computed: gradients are shown but never judged for networks with "
                "ReLU/max-pool kinks (models/error_bounds.py); "
                f"{GRADIENTS_ENV}=all computes them")

_CODE = (reference, reference_grad, closed_form, weights, inputs, params, ir)


@dataclass(frozen=True)
class Plan:
    """What the truth of one (model, batch) computes (module docstring)."""

    output_examples: int       # inference output of the first k examples
    gradients: bool            # the reference backward runs
    closed_form: bool          # single convolution, "sum" loss: models/closed_form.py
    separate_inference: bool   # batch norm: the k examples get an inference pass of their own
    whole_batch: bool = True   # the training-mode loss over the whole batch (and gradients)


@dataclass(frozen=True)
class Truth:
    output: np.ndarray              # inference output of the first k examples, float64
    loss: float | None              # training-mode loss over the whole batch (None: too costly)
    loss_scale: float | None        # |loss|, or sum |output| for a "sum" loss (cancels)
    grads: dict[str, np.ndarray] | None  # canonical layouts, float64; None: not computed
    seconds: float                  # time it took to compute (0 when read from the cache)
    cached: bool
    batch: int                      # the whole batch's size (output holds its first k)
    grad_skipped: str = ""          # why grads is None
    loss_skipped: str = ""          # why loss is None: the whole batch is above the cost cap

    @property
    def output_examples(self) -> int:
        return int(self.output.shape[0])


def gradient_mode() -> str:
    mode = os.environ.get(GRADIENTS_ENV, "judged").strip().lower() or "judged"
    if mode not in GRADIENT_MODES:
        raise ValueError(f"{GRADIENTS_ENV}={mode!r}: expected one of {GRADIENT_MODES}")
    return mode


def _has_batch_norm(model: ir.Model) -> bool:
    return any(isinstance(node, ir.BatchNorm) for node in ir.all_nodes(model))


def max_gflop() -> float:
    return float(os.environ.get("DLBENCH_TRUTH_MAX_GFLOP", MAX_GFLOP))


def _whole_batch_plan(model: ir.Model, batch: int) -> Plan:
    shortcut = closed_form.applies(model)
    return Plan(output_examples=min(batch, OUTPUT_EXAMPLES),
                gradients=shortcut or gradient_mode() == "all" or grad_judged(model),
                closed_form=shortcut,
                separate_inference=not shortcut and _has_batch_norm(model))


def plan(model: ir.Model, batch: int) -> Plan:
    whole = _whole_batch_plan(model, batch)
    if whole.closed_form or _cost_gflop(model, batch, whole) <= max_gflop():
        return whole
    return Plan(whole.output_examples, gradients=False, closed_form=False,
                separate_inference=True, whole_batch=False)


def cache_dir() -> Path:
    found = os.environ.get("DLBENCH_TRUTH_CACHE")
    return Path(found) if found else Path.home() / ".cache" / "dlbench" / "truth"


def key(model: ir.Model, batch: int, seed: int) -> str:
    digest = hashlib.sha256()
    digest.update(repr(model).encode())
    digest.update(f"|batch={batch}|seed={seed}|{plan(model, batch)!r}|".encode())
    for source in (Path(__file__), *(Path(module.__file__) for module in _CODE)):
        digest.update(source.read_bytes())
    return f"{model.name}_b{batch}_s{seed}_{digest.hexdigest()[:16]}"


def _window_sum_gflop(model: ir.Model, batch: int) -> float:
    """Additions of ``closed_form.window_sums``: the batch sum over the input, then one
    sum over the output positions per input channel and kernel tap."""
    node = model.body[0]
    channels, height, width = model.input.shape
    out_h = closed_form.output_size(height, node.kernel[0], node.stride[0], node.padding[0])
    out_w = closed_form.output_size(width, node.kernel[1], node.stride[1], node.padding[1])
    return (batch * channels * height * width
            + channels * node.kernel[0] * node.kernel[1] * out_h * out_w) / 1e9


def _cost_gflop(model: ir.Model, batch: int, steps: Plan) -> float:
    per_example = analyse(model).flops / 1e9
    head = steps.output_examples * per_example
    if steps.closed_form:
        return head + _window_sum_gflop(model, batch)
    if not steps.whole_batch:
        return head
    passes = 3.0 if steps.gradients else 1.0
    return passes * batch * per_example + (head if steps.separate_inference else 0.0)


def cost_gflop(model: ir.Model, batch: int) -> float:
    """GFLOP of the passes ``plan`` runs, in forward FLOPs as ``models.analysis`` counts
    them: the training forward over the batch (which is also the inference pass without
    batch norm), its backward where gradients are computed (twice the forward's
    products), an inference pass over the k examples with batch norm; for the closed
    form, the k examples' convolution and the box sums; for the output alone, the k
    examples' inference pass."""
    return _cost_gflop(model, batch, plan(model, batch))


def whole_batch_skipped(model: ir.Model, batch: int) -> str:
    """Why the truth of (model, batch) holds the output alone ("" where it holds all)."""
    steps = plan(model, batch)
    if steps.whole_batch:
        return ""
    whole = _cost_gflop(model, batch, _whole_batch_plan(model, batch))
    return (f"loss and gradients not judged: the whole batch's float64 pass would be "
            f"{whole:.0f} GFLOP > {max_gflop():.0f} (DLBENCH_TRUTH_MAX_GFLOP); output "
            f"judged on the first {steps.output_examples} examples")


# How a skip for cost begins (``too_expensive``), which a resumed run looks for in rows.
SKIPPED_FOR_COST = "float64 reference skipped"


def too_expensive(model: ir.Model, batch: int) -> str | None:
    limit = max_gflop()
    cost = cost_gflop(model, batch)
    if cost > limit:
        return (f"{SKIPPED_FOR_COST}: {cost:.0f} GFLOP > {limit:.0f} "
                "(DLBENCH_TRUTH_MAX_GFLOP); pairwise agreement only")
    return None


@dataclass(frozen=True)
class _Computed:
    output: np.ndarray
    loss: float | None
    loss_scale: float | None
    grads: dict[str, np.ndarray] | None


def _by_closed_form(model: ir.Model, w: weights.Weights, data: inputs.Batch,
                    steps: Plan) -> _Computed:
    node = model.body[0]
    head = inputs.head(data, steps.output_examples)
    output = reference.forward(model, w, head, train=False)
    bias = w[f"{node.name}.bias"] if node.bias else None
    loss, grads = closed_form.loss_and_gradients(node, w[f"{node.name}.weight"], bias, data.x)
    # The "sum" loss's scale, Σ|y64| over the batch, from the k examples computed: the
    # examples are independent draws of the same distribution, and over all the suites'
    # layers at batch 16 this estimate lies within 1e-3 of the full sum (1.3e-2 for a
    # 32x32 input), a normalisation that moves no verdict against a 4-sigma bound.
    # At batch <= OUTPUT_EXAMPLES it is the full sum.
    scale = float(np.abs(output).sum()) * data.size / steps.output_examples
    return _Computed(output, loss, scale, grads)


def _by_reference(model: ir.Model, w: weights.Weights, data: inputs.Batch,
                  steps: Plan) -> _Computed:
    if not steps.whole_batch:
        head = inputs.head(data, steps.output_examples)
        return _Computed(reference.forward(model, w, head, train=False), None, None, None)
    if steps.gradients:
        loss, grads, trained = reference_grad.loss_gradients_and_output(model, w, data)
    else:
        body_input, trained = reference.run(model, w, data, train=True)
        loss, grads = reference.loss_of_output(model, body_input, trained, data), None
    k = steps.output_examples
    if steps.separate_inference:
        output = reference.forward(model, w, inputs.head(data, k), train=False)
    else:
        output = np.array(trained[:k])   # a copy: the rest of the batch is let go
    # A sum of signed outputs cancels: judge its error against the sum of magnitudes.
    scale = float(np.abs(trained).sum()) if model.loss.kind == "sum" else abs(loss)
    return _Computed(output, loss, scale, grads)


def compute(model: ir.Model, batch: int, seed: int) -> Truth:
    started = time.perf_counter()
    steps = plan(model, batch)
    w = weights.canonical_weights(model, seed)
    data = inputs.make_batch(model, batch, seed)
    run = _by_closed_form if steps.closed_form else _by_reference
    found = run(model, w, data, steps)
    partial = whole_batch_skipped(model, batch)
    return Truth(found.output, found.loss, found.loss_scale, found.grads,
                 time.perf_counter() - started, False, batch,
                 "" if found.grads is not None else (partial or GRAD_SKIPPED), partial)


def _path(model: ir.Model, batch: int, seed: int) -> Path:
    return cache_dir() / f"{key(model, batch, seed)}.npz"


def is_cached(model: ir.Model, batch: int, seed: int) -> bool:
    return _path(model, batch, seed).exists()


def _load(path: Path) -> Truth:
    with np.load(path) as stored:
        grads = {name[len("grad:"):]: stored[name] for name in stored.files
                 if name.startswith("grad:")}
        skipped = str(stored["grad_skipped"])
        loss_skipped = str(stored["loss_skipped"])
        loss, scale = ((None, None) if loss_skipped
                       else (float(stored["loss"]), float(stored["loss_scale"])))
        return Truth(stored["output"], loss, scale, None if skipped else grads, 0.0, True,
                     int(stored["batch"]), skipped, loss_skipped)


def _store(path: Path, truth: Truth) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written under a private name and renamed: workers of other frameworks, and the
    # processes of fill_cache, may read the same entry at the same time.
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(partial, output=truth.output,
             loss=np.nan if truth.loss is None else truth.loss,
             loss_scale=np.nan if truth.loss_scale is None else truth.loss_scale,
             batch=truth.batch, grad_skipped=np.str_(truth.grad_skipped),
             loss_skipped=np.str_(truth.loss_skipped),
             **{f"grad:{name}": g for name, g in (truth.grads or {}).items()})
    os.replace(partial, path)


def load_or_compute(model: ir.Model, batch: int, seed: int) -> Truth:
    path = _path(model, batch, seed)
    if path.exists():
        return _load(path)
    truth = compute(model, batch, seed)
    _store(path, truth)
    return truth
