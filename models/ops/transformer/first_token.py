"""FirstToken: step 0 of a sequence, (T, F) -> (F,): ViT's class token, read out for the
classifier (Dosovitskiy et al. 2021, eq. 4)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext


def shape(node: ir.FirstToken, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 2:
        ctx.fail(node, f"expects a (T, F) sequence, got {shape}")
    return (shape[1],)


def forward(node: ir.FirstToken, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return x[:, 0]


def backward(node: ir.FirstToken, x: np.ndarray, need_dx: bool, tape: TapeContext):
    def back(dy):
        dx = np.zeros_like(x, dtype=np.float64)
        dx[:, 0] = dy
        return dx
    return x[:, 0], back


OP = Op(ir.FirstToken, "first_token", shape, forward, backward)
