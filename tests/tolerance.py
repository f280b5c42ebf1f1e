"""fp32 tolerances from arithmetic, for checks that compare two fp32 evaluations of one
network that sum in different orders (jit vs eager, NHWC vs NCHW, one framework vs
another).

A dot product of length K computed in fp32 in any order satisfies
|computed − exact| ≤ γ_K · |a|ᵀ|b|, with γ_K = K·u / (1 − K·u) and u = 2⁻²⁴ the unit
roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Thm 3.1 and
eq. 3.5). Two evaluations therefore differ by at most 2·γ_K·|a|ᵀ|b|. A layer's error
travels through the layers after it; the canonical He-normal weights keep activations at
unit scale through depth (models/weights.py), so the per-layer bounds add rather than
multiply, and |a|ᵀ|b| is of the order of the output's own scale. Hence the bound, relative
to the largest magnitude of the compared tensor:

    forward:  Σ_layers 2·γ_K,  K = the layer's reduction length (MACs per output)
    gradient: forward + Σ_layers 2·(γ_K_data + γ_K_weight), with K_data the MACs per input
              element (backward-data) and K_weight = batch × MACs per weight
              (backward-filter sums over every example and position).

The worst-case γ_K grows as K while rounding errors of real kernels grow as about √K, so
these bounds hold with a wide margin on any machine, and still catch a wrong kernel, whose
error is of the order of the values themselves.
"""

from __future__ import annotations

import math

import numpy as np

from models.analysis import analyse
from models.zoo import get_model

U = 2.0 ** -24


def gamma(k: float) -> float:
    return k * U / (1 - k * U)


def _products(name: str):
    """(MACs per output element, per input element, per parameter) of each layer that
    sums products (convolution, dense, LSTM)."""
    for layer in analyse(get_model(name)).layers:
        if layer.flops <= 0:
            continue
        macs = layer.flops / 2
        yield (macs / math.prod(layer.out_shape), macs / math.prod(layer.in_shape),
               macs / max(layer.params, 1))


def forward_rtol(name: str) -> float:
    return sum(2 * gamma(k) for k, _, _ in _products(name))


def gradient_rtol(name: str, batch: int) -> float:
    return forward_rtol(name) + sum(2 * (gamma(k_in) + gamma(batch * k_w))
                                    for _, k_in, k_w in _products(name))


def assert_fp32_close(actual, expected, rtol: float) -> None:
    """Elementwise within ``rtol`` of the compared tensor's scale (see the module doc)."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)
