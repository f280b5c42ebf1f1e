"""The IR realised with TensorFlow's core ops over ``tf.Variable``s holding the canonical
weights, in the activation layout the adapter picks per device (``Layout``).

Every IR node becomes the op a hand-written TensorFlow model runs (tf.nn.conv2d,
tf.nn.max_pool2d, fused batch norm, tf.nn.local_response_normalization, keras.layers.LSTM
...), the same kernels Keras's layers call. Activations are NHWC on the CPU, where
TensorFlow's convolutions and pooling only implement NHWC (oneDNN and Eigen); on a GPU
either layout runs (cuDNN), and the network can be built NCHW, cuDNN's native fp32 layout.
Canonical NCHW inputs and OIHW weights are converted once, when the network is built; the
filter is HWIO in both layouts (tf.nn.conv2d takes no other).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from models import ir
from models.analysis import analyse
from models.inputs import StepMask
from models.ops import builder_table
from models.weights import Weights

# What SelfAttention (below) runs, recorded in each row of a model with attention.
ATTENTION = "tf.einsum Q·Kᵀ, tf.where mask, tf.nn.softmax (fp32), tf.einsum P·V"


class Lengths(NamedTuple):
    """Sequence lengths in the forms the LSTM and the masked mean need, made once. A
    named tuple, so that tf.function takes it as an argument made of three tensors (a
    nest structure) rather than as a Python object keyed by identity."""

    mask: tf.Tensor     # bool (N, T): the Keras LSTM's mask, True where a step is valid
    weight: tf.Tensor   # float (N, T, 1): the same mask as numbers, for the masked mean
    count: tf.Tensor    # float (N, 1)

    @staticmethod
    def of(lengths: np.ndarray, steps: int) -> Lengths:
        mask = StepMask.of(lengths, steps)   # computed once in numpy (models.inputs)
        return Lengths(tf.constant(mask.valid), tf.constant(mask.weight[:, :, None]),
                       tf.constant(mask.count[:, None]))


@dataclass(frozen=True)
class Layout:
    """Where a 4-D activation keeps its channels: "NHWC" (channels last, Keras's default)
    or "NCHW" (channels first). Every layout-dependent argument comes from here."""

    name: str

    def __post_init__(self):
        if self.name not in ("NHWC", "NCHW"):
            raise ValueError(f"no activation layout {self.name!r} (NHWC or NCHW)")

    @property
    def channels_last(self) -> bool:
        return self.name == "NHWC"

    @property
    def channel_axis(self) -> int:
        return -1 if self.channels_last else 1

    @property
    def spatial_axes(self) -> list[int]:
        return [1, 2] if self.channels_last else [2, 3]

    def window(self, pair: ir.Pair) -> list[int]:
        """A (height, width) pair as the 4-element ksize/strides list of this layout."""
        return [1, *pair, 1] if self.channels_last else [1, 1, *pair]

    def paddings(self, height: list[int], width: list[int]) -> list[list[int]]:
        """tf.pad's paddings for (before, after) pairs along height and width."""
        spatial = [list(height), list(width)]
        return [[0, 0], *spatial, [0, 0]] if self.channels_last else [[0, 0], [0, 0], *spatial]

    def from_nchw(self, array: np.ndarray) -> np.ndarray:
        """A canonical NCHW array (a batch, per-pixel constants) in this layout."""
        return np.ascontiguousarray(array.transpose(0, 2, 3, 1)) if self.channels_last \
            else array

    def to_nchw(self, array: np.ndarray) -> np.ndarray:
        return array.transpose(0, 3, 1, 2) if self.channels_last else array


NHWC, NCHW = Layout("NHWC"), Layout("NCHW")


@dataclass(frozen=True)
class ParamLayout:
    """How a canonical parameter lies in its tf.Variable, both ways (the same maps serve
    its gradient): a convolution's OIHW weight as HWIO, tf.nn.conv2d's only filter
    layout; the rows of a dense weight after an NHWC flatten in (H, W, C) order instead
    of the canonical (C, H, W); everything else as the IR has it (Keras's LSTM layouts
    (in, 4H), (H, 4H), (4H,) with gates i, f, c, o are the canonical ones)."""

    conv: bool = False
    flattened: tuple[int, int, int] | None = None   # (C, H, W) of the flattened activation

    def to_variable(self, array: np.ndarray) -> np.ndarray:
        if self.conv:
            array = array.transpose(2, 3, 1, 0)   # OIHW -> HWIO
        if self.flattened is not None:
            c, h, w = self.flattened
            array = array.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)
        return np.ascontiguousarray(array, np.float32)

    def to_canonical(self, array: np.ndarray) -> np.ndarray:
        if self.conv:
            array = array.transpose(3, 2, 0, 1)   # HWIO -> OIHW
        if self.flattened is not None:
            c, h, w = self.flattened
            array = array.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
        return np.ascontiguousarray(array)


AS_IS = ParamLayout()


