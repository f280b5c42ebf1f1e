"""TiedDense: a decoder whose weight is the transpose of an earlier Dense's; only the
bias is its own (Bahrampour et al. 2016, 4.3)."""

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
from models.ops.dense import affine_backward
from models.params import ParamSpec


def encoder(node: ir.TiedDense, ctx: ShapeContext) -> ir.Dense:
    found = ctx.earlier(node.tied_to)
    if not isinstance(found, ir.Dense):
        ctx.fail(node, f"is tied to '{node.tied_to}', which is no earlier Dense")
    return found


def shape(node: ir.TiedDense, shape: Shape, ctx: ShapeContext) -> Shape:
    enc = encoder(node, ctx)
    if shape != (enc.out_features,):
        ctx.fail(node, f"expects ({enc.out_features},) input, got {shape}")
    return (enc.in_features,)


def params(node: ir.TiedDense, ctx: ShapeContext) -> list[ParamSpec]:
    # The weight belongs to the encoder; the bias has the size of the encoder's input.
    if not node.bias:
        return []
    in_features = encoder(node, ctx).in_features
    return [ParamSpec(f"{node.name}.bias", (in_features,), "bias", in_features)]


def flops(node: ir.TiedDense, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    enc = encoder(node, ctx)
    return 2 * enc.in_features * enc.out_features


def forward(node: ir.TiedDense, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    # The decoder's weight is the encoder's (in, out) weight transposed.
    y = matmul(x, ctx.param(f"{node.tied_to}.weight").T, macs)
    return y + ctx.param(f"{node.name}.bias") if node.bias else y


def backward(node: ir.TiedDense, x: np.ndarray, need_dx: bool, tape: TapeContext):
    return affine_backward(node, x, tape)


OP = Op(ir.TiedDense, "tied_dense", shape, forward, backward, params, flops, product_terms)
