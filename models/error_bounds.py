"""How far from the float64 truth a correct implementation may land, per precision.

A fingerprint's errors against float64 (``suites/truth_check.py``) are relative to the
largest reference value of the quantity (the largest output, the largest gradient
element), the normalisation under which fp32-strict outputs of single convolutions,
ResNet-50 and VGG-16 measured 3e-7 to 4e-6 on an H100 and TF32 ones 3e-4 to 1.2e-3.
The bound is derived from the network's depth and reduction lengths, not measured:

* **Accumulation** in float32 (every precision here accumulates in fp32, unit roundoff
  u32 = 2^-24). A length-K reduction summed in any order has a relative error of about
  u32·sqrt(K) (the probabilistic bound of Higham & Mary, "A New Approach to Probabilistic
  Rounding Error Analysis", SISC 2019, with rounding errors independent and of mean
  zero; blocked and pairwise sums, which BLAS and cuDNN use, stay below it). Layers'
  errors are added linearly, not in quadrature, so no independence between layers is
  assumed: the term is u32·Σ_l sqrt(K_l) over every reduction on the way (a
  convolution's C/g·kh·kw, a dense layer's inputs, an LSTM's input + hidden once per time
  step, and in training a batch norm's N·H·W statistics).
* **Operand rounding**: TF32 rounds both operands of every product to 10 explicit
  mantissa bits (u = 2^-11), bf16 to 7 and stores results in bf16 too (u = 2^-8), fp32
  stores each layer's output in fp32 (u = 2^-24). Each matrix-product layer then adds a
  relative error of order u, independent from layer to layer (the rounded values differ),
  so L such layers give about sqrt(L)·u; the bound takes 2·u·sqrt(L) (two operands).

A bound computed this way is loose by one to two orders of magnitude for fp32 (ResNet-50's
is about 9e-5 against measured errors of at most 4e-6), which is the point: it covers
Winograd and FFT convolutions, split-K GEMMs and any summation order, and it still sits
below a TF32-sized error (about 5e-4) for every network of the default suites' forward
passes, so an fp32-labelled row computed in TF32 fails. Gradients add the backward
reductions (data gradient, weight gradient over N·OH·OW, batch-norm statistics) and are
loose enough for deep batch-normalised networks that only the forward output can tell
TF32 from fp32 there; the report says which quantity failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models import ir
from models.analysis import analyse

U_FP32 = 2.0 ** -24
# Unit roundoff of the values each precision multiplies (and, for bf16, stores).
OPERAND_U = {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8}
_PRODUCTS = ("Conv2d", "Dense", "TiedDense", "LSTM")


@dataclass(frozen=True)
class Bounds:
    precision: str
    output: float        # inference output, relative to its largest value
    loss: float
    grad: float          # every gradient element, relative to the largest one
    forward_sum: float   # Σ sqrt(K) of the inference pass (the derivation's terms)
    training_sum: float  # Σ sqrt(K) of forward + backward in training
    product_layers: int


@dataclass(frozen=True)
class _Reductions:
    forward: float       # Σ sqrt(K) over the inference pass
    training: float      # extra Σ sqrt(K) of training: batch-norm statistics, backward
    products: int        # matrix-product layers (LSTM: one per time step)


def _reductions(model: ir.Model, batch: int) -> _Reductions:
    stats = analyse(model)
    forward = training = 0.0
    products = 0
    wgrad = 0.0
    for layer in stats.layers:
        if layer.frozen:
            continue
        out = math.prod(layer.out_shape)
        if layer.kind in ("Conv2d", "Dense", "TiedDense"):
            k = layer.flops / 2 / out                     # products per output element
            forward += math.sqrt(k)
            # data gradient: each input element sums over out_channels/g·kh·kw ≈ the
            # forward's K scaled by the channel ratio; the forward K is a fair estimate.
            training += math.sqrt(k)
            spatial = out // layer.out_shape[0] if layer.kind == "Conv2d" else 1
            wgrad = max(wgrad, math.sqrt(batch * spatial))
            products += 1
        elif layer.kind == "LSTM":
            steps, hidden = layer.out_shape
            k = layer.in_shape[1] + hidden
            forward += steps * math.sqrt(k)
            training += steps * math.sqrt(k)
            wgrad = max(wgrad, math.sqrt(batch * steps))
            products += steps
        elif layer.kind == "BatchNorm" and len(layer.out_shape) == 3:
            training += 2 * math.sqrt(batch * out // layer.out_shape[0])  # mean, variance
        elif layer.kind in ("GlobalAvgPool", "MeanOverTime", "LRN"):
            size = math.prod(layer.in_shape) // max(out, 1)
            forward += math.sqrt(max(size, 1))
            training += math.sqrt(max(size, 1))
    return _Reductions(forward, training + wgrad, max(products, 1))


def bounds(model: ir.Model, batch: int, precision: str) -> Bounds:
    """The largest error against float64 that ``precision`` arithmetic explains for
    ``model`` at ``batch`` (see the module's docstring for the derivation)."""
    r = _reductions(model, batch)
    u = OPERAND_U.get(precision, OPERAND_U["bf16"])
    output = U_FP32 * r.forward + 2 * u * math.sqrt(r.products)
    classes = model.loss.classes or 1
    # The loss runs in training mode (batch-norm statistics) and averages N·classes terms.
    loss = (U_FP32 * (r.forward + r.training + math.sqrt(batch * classes))
            + 2 * u * math.sqrt(r.products))
    # Gradients: the training forward, its backward, and twice as many rounded operands.
    grad = U_FP32 * (r.forward + r.training) + 2 * u * math.sqrt(2 * r.products)
    return Bounds(precision, output, loss, grad, r.forward, r.forward + r.training,
                  r.products)
