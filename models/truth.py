"""The float64 truth for one (model, batch size, seed): the numpy reference's inference
output, training-mode loss and every trainable parameter's gradient for the canonical
weights and the seeded batch, computed once and cached on disk.

Every framework's fingerprint row is judged against this (``suites/truth_check.py``,
``reports/truth.py``). The numpy reference was chosen over a float64 build of one of the
benchmarked frameworks so that the truth shares no kernel, layout or autodiff code with
anything it judges.

The cache key hashes the model's IR (its frozen dataclasses' repr names every layer and
setting), the batch size, the seed, and the source of every module that decides the
numbers (reference, its gradients, weights, inputs, parameter specs): a changed model, a
changed initialiser or a changed reference rule all miss the cache. The directory is
``$DLBENCH_TRUTH_CACHE``, else ``~/.cache/dlbench/truth``.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models import inputs, ir, params, reference, reference_grad, weights
from models.analysis import analyse

# Beyond this many GFLOP per reference (one inference pass, one training pass and its
# backward: 4x the model's forward FLOPs at the batch size) the truth is not computed and
# the report falls back to pairwise agreement. Every pair of the default suites and of
# cnn-benchmarks is below it (the largest, VGG-19 at batch 16, is 2.5 TFLOP); above it are
# only Bahrampour's AlexNet without LRN at batch 512 (4.7) and VGG-A at batch 64 (3.9, in
# convnet-benchmarks and li2016). float64 numpy runs these networks at 7 to 12 GFLOP per
# CPU-second (measured: ResNet-50, GoogLeNet, VGG-16), so 3 TFLOP is at most about 7
# CPU-minutes, once. Override with $DLBENCH_TRUTH_MAX_GFLOP.
MAX_GFLOP = 3_000.0
_CODE = (reference, reference_grad, weights, inputs, params, ir)


@dataclass(frozen=True)
class Truth:
    output: np.ndarray              # inference output, float64
    loss: float                     # training-mode loss
    loss_scale: float               # |loss|, or sum |output| for a "sum" loss (cancels)
    grads: dict[str, np.ndarray]    # canonical layouts, float64
    seconds: float                  # time it took to compute (0 when read from the cache)
    cached: bool


def cache_dir() -> Path:
    found = os.environ.get("DLBENCH_TRUTH_CACHE")
    return Path(found) if found else Path.home() / ".cache" / "dlbench" / "truth"


def key(model: ir.Model, batch: int, seed: int) -> str:
    digest = hashlib.sha256()
    digest.update(repr(model).encode())
    digest.update(f"|batch={batch}|seed={seed}|".encode())
    for module in _CODE:
        digest.update(Path(module.__file__).read_bytes())
    return f"{model.name}_b{batch}_s{seed}_{digest.hexdigest()[:16]}"


def cost_gflop(model: ir.Model, batch: int) -> float:
    """Forward FLOPs of the passes the truth needs: inference, training forward and its
    backward (twice the forward's products)."""
    return 4.0 * analyse(model).flops * batch / 1e9


def too_expensive(model: ir.Model, batch: int) -> str | None:
    limit = float(os.environ.get("DLBENCH_TRUTH_MAX_GFLOP", MAX_GFLOP))
    cost = cost_gflop(model, batch)
    if cost > limit:
        return (f"float64 reference skipped: {cost:.0f} GFLOP > {limit:.0f} "
                "(DLBENCH_TRUTH_MAX_GFLOP); pairwise agreement only")
    return None


def compute(model: ir.Model, batch: int, seed: int) -> Truth:
    started = time.perf_counter()
    w = weights.canonical_weights(model, seed)
    data = inputs.make_batch(model, batch, seed)
    output = reference.forward(model, w, data, train=False)
    loss, grads = reference_grad.loss_and_gradients(model, w, data)
    if model.loss.kind == "sum":
        # A sum of signed outputs cancels: judge its error against the sum of magnitudes
        # (the training output equals the inference output for these single layers).
        scale = float(np.abs(reference.forward(model, w, data, train=True)).sum())
    else:
        scale = abs(loss)
    return Truth(output, loss, scale, grads, time.perf_counter() - started, False)


def _path(model: ir.Model, batch: int, seed: int) -> Path:
    return cache_dir() / f"{key(model, batch, seed)}.npz"


def is_cached(model: ir.Model, batch: int, seed: int) -> bool:
    return _path(model, batch, seed).exists()


def load_or_compute(model: ir.Model, batch: int, seed: int) -> Truth:
    path = _path(model, batch, seed)
    if path.exists():
        with np.load(path) as stored:
            grads = {name[len("grad:"):]: stored[name] for name in stored.files
                     if name.startswith("grad:")}
            return Truth(stored["output"], float(stored["loss"]), float(stored["loss_scale"]),
                         grads, 0.0, True)
    truth = compute(model, batch, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written under a private name and renamed: workers of other frameworks may read the
    # same entry at the same time.
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(partial, output=truth.output, loss=truth.loss, loss_scale=truth.loss_scale,
             **{f"grad:{name}": g for name, g in truth.grads.items()})
    os.replace(partial, path)
    return truth
