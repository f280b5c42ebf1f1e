"""MeanOverTime: the mean over each sequence's valid steps, (N, T, F) -> (N, F)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, reduction_terms


def shape(node: ir.MeanOverTime, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 2:
        ctx.fail(node, f"expects (T, F) input, got {shape}")
    return (shape[1],)


def mean_over_time(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean of (N, T, F) over each sequence's valid steps; padded steps never count."""
    valid = np.arange(x.shape[1])[None, :, None] < lengths[:, None, None]
    return np.where(valid, x, 0.0).sum(axis=1) / lengths[:, None]


def forward(node: ir.MeanOverTime, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return mean_over_time(x, ctx.lengths_for(x))


def backward(node: ir.MeanOverTime, x: np.ndarray, need_dx: bool, tape: TapeContext):
    lengths = tape.lengths_for(x)
    valid = np.arange(x.shape[1])[None, :, None] < lengths[:, None, None]
    return (mean_over_time(x, lengths),
            lambda dy: np.where(valid, dy[:, None, :] / lengths[:, None, None], 0.0))


OP = Op(ir.MeanOverTime, "mean_over_time", shape, forward, backward, bound=reduction_terms)
