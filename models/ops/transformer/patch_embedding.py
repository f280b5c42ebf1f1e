"""PatchEmbedding: ViT's input layer (Dosovitskiy et al. 2021, 3.1, eq. 1). The image is
cut into p×p patches in row-major order, each flattened as (C, p, p) and projected by the
same (dim, C, p, p) weight that a convolution of kernel and stride p applies, then a
learned class token is put before them."""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, Terms
from models.params import ParamSpec


def grid(node: ir.PatchEmbedding, shape: Shape, ctx: ShapeContext) -> tuple[int, int]:
    if len(shape) != 3 or shape[0] != node.in_channels:
        ctx.fail(node, f"expects a ({node.in_channels}, H, W) image, got {shape}")
    if node.patch < 1 or shape[1] % node.patch or shape[2] % node.patch:
        ctx.fail(node, f"the image {shape[1]}×{shape[2]} is not cut evenly into "
                       f"{node.patch}×{node.patch} patches")
    return shape[1] // node.patch, shape[2] // node.patch


def shape(node: ir.PatchEmbedding, shape: Shape, ctx: ShapeContext) -> Shape:
    rows, cols = grid(node, shape, ctx)
    return (rows * cols + int(node.class_token), node.dim)


def params(node: ir.PatchEmbedding, ctx: ShapeContext) -> list[ParamSpec]:
    fan_in = node.in_channels * node.patch ** 2
    specs = [ParamSpec(f"{node.name}.weight", (node.dim, node.in_channels, node.patch, node.patch),
                       "normal", fan_in),
             ParamSpec(f"{node.name}.bias", (node.dim,), "bias", fan_in)]
    if node.class_token:
        specs.append(ParamSpec(f"{node.name}.class_token", (node.dim,), "normal", 1))
    return specs


def flops(node: ir.PatchEmbedding, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    patches = out_shape[0] - int(node.class_token)
    return 2 * patches * node.in_channels * node.patch ** 2 * node.dim


def patches(x: np.ndarray, p: int) -> np.ndarray:
    """(N, C, H, W) -> (N, H/p · W/p, C·p·p): row-major patches, each flattened as (C, p, p)."""
    n, c, h, w = x.shape
    return (x.reshape(n, c, h // p, p, w // p, p).transpose(0, 2, 4, 1, 3, 5)
            .reshape(n, (h // p) * (w // p), c * p * p))


def unpatch(dp: np.ndarray, shape: tuple[int, ...], p: int) -> np.ndarray:
    """The inverse of ``patches``."""
    n, c, h, w = shape
    return (dp.reshape(n, h // p, w // p, c, p, p).transpose(0, 3, 1, 4, 2, 5)
            .reshape(n, c, h, w))


def embed(node: ir.PatchEmbedding, flat: np.ndarray, param, macs: list[int] | None) -> np.ndarray:
    weight = param(f"{node.name}.weight").reshape(node.dim, -1)
    y = flat @ weight.T + param(f"{node.name}.bias")
    if macs is not None:
        macs.append(y.size * weight.shape[1])
    if node.class_token:
        token = np.broadcast_to(param(f"{node.name}.class_token"), (y.shape[0], 1, node.dim))
        y = np.concatenate([token, y], axis=1)
    return y


def forward(node: ir.PatchEmbedding, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return embed(node, patches(x, node.patch), ctx.param, macs)


def backward(node: ir.PatchEmbedding, x: np.ndarray, need_dx: bool, tape: TapeContext):
    add = tape.adder(node.name)
    flat = patches(x, node.patch)
    weight = tape.param(f"{node.name}.weight")

    def back(dy):
        if node.class_token:
            add("class_token", dy[:, 0].sum(axis=0))
            dy = dy[:, 1:]
        rows = dy.reshape(-1, node.dim)
        add("weight", (rows.T @ flat.reshape(rows.shape[0], -1)).reshape(weight.shape))
        add("bias", rows.sum(axis=0))
        if not need_dx:
            return None
        return unpatch(dy @ weight.reshape(node.dim, -1), x.shape, node.patch)
    return embed(node, flat, tape.param, None), back


def bound(layer, batch: int) -> Terms:
    # A convolution's: C·p·p products per output element; the weight gradient sums over
    # the batch and the patches.
    k = layer.flops / 2 / max(math.prod(layer.out_shape), 1)
    return Terms(forward=k, backward=k, wgrad=batch * layer.out_shape[0], products=1)


OP = Op(ir.PatchEmbedding, "patch_embedding", shape, forward, backward, params, flops, bound)