@dataclass(frozen=True)
class Decode:
    """A cached pass over new steps of one sequence (greedy generation): ``start``, the
    first new step's position (an int32 scalar tensor, so one traced function serves
    every position); ``caches``, per attention layer its keys and values as fixed-shape
    variables, (capacity, heads, d) each (batch 1), which the pass writes the new steps
    into (``scatter_nd_update``, in place)."""

    start: tf.Tensor
    caches: dict[str, tuple[tf.Variable, tf.Variable]]


@dataclass(frozen=True)
class Context:
    """How one pass runs: training-mode batch norm or not, and the compute dtype
    (bfloat16 under mixed precision; variables stay float32). ``decode``: a cached pass
    (``Decode``), None for a whole sequence."""

    training: bool
    dtype: tf.DType
    lengths: Lengths | None = None
    decode: Decode | None = None


def _cast(value, ctx: Context):
    # tf.cast returns its input unchanged when the dtype already matches (fp32 runs).
    return tf.cast(value, ctx.dtype)


def _spatial_padding(size: int, out: int, kernel: int, stride: int, pad: int
                     ) -> tuple[int, int]:
    """(before, after) padding that makes a VALID window op over the padded input give
    ``out`` windows starting at ``-pad``, as PyTorch and Caffe place them. ``after``
    differs from ``pad`` where the last windows leave padding unused or, in ceil mode,
    run past it."""
    return pad, max(0, (out - 1) * stride + kernel - size - pad)


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """What TensorFlow's "SAME" pads (tf.nn.convolution docs: output ceil(size/stride),
    the extra pixel on the bottom/right)."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + kernel - size)
    return total // 2, total - total // 2


def window_padding(in_hw: tuple[int, int], out_hw: tuple[int, int], kernel: ir.Pair,
                   stride: ir.Pair, pad: ir.Pair) -> tuple[str, list[list[int]] | None]:
    """TensorFlow's padding mode for a window op, plus explicit (before, after) paddings
    of height and width (``Layout.paddings`` places them) to apply first with tf.pad when
    neither "VALID" nor "SAME" places the windows right. An
    explicit padding list in tf.nn.conv2d would do too, but its filter gradient on CPU
    is several times slower than pad + VALID (measured here with TF 2.21 on the ResNet
    stem), which is also what Keras models do (ZeroPadding2D, keras.applications)."""
    pads = [_spatial_padding(in_hw[i], out_hw[i], kernel[i], stride[i], pad[i])
            for i in range(2)]
    if all(p == (0, 0) for p in pads):
        return "VALID", None
    same = [_same_padding(in_hw[i], kernel[i], stride[i]) for i in range(2)]
    if pads == same and all(-(-in_hw[i] // stride[i]) == out_hw[i] for i in range(2)):
        return "SAME", None
    return "VALID", [list(pads[0]), list(pads[1])]


class Sequence:
    """Runs layers in order; every layer is called as ``layer(x, ctx)``."""

    def __init__(self, layers: list):
        self.layers = layers

    def __call__(self, x: tf.Tensor, ctx: Context) -> tf.Tensor:
        for layer in self.layers:
            x = layer(x, ctx)
        return x


class Residual:
    def __init__(self, body: Sequence, shortcut: Sequence | None):
        self.body = body
        self.shortcut = shortcut

    def __call__(self, x, ctx):
        return self.body(x, ctx) + (x if self.shortcut is None else self.shortcut(x, ctx))


class Concat:
    """Inception: every branch on the same input, concatenated along channels."""

    def __init__(self, branches: list[Sequence], layout: Layout):
        self.branches = branches
        self.axis = layout.channel_axis

    def __call__(self, x, ctx):
        return tf.concat([branch(x, ctx) for branch in self.branches], axis=self.axis)


class Conv2d:
    """tf.nn.conv2d with an HWIO filter in the network's layout. Grouped convolution is
    the same op: a filter whose input depth is the input's depth / groups (tf.nn.conv2d
    docs), which oneDNN and cuDNN run as one grouped kernel. TensorFlow's own (Eigen) CPU
    kernels have no groups for the fused Conv2D + BiasAdd + Relu that Grappler makes, nor
    for Conv2DBackpropInput; where ``grouped_conv_runs`` finds them missing,
    ``split_groups`` computes the same function as one convolution per group over its
    slice of the input and of the filter's output channels, concatenated, with the bias
    added after the concatenation (so nothing fuses into the grouped op). The weight
    stays one variable."""

    def __init__(self, weight: tf.Variable, bias: tf.Variable | None, stride: ir.Pair,
                 padding: str, explicit: list[list[int]] | None, layout: Layout = NHWC,
                 groups: int = 1, split_groups: bool = False):
        self.weight = weight
        self.bias = bias
        self.layout = layout
        self.strides = layout.window(stride)
        self.padding = padding
        self.explicit = explicit   # (before, after) of height and width, or None
        self.groups = groups if split_groups else 1

    def pad(self, x):
        return x if self.explicit is None else tf.pad(x, self.layout.paddings(*self.explicit))

    def crop(self, dx):
        """The gradient of ``pad``: the padded input's gradient cut back to the input."""
        if self.explicit is None:
            return dx
        (top, bottom), (left, right) = self.explicit
        h, w = self.layout.spatial_axes
        index = [slice(None)] * 4
        index[h] = slice(top, dx.shape[h] - bottom)
        index[w] = slice(left, dx.shape[w] - right)
        return dx[tuple(index)]

    def __call__(self, x, ctx):
        weight = _cast(self.weight, ctx)
        if self.groups == 1:
            y = tf.nn.conv2d(self.pad(x), weight, self.strides, self.padding,
                             data_format=self.layout.name)
        else:
            axis = self.layout.channel_axis
            slices = zip(tf.split(self.pad(x), self.groups, axis=axis),
                         tf.split(weight, self.groups, axis=-1), strict=True)
            y = tf.concat([tf.nn.conv2d(xs, ws, self.strides, self.padding,
                                        data_format=self.layout.name)
                           for xs, ws in slices], axis=axis)
        # BiasAdd (not +) so Grappler fuses Conv2D + BiasAdd + Relu, as for Keras's Conv2D.
        return y if self.bias is None else tf.nn.bias_add(y, _cast(self.bias, ctx),
                                                          data_format=self.layout.name)


