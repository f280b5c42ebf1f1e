"""An independent numpy reference for the IR's forward pass and losses.

The adapter conformance kit takes its forward goldens from here, so this file favours
plain, checkable code over speed: every node kind is a small function over float64
arrays (``tests/test_reference.py`` checks each one against ``torch.nn.functional``), and
``forward`` only dispatches on node types. Shapes come from the arrays themselves, never
from ``models.analysis``, so a wrong shape or FLOP rule there shows up as a mismatch
instead of being copied (``tests/test_models.py`` compares the two).

Conventions (docs of ``models.ir``): activations NCHW or (N, T, F); conv weights OIHW;
dense weights (in, out); LSTM gates (i, f, g, o) with ``w_ih`` (in, 4H), ``w_hh`` (H, 4H)
and one bias (4H). Dropout is the identity; ``train`` only switches batch norm to batch
statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import ir
from models.inputs import Batch

Pair = tuple[int, int]


# --------------------------------------------------------------------------------------
# Matrix products, with an optional multiply-accumulate count taken from the operands'
# actual shapes (tests compare it with the analysis' FLOPs).


def _tensordot(a: np.ndarray, b: np.ndarray, axes: tuple[list[int], list[int]],
               macs: list[int] | None) -> np.ndarray:
    out = np.tensordot(a, b, axes)
    if macs is not None:
        # Every output element is a sum of as many products as the contracted size.
        macs.append(out.size * math.prod(a.shape[i] for i in axes[0]))
    return out


def _matmul(x: np.ndarray, w: np.ndarray, macs: list[int] | None) -> np.ndarray:
    """``x @ w`` over the last axis of ``x``."""
    return _tensordot(x, w, ([x.ndim - 1], [0]), macs)


# --------------------------------------------------------------------------------------
# Node kinds as functions.


# The windows a convolution multiplies are copied into one array (im2col); batches are
# split so that copy stays under this many bytes.
WINDOW_BYTES = 256 * 2**20


def batch_chunk(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Pair,
                padding: Pair) -> int:
    """How many examples one im2col copy of ``WINDOW_BYTES`` holds (at least one)."""
    _, c, h, w = x_shape
    _, _, kh, kw = w_shape
    oh = (h + 2 * padding[0] - kh) // stride[0] + 1
    ow = (w + 2 * padding[1] - kw) // stride[1] + 1
    per_example = 8 * c * kh * kw * oh * ow
    return max(1, WINDOW_BYTES // max(per_example, 1))


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
           stride: Pair = (1, 1), padding: Pair = (0, 0), groups: int = 1,
           macs: list[int] | None = None) -> np.ndarray:
    """Cross-correlation of NCHW ``x`` with OIHW ``weight`` (PyTorch/Caffe convolution)."""
    n, c, _, _ = x.shape
    out_c, group_c, kh, kw = weight.shape
    if c != group_c * groups or out_c % groups:
        raise ValueError(f"conv2d: input channels {c} and weight {weight.shape} "
                         f"do not fit groups={groups}")
    (sh, sw), (ph, pw) = stride, padding
    chunk = batch_chunk(x.shape, weight.shape, stride, padding)
    if chunk < n:  # bound the window copies' memory (a batch-128 11x11 layer: gigabytes)
        y = np.concatenate([conv2d(x[i:i + chunk], weight, None, stride, padding, groups, macs)
                            for i in range(0, n, chunk)])
        return y if bias is None else y + bias[None, :, None, None]
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # zero padding
    # windows[n, c, i, j, di, dj] = x[n, c, i*sh + di, j*sw + dj]
    windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = windows.shape[2:4]
    per_group = out_c // groups
    outputs = []
    for g in range(groups):
        w_g = weight[g * per_group:(g + 1) * per_group]            # (O/g, C/g, kh, kw)
        x_g = windows[:, g * group_c:(g + 1) * group_c]            # (N, C/g, OH, OW, kh, kw)
        y_g = _tensordot(x_g, w_g, ([1, 4, 5], [1, 2, 3]), macs)   # (N, OH, OW, O/g)
        outputs.append(y_g.transpose(0, 3, 1, 2))
    y = np.concatenate(outputs, axis=1)
    assert y.shape == (n, out_c, oh, ow)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return y


def pool_out_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape`` (aten/src/ATen/native/Pool.h), which Caffe
    shares: in ceil mode a last window that would start in the right padding is dropped."""
    span = size + 2 * pad - kernel
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def pool2d(x: np.ndarray, kind: str, kernel: Pair, stride: Pair, padding: Pair = (0, 0),
           ceil_mode: bool = False) -> np.ndarray:
    """Max or average pooling. Padding counts as -inf for max; average pooling allows no
    padding. Ceil-mode windows that run past the input cover only its valid elements,
    and an average divides by their number (PyTorch's avg_pool2d divides by the window
    clipped to input + padding, which with no padding is the same)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if kind == "avg" and (ph, pw) != (0, 0):
        raise ValueError("padded average pooling is not part of the IR")
    n, c, h, w = x.shape
    oh = pool_out_size(h, kh, sh, ph, ceil_mode)
    ow = pool_out_size(w, kw, sw, pw, ceil_mode)
    # Pad on the left by the padding, on the right by whatever the last window needs.
    right_h = max(ph, (oh - 1) * sh + kh - h - ph)
    right_w = max(pw, (ow - 1) * sw + kw - w - pw)
    pads = ((0, 0), (0, 0), (ph, right_h), (pw, right_w))

    def windows(a: np.ndarray) -> np.ndarray:
        view = sliding_window_view(a, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return view[:, :, :oh, :ow]  # (N, C, OH, OW, kh, kw)

    if kind == "max":
        # The window's maximum as kh * kw element-wise maxima of strided slices, one per
        # offset: the same values as reducing the windows view (max is exact in any
        # order), without numpy reducing two short strided axes of a 6-D view, which
        # took 2.1 of GoogLeNet's 4.7 s at batch 16 (one core of a 2-core AMD EPYC).
        padded = np.pad(x, pads, constant_values=-np.inf)
        found = None
        for di in range(kh):
            for dj in range(kw):
                part = padded[:, :, di:di + (oh - 1) * sh + 1:sh, dj:dj + (ow - 1) * sw + 1:sw]
                found = part.copy() if found is None else np.maximum(found, part, out=found)
        return found
    if kind == "avg":
        total = windows(np.pad(x, pads)).sum(axis=(4, 5))
        valid = windows(np.pad(np.ones((1, 1, h, w)), pads)).sum(axis=(4, 5))
        return total / valid
    raise ValueError(f"unknown pooling {kind!r}")


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(2, 3))


def sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) without overflow for large negative x.
    return np.exp(-np.logaddexp(0.0, -x))


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "tanh":
        return np.tanh(x)
    if kind == "sigmoid":
        return sigmoid(x)
    raise ValueError(f"unknown activation {kind!r}")


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, k: float) -> np.ndarray:
    """Caffe's across-channel LRN: ``x / (k + alpha/size * sum of x^2 over the `size`
    channels centred on each one, zero-padded at the edges) ** beta``."""
    if size % 2 != 1:
        raise ValueError("Caffe's LRN window is odd-sized")
    half = size // 2
    squares = np.pad(x * x, ((0, 0), (half, half), (0, 0), (0, 0)))
    window_sum = sliding_window_view(squares, size, axis=1).sum(axis=-1)
    return x / (k + alpha / size * window_sum) ** beta


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


def lstm(x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, bias: np.ndarray,
         lengths: np.ndarray, macs: list[int] | None = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masked single-layer LSTM over (N, T, F). Returns the per-step hidden states
    (N, T, H) and the final (h, c); at steps past a sequence's length its state is held,
    so the final state is the one at its last valid step."""
    n, steps, _ = x.shape
    hidden = w_hh.shape[0]
    h = np.zeros((n, hidden))
    c = np.zeros((n, hidden))
    outputs = np.zeros((n, steps, hidden))
    projected = _matmul(x, w_ih, macs) + bias  # the input part of every step at once
    for t in range(steps):
        gates = projected[:, t] + _matmul(h, w_hh, macs)
        i, f, g, o = np.split(gates, 4, axis=1)  # gate order (i, f, g, o)
        c_next = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h_next = sigmoid(o) * np.tanh(c_next)
        live = (t < lengths)[:, None]
        c = np.where(live, c_next, c)
        h = np.where(live, h_next, h)
        outputs[:, t] = h
    return outputs, h, c


