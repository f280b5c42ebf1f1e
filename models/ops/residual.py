"""Residual: ``body(x) + shortcut(x)``; an empty shortcut is the identity."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext


def shape(node: ir.Residual, shape: Shape, ctx: ShapeContext) -> Shape:
    body = ctx.sequence(node.body, shape)
    short = ctx.sequence(node.shortcut, shape) if node.shortcut else shape
    if body != short:
        ctx.fail(node, f"body gives {body} but shortcut gives {short}")
    return body


def forward(node: ir.Residual, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    shortcut = ctx.sequence(node.shortcut, x) if node.shortcut else x
    return ctx.sequence(node.body, x) + shortcut


def backward(node: ir.Residual, x: np.ndarray, need_dx: bool, tape: TapeContext):
    y, body_back = tape.sequence(node.body, x, need_dx)
    if node.shortcut:
        short, short_back = tape.sequence(node.shortcut, x, need_dx)
    else:
        short, short_back = x, (lambda dy: dy)

    def back(dy):
        a, b = body_back(dy), short_back(dy)
        return None if a is None or b is None else a + b
    return y + short, back


OP = Op(ir.Residual, "residual", shape, forward, backward, container=True)