_GROUPED_CONV_RUNS: dict[str, bool] = {}


def grouped_conv_runs(device: str) -> bool:
    """Whether this process's TensorFlow runs a grouped convolution as one op on
    ``device``: forward and gradient of conv + bias + ReLU, in graph mode (where Grappler
    fuses them) and eagerly. oneDNN builds and cuDNN do; TensorFlow's Eigen CPU kernels
    (``TF_ENABLE_ONEDNN_OPTS=0``, or a CPU TensorFlow does not enable oneDNN on) do not.
    Probed once per device on a tiny input."""
    if device not in _GROUPED_CONV_RUNS:
        with tf.device(device):
            x = tf.ones([1, 4, 4, 4])
            w = tf.Variable(tf.ones([3, 3, 2, 4]))
            b = tf.Variable(tf.zeros([4]))

            def step(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
                    loss = tf.reduce_sum(y)
                return y, tape.gradient(loss, [x, w, b])

            try:
                step(x)
                tf.function(step)(x)
                _GROUPED_CONV_RUNS[device] = True
            except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError):
                _GROUPED_CONV_RUNS[device] = False
    return _GROUPED_CONV_RUNS[device]


class Pool2d:
    """Max or average pooling. TensorFlow has only VALID and SAME, so PyTorch/Caffe
    placement and ceil mode come from explicit padding: -inf for max pooling (padding
    never wins); zeros for average pooling, which then divides by the number of valid
    elements in each window, as Caffe and PyTorch do in ceil mode."""

    def __init__(self, node: ir.Pool2d, in_hw: tuple[int, int], out_hw: tuple[int, int],
                 layout: Layout = NHWC):
        self.max = node.kind == "max"
        self.layout = layout
        self.ksize = layout.window(node.kernel)
        self.strides = layout.window(node.stride)
        self.padding, explicit = window_padding(in_hw, out_hw, node.kernel, node.stride,
                                                node.padding)
        self.explicit = None if explicit is None else layout.paddings(*explicit)
        self.scale = None
        if not self.max and explicit is not None:
            valid = np.pad(np.ones(in_hw, np.float32), explicit)
            counts = np.lib.stride_tricks.sliding_window_view(valid, node.kernel)
            counts = counts[::node.stride[0], ::node.stride[1]][:out_hw[0], :out_hw[1]]
            counts = counts.sum(axis=(2, 3))
            scale = (np.prod(node.kernel) / counts)[None, None, :, :].astype(np.float32)
            self.scale = tf.constant(layout.from_nchw(scale))

    def __call__(self, x, ctx):
        window = dict(data_format=self.layout.name)
        if self.max:
            if self.explicit is not None:
                x = tf.pad(x, self.explicit, constant_values=-np.inf)
            return tf.nn.max_pool2d(x, self.ksize, self.strides, self.padding, **window)
        if self.explicit is None:
            return tf.nn.avg_pool2d(x, self.ksize, self.strides, self.padding, **window)
        y = tf.nn.avg_pool2d(tf.pad(x, self.explicit), self.ksize, self.strides, "VALID",
                             **window)
        return y * _cast(self.scale, ctx)


class GlobalAvgPool:
    def __init__(self, layout: Layout = NHWC):
        self.axes = layout.spatial_axes

    def __call__(self, x, ctx):
        return tf.reduce_mean(x, axis=self.axes)


