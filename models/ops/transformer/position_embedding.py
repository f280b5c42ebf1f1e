"""PositionEmbedding: adds a learned table's row t to step t of a sequence (GPT-2's wpe,
BERT's and ViT's position embeddings), and for BERT row 0 of its token-type table."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, Terms
from models.params import ParamSpec


def shape(node: ir.PositionEmbedding, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 2 or shape[1] != node.dim:
        ctx.fail(node, f"expects a (T, {node.dim}) sequence, got {shape}")
    if shape[0] > node.positions:
        # The one place a too-long sequence is refused: every adapter would index past
        # its table, each failing in its own way or (on a GPU) not at all.
        ctx.fail(node, f"a sequence of {shape[0]} steps is longer than the model's context "
                       f"of {node.positions} positions")
    return shape


def params(node: ir.PositionEmbedding, ctx: ShapeContext) -> list[ParamSpec]:
    specs = [ParamSpec(f"{node.name}.table", (node.positions, node.dim), "normal", 1)]
    if node.segments:
        specs.append(ParamSpec(f"{node.name}.segments", (node.segments, node.dim), "normal", 1))
    return specs


def added(node: ir.PositionEmbedding, steps: int, param) -> np.ndarray:
    """The (T, dim) array added to every example."""
    rows = param(f"{node.name}.table")[:steps]
    return rows + param(f"{node.name}.segments")[0] if node.segments else rows


def forward(node: ir.PositionEmbedding, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return x + added(node, x.shape[1], ctx.param)


def backward(node: ir.PositionEmbedding, x: np.ndarray, need_dx: bool, tape: TapeContext):
    add = tape.adder(node.name)
    table = tape.param(f"{node.name}.table")

    def back(dy):
        per_step = dy.sum(axis=0)                       # (T, dim), over the batch
        dtable = np.zeros_like(table)
        dtable[:dy.shape[1]] = per_step
        add("table", dtable)
        if node.segments:
            dseg = np.zeros((node.segments, node.dim))
            dseg[0] = per_step.sum(axis=0)
            add("segments", dseg)
        return dy
    return x + added(node, x.shape[1], tape.param), back


def bound(layer, batch: int) -> Terms:
    # The table's gradient sums over the batch (the token-type row over every step too).
    return Terms(wgrad=batch * layer.out_shape[0])


OP = Op(ir.PositionEmbedding, "position_embedding", shape, forward, backward, params,
        bound=bound)
