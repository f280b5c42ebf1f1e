"""Dropout: the identity when benchmarking, as the seeds ran it (``models.ir.Dropout``)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, TapeContext, same_shape


def forward(node: ir.Dropout, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    return x


def backward(node: ir.Dropout, x: np.ndarray, need_dx: bool, tape: TapeContext):
    return x, lambda dy: dy


OP = Op(ir.Dropout, "dropout", same_shape, forward, backward)
