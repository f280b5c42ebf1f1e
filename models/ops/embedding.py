"""Embedding: token ids (T,) -> rows of a (vocab, dim) table, (T, dim)."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext
from models.params import ParamSpec


def shape(node: ir.Embedding, shape: Shape, ctx: ShapeContext) -> Shape:
    if ctx.input_kind != "tokens" or len(shape) != 1:
        ctx.fail(node, "needs token input")
    return (shape[0], node.dim)


def params(node: ir.Embedding, ctx: ShapeContext) -> list[ParamSpec]:
    return [ParamSpec(f"{node.name}.table", (node.vocab, node.dim), node.init, 1)]


def forward(node: ir.Embedding, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return ctx.param(f"{node.name}.table")[x]


def backward(node: ir.Embedding, x: np.ndarray, need_dx: bool, tape: TapeContext):
    table, add = tape.param(f"{node.name}.table"), tape.adder(node.name)

    def back(dy):
        dtable = np.zeros_like(table)
        np.add.at(dtable, x, dy)
        add("table", dtable)
        return None  # tokens have no gradient
    return table[x], back


OP = Op(ir.Embedding, "embedding", shape, forward, backward, params)
