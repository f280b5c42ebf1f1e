"""The IR realised as pure JAX functions over a flat parameter dict keyed by canonical
names, with the canonical weights converted once to the activation layout.

Every node becomes the jax.lax / jax.numpy call a hand-written JAX model uses (Flax's
``nn.Conv`` is ``lax.conv_general_dilated``, ``nn.max_pool`` is ``lax.reduce_window``),
so XLA sees the same graph as from an idiomatic Flax model, without Flax's module and
variable-collection machinery. Each realisation is a function ``(params, x, ctx) -> y``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from models import ir
from models.inputs import StepMask
from models.ops import builder_table
from models.ops.base import window_output_size
from models.ops.dense import tied_weight_name
from models.weights import Weights

# jax.nn.dot_product_attention's ``implementation``: "xla", "cudnn", or None, which in jax
# 0.10.2 (jax/_src/nn/functions.py: "TODO ... Automatically select the best backend
# (defaults to XLA for now)") runs the XLA implementation, softmax(Q·Kᵀ)·V as XLA fuses
# it, on the GPU too: cuDNN's fused attention only where "cudnn" is passed (the adapter's
# cudnn_attention variant). Each row of a model with attention records which ran.
ATTENTION = {None: "jax.nn.dot_product_attention, implementation=None (the XLA implementation)",
             "cudnn": "jax.nn.dot_product_attention, implementation='cudnn' (cuDNN's fused "
                      "attention)"}

Params = dict[str, jax.Array]


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool,
                    key_lengths: jax.Array | None, implementation: str = "cudnn") -> jax.Array:
    """jax.nn.dot_product_attention on cuDNN's fused kernel, (N, T, heads, d) in and out.

    cuDNN's kernel takes no boolean mask: the keys past each sequence's length are masked
    from the lengths themselves (``key_value_seq_lengths``, the same keys as the boolean
    mask of the XLA path). Its backward takes no odd sequence length: JAX raises
    "Unsupported sequence length Q 197, KV 197" where ViT-B/16's attention is
    differentiated (jax 0.11.2, jax/_src/cudnn/fused_attention_stablehlo.py
    check_is_flash_attention; the forward takes any length). An odd length is therefore
    padded by one zero step, and the kernel is given the true lengths
    (``query_seq_lengths``, ``key_value_seq_lengths``): the extra key is masked for every
    query, the extra query's row is sliced off, so each real query attends to exactly its
    keys and the function, and its gradients, are unchanged. ``implementation`` is for the
    tests, which check the padding on the CPU with the XLA implementation."""
    n, steps = q.shape[:2]
    lengths: dict[str, jax.Array] = {}
    if key_lengths is not None:
        lengths["key_value_seq_lengths"] = key_lengths.astype(jnp.int32)
    if steps % 2:
        pad = ((0, 0), (0, 1), (0, 0), (0, 0))
        q, k, v = (jnp.pad(t, pad) for t in (q, k, v))
        full = jnp.full((n,), steps, jnp.int32)
        lengths = {"query_seq_lengths": full, "key_value_seq_lengths": full, **lengths}
    o = jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=implementation,
                                     **lengths)
    return o[:, :steps]


class Lengths(NamedTuple):
    """Sequence lengths in the forms the LSTM and the masked mean need, made once; a
    NamedTuple so it passes through ``jax.jit`` as a pytree of device arrays."""

    live: jax.Array    # bool (T, N): step t of sequence n is valid (time-major for scan)
    mask: jax.Array    # float32 (N, T)
    count: jax.Array   # float32 (N,)

    @staticmethod
    def of(lengths: np.ndarray, steps: int) -> Lengths:
        mask = StepMask.of(lengths, steps)   # computed once in numpy (models.inputs)
        return Lengths(np.ascontiguousarray(mask.valid.T), mask.weight, mask.count)


@dataclass(frozen=True)
class Numerics:
    """Static settings baked into the traced functions."""

    layout: str              # activations: "NHWC" or "NCHW"
    precision: lax.Precision  # of every convolution and matrix product
    dtype: Any               # compute dtype: float32, or bfloat16 for mixed precision
    attention: str | None = None   # jax.nn.dot_product_attention's implementation

    @property
    def channel_axis(self) -> int:
        return 3 if self.layout == "NHWC" else 1

    def spatial(self, h: int, w: int, rest: int) -> tuple[Any, ...]:
        """A 4-tuple over (N, C, H, W) in the activation layout, ``rest`` for N and C."""
        return (rest, h, w, rest) if self.layout == "NHWC" else (rest, rest, h, w)


@dataclass(frozen=True)
class Decode:
    """A cached pass over new steps of one sequence (greedy generation): ``start``, the
    first new step's position (an int32 scalar, traced, so one program serves every
    position); ``caches``, per attention layer its keys and values, (1, capacity, heads,
    d) each; ``written``, filled by the pass with each layer's caches after the new steps'
    keys and values are written in (the pass's function returns them: JAX arrays are
    values, not buffers)."""

    start: jax.Array
    caches: dict[str, tuple[jax.Array, jax.Array]]
    written: dict[str, tuple[jax.Array, jax.Array]] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a call passes besides params and x. ``train`` is a Python bool, so it is
    static for ``jax.jit``: forward and gradient are separate traced functions. ``decode``:
    a cached pass (``Decode``), None for a whole sequence."""

    train: bool
    lengths: Lengths | None = None
    decode: Decode | None = None


