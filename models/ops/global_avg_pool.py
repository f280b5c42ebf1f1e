"""GlobalAvgPool: the mean over H and W, keeping N and C: (N, C, H, W) -> (N, C)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, reduction_terms


def shape(node: ir.GlobalAvgPool, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 3:
        ctx.fail(node, f"expects (C, H, W) input, got {shape}")
    return (shape[0],)


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(2, 3))


def forward(node: ir.GlobalAvgPool, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return global_avg_pool(x)


def backward(node: ir.GlobalAvgPool, x: np.ndarray, need_dx: bool, tape: TapeContext):
    area = x.shape[2] * x.shape[3]
    return (global_avg_pool(x),
            lambda dy: np.broadcast_to(dy[:, :, None, None] / area, x.shape))


OP = Op(ir.GlobalAvgPool, "global_avg_pool", shape, forward, backward, bound=reduction_terms)
