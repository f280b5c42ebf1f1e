"""Activation: element-wise ReLU, tanh, sigmoid, or GELU in either form."""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, TapeContext, same_shape, sigmoid

# GELU's tanh approximation, x·Φ(x) ≈ ½x(1 + tanh(√(2/π)(x + 0.044715x³))) (Hendrycks &
# Gimpel 2016, 2), as GPT-2's "gelu_new" and torch's approximate="tanh" compute it.
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715

# erf element by element through the standard library (models/ imports numpy only, and
# numpy has no erf): exact to the last bit, about 0.2 µs an element.
_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    return _ERF(np.asarray(x, dtype=np.float64)).astype(np.float64)


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "tanh":
        return np.tanh(x)
    if kind == "sigmoid":
        return sigmoid(x)
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + GELU_A * x ** 3)))
    if kind == "gelu_erf":
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    raise ValueError(f"unknown activation {kind!r}")


def gelu_tanh_slope(x: np.ndarray) -> np.ndarray:
    """d/dx of GELU's tanh form: the derivative of the approximation itself, as autodiff
    of it gives."""
    t = np.tanh(GELU_C * (x + GELU_A * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * x * x)


def forward(node: ir.Activation, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return activation(x, node.kind)


def backward(node: ir.Activation, x: np.ndarray, need_dx: bool, tape: TapeContext):
    y = activation(x, node.kind)
    if node.kind == "gelu_erf":
        # y = x·Φ(x), so Φ(x) = y / x where x != 0; the slope Φ(x) + x·φ(x) then needs
        # no second pass of erf.
        phi = np.where(x != 0.0, y / np.where(x != 0.0, x, 1.0), 0.5)
        return y, lambda dy: dy * (phi + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    if node.kind == "gelu_tanh":
        return y, lambda dy: dy * gelu_tanh_slope(x)
    # Slopes from the output, which the next layer keeps anyway (no extra copy).
    slope = {"relu": lambda: y > 0, "tanh": lambda: 1 - y * y,
             "sigmoid": lambda: y * (1 - y)}[node.kind]
    return y, lambda dy: dy * slope()


def kink(node: ir.Activation) -> bool:
    return node.kind == "relu"


OP = Op(ir.Activation, "activation", same_shape, forward, backward, kink=kink)
