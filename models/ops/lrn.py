"""LRN: Caffe's cross-channel local response normalisation (``models.ir.LRN``)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, reduction_terms


def shape(node: ir.LRN, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 3 or node.size < 1 or node.size % 2 == 0:
        ctx.fail(node, "needs (C, H, W) input and an odd window size")
    return shape


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, k: float) -> np.ndarray:
    """Caffe's across-channel LRN: ``x / (k + alpha/size * sum of x^2 over the `size`
    channels centred on each one, zero-padded at the edges) ** beta``."""
    if size % 2 != 1:
        raise ValueError("Caffe's LRN window is odd-sized")
    half = size // 2
    squares = np.pad(x * x, ((0, 0), (half, half), (0, 0), (0, 0)))
    window_sum = sliding_window_view(squares, size, axis=1).sum(axis=-1)
    return x / (k + alpha / size * window_sum) ** beta


def forward(node: ir.LRN, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    return lrn(x, node.size, node.alpha, node.beta, node.k)


def backward(node: ir.LRN, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """y = x·s^-β with s = k + α/n·Σ x² over the window: the input gradient is the direct
    term plus every window the channel falls in (the window is symmetric, so that is the
    same windowed sum of dy·x·s^(-β-1))."""
    half = node.size // 2
    squares = np.pad(x * x, ((0, 0), (half, half), (0, 0), (0, 0)))
    s = node.k + node.alpha / node.size * sliding_window_view(squares, node.size, axis=1).sum(-1)
    y = x * s ** -node.beta

    def back(dy):
        t = np.pad(dy * x * s ** (-node.beta - 1), ((0, 0), (half, half), (0, 0), (0, 0)))
        around = sliding_window_view(t, node.size, axis=1).sum(-1)
        return dy * s ** -node.beta - 2 * node.beta * node.alpha / node.size * x * around
    return y, back


OP = Op(ir.LRN, "lrn", shape, forward, backward, bound=reduction_terms)
