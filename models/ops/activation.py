"""Activation: element-wise ReLU, tanh or sigmoid."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, TapeContext, same_shape, sigmoid


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "tanh":
        return np.tanh(x)
    if kind == "sigmoid":
        return sigmoid(x)
    raise ValueError(f"unknown activation {kind!r}")


def forward(node: ir.Activation, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return activation(x, node.kind)


def backward(node: ir.Activation, x: np.ndarray, need_dx: bool, tape: TapeContext):
    # Slopes from the output, which the next layer keeps anyway (no extra copy).
    y = activation(x, node.kind)
    slope = {"relu": lambda: y > 0, "tanh": lambda: 1 - y * y,
             "sigmoid": lambda: y * (1 - y)}[node.kind]
    return y, lambda dy: dy * slope()


def kink(node: ir.Activation) -> bool:
    return node.kind == "relu"


OP = Op(ir.Activation, "activation", same_shape, forward, backward, kink=kink)
