"""Flatten: (C, H, W) -> (C·H·W,), in C, H, W order."""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext


def shape(node: ir.Flatten, shape: Shape, ctx: ShapeContext) -> Shape:
    return (math.prod(shape),)


def forward(node: ir.Flatten, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    return x.reshape(x.shape[0], -1)  # C, H, W order


def backward(node: ir.Flatten, x: np.ndarray, need_dx: bool, tape: TapeContext):
    return x.reshape(x.shape[0], -1), lambda dy: dy.reshape(x.shape)


OP = Op(ir.Flatten, "flatten", shape, forward, backward)
