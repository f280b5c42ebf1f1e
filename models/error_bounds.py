"""How far from the float64 truth a correct implementation may land, per precision.

A fingerprint's errors against float64 (``suites/truth/check.py``) are relative: the
inference output's largest error over its largest value (the normalisation under which
fp32-strict outputs of single convolutions, ResNet-50 and VGG-16 measured 3e-7 to 4e-6 on
an H100, and TF32 ones 3e-4 to 1.2e-3), the gradient's 2-norm error over its 2-norm. The
bound is derived from the network's reduction lengths and depth, not measured:

* **Accumulation** in float32 (every precision here accumulates in fp32, u32 = 2^-24).
  Under the probabilistic model of rounding (Higham & Mary, "A New Approach to
  Probabilistic Rounding Error Analysis", SISC 2019: rounding errors independent, mean
  zero), a length-K reduction's error has a standard deviation of about u32·sqrt(K) in
  units of the result's scale; blocked and pairwise sums, which BLAS and cuDNN use, stay
  below it. Layers that keep activations at unit scale (He initialisation, batch norm —
  why outputs stay comparable at all) pass earlier errors on unchanged, and independent
  errors add in quadrature: u32·sqrt(Σ_l K_l) over every reduction on the way (a
  convolution's C/g·kh·kw, a dense layer's inputs, an LSTM's input + hidden once per time
  step, a global average's window; in training also batch norm's N·H·W statistics, each
  layer's data gradient and the longest weight-gradient reduction N·OH·OW). The bound is
  LAMBDA = 4 standard deviations of that: a correct implementation exceeds it with
  probability below 1e-4 per quantity, and it leaves a factor of a few for algorithms
  whose error constant is larger than plain summation's (Winograd transforms, split-K).
* **Operand rounding**: TF32 rounds both operands of every product to 10 explicit
  mantissa bits (u = 2^-11), bf16 to 7 and stores results in bf16 (u = 2^-8), fp16 (ONNX
  Runtime's float16 graph) stores operands and results in fp16 (u = 2^-11), fp32
  stores each layer's output in fp32 (u = 2^-24). Each matrix-product layer then adds a
  relative error of order u, independent from layer to layer, so L such layers give about
  sqrt(L)·u; the bound takes 2·u·sqrt(L) (two rounded operands).

**The output is compared on the batch's first examples** (``models/truth.py``: k = 4,
each example's inference output being independent of the others). Nothing above depends
on how many examples are compared: the output bound is a per-element statement from the
forward's reduction lengths and depth, and only the loss (batch norm's statistics, the
mean over the batch) and the gradients (the weight gradient's reduction over the batch)
depend on the batch size, and those are computed over the whole batch.

**Gradients of piecewise networks are not bounded this way.** ReLU and max pooling make
the gradient piecewise: fp32 rounding moves a few inputs across a ReLU's zero or a pooling
window's near-tie, and each crossing changes the gradient by an O(1) amount at one element.
Measured on the CPU: PyTorch's fp32 ResNet-50 (batch 16) gradient is 2.3e-2 from float64
in 2-norm (its outputs 4e-7), PyTorch's float64 gradient matches the reference to 9e-15,
and a 1e-6 relative perturbation of the input alone moves float64 ResNet-18's gradient by
1.3e-2 (6e-8 moves it by 3e-7): a crossing, not accumulated rounding. How often crossings
happen depends on how densely the data sit near the kinks, which no depth-and-length
formula captures, so ``grad_judged`` is False for such networks: their gradient errors are
reported where computed but the verdict rests on the output and the loss (where TF32
shows), and the float64 truth skips their gradients unless asked for them.

For the default suites' forward passes the fp32 bound stays below 2e-4 (ResNet-152: 1e-4)
while a TF32-sized error is 5e-4 or more, so an fp32-labelled row computed in TF32 fails;
single convolutions' bounds (conv_l5: 1.4e-5) sit several times above the 2.6e-6 that
PyTorch's fp32 CPU kernels measure there. Gradients are judged in 2-norm, not per
element: a max-pooling window whose two largest inputs lie within rounding of each other
sends its gradient to a different input in fp32 than in float64 — a legitimate, sparse
difference that a max-norm would magnify.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models import ir, ops
from models.analysis import analyse

U_FP32 = 2.0 ** -24
# Unit roundoff of the values each precision multiplies (and, for bf16, stores).
OPERAND_U = {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
@dataclass(frozen=True)
class Bounds:
    precision: str
    output: float        # inference output: max error over the largest value
    loss: float
    grad: float          # all gradients: 2-norm error over the 2-norm
    forward_terms: float     # Σ K of the inference pass (the derivation's terms)
    training_terms: float    # Σ K of forward and backward in training
    product_layers: int
    grad_judged: bool = True  # False: ReLU or max pooling in training (module docstring)


def grad_judged(model: ir.Model) -> bool:
    """Whether ``model``'s gradient errors are judged: no ReLU or max pooling in its
    trainable body (module docstring). ``models/truth.py`` computes the float64 gradients
    by default only where this holds."""
    return not any(ops.op_for(node).kink(node) for node in ir.walk(model.body))


@dataclass(frozen=True)
class _Reductions:
    forward: float       # Σ K over the inference pass
    statistics: float    # Σ K of batch-norm statistics in training
    backward: float      # Σ K of the data gradients and the longest weight gradient
    products: int        # matrix-product layers (LSTM: one per time step)


def _reductions(model: ir.Model, batch: int) -> _Reductions:
    """Σ K over the trainable layers, each layer's terms declared by its op
    (``models.ops``, ``bound``)."""
    forward = statistics = backward = 0.0
    products = 0
    wgrad = 0.0
    for layer in analyse(model).layers:
        if layer.frozen:
            continue
        terms = ops.BY_KIND[layer.kind].bound(layer, batch)
        forward += terms.forward
        statistics += terms.statistics
        backward += terms.backward
        wgrad = max(wgrad, terms.wgrad)
        products += terms.products
    return _Reductions(forward, statistics, backward + wgrad, max(products, 1))


LAMBDA = 4.0


def bounds(model: ir.Model, batch: int, precision: str) -> Bounds:
    """The largest error against float64 that ``precision`` arithmetic explains for
    ``model`` at ``batch`` (see the module's docstring for the derivation)."""
    r = _reductions(model, batch)
    u = OPERAND_U.get(precision, OPERAND_U["bf16"])
    rounding = 2 * u * math.sqrt(r.products)
    output = LAMBDA * U_FP32 * math.sqrt(r.forward) + rounding
    # The loss runs in training mode (batch-norm statistics) and averages N·classes terms.
    classes = model.loss.classes or 1
    loss = LAMBDA * U_FP32 * math.sqrt(r.forward + r.statistics + batch * classes) + rounding
    # Gradients: the training forward, its backward, and twice as many rounded operands.
    training = r.forward + r.statistics + r.backward
    grad = LAMBDA * U_FP32 * math.sqrt(training) + 2 * u * math.sqrt(2 * r.products)
    return Bounds(precision, output, loss, grad, r.forward, training, r.products,
                  grad_judged(model))
