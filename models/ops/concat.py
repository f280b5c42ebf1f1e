"""Concat: every branch on the same input, concatenated along channels (Inception)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext


def shape(node: ir.Concat, shape: Shape, ctx: ShapeContext) -> Shape:
    outs = [ctx.sequence(branch, shape) for branch in node.branches]
    if not outs or len(outs[0]) != 3 or any(o[1:] != outs[0][1:] for o in outs):
        ctx.fail(node, f"branches give incompatible shapes {outs}")
    return (sum(o[0] for o in outs),) + outs[0][1:]


def forward(node: ir.Concat, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    return np.concatenate([ctx.sequence(b, x) for b in node.branches], axis=1)


def backward(node: ir.Concat, x: np.ndarray, need_dx: bool, tape: TapeContext):
    outs = [tape.sequence(branch, x, need_dx) for branch in node.branches]
    bounds = np.cumsum([0] + [o.shape[1] for o, _ in outs])

    def back(dy):
        parts = [b(dy[:, lo:hi]) for (_, b), lo, hi in zip(outs, bounds, bounds[1:])]
        return None if parts[0] is None else sum(parts)
    return np.concatenate([o for o, _ in outs], axis=1), back


OP = Op(ir.Concat, "concat", shape, forward, backward, container=True)
