"""LayerNorm over the last axis (Ba et al. 2016): each example's (or each step's) own
mean and biased variance, in training and inference alike, then a learned scale and
shift per feature."""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, Terms
from models.params import ParamSpec


def shape(node: ir.LayerNorm, shape: Shape, ctx: ShapeContext) -> Shape:
    # Vectors and sequences only: an image's last axis is its width, which the adapters
    # hold in different positions (NHWC), and no network normalises over it.
    if len(shape) not in (1, 2) or shape[-1] != node.features:
        ctx.fail(node, f"expects (F,) or (T, F) input with F = {node.features}, got {shape}")
    if not node.eps > 0:
        ctx.fail(node, f"eps must be positive, got {node.eps}")
    return shape


def params(node: ir.LayerNorm, ctx: ShapeContext) -> list[ParamSpec]:
    # The same inits as batch norm's scale and shift (models/weights.py): values near 1
    # and 0 rather than exactly 1 and 0, so an adapter that drops or swaps them shows.
    f = (node.features,)
    return [ParamSpec(f"{node.name}.gamma", f, "gamma", 1),
            ParamSpec(f"{node.name}.beta", f, "beta", 1)]


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """``gamma * (x - mean) / sqrt(var + eps) + beta`` over the last axis, the variance
    biased (divided by the feature count), as torch.nn.LayerNorm and ONNX
    LayerNormalization compute it."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def forward(node: ir.LayerNorm, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    return layer_norm(x, ctx.param(f"{node.name}.gamma"), ctx.param(f"{node.name}.beta"),
                      node.eps)


def backward(node: ir.LayerNorm, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """Batch norm's rule (models/ops/batch_norm.py) over the last axis instead of the
    batch: with x̂ = (x - μ)·r, r = (σ² + ε)^-½ and g = dy·γ,
    dx = r/F · (F·g - Σ g - x̂·Σ g·x̂), the sums over the F features of each row;
    dγ = Σ dy·x̂ and dβ = Σ dy over every row."""
    gamma, beta = tape.param(f"{node.name}.gamma"), tape.param(f"{node.name}.beta")
    add = tape.adder(node.name)
    mean = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + node.eps)
    xhat = (x - mean) * inv
    y = xhat * gamma + beta
    rows = tuple(range(x.ndim - 1))
    features = x.shape[-1]

    def back(dy):
        add("gamma", (dy * xhat).sum(axis=rows))
        add("beta", dy.sum(axis=rows))
        g = dy * gamma
        return inv / features * (features * g - g.sum(axis=-1, keepdims=True)
                                 - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    return y, back


def bound(layer, batch: int) -> Terms:
    """The mean and the variance are sums of F terms, forward (inference too, unlike
    batch norm) and again in the data gradient's two row sums; the scale's and shift's
    gradients sum over the batch and, for a sequence, its steps."""
    features = layer.out_shape[-1]
    rows = batch * math.prod(layer.out_shape[:-1])
    return Terms(forward=2 * features, backward=2 * features, wgrad=rows)


OP = Op(ir.LayerNorm, "layer_norm", shape, forward, backward, params, bound=bound)