def mean_over_time(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean of (N, T, F) over each sequence's valid steps; padded steps never count."""
    valid = np.arange(x.shape[1])[None, :, None] < lengths[:, None, None]
    return np.where(valid, x, 0.0).sum(axis=1) / lengths[:, None]


# --------------------------------------------------------------------------------------
# Running a model.


@dataclass(frozen=True)
class LayerTrace:
    """What one leaf node did: its output shape per example and the multiply-accumulates
    of its matrix products for the whole batch."""

    name: str
    kind: str
    out_shape: tuple[int, ...]
    macs: int


class _Runner:
    def __init__(self, weights: dict[str, np.ndarray], lengths: np.ndarray | None,
                 train: bool, trace: list[LayerTrace] | None):
        self.weights = weights
        self.lengths = lengths
        self.train = train
        self.trace = trace

    def param(self, name: str) -> np.ndarray:
        if name not in self.weights:
            raise KeyError(f"reference forward needs weight '{name}'")
        return np.asarray(self.weights[name], dtype=np.float64)

    def sequence(self, nodes: tuple[ir.Node, ...], x: np.ndarray) -> np.ndarray:
        for node in nodes:
            x = self.node(node, x)
        return x

    def node(self, node: ir.Node, x: np.ndarray) -> np.ndarray:
        if isinstance(node, ir.Residual):
            shortcut = self.sequence(node.shortcut, x) if node.shortcut else x
            return self.sequence(node.body, x) + shortcut
        if isinstance(node, ir.Concat):
            return np.concatenate([self.sequence(b, x) for b in node.branches], axis=1)
        macs: list[int] = []
        y = self.leaf(node, x, macs)
        if self.trace is not None:
            self.trace.append(LayerTrace(node.name, type(node).__name__, y.shape[1:],
                                         sum(macs)))
        return y

    def leaf(self, node: ir.Node, x: np.ndarray, macs: list[int]) -> np.ndarray:
        p = node.name
        if isinstance(node, ir.Conv2d):
            bias = self.param(f"{p}.bias") if node.bias else None
            return conv2d(x, self.param(f"{p}.weight"), bias, node.stride, node.padding,
                          node.groups, macs)
        if isinstance(node, ir.Pool2d):
            return pool2d(x, node.kind, node.kernel, node.stride, node.padding,
                          node.ceil_mode)
        if isinstance(node, ir.GlobalAvgPool):
            return global_avg_pool(x)
        if isinstance(node, ir.Activation):
            return activation(x, node.kind)
        if isinstance(node, ir.LRN):
            return lrn(x, node.size, node.alpha, node.beta, node.k)
        if isinstance(node, ir.BatchNorm):
            return batch_norm(x, self.param(f"{p}.gamma"), self.param(f"{p}.beta"),
                              self.param(f"{p}.running_mean"),
                              self.param(f"{p}.running_var"), node.eps, self.train)
        if isinstance(node, ir.Dense):
            y = _matmul(x, self.param(f"{p}.weight"), macs)
            return y + self.param(f"{p}.bias") if node.bias else y
        if isinstance(node, ir.TiedDense):
            # The decoder's weight is the encoder's (in, out) weight transposed.
            y = _matmul(x, self.param(f"{node.tied_to}.weight").T, macs)
            return y + self.param(f"{p}.bias") if node.bias else y
        if isinstance(node, ir.Dropout):
            return x
        if isinstance(node, ir.Flatten):
            return x.reshape(x.shape[0], -1)  # C, H, W order
        if isinstance(node, ir.Embedding):
            return self.param(f"{p}.table")[x]
        if isinstance(node, ir.LSTM):
            outputs, _, _ = lstm(x, self.param(f"{p}.w_ih"), self.param(f"{p}.w_hh"),
                                 self.param(f"{p}.bias"), self.lengths_for(x), macs)
            return outputs
        if isinstance(node, ir.MeanOverTime):
            return mean_over_time(x, self.lengths_for(x))
        raise TypeError(f"reference has no rule for {type(node).__name__} '{p}'")

    def lengths_for(self, x: np.ndarray) -> np.ndarray:
        if self.lengths is None:  # no mask: every step is valid
            return np.full(x.shape[0], x.shape[1])
        return self.lengths


def run(model: ir.Model, weights: dict[str, np.ndarray], batch: Batch, train: bool = False,
        trace: list[LayerTrace] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(body input, body output): the body input is the frozen prefix's output."""
    x = np.asarray(batch.x)
    x = x.astype(np.int64) if model.input.kind == "tokens" else x.astype(np.float64)
    lengths = None if batch.lengths is None else np.asarray(batch.lengths, dtype=np.int64)
    runner = _Runner(weights, lengths, train, trace)
    body_input = runner.sequence(model.frozen, x)
    return body_input, runner.sequence(model.body, body_input)


def forward(model: ir.Model, weights: dict[str, np.ndarray], batch: Batch,
            train: bool = False, trace: list[LayerTrace] | None = None) -> np.ndarray:
    """The body's output (logits, reconstruction or layer output) in float64. ``train``
    makes batch norm use batch statistics. Pass a list as ``trace`` to get one
    ``LayerTrace`` per leaf node run."""
    return run(model, weights, batch, train, trace)[1]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def loss(model: ir.Model, weights: dict[str, np.ndarray], batch: Batch,
         train: bool = True) -> float:
    """The model's loss on ``batch`` (``models.ir.Loss`` defines the kinds)."""
    body_input, out = run(model, weights, batch, train)
    return loss_of_output(model, body_input, out, batch)


def loss_of_output(model: ir.Model, body_input: np.ndarray, out: np.ndarray,
                   batch: Batch) -> float:
    """The loss of a body output ``out`` that ``run`` computed from ``batch``."""
    kind = model.loss.kind
    if kind == "softmax_xent":
        if batch.labels is None:
            raise ValueError(f"{model.name}: softmax loss needs labels")
        labels = np.asarray(batch.labels, dtype=np.int64)
        return float(-log_softmax(out)[np.arange(len(labels)), labels].mean())
    if kind == "mse_reconstruction":
        return float(np.mean((out - body_input) ** 2))
    if kind == "sum":
        return float(out.sum())
    raise ValueError(f"unknown loss {kind!r}")