class Activation:
    # GELU (Hendrycks & Gimpel 2016): tf.nn.gelu's tanh approximation (approximate=True,
    # GPT-2's "gelu_new") and exact erf form (approximate=False, BERT's and ViT's).
    OPS = {"relu": tf.nn.relu, "tanh": tf.math.tanh, "sigmoid": tf.math.sigmoid,
           "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
           "gelu_erf": lambda x: tf.nn.gelu(x, approximate=False)}

    def __init__(self, kind: str):
        self.op = self.OPS[kind]

    def __call__(self, x, ctx):
        return self.op(x)


class LRN:
    """Caffe's LRN divides alpha by the window size and counts ``size`` channels;
    tf.nn.local_response_normalization sums 2 * depth_radius + 1 channels and does not
    divide: depth_radius = (size - 1) / 2, alpha = alpha / size, bias = k. The op
    normalises over the last axis only, so an NCHW network transposes around it (as an
    NCHW TensorFlow AlexNet must)."""

    def __init__(self, node: ir.LRN, layout: Layout = NHWC):
        self.args = dict(depth_radius=(node.size - 1) // 2, bias=node.k,
                         alpha=node.alpha / node.size, beta=node.beta)
        self.channels_last = layout.channels_last

    def __call__(self, x, ctx):
        # TensorFlow's LRN has float32 and float16 kernels only (CPU and cuDNN), so under
        # bfloat16 mixed precision it runs in float32, as Keras keeps such ops in float32.
        y = tf.cast(x, tf.float32)
        if not self.channels_last:
            y = tf.transpose(y, [0, 2, 3, 1])
        y = tf.nn.local_response_normalization(y, **self.args)
        if not self.channels_last:
            y = tf.transpose(y, [0, 3, 1, 2])
        return tf.cast(y, x.dtype)


class BatchNorm:
    """Fused batch norm (one kernel forward, one backward: oneDNN and cuDNN): batch
    statistics in training mode, the canonical running statistics in inference. The
    op is functional, so gradient passes never move the running statistics."""

    def __init__(self, gamma, beta, mean, var, eps: float, layout: Layout = NHWC):
        self.gamma, self.beta, self.mean, self.var, self.eps = gamma, beta, mean, var, eps
        self.layout = layout

    def __call__(self, x, ctx):
        if x.shape.rank == 4:
            # Scale, offset and statistics stay float32 under mixed precision (FusedBatchNormV3).
            args = dict(epsilon=self.eps, data_format=self.layout.name,
                        is_training=ctx.training)
            if not ctx.training:
                args.update(mean=self.mean, variance=self.var)
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, self.gamma, self.beta, **args)
            return y
        if ctx.training:
            mean, var = tf.nn.moments(x, axes=list(range(x.shape.rank - 1)))
        else:
            mean, var = _cast(self.mean, ctx), _cast(self.var, ctx)
        return tf.nn.batch_normalization(x, mean, var, _cast(self.beta, ctx),
                                         _cast(self.gamma, ctx), self.eps)


class LayerNorm:
    """The last axis's mean and biased variance (tf.nn.moments), then
    tf.nn.batch_normalization's ``(x - mean) * rsqrt(var + eps) * gamma + beta``: Keras's
    LayerNormalization does the same, in float32 under mixed precision, as here."""

    def __init__(self, gamma, beta, eps: float):
        self.gamma, self.beta, self.eps = gamma, beta, eps

    def __call__(self, x, ctx):
        xf = tf.cast(x, tf.float32)
        mean, var = tf.nn.moments(xf, axes=[-1], keepdims=True)
        y = tf.nn.batch_normalization(xf, mean, var, self.beta, self.gamma, self.eps)
        return tf.cast(y, x.dtype)


def _affine(x, weight, bias, transpose_b: bool = False):
    """``x @ weight (+ bias)`` over the last axis of a vector batch (N, in) or a sequence
    batch (N, T, in). A sequence is folded to (N·T, in) for one MatMul, so that Grappler
    still fuses MatMul + BiasAdd as for Keras's Dense, then unfolded."""
    if x.shape.rank == 2:
        y = tf.matmul(x, weight, transpose_b=transpose_b)
        # BiasAdd lets Grappler fuse MatMul + BiasAdd (+ Relu), as for Keras's Dense.
        return y if bias is None else tf.nn.bias_add(y, bias)
    lead = tf.shape(x)[:-1]
    y = _affine(tf.reshape(x, [-1, x.shape[-1]]), weight, bias, transpose_b)
    return tf.reshape(y, tf.concat([lead, tf.shape(y)[-1:]], axis=0))


class Dense:
    def __init__(self, weight: tf.Variable, bias: tf.Variable | None):
        self.weight = weight
        self.bias = bias

    def __call__(self, x, ctx):
        return _affine(x, _cast(self.weight, ctx),
                       None if self.bias is None else _cast(self.bias, ctx))