Apply = Callable[[Params, jax.Array, Context], jax.Array]


@dataclass(frozen=True)
class Network:
    frozen: Apply                  # the untrainable prefix
    body: Apply
    trainable: dict[str, np.ndarray]   # the body's trainable parameters
    fixed: dict[str, np.ndarray]       # frozen-prefix parameters and BN running statistics
    # Axis permutations applied to canonical arrays (conv weights OIHW -> HWIO), so
    # gradients can be reported in canonical layouts.
    permutations: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def canonical(self, name: str, array: np.ndarray) -> np.ndarray:
        perm = self.permutations.get(name)
        return array if perm is None else np.transpose(array, np.argsort(perm))


def sequence(layers: list[Apply]) -> Apply:
    def run(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
        for layer in layers:
            x = layer(params, x, ctx)
        return x
    return run


# Each layer's operations carry the layer's kind in the op_name of their HLO metadata
# ("jit(_loss)/jvp(conv)/conv_general_dilated", the ReLU's backward
# "transpose(jvp(relu))/select_n"), which profiles read to split a step's time by layer type
# (Li et al. 2016, Fig. 2) where XLA's instruction names do not tell ("compare_select_fusion").
# The names are those suites.instruments.profiling.layer_type knows.
_SCOPES: dict[type, str] = {
    ir.Conv2d: "conv", ir.GlobalAvgPool: "global_avg_pool", ir.LRN: "lrn",
    ir.BatchNorm: "batch_norm", ir.LayerNorm: "layer_norm", ir.Dense: "dense",
    ir.TiedDense: "dense", ir.Embedding: "embedding", ir.PositionEmbedding: "embedding",
    # ViT's patch embedding is a strided convolution, and runs as one.
    ir.PatchEmbedding: "conv", ir.SelfAttention: "self_attention", ir.FirstToken: "first_token",
    ir.LSTM: "lstm", ir.MeanOverTime: "mean_over_time",
}


def layer_scope(node: ir.Node) -> str | None:
    """The scope of a node's operations; None for nodes made of other nodes (Residual,
    Concat, whose branches keep their own) and for no-ops."""
    if isinstance(node, ir.Pool2d):
        return f"{node.kind}_pool"
    if isinstance(node, ir.Activation):
        return node.kind
    return _SCOPES.get(type(node))


def layer_context(scope: str, x: Any) -> contextlib.AbstractContextManager:
    """The layer's named scope while jax traces it. Called op by op (the eager variant)
    there is no program to annotate, and the scope would only add its cost to dispatch."""
    return jax.named_scope(scope) if isinstance(x, jax.core.Tracer) else contextlib.nullcontext()


def scoped(scope: str, apply: Apply) -> Apply:
    def run(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
        with layer_context(scope, x):
            return apply(params, x, ctx)
    return run


class Builder:
    """Turns IR nodes into functions and collects the parameters they read."""

    def __init__(self, weights: Weights, numerics: Numerics):
        self.weights = weights
        self.num = numerics
        self.arrays: dict[str, np.ndarray] = {}
        self.permutations: dict[str, tuple[int, ...]] = {}

    def sequence(self, nodes: tuple[ir.Node, ...]) -> Apply:
        return sequence([self.node(node) for node in nodes])

    def _param(self, name: str, perm: tuple[int, ...] | None = None) -> str:
        array = self.weights[name]
        if perm is not None:
            array = np.ascontiguousarray(np.transpose(array, perm))
            self.permutations[name] = perm
        self.arrays[name] = array
        return name

    def _cast(self, params: Params, name: str) -> jax.Array:
        # Parameters stay float32; bf16 compute casts at the point of use, so gradients
        # flow back to the float32 values (what Flax does with param_dtype != dtype).
        return params[name].astype(self.num.dtype)

    def _bias(self, y: jax.Array, bias: jax.Array) -> jax.Array:
        if y.ndim == 4 and self.num.layout == "NCHW":
            return y + bias[:, None, None]
        return y + bias

    def node(self, node: ir.Node) -> Apply:
        method = _TABLE.get(type(node))
        if method is None:
            raise TypeError(f"no JAX realisation for {type(node).__name__}")
        scope = layer_scope(node)
        return method(self, node) if scope is None else scoped(scope, method(self, node))

    # --- one method per op, in the order of models.ops.OPS ----------------------------
    def conv2d(self, node: ir.Conv2d) -> Apply:
        nhwc = self.num.layout == "NHWC"
        weight = self._param(f"{node.name}.weight", (2, 3, 1, 0) if nhwc else None)
        bias = self._param(f"{node.name}.bias") if node.bias else None
        numbers = ("NHWC", "HWIO", "NHWC") if nhwc else ("NCHW", "OIHW", "NCHW")
        padding = tuple((p, p) for p in node.padding)

        def conv(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            y = lax.conv_general_dilated(x, self._cast(params, weight), node.stride, padding,
                                         dimension_numbers=numbers,
                                         feature_group_count=node.groups,
                                         precision=self.num.precision)
            return y if bias is None else self._bias(y, self._cast(params, bias))
        return conv

    def pool2d(self, node: ir.Pool2d) -> Apply:
        (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
        window, strides = self.num.spatial(kh, kw, 1), self.num.spatial(sh, sw, 1)
        h_axis = 1 if self.num.layout == "NHWC" else 2

        def padding(h: int, w: int) -> tuple[tuple[int, int], ...]:
            # Pad left by the padding and right by what the last (ceil-mode) window needs.
            oh = window_output_size(h, kh, sh, ph, node.ceil_mode)
            ow = window_output_size(w, kw, sw, pw, node.ceil_mode)
            right_h = max(ph, (oh - 1) * sh + kh - h - ph)
            right_w = max(pw, (ow - 1) * sw + kw - w - pw)
            return self.num.spatial((ph, right_h), (pw, right_w), (0, 0))

        def max_pool(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            pads = padding(x.shape[h_axis], x.shape[h_axis + 1])
            # A concrete -inf with lax.max is JAX's differentiable reduce_window_max, as
            # Flax's nn.max_pool calls it (a traced init value is not).
            return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, pads)

        def avg_pool(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            h, w = x.shape[h_axis], x.shape[h_axis + 1]
            total = lax.reduce_window(x, 0.0, lax.add, window, strides,
                                      padding(h, w))
            # Ceil-mode windows past the edge average their valid elements only (the
            # reference's rule); the counts are a constant of the shapes.
            counts = np.outer(valid_counts(h, kh, sh, ph), valid_counts(w, kw, sw, pw))
            counts = counts[None, :, :, None] if h_axis == 1 else counts[None, None]
            return total / jnp.asarray(counts, x.dtype)

        def valid_counts(size: int, kernel: int, stride: int, pad: int) -> np.ndarray:
            starts = np.arange(window_output_size(size, kernel, stride, pad, node.ceil_mode))
            starts = starts * stride - pad
            return np.minimum(starts + kernel, size) - np.maximum(starts, 0)

        return max_pool if node.kind == "max" else avg_pool

    def global_avg_pool(self, node: ir.GlobalAvgPool) -> Apply:
        axes = (1, 2) if self.num.layout == "NHWC" else (2, 3)
        return lambda params, x, ctx: jnp.mean(x, axis=axes)

    def activation(self, node: ir.Activation) -> Apply:
        # jax.nn.gelu's approximate=True is the tanh form, 0.5x(1 + tanh(sqrt(2/pi)(x +
        # 0.044715x^3))), approximate=False the exact x·Phi(x) through erf (the jax.nn.gelu
        # API doc); Flax's nn.gelu is the same function.
        fn = {"relu": jax.nn.relu, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid,
              "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
              "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False)}[node.kind]
        return lambda params, x, ctx: fn(x)

    def lrn(self, node: ir.LRN) -> Apply:
        half = node.size // 2
        channel = self.num.channel_axis
        window = tuple(node.size if a == channel else 1 for a in range(4))
        pads = tuple((half, half) if a == channel else (0, 0) for a in range(4))

        def lrn(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # In float32 (bf16's 8-bit mantissa is too coarse for the power), as
            # torch.autocast runs pow in float32.
            xf = x.astype(jnp.float32)
            sums = lax.reduce_window(xf * xf, 0.0, lax.add, window, (1, 1, 1, 1), pads)
            return (xf / (node.k + node.alpha / node.size * sums) ** node.beta).astype(x.dtype)
        return lrn

    def batch_norm(self, node: ir.BatchNorm) -> Apply:
        gamma, beta = self._param(f"{node.name}.gamma"), self._param(f"{node.name}.beta")
        mean_name = self._param(f"{node.name}.running_mean")
        var_name = self._param(f"{node.name}.running_var")

        def batch_norm(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # Flax's BatchNorm (_compute_stats, _normalize) operation for operation, so
            # XLA fuses the same graph: statistics in float32, the biased variance as
            # E[x^2] - E[x]^2 in one pass over x (use_fast_variance), lax.square rather
            # than x * x (one multiply in the derivative, not two).
            channel = self.num.channel_axis if x.ndim == 4 else 1
            axes = tuple(a for a in range(x.ndim) if a != channel)
            shape = tuple(-1 if a == channel else 1 for a in range(x.ndim))
            xf = x.astype(jnp.float32)
            if ctx.train:
                # Batch statistics. The running statistics are not updated: they stay
                # canonical (an unused update would be dropped by XLA anyway).
                squares = lax.square(xf)
                mean, mean_of_squares = jnp.mean(xf, axes), jnp.mean(squares, axes)
                var = jnp.maximum(0.0, mean_of_squares - lax.square(mean))
            else:
                mean, var = params[mean_name], params[var_name]
            y = xf - jnp.expand_dims(mean, axes)
            scale = lax.rsqrt(jnp.expand_dims(var, axes) + node.eps) * params[gamma].reshape(shape)
            y = y * scale + params[beta].reshape(shape)
            return y.astype(x.dtype)
        return batch_norm

    def layer_norm(self, node: ir.LayerNorm) -> Apply:
        gamma, beta = self._param(f"{node.name}.gamma"), self._param(f"{node.name}.beta")

        def layer_norm(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # Flax's LayerNorm (_compute_stats, _normalize): statistics in float32 over
            # the last axis, the biased variance as E[x^2] - E[x]^2 clamped at 0, then
            # lax.rsqrt, in training and inference alike.
            xf = x.astype(jnp.float32)
            mean = jnp.mean(xf, -1, keepdims=True)
            var = jnp.maximum(0.0, jnp.mean(lax.square(xf), -1, keepdims=True) - lax.square(mean))
            y = (xf - mean) * (lax.rsqrt(var + node.eps) * params[gamma]) + params[beta]
            return y.astype(x.dtype)
        return layer_norm

    def dense(self, node: ir.Dense) -> Apply:
        weight = self._param(f"{node.name}.weight")
        bias = self._param(f"{node.name}.bias") if node.bias else None

        def dense(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # jnp.dot contracts x's last axis: a vector (N, in) or a sequence (N, T, in).
            y = jnp.dot(x, self._cast(params, weight), precision=self.num.precision)
            return y if bias is None else y + self._cast(params, bias)
        return dense

    def tied_dense(self, node: ir.TiedDense) -> Apply:
        # The encoder's (in, out) weight or the Embedding's (vocab, dim) table, read
        # transposed: the same array in the params dict, so its gradient sums the
        # encoder's and the decoder's contributions.
        weight = tied_weight_name(node)
        bias = self._param(f"{node.name}.bias") if node.bias else None

        def tied(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # x's last axis against the stored array's axis 1: x @ weight.T, for a vector
            # (N, in) or a sequence (N, T, in).
            y = lax.dot_general(x, self._cast(params, weight), (((x.ndim - 1,), (1,)), ((), ())),
                                precision=self.num.precision)
            return y if bias is None else y + self._cast(params, bias)
        return tied

    def dropout(self, node: ir.Dropout) -> Apply:
        return lambda params, x, ctx: x

    def flatten(self, node: ir.Flatten) -> Apply:
        def flatten(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            if x.ndim == 4 and self.num.layout == "NHWC":
                x = jnp.transpose(x, (0, 3, 1, 2))  # the IR flattens in C, H, W order
            return x.reshape(x.shape[0], -1)
        return flatten

    def residual(self, node: ir.Residual) -> Apply:
        body = self.sequence(node.body)
        shortcut = self.sequence(node.shortcut) if node.shortcut else None

        def residual(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            return body(params, x, ctx) + (x if shortcut is None else shortcut(params, x, ctx))
        return residual

    def concat(self, node: ir.Concat) -> Apply:
        branches = [self.sequence(branch) for branch in node.branches]
        axis = self.num.channel_axis

        def concat(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            outputs = [branch(params, x, ctx) for branch in branches]
            # Only the concatenation is the concat layer: the branches keep their own scopes.
            with layer_context("concat", x):
                return jnp.concatenate(outputs, axis=axis)
        return concat

    def embedding(self, node: ir.Embedding) -> Apply:
        table = self._param(f"{node.name}.table")
        return lambda params, x, ctx: jnp.take(params[table], x, axis=0).astype(self.num.dtype)

    def position_embedding(self, node: ir.PositionEmbedding) -> Apply:
        table = self._param(f"{node.name}.table")
        segments = self._param(f"{node.name}.segments") if node.segments else None

        def position_embedding(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            # The first T rows, broadcast over the batch, as the ViT reference's
            # AddPositionEmbs adds them (google-research/vision_transformer); BERT's
            # token-type row 0, every token being in the first segment.
            if ctx.decode is None:
                rows = params[table][:x.shape[1]]
            else:   # the new steps' rows
                rows = lax.dynamic_slice_in_dim(params[table], ctx.decode.start, x.shape[1])
            if segments is not None:
                rows = rows + params[segments][0]
            return x + rows.astype(x.dtype)
        return position_embedding

    def patch_embedding(self, node: ir.PatchEmbedding) -> Apply:
        # A convolution of kernel and stride p, as the ViT reference implementation's
        # nn.Conv (google-research/vision_transformer, models_vit.py) computes it.
        nhwc = self.num.layout == "NHWC"
        weight = self._param(f"{node.name}.weight", (2, 3, 1, 0) if nhwc else None)
        bias = self._param(f"{node.name}.bias")
        token = self._param(f"{node.name}.class_token") if node.class_token else None
        numbers = ("NHWC", "HWIO", "NHWC") if nhwc else ("NCHW", "OIHW", "NCHW")
        p = node.patch

        def patch_embedding(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            y = lax.conv_general_dilated(x, self._cast(params, weight), (p, p), "VALID",
                                         dimension_numbers=numbers,
                                         precision=self.num.precision)
            n = y.shape[0]
            if not nhwc:
                y = jnp.transpose(y, (0, 2, 3, 1))
            # (N, H/p, W/p, dim) -> (N, patches, dim), the patches in row-major order.
            y = y.reshape(n, -1, node.dim) + self._cast(params, bias)
            if token is None:
                return y
            first = jnp.broadcast_to(self._cast(params, token), (n, 1, node.dim))
            return jnp.concatenate([first, y], axis=1)
        return patch_embedding

    def self_attention(self, node: ir.SelfAttention) -> Apply:
        qkv_w, qkv_b = self._param(f"{node.name}.qkv.weight"), self._param(f"{node.name}.qkv.bias")
        out_w, out_b = self._param(f"{node.name}.out.weight"), self._param(f"{node.name}.out.bias")
        heads, size = node.heads, node.dim // node.heads

        def self_attention(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            n, steps, _ = x.shape
            qkv = jnp.dot(x, self._cast(params, qkv_w), precision=self.num.precision)
            qkv = qkv + self._cast(params, qkv_b)
            # Columns q | k | v, the heads contiguous inside each: (N, T, heads, d) each,
            # the (B, T, N, H) layout jax.nn.dot_product_attention takes.
            q, k, v = (part.reshape(n, steps, heads, size) for part in jnp.split(qkv, 3, -1))
            padding: dict[str, Any] = {}
            causal = node.causal
            if ctx.decode is not None:
                # The new steps' keys and values written into the layer's preallocated
                # cache at their positions (lax.dynamic_update_slice), then every query
                # attends to the cache's positions up to its own; the rest of the fixed
                # capacity is masked out: (1, 1, T, capacity), True = attend.
                start = ctx.decode.start
                cached_k, cached_v = ctx.decode.caches[node.name]
                k = lax.dynamic_update_slice(cached_k, k.astype(cached_k.dtype), (0, start, 0, 0))
                v = lax.dynamic_update_slice(cached_v, v.astype(cached_v.dtype), (0, start, 0, 0))
                ctx.decode.written[node.name] = (k, v)
                positions = start + jnp.arange(steps)
                padding = {"mask": (jnp.arange(k.shape[1])[None, :] <= positions[:, None])[None, None]}
                causal = False
            elif self.num.attention == "cudnn":
                o = cudnn_attention(q.astype(k.dtype), k, v, causal,
                                    ctx.lengths.count if node.padding else None)
                o = o.reshape(n, steps, node.dim)
                y = jnp.dot(o, self._cast(params, out_w), precision=self.num.precision)
                return y + self._cast(params, out_b)
            elif node.padding:
                # Keys past each sequence's length are masked, for every query row
                # (padded rows attend to the valid keys): (N, 1, 1, T), True = attend.
                padding = {"mask": (ctx.lengths.mask > 0)[:, None, None, :]}
            # JAX's attention, implementation self.num.attention (ATTENTION above: None is
            # the XLA implementation, also on a GPU); its scale is 1/sqrt(d) and its matrix
            # products take the process's jax_default_matmul_precision, which the adapter
            # sets with the precision (jax.nn.dot_product_attention API doc).
            o = jax.nn.dot_product_attention(q.astype(k.dtype), k, v, is_causal=causal,
                                             implementation=self.num.attention, **padding)
            o = o.reshape(n, steps, node.dim)
            y = jnp.dot(o, self._cast(params, out_w), precision=self.num.precision)
            return y + self._cast(params, out_b)
        return self_attention

    def first_token(self, node: ir.FirstToken) -> Apply:
        return lambda params, x, ctx: x[:, 0]

    def lstm(self, node: ir.LSTM) -> Apply:
        w_ih = self._param(f"{node.name}.w_ih")
        w_hh = self._param(f"{node.name}.w_hh")
        bias = self._param(f"{node.name}.bias")
        precision, dtype = self.num.precision, self.num.dtype

        # One step function for every call: lax.scan caches the loop body it traces by
        # the function, so a closure made per call would have the eager variant trace and
        # compile the loop again at every step. The recurrent weights therefore travel in
        # the carry (unchanged): XLA's while loop carries a closed-over constant anyway, and
        # the jitted program's optimised HLO is the same as with a closure.
        def step(carry, inputs):
            h, c, recurrent = carry
            gates_x, live = inputs
            gates = gates_x + jnp.dot(h, recurrent, precision=precision)
            i, f, g, o = jnp.split(gates, 4, axis=-1)  # gate order (i, f, g, o)
            c_next = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h_next = jax.nn.sigmoid(o) * jnp.tanh(c_next)
            # Past its length a sequence holds its state (the masked LISA Lab LSTM).
            live = live[:, None]
            h, c = jnp.where(live, h_next, h), jnp.where(live, c_next, c)
            return (h, c, recurrent), h

        def lstm(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            n = x.shape[0]
            # The input projection of every step at once, time-major for the scan.
            projected = jnp.dot(x, self._cast(params, w_ih), precision=precision)
            projected = jnp.swapaxes(projected + self._cast(params, bias), 0, 1)
            zeros = jnp.zeros((n, node.hidden_size), dtype)
            _, outputs = lax.scan(step, (zeros, zeros, self._cast(params, w_hh)),
                                  (projected, ctx.lengths.live))
            return jnp.swapaxes(outputs, 0, 1)
        return lstm

    def mean_over_time(self, node: ir.MeanOverTime) -> Apply:
        def mean(params: Params, x: jax.Array, ctx: Context) -> jax.Array:
            lengths = ctx.lengths
            total = jnp.sum(x.astype(jnp.float32) * lengths.mask[:, :, None], axis=1)
            return (total / lengths.count[:, None]).astype(x.dtype)
        return mean


# Every op's method, checked when this module is imported (models.ops.builder_table).
_TABLE = builder_table(Builder)


def build(model: ir.Model, weights: Weights, numerics: Numerics,
          trainable_names: set[str]) -> Network:
    """The frozen prefix and body as functions, with their parameters split into the
    body's trainable ones (``analyse(model).trainable_names``) and everything else."""
    builder = Builder(weights, numerics)
    frozen = builder.sequence(model.frozen)
    body = builder.sequence(model.body)
    trainable = {n: a for n, a in builder.arrays.items() if n in trainable_names}
    fixed = {n: a for n, a in builder.arrays.items() if n not in trainable_names}
    return Network(frozen, body, trainable, fixed, builder.permutations)


def loss_value(kind: str, out: jax.Array, features: jax.Array,
               labels: jax.Array | None) -> jax.Array:
    """The IR's losses, always in float32 (``models.ir.Loss``)."""
    out = out.astype(jnp.float32)
    if kind == "softmax_xent":
        log_probs = jax.nn.log_softmax(out)
        return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))
    if kind == "mse_reconstruction":
        return jnp.mean((out - features.astype(jnp.float32)) ** 2)
    if kind == "token_xent":
        # Per-step cross-entropy over (N, T, classes), summed over the steps labelled
        # >= 0 and divided by their count in the batch (-1: not counted; the input
        # generator labels at least one step).
        counted = labels >= 0
        log_probs = jax.nn.log_softmax(out)
        picked = jnp.take_along_axis(log_probs, jnp.where(counted, labels, 0)[..., None],
                                     axis=-1)[..., 0]
        return -jnp.sum(jnp.where(counted, picked, 0.0)) / jnp.sum(counted)
    return jnp.sum(out)
