"""SelfAttention: multi-head scaled dot-product self-attention (Vaswani et al. 2017,
3.2.1-3.2.2), with GPT-2's causal mask or BERT's padding mask, in float64 forward and
backward.

Per head h of size d = dim / heads: ``S = Q Kᵀ / √d + M``, ``P = softmax(S)`` over the
keys, ``O = P V``; M is -∞ where a key is masked (a later step under ``causal``, a step
past the sequence's length under ``padding``) and 0 elsewhere. Every query step is
computed, the padded ones too: they attend to the valid keys, as a key mask in PyTorch's
scaled_dot_product_attention, jax.nn.dot_product_attention and ONNX Runtime's attention
does, so the whole output is specified and compared.

The backward pass is the softmax's: with dP = dO Vᵀ, ``dS = P ⊙ (dP - rowsum(dP ⊙ P))``,
then dQ = dS K / √d, dK = dSᵀ Q / √d, dV = Pᵀ dO.
"""

from __future__ import annotations

import math

import numpy as np

from models import ir
from models.ops.base import ForwardContext, Op, Shape, ShapeContext, TapeContext, Terms
from models.params import ParamSpec


def shape(node: ir.SelfAttention, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 2 or shape[1] != node.dim:
        ctx.fail(node, f"expects a (T, {node.dim}) sequence, got {shape}")
    if node.heads < 1 or node.dim % node.heads:
        ctx.fail(node, f"{node.heads} heads do not divide the width {node.dim}")
    if node.padding and ctx.input_kind != "tokens":
        ctx.fail(node, "a padding mask needs token input (its sequence lengths)")
    return shape


def params(node: ir.SelfAttention, ctx: ShapeContext) -> list[ParamSpec]:
    d = node.dim
    return [ParamSpec(f"{node.name}.qkv.weight", (d, 3 * d), "normal", d),
            ParamSpec(f"{node.name}.qkv.bias", (3 * d,), "bias", d),
            ParamSpec(f"{node.name}.out.weight", (d, d), "normal", d),
            ParamSpec(f"{node.name}.out.bias", (d,), "bias", d)]


def flops(node: ir.SelfAttention, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    """The projections' 2·T·d·3d and 2·T·d·d, and the two products with the scores,
    Q Kᵀ and P V, 2·T·T·d each. Causal attention is counted in full, as the PaLM paper's
    model FLOPs count it (Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T per token
    for training, its attention term being this one's 4·T·d per token, times 3)."""
    steps, d = in_shape
    return 2 * steps * d * 4 * d + 4 * steps * steps * d


def mask(node: ir.SelfAttention, steps: int, lengths: np.ndarray | None) -> np.ndarray:
    """(N or 1, 1, T, T) booleans, True where query t may attend to key s."""
    allowed = np.ones((1, 1, steps, steps), dtype=bool)
    if node.causal:
        allowed = allowed & np.tril(np.ones((steps, steps), dtype=bool))[None, None]
    if node.padding and lengths is not None:
        keys = np.arange(steps)[None, :] < np.asarray(lengths)[:, None]      # (N, T)
        allowed = allowed & keys[:, None, None, :]
    return allowed


def heads(a: np.ndarray, count: int) -> np.ndarray:
    """(N, T, dim) -> (N, heads, T, d)."""
    n, t, dim = a.shape
    return a.reshape(n, t, count, dim // count).transpose(0, 2, 1, 3)


def merge(a: np.ndarray) -> np.ndarray:
    """(N, heads, T, d) -> (N, T, dim)."""
    n, h, t, d = a.shape
    return a.transpose(0, 2, 1, 3).reshape(n, t, h * d)


def attend(node: ir.SelfAttention, x: np.ndarray, param, lengths, macs: list[int] | None):
    """The forward pass and what its backward needs."""
    n, steps, d = x.shape
    head = d // node.heads
    qkv = x @ param(f"{node.name}.qkv.weight") + param(f"{node.name}.qkv.bias")
    q, k, v = (heads(part, node.heads) for part in np.split(qkv, 3, axis=-1))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head)
    allowed = mask(node, steps, lengths)
    scores = np.where(allowed, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    o = merge(p @ v)
    y = o @ param(f"{node.name}.out.weight") + param(f"{node.name}.out.bias")
    if macs is not None:
        macs += [qkv.size * d, q.size * steps, o.size * steps, y.size * d]
    return y, (q, k, v, p, o)


def forward(node: ir.SelfAttention, x: np.ndarray, ctx: ForwardContext,
            macs: list[int]) -> np.ndarray:
    lengths = ctx.lengths_for(x) if node.padding else None
    return attend(node, x, ctx.param, lengths, macs)[0]


def backward(node: ir.SelfAttention, x: np.ndarray, need_dx: bool, tape: TapeContext):
    lengths = tape.lengths_for(x) if node.padding else None
    y, (q, k, v, p, o) = attend(node, x, tape.param, lengths, None)
    add = tape.adder(node.name)
    scale = 1.0 / math.sqrt(node.dim // node.heads)
    w_qkv, w_out = tape.param(f"{node.name}.qkv.weight"), tape.param(f"{node.name}.out.weight")

    def back(dy):
        rows = dy.reshape(-1, node.dim)
        add("out.weight", o.reshape(-1, node.dim).T @ rows)
        add("out.bias", rows.sum(axis=0))
        do = heads(dy @ w_out.T, node.heads)
        dp = do @ v.transpose(0, 1, 3, 2)
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
        dq = ds @ k * scale
        dk = ds.transpose(0, 1, 3, 2) @ q * scale
        dv = p.transpose(0, 1, 3, 2) @ do
        dqkv = np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)
        flat = dqkv.reshape(-1, 3 * node.dim)
        add("qkv.weight", x.reshape(-1, node.dim).T @ flat)
        add("qkv.bias", flat.sum(axis=0))
        return dqkv @ w_qkv.T
    return y, back


def bound(layer, batch: int) -> Terms:
    """Four matrix products in a row: the projection (K = dim), the scores (K = d, at
    most dim, taken as dim: the layer record does not carry the head count), the
    weighted sum of values (K = T keys, and the softmax's own sum of T) and the output
    projection (K = dim); backward the same lengths; the weights' gradients sum over the
    batch's steps."""
    steps, dim = layer.in_shape
    k = 3 * dim + 2 * steps
    return Terms(forward=k, backward=k, wgrad=batch * steps, products=4)


OP = Op(ir.SelfAttention, "self_attention", shape, forward, backward, params, flops, bound)