class TiedDense:
    """Decoder using the transpose of an encoder's weight (Bahrampour et al. 2016, 4.3)
    or of an embedding's (vocab, dim) table (a language model's tied head, Press & Wolf
    2017): a transposed matmul on the encoder's own variable, so both uses add to its
    gradient."""

    def __init__(self, weight: tf.Variable, bias: tf.Variable | None):
        self.weight = weight
        self.bias = bias

    def __call__(self, x, ctx):
        return _affine(x, _cast(self.weight, ctx),
                       None if self.bias is None else _cast(self.bias, ctx), transpose_b=True)


class Identity:
    def __call__(self, x, ctx):
        return x


class Flatten:
    """NHWC flattens in (H, W, C) order, the canonical order is (C, H, W). Where a Dense
    follows, the builder permutes that Dense's weight rows once instead
    (``nchw=False``); otherwise the activation is transposed back to NCHW first. An NCHW
    network flattens in the canonical order already (``nchw=False``)."""

    def __init__(self, nchw: bool):
        self.nchw = nchw

    def __call__(self, x, ctx):
        if self.nchw and x.shape.rank == 4:
            x = tf.transpose(x, [0, 3, 1, 2])
        return tf.reshape(x, [tf.shape(x)[0], -1])


class Embedding:
    def __init__(self, table: tf.Variable):
        self.table = table

    def __call__(self, x, ctx):
        # Gather in float32 and cast the rows, as Keras's Embedding does under mixed
        # precision (casting the whole table every step would cost more than the lookup).
        return _cast(tf.gather(self.table, x), ctx)


class PositionEmbedding:
    """Adds rows 0..T-1 of the position table (and row 0 of the token-type table, when
    there is one) to every example: a slice and a broadcast add, as Hugging Face's
    TFGPT2 and TFBert models do with their position ids 0..T-1."""

    def __init__(self, table: tf.Variable, segments: tf.Variable | None):
        self.table = table
        self.segments = segments

    def __call__(self, x, ctx):
        steps = tf.shape(x)[1]
        if ctx.decode is None:
            rows = self.table[:steps]
        else:
            # A cached pass's new steps: their rows gathered, a static shape whatever the
            # position. A slice from the position (table[start:start + steps]) has bounds
            # XLA must know when it compiles, so jit_compile made one program per position
            # (GPT-2 tiny on 2 CPU cores: 300 ms at each new position, then 0.3 ms).
            rows = tf.gather(self.table, ctx.decode.start + tf.range(steps))
        if self.segments is not None:
            rows = rows + self.segments[0]
        return x + _cast(rows, ctx)


class PatchEmbedding:
    """ViT's patch projection as what it is, a convolution of kernel and stride p
    (tf.nn.conv2d, VALID, HWIO filter) in the network's image layout, then the grid
    (H/p, W/p) read row-major into a sequence (an NCHW output is made channels-last first)
    and the class token put before it (Dosovitskiy et al. 2021, eq. 1)."""

    def __init__(self, weight: tf.Variable, bias: tf.Variable, token: tf.Variable | None,
                 patch: int, layout: Layout = NHWC):
        self.weight, self.bias, self.token = weight, bias, token
        self.layout = layout
        self.strides = layout.window((patch, patch))

    def __call__(self, x, ctx):
        y = tf.nn.conv2d(x, _cast(self.weight, ctx), self.strides, "VALID",
                         data_format=self.layout.name)
        y = tf.nn.bias_add(y, _cast(self.bias, ctx), data_format=self.layout.name)
        if not self.layout.channels_last:
            y = tf.transpose(y, [0, 2, 3, 1])
        dim = y.shape[-1]
        y = tf.reshape(y, [tf.shape(y)[0], -1, dim])
        if self.token is None:
            return y
        token = tf.broadcast_to(_cast(self.token, ctx), [tf.shape(y)[0], 1, dim])
        return tf.concat([token, y], axis=1)


