"""Dense: ``x @ weight + bias`` with an (in, out) weight, over a vector or every step of
a sequence."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import (
    ForwardContext,
    Op,
    Shape,
    ShapeContext,
    TapeContext,
    matmul,
    product_terms,
)
from models.params import ParamSpec


def shape(node: ir.Dense, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) not in (1, 2) or shape[-1] != node.in_features:
        ctx.fail(node, f"expects ({node.in_features},) or (T, {node.in_features}) input, got {shape}")
    return (*shape[:-1], node.out_features)


def params(node: ir.Dense, ctx: ShapeContext) -> list[ParamSpec]:
    specs = [ParamSpec(f"{node.name}.weight", (node.in_features, node.out_features),
                       "he", node.in_features)]
    if node.bias:
        specs.append(ParamSpec(f"{node.name}.bias", (node.out_features,), "bias",
                               node.in_features))
    return specs


def flops(node: ir.Dense, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    steps = in_shape[0] if len(in_shape) == 2 else 1
    return 2 * steps * node.in_features * node.out_features


def forward(node: ir.Dense, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    y = matmul(x, ctx.param(f"{node.name}.weight"), macs)
    return y + ctx.param(f"{node.name}.bias") if node.bias else y


def affine_backward(node: ir.Dense | ir.TiedDense, x: np.ndarray, tape: TapeContext):
    """``x @ w + b`` and its backward, for Dense and for a tied decoder, whose weight is
    its encoder's transposed (a Dense's (in, out) weight, or an Embedding's (vocab, dim)
    table) and whose weight gradient goes to the encoder."""
    p, add = node.name, tape.adder(node.name)
    tied = isinstance(node, ir.TiedDense)
    w = tape.param(tied_weight_name(node)).T if tied else tape.param(f"{p}.weight")
    y = x @ w + (tape.param(f"{p}.bias") if node.bias else 0.0)

    def back(dy):
        flat_x, flat_dy = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
        dw = flat_x.T @ flat_dy
        if tied:
            tape.adder(node.tied_to)(tied_weight_name(node).rsplit(".", 1)[1], dw.T)
        else:
            add("weight", dw)
        if node.bias:
            add("bias", flat_dy.sum(axis=0))
        return dy @ w.T
    return y, back


def tied_weight_name(node: ir.TiedDense) -> str:
    """The encoder's parameter a tied decoder transposes: a Dense's (in, out) weight, or
    an Embedding's (vocab, dim) table; both are (decoder out, decoder in) as stored."""
    return f"{node.tied_to}.table" if node.table else f"{node.tied_to}.weight"


def backward(node: ir.Dense, x: np.ndarray, need_dx: bool, tape: TapeContext):
    return affine_backward(node, x, tape)


OP = Op(ir.Dense, "dense", shape, forward, backward, params, flops, product_terms)
