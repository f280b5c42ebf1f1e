"""BatchNorm over channels (dim 1): running statistics in inference, batch statistics in
training, as the gradient pass runs it."""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, Terms
from models.params import ParamSpec


def shape(node: ir.BatchNorm, shape: Shape, ctx: ShapeContext) -> Shape:
    if shape[0] != node.num_features:
        ctx.fail(node, f"expects {node.num_features} channels, got {shape}")
    return shape


def params(node: ir.BatchNorm, ctx: ShapeContext) -> list[ParamSpec]:
    c = (node.num_features,)
    return [
        ParamSpec(f"{node.name}.gamma", c, "gamma", 1),
        ParamSpec(f"{node.name}.beta", c, "beta", 1),
        ParamSpec(f"{node.name}.running_mean", c, "mean", 1, trainable=False),
        ParamSpec(f"{node.name}.running_var", c, "var", 1, trainable=False),
    ]


def batch_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, running_mean: np.ndarray,
               running_var: np.ndarray, eps: float, train: bool) -> np.ndarray:
    """Normalises over every axis but channels (axis 1). Training uses the batch's mean
    and biased variance, as PyTorch and TensorFlow normalise in training mode."""
    axes = (0,) + tuple(range(2, x.ndim))
    if train:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = running_mean, running_var
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = (gamma / np.sqrt(var + eps)).reshape(shape)
    return (x - mean.reshape(shape)) * scale + beta.reshape(shape)


def forward(node: ir.BatchNorm, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    p = node.name
    return batch_norm(x, ctx.param(f"{p}.gamma"), ctx.param(f"{p}.beta"),
                      ctx.param(f"{p}.running_mean"), ctx.param(f"{p}.running_var"), node.eps,
                      ctx.train)


def backward(node: ir.BatchNorm, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """Training-mode batch norm over every axis but channels (biased batch variance)."""
    gamma, beta = tape.param(f"{node.name}.gamma"), tape.param(f"{node.name}.beta")
    add, eps = tape.adder(node.name), node.eps
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    count = x.size // x.shape[1]

    def back(dy):
        dbeta, dgamma = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
        add("gamma", dgamma)
        add("beta", dbeta)
        scale = (gamma * inv).reshape(shape) / count
        return scale * (count * dy - dbeta.reshape(shape) - xhat * dgamma.reshape(shape))
    return y, back


def bound(layer, batch: int) -> Terms:
    """Training's mean and variance over N·H·W (images only; a vector's batch statistics
    are left out, as they always were)."""
    if len(layer.out_shape) != 3:
        return Terms()
    return Terms(statistics=2 * batch * math.prod(layer.out_shape) // layer.out_shape[0])


OP = Op(ir.BatchNorm, "batch_norm", shape, forward, backward, params, bound=bound)