class SelfAttention:
    """Multi-head scaled dot-product attention in TensorFlow's own ops: the fused q|k|v
    projection, the scores by tf.einsum, the mask applied with tf.where (-inf where a key
    is masked, so its weight is exactly 0), tf.nn.softmax over the keys, the weighted sum
    by tf.einsum and the output projection. Every op has a graph-mode kernel and an XLA
    lowering, so the layer runs in all three variants (eager, tf.function, jit_compile);
    Keras's MultiHeadAttention computes the same with per-head (dim, heads, d) kernels,
    which the fused canonical weight would have to be split into. The softmax runs in
    float32, also under mixed precision, as LayerNorm does here."""

    def __init__(self, node: ir.SelfAttention, qkv_weight, qkv_bias, out_weight, out_bias):
        self.node = node
        self.qkv_weight, self.qkv_bias = qkv_weight, qkv_bias
        self.out_weight, self.out_bias = out_weight, out_bias
        self.scale = 1.0 / float(np.sqrt(node.dim // node.heads))

    def allowed(self, steps, ctx):
        """Broadcastable to (N, heads, T queries, T keys): True where a query may attend
        to a key (models/ops/transformer/attention.py ``mask``), or None."""
        allowed = None
        if self.node.causal:
            # The lower triangle: query t sees keys s <= t.
            allowed = tf.cast(tf.linalg.band_part(tf.ones([steps, steps]), -1, 0), tf.bool)
        if self.node.padding:
            keys = ctx.lengths.mask[:, None, None, :]     # (N, 1, 1, T): key s < length
            allowed = keys if allowed is None else tf.logical_and(allowed, keys)
        return allowed

    def cached(self, k, v, steps, decode: Decode):
        """A cached pass: the new steps' keys and values written into the layer's cache
        variables at their positions, then the whole cache as the keys and values, with
        what each query may attend to: the positions up to its own, (T, capacity)."""
        cache_k, cache_v = decode.caches[self.node.name]
        positions = decode.start + tf.range(steps)
        at = positions[:, None]
        cache_k.scatter_nd_update(at, tf.cast(k[0], cache_k.dtype))
        cache_v.scatter_nd_update(at, tf.cast(v[0], cache_v.dtype))
        allowed = tf.range(cache_k.shape[0])[None, :] <= at
        return cache_k.read_value()[None], cache_v.read_value()[None], allowed

    def __call__(self, x, ctx):
        node = self.node
        steps = tf.shape(x)[1]
        qkv = _affine(x, _cast(self.qkv_weight, ctx), _cast(self.qkv_bias, ctx))
        # (N, T, 3·dim) -> three (N, T, heads, d): q | k | v, heads contiguous in each.
        q, k, v = (tf.reshape(part, [tf.shape(x)[0], steps, node.heads, node.dim // node.heads])
                   for part in tf.split(qkv, 3, axis=-1))
        if ctx.decode is None:
            allowed = self.allowed(steps, ctx)
        else:
            k, v, allowed = self.cached(k, v, steps, ctx.decode)
        scores = tf.cast(tf.einsum("nqhd,nkhd->nhqk", q, k), tf.float32) * self.scale
        if allowed is not None:
            allowed = tf.broadcast_to(allowed, tf.shape(scores))
            scores = tf.where(allowed, scores, tf.constant(-np.inf, tf.float32))
        weights = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
        o = tf.einsum("nhqk,nkhd->nqhd", weights, v)
        o = tf.reshape(o, [tf.shape(x)[0], steps, node.dim])
        return _affine(o, _cast(self.out_weight, ctx), _cast(self.out_bias, ctx))


class FirstToken:
    def __call__(self, x, ctx):
        return x[:, 0]


class LSTMLayer:
    """keras.layers.LSTM with the batch's mask; Keras's gate order (i, f, c, o) and
    weight layouts (in, 4H), (H, 4H) and its single bias (4H) are the canonical ones.

    Which kernel runs (keras/src/layers/rnn/lstm.py, backend/tensorflow/rnn.py): on a GPU,
    with the default tanh/sigmoid activations and a right-padded mask, as ours is, Keras
    calls cuDNN's fused LSTM (CudnnRNNV3 with per-sequence lengths, skipping padded
    steps). Elsewhere it runs its masked tf.while_loop, which holds the state past each
    length: always on the CPU; under XLA, which cannot compile the cuDNN op; and under
    bfloat16, whose cuDNN gradients are wrong (adapter.cudnn_lstm). Keras
    would fall back by itself only in eager mode; inside a tf.function a missing kernel
    fails at run time, hence the explicit choice.
    """

    def __init__(self, node: ir.LSTM, values: Mapping, cudnn: bool, policy: str):
        self.layer = keras.layers.LSTM(node.hidden_size, return_sequences=True,
                                       use_cudnn="auto" if cudnn else False, dtype=policy)
        self.layer.build((None, None, node.input_size))
        cell = self.layer.cell
        # ``values``: canonical arrays, or another LSTM's variables (the same layouts).
        cell.kernel.assign(values[f"{node.name}.w_ih"])
        cell.recurrent_kernel.assign(values[f"{node.name}.w_hh"])
        cell.bias.assign(values[f"{node.name}.bias"])
        # The tf.Variables behind Keras's variables, for GradientTape.
        self.variables = {"w_ih": cell.kernel.value, "w_hh": cell.recurrent_kernel.value,
                          "bias": cell.bias.value}

    def __call__(self, x, ctx):
        return self.layer(x, mask=ctx.lengths.mask, training=ctx.training)


class MaskedMean:
    def __call__(self, x, ctx):
        lengths = ctx.lengths
        return tf.reduce_sum(x * _cast(lengths.weight, ctx), axis=1) / _cast(lengths.count, ctx)


@dataclass(frozen=True)
class Near:
    """The nodes before and after the one being built, within its sequence."""

    previous: ir.Node | None
    following: ir.Node | None


class Builder:
    """Turns IR nodes into layers over tf.Variables and remembers which variable holds
    each canonical parameter (for gradients and fingerprints) and in which layout.
    ``source``, where given, holds another network's variables by canonical name: each
    new variable then starts as a device-side copy of its namesake (already in this
    layout) instead of from ``weights``."""

    def __init__(self, model: ir.Model, weights: Weights, cudnn_lstm: bool, policy: str,
                 layout: Layout = NHWC, source: Mapping[str, tf.Variable] | None = None):
        self.weights = weights
        self.source = source
        self.layout = layout
        self.cudnn_lstm = cudnn_lstm
        self.policy = policy
        self.split_groups = False
        # Per-example canonical (C, H, W) shapes around every node, from the IR analysis.
        self.shapes = {layer.name: (layer.in_shape, layer.out_shape)
                       for layer in analyse(model).layers}
        self.dense: dict[str, Dense] = {}
        self.embedding_tables: dict[str, tf.Variable] = {}   # for tied heads
        self.params: dict[str, tf.Variable] = {}
        self.variables: dict[str, tf.Variable] = {}   # every variable, running statistics too
        self.layouts: dict[str, ParamLayout] = {}
        self.trainable = True
        self.near = Near(None, None)   # the node being built's neighbours in its sequence

    def variable(self, name: str, layout: ParamLayout = AS_IS,
                 trainable: bool = True) -> tf.Variable:
        value = layout.to_variable(self.weights[name]) if self.source is None \
            else self.source[name]
        var = tf.Variable(value, name=name.replace(".", "/"),
                          trainable=trainable and self.trainable)
        self.variables[name] = var
        if trainable:
            self.params[name] = var
            self.layouts[name] = layout
        return var

    def sequence(self, nodes: tuple[ir.Node, ...]) -> Sequence:
        layers = []
        for index, node in enumerate(nodes):
            # Flatten and Dense read their neighbours (Flatten's docstring).
            self.near = Near(nodes[index - 1] if index else None,
                             nodes[index + 1] if index + 1 < len(nodes) else None)
            layers.append(self.node(node))
        return Sequence(layers)

    def node(self, node: ir.Node):
        method = _TABLE.get(type(node))
        if method is None:
            raise TypeError(f"no TensorFlow realisation for {type(node).__name__}")
        return method(self, node)

    # --- one method per op, in the order of models.ops.OPS --------------------------------
    def conv2d(self, node: ir.Conv2d) -> Conv2d:
        (_, *in_hw), (_, *out_hw) = self.shapes[node.name]
        padding, explicit = window_padding(tuple(in_hw), tuple(out_hw), node.kernel,
                                           node.stride, node.padding)
        # OIHW -> HWIO (TensorFlow's filter layout; I is the per-group input depth).
        return Conv2d(self.variable(f"{node.name}.weight", ParamLayout(conv=True)),
                      self.variable(f"{node.name}.bias") if node.bias else None,
                      node.stride, padding, explicit, self.layout, node.groups,
                      self.split_groups)

    def pool2d(self, node: ir.Pool2d) -> Pool2d:
        (_, *in_hw), (_, *out_hw) = self.shapes[node.name]
        return Pool2d(node, tuple(in_hw), tuple(out_hw), self.layout)

    def global_avg_pool(self, node: ir.GlobalAvgPool) -> GlobalAvgPool:
        return GlobalAvgPool(self.layout)

    def activation(self, node: ir.Activation) -> Activation:
        return Activation(node.kind)

    def lrn(self, node: ir.LRN) -> LRN:
        return LRN(node, self.layout)

    def batch_norm(self, node: ir.BatchNorm) -> BatchNorm:
        p = node.name
        return BatchNorm(self.variable(f"{p}.gamma"), self.variable(f"{p}.beta"),
                         self.variable(f"{p}.running_mean", trainable=False),
                         self.variable(f"{p}.running_var", trainable=False), node.eps,
                         self.layout)

    def layer_norm(self, node: ir.LayerNorm) -> LayerNorm:
        return LayerNorm(self.variable(f"{node.name}.gamma"), self.variable(f"{node.name}.beta"),
                         node.eps)

    def dense(self, node: ir.Dense) -> Dense:
        previous = self.near.previous
        flattened = self.shapes[previous.name][0] if isinstance(previous, ir.Flatten) else ()
        # Rows in canonical (C, H, W) order -> the (H, W, C) order of NHWC flattening.
        layout = ParamLayout(flattened=tuple(flattened)) \
            if len(flattened) == 3 and self.layout.channels_last else AS_IS
        bias = self.variable(f"{node.name}.bias") if node.bias else None
        dense = Dense(self.variable(f"{node.name}.weight", layout), bias)
        self.dense[node.name] = dense
        return dense

    def tied_dense(self, node: ir.TiedDense) -> TiedDense:
        bias = self.variable(f"{node.name}.bias") if node.bias else None
        # The encoder's own variable: a Dense's (in, out) weight or an Embedding's
        # (vocab, dim) table, both used transposed.
        weight = self.embedding_tables[node.tied_to] if node.table \
            else self.dense[node.tied_to].weight
        return TiedDense(weight, bias)

    def dropout(self, node: ir.Dropout) -> Identity:
        return Identity()

    def flatten(self, node: ir.Flatten) -> Flatten:
        return Flatten(nchw=self.layout.channels_last
                       and not isinstance(self.near.following, ir.Dense))

    def residual(self, node: ir.Residual) -> Residual:
        shortcut = self.sequence(node.shortcut) if node.shortcut else None
        return Residual(self.sequence(node.body), shortcut)

    def concat(self, node: ir.Concat) -> Concat:
        return Concat([self.sequence(branch) for branch in node.branches], self.layout)

    def embedding(self, node: ir.Embedding) -> Embedding:
        table = self.variable(f"{node.name}.table")
        self.embedding_tables[node.name] = table
        return Embedding(table)

    def position_embedding(self, node: ir.PositionEmbedding) -> PositionEmbedding:
        segments = self.variable(f"{node.name}.segments") if node.segments else None
        return PositionEmbedding(self.variable(f"{node.name}.table"), segments)

    def patch_embedding(self, node: ir.PatchEmbedding) -> PatchEmbedding:
        # OIHW -> HWIO, as for Conv2d; the image comes in the network's layout.
        token = self.variable(f"{node.name}.class_token") if node.class_token else None
        return PatchEmbedding(self.variable(f"{node.name}.weight", ParamLayout(conv=True)),
                              self.variable(f"{node.name}.bias"), token, node.patch,
                              self.layout)

    def self_attention(self, node: ir.SelfAttention) -> SelfAttention:
        p = node.name
        return SelfAttention(node, self.variable(f"{p}.qkv.weight"),
                             self.variable(f"{p}.qkv.bias"), self.variable(f"{p}.out.weight"),
                             self.variable(f"{p}.out.bias"))

    def first_token(self, node: ir.FirstToken) -> FirstToken:
        return FirstToken()

    def lstm(self, node: ir.LSTM) -> LSTMLayer:
        values = self.weights if self.source is None else self.source
        layer = LSTMLayer(node, values, self.cudnn_lstm, self.policy)
        if not self.trainable:
            layer.layer.trainable = False
        for key, var in layer.variables.items():
            self.params[f"{node.name}.{key}"] = self.variables[f"{node.name}.{key}"] = var
            self.layouts[f"{node.name}.{key}"] = AS_IS
        return layer

    def mean_over_time(self, node: ir.MeanOverTime) -> MaskedMean:
        return MaskedMean()


# Every op's method, checked when this module is imported (models.ops.builder_table).
_TABLE = builder_table(Builder)


@dataclass(frozen=True)
class Network:
    """A built network: the frozen prefix (empty in a training copy), the trainable body,
    canonical name -> body variable (``params``) and its layout, and every variable by
    canonical name (running statistics too), which a copy starts from."""

    frozen: Sequence
    body: Sequence
    params: dict[str, tf.Variable]
    layouts: dict[str, ParamLayout]
    variables: dict[str, tf.Variable] = field(repr=False)

    def canonical(self, name: str, array: np.ndarray) -> np.ndarray:
        """A parameter's value or gradient, as a host array, in the IR's layout."""
        return self.layouts[name].to_canonical(array)


def build_network(model: ir.Model, weights: Weights, cudnn_lstm: bool = True,
                  policy: str = "float32", layout: Layout = NHWC, split_groups: bool = False,
                  source: Network | None = None) -> Network:
    """The network on tf.Variables of its own. ``policy`` is the Keras dtype policy of
    Keras-built layers ("mixed_bfloat16" under bf16); ``layout`` the activations' layout;
    ``split_groups`` runs grouped convolutions one group at a time (see Conv2d).
    ``source``: a network built with the same arguments; the result is then a copy of
    its body whose variables start as device-side copies of the source's, and has no
    frozen prefix (nothing trains it: the copy runs on the source's prefix's output)."""
    builder = Builder(model, weights, cudnn_lstm, policy, layout,
                      None if source is None else source.variables)
    builder.split_groups = split_groups
    builder.trainable = False
    frozen = builder.sequence(model.frozen if source is None else ())
    frozen_names = set(builder.params)
    builder.trainable = True
    body = builder.sequence(model.body)
    trainable = {name: var for name, var in builder.params.items()
                 if name not in frozen_names}
    return Network(frozen, body, trainable, {name: builder.layouts[name] for name in trainable},
                   builder.variables)


def build(model: ir.Model, weights: Weights, cudnn_lstm: bool = True,
          policy: str = "float32", layout: Layout = NHWC, split_groups: bool = False,
          ) -> tuple[Sequence, Sequence, dict[str, tf.Variable]]:
    """(frozen prefix, trainable body, canonical name -> body variable): build_network's
    parts."""
    network = build_network(model, weights, cudnn_lstm, policy, layout, split_groups)
    return network.frozen, network.body, network.params
