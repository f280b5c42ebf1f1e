"""TiedDense: a decoder whose weight is the transpose of an earlier Dense's (Bahrampour et
al. 2016, 4.3) or of an earlier Embedding's table (a language model's tied output layer,
Press & Wolf 2017, arXiv:1608.05859); only the bias is its own."""

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
from models.ops.dense import affine_backward, tied_weight_name
from models.params import ParamSpec


def sizes(node: ir.TiedDense, ctx: ShapeContext) -> tuple[int, int]:
    """(inputs, outputs) of the decoder: its encoder's sizes, reversed."""
    found = ctx.earlier(node.tied_to)
    if node.table and isinstance(found, ir.Embedding):
        return found.dim, found.vocab
    if not node.table and isinstance(found, ir.Dense):
        return found.out_features, found.in_features
    kind = "Embedding" if node.table else "Dense"
    ctx.fail(node, f"is tied to '{node.tied_to}', which is no earlier {kind}")
    raise AssertionError  # ctx.fail raises


def shape(node: ir.TiedDense, shape: Shape, ctx: ShapeContext) -> Shape:
    inputs, outputs = sizes(node, ctx)
    if len(shape) not in (1, 2) or shape[-1] != inputs:
        ctx.fail(node, f"expects ({inputs},) or (T, {inputs}) input, got {shape}")
    return (*shape[:-1], outputs)


def params(node: ir.TiedDense, ctx: ShapeContext) -> list[ParamSpec]:
    # The weight belongs to the encoder; the bias has the size of the decoder's output.
    if not node.bias:
        return []
    inputs, outputs = sizes(node, ctx)
    return [ParamSpec(f"{node.name}.bias", (outputs,), "bias", inputs)]


def flops(node: ir.TiedDense, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    inputs, outputs = sizes(node, ctx)
    steps = in_shape[0] if len(in_shape) == 2 else 1
    return 2 * steps * inputs * outputs


def forward(node: ir.TiedDense, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    # The decoder's weight is the encoder's stored array transposed.
    y = matmul(x, ctx.param(tied_weight_name(node)).T, macs)
    return y + ctx.param(f"{node.name}.bias") if node.bias else y


def backward(node: ir.TiedDense, x: np.ndarray, need_dx: bool, tape: TapeContext):
    return affine_backward(node, x, tape)


OP = Op(ir.TiedDense, "tied_dense", shape, forward, backward, params, flops, product_terms)
