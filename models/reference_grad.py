"""Float64 gradients for the numpy reference (``models.reference``): loss and the gradient
of every trainable body parameter, as each framework's ``gradient`` measure computes them
(batch norm on batch statistics, dropout as identity, the frozen prefix constant).

Reverse mode by hand: running the body records, per leaf node, a closure that maps the
output's gradient to the input's and adds the node's parameter gradients into one dict.
Each rule is the textbook derivative of the forward function in ``models.reference``
(which this module calls for the forward values, so both stay one implementation);
``tests/test_reference_grad.py`` checks every rule against central finite differences
and the tiny models against the conformance kit's gradient goldens.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import ir
from models import reference as ref
from models.analysis import analyse
from models.inputs import Batch

Grads = dict[str, np.ndarray]
Backward = Callable[[np.ndarray], np.ndarray | None]


# --------------------------------------------------------------------------------------
# Node kinds: forward value and a backward closure.


def conv2d(x, weight, bias, stride, padding, groups, need_dx, add):
    """Convolution and its backward: weight gradient from the windows the forward pass
    multiplied, input gradient by adding each kernel tap's contribution back into place
    (col2im). Split over the batch as the forward pass is."""
    n = x.shape[0]
    y = ref.conv2d(x, weight, bias, stride, padding, groups)
    chunk = ref.batch_chunk(x.shape, weight.shape, stride, padding)

    def backward(dy):
        if bias is not None:
            add("bias", dy.sum(axis=(0, 2, 3)))
        dw = np.zeros_like(weight)
        dx = np.zeros_like(x) if need_dx else None
        for i in range(0, n, chunk):
            part = _conv_backward(x[i:i + chunk], weight, dy[i:i + chunk], stride, padding,
                                  groups, need_dx)
            dw += part[0]
            if need_dx:
                dx[i:i + chunk] = part[1]
        add("weight", dw)
        return dx
    return y, backward


def _conv_backward(x, weight, dy, stride, padding, groups, need_dx):
    out_c, group_c, kh, kw = weight.shape
    (sh, sw), (ph, pw) = stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = dy.shape[2:]
    windows = windows[:, :, :oh, :ow]
    per_group = out_c // groups
    dw = np.empty_like(weight)
    dxp = np.zeros_like(xp) if need_dx else None
    for g in range(groups):
        o = slice(g * per_group, (g + 1) * per_group)
        c = slice(g * group_c, (g + 1) * group_c)
        dy_g = dy[:, o]                                                  # (N, O/g, OH, OW)
        dw[o] = np.tensordot(dy_g, windows[:, c], ([0, 2, 3], [0, 2, 3]))
        if need_dx:
            cols = np.tensordot(dy_g, weight[o], ([1], [0]))             # (N, OH, OW, C/g, kh, kw)
            for di in range(kh):
                for dj in range(kw):
                    dxp[:, c, di:di + sh * (oh - 1) + 1:sh, dj:dj + sw * (ow - 1) + 1:sw] += \
                        cols[..., di, dj].transpose(0, 3, 1, 2)
    dx = None if dxp is None else dxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]
    return dw, dx


def pool2d(x, node: ir.Pool2d):
    """Max pooling sends each window's gradient to its (first) largest element; average
    pooling spreads it evenly over the window's valid elements."""
    y = ref.pool2d(x, node.kind, node.kernel, node.stride, node.padding, node.ceil_mode)
    (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
    n, c, h, w = x.shape
    oh, ow = y.shape[2:]
    right_h = max(ph, (oh - 1) * sh + kh - h - ph)
    right_w = max(pw, (ow - 1) * sw + kw - w - pw)
    pads = ((0, 0), (0, 0), (ph, right_h), (pw, right_w))

    def taps(a):
        view = sliding_window_view(a, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
        return view.reshape(*view.shape[:4], kh * kw)

    if node.kind == "max":
        winner = taps(np.pad(x, pads, constant_values=-np.inf)).argmax(axis=-1)
    else:
        valid = taps(np.pad(np.ones((1, 1, h, w)), pads)).sum(axis=-1)

    def backward(dy):
        dxp = np.zeros((n, c, h + ph + right_h, w + pw + right_w))
        share = None if node.kind == "max" else dy / valid
        for di in range(kh):
            for dj in range(kw):
                part = dy * (winner == di * kw + dj) if node.kind == "max" else share
                dxp[:, :, di:di + sh * (oh - 1) + 1:sh, dj:dj + sw * (ow - 1) + 1:sw] += part
        return dxp[:, :, ph:ph + h, pw:pw + w]
    return y, backward


def lrn(x, node: ir.LRN):
    """y = x·s^-β with s = k + α/n·Σ x² over the window: the input gradient is the direct
    term plus every window the channel falls in (the window is symmetric, so that is the
    same windowed sum of dy·x·s^(-β-1))."""
    half = node.size // 2
    squares = np.pad(x * x, ((0, 0), (half, half), (0, 0), (0, 0)))
    s = node.k + node.alpha / node.size * sliding_window_view(squares, node.size, axis=1).sum(-1)
    y = x * s ** -node.beta

    def backward(dy):
        t = np.pad(dy * x * s ** (-node.beta - 1), ((0, 0), (half, half), (0, 0), (0, 0)))
        around = sliding_window_view(t, node.size, axis=1).sum(-1)
        return dy * s ** -node.beta - 2 * node.beta * node.alpha / node.size * x * around
    return y, backward


def batch_norm(x, gamma, beta, eps, add):
    """Training-mode batch norm over every axis but channels (biased batch variance)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    count = x.size // x.shape[1]

    def backward(dy):
        dbeta, dgamma = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
        add("gamma", dgamma)
        add("beta", dbeta)
        scale = (gamma * inv).reshape(shape) / count
        return scale * (count * dy - dbeta.reshape(shape) - xhat * dgamma.reshape(shape))
    return y, backward


def lstm(x, w_ih, w_hh, bias, lengths, add):
    """Back-propagation through time of ``models.reference.lstm``: a sequence past its
    length holds its state, so its gradient passes through those steps unchanged."""
    n, steps, _ = x.shape
    hidden = w_hh.shape[0]
    h, c = np.zeros((n, hidden)), np.zeros((n, hidden))
    outputs = np.zeros((n, steps, hidden))
    projected = x @ w_ih + bias
    tape = []
    for t in range(steps):
        gates = projected[:, t] + h @ w_hh
        i, f, g, o = np.split(gates, 4, axis=1)
        i, f, g, o = ref.sigmoid(i), ref.sigmoid(f), np.tanh(g), ref.sigmoid(o)
        c_next = f * c + i * g
        tanh_c = np.tanh(c_next)
        live = (t < lengths)[:, None].astype(np.float64)
        tape.append((h, c, i, f, g, o, tanh_c, live))
        c = live * c_next + (1 - live) * c
        h = live * (o * tanh_c) + (1 - live) * h
        outputs[:, t] = h

    def backward(dout):
        dh, dc = np.zeros((n, hidden)), np.zeros((n, hidden))
        dproj = np.zeros_like(projected)
        dw_hh = np.zeros_like(w_hh)
        for t in reversed(range(steps)):
            h_prev, c_prev, i, f, g, o, tanh_c, live = tape[t]
            dh = dh + dout[:, t]
            dh_new, dc_new = dh * live, dc * live
            do = dh_new * tanh_c
            dc_new = dc_new + dh_new * o * (1 - tanh_c ** 2)
            da = np.concatenate([dc_new * g * i * (1 - i), dc_new * c_prev * f * (1 - f),
                                 dc_new * i * (1 - g ** 2), do * o * (1 - o)], axis=1)
            dproj[:, t] = da
            dw_hh += h_prev.T @ da
            dh = dh * (1 - live) + da @ w_hh.T
            dc = dc * (1 - live) + dc_new * f
        add("w_ih", np.tensordot(x, dproj, ([0, 1], [0, 1])))
        add("w_hh", dw_hh)
        add("bias", dproj.sum(axis=(0, 1)))
        return dproj @ w_ih.T
    return outputs, backward


# --------------------------------------------------------------------------------------
# Running a model with a tape.


class _Tape:
    def __init__(self, weights, lengths, trainable: set[str]):
        self.weights = weights
        self.lengths = lengths
        self.trainable = trainable
        self.grads: Grads = {}

    def param(self, name: str) -> np.ndarray:
        return np.asarray(self.weights[name], dtype=np.float64)

    def adder(self, prefix: str) -> Callable[[str, np.ndarray], None]:
        def add(suffix: str, value: np.ndarray) -> None:
            name = f"{prefix}.{suffix}"
            if name in self.trainable:  # a tied decoder adds into its encoder's weight
                self.grads[name] = self.grads[name] + value if name in self.grads else value
        return add

    def sequence(self, nodes, x, need_dx: bool):
        backs = []
        for node in nodes:
            x, back = self.node(node, x, need_dx)
            backs.append(back)
            need_dx = True  # every later node's input depends on a parameter

        def backward(dy):
            for back in reversed(backs):
                dy = back(dy)
            return dy
        return x, backward

    def node(self, node: ir.Node, x, need_dx: bool):
        if isinstance(node, ir.Residual):
            y, body_back = self.sequence(node.body, x, need_dx)
            if node.shortcut:
                short, short_back = self.sequence(node.shortcut, x, need_dx)
            else:
                short, short_back = x, (lambda dy: dy)

            def residual_back(dy):
                a, b = body_back(dy), short_back(dy)
                return None if a is None or b is None else a + b
            return y + short, residual_back
        if isinstance(node, ir.Concat):
            outs = [self.sequence(branch, x, need_dx) for branch in node.branches]
            bounds = np.cumsum([0] + [o.shape[1] for o, _ in outs])

            def concat_back(dy):
                parts = [back(dy[:, a:b]) for (_, back), a, b in zip(outs, bounds, bounds[1:])]
                return None if parts[0] is None else sum(parts)
            return np.concatenate([o for o, _ in outs], axis=1), concat_back
        return self.leaf(node, x, need_dx)

    def leaf(self, node: ir.Node, x, need_dx: bool):
        p, add = node.name, self.adder(node.name)
        if isinstance(node, ir.Conv2d):
            bias = self.param(f"{p}.bias") if node.bias else None
            return conv2d(x, self.param(f"{p}.weight"), bias, node.stride, node.padding,
                          node.groups, need_dx, add)
        if isinstance(node, ir.Pool2d):
            return pool2d(x, node)
        if isinstance(node, ir.GlobalAvgPool):
            area = x.shape[2] * x.shape[3]
            return (ref.global_avg_pool(x),
                    lambda dy: np.broadcast_to(dy[:, :, None, None] / area, x.shape))
        if isinstance(node, ir.Activation):
            # Slopes from the output, which the next layer keeps anyway (no extra copy).
            y = ref.activation(x, node.kind)
            slope = {"relu": lambda: y > 0, "tanh": lambda: 1 - y * y,
                     "sigmoid": lambda: y * (1 - y)}[node.kind]
            return y, lambda dy: dy * slope()
        if isinstance(node, ir.LRN):
            return lrn(x, node)
        if isinstance(node, ir.BatchNorm):
            return batch_norm(x, self.param(f"{p}.gamma"), self.param(f"{p}.beta"), node.eps,
                              add)
        if isinstance(node, (ir.Dense, ir.TiedDense)):
            tied = isinstance(node, ir.TiedDense)
            w = self.param(f"{node.tied_to}.weight").T if tied else self.param(f"{p}.weight")
            y = x @ w + (self.param(f"{p}.bias") if node.bias else 0.0)

            def dense_back(dy):
                flat_x, flat_dy = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
                dw = flat_x.T @ flat_dy
                if tied:
                    self.adder(node.tied_to)("weight", dw.T)
                else:
                    add("weight", dw)
                if node.bias:
                    add("bias", flat_dy.sum(axis=0))
                return dy @ w.T
            return y, dense_back
        if isinstance(node, ir.Dropout):
            return x, lambda dy: dy
        if isinstance(node, ir.Flatten):
            return x.reshape(x.shape[0], -1), lambda dy: dy.reshape(x.shape)
        if isinstance(node, ir.Embedding):
            table = self.param(f"{p}.table")

            def embedding_back(dy):
                dtable = np.zeros_like(table)
                np.add.at(dtable, x, dy)
                add("table", dtable)
                return None  # tokens have no gradient
            return table[x], embedding_back
        if isinstance(node, ir.LSTM):
            return lstm(x, self.param(f"{p}.w_ih"), self.param(f"{p}.w_hh"),
                        self.param(f"{p}.bias"), self.lengths_for(x), add)
        if isinstance(node, ir.MeanOverTime):
            lengths = self.lengths_for(x)
            valid = np.arange(x.shape[1])[None, :, None] < lengths[:, None, None]
            return (ref.mean_over_time(x, lengths),
                    lambda dy: np.where(valid, dy[:, None, :] / lengths[:, None, None], 0.0))
        raise TypeError(f"reference gradient has no rule for {type(node).__name__} '{p}'")

    def lengths_for(self, x):
        return np.full(x.shape[0], x.shape[1]) if self.lengths is None else self.lengths


def loss_and_gradients(model: ir.Model, weights, batch: Batch) -> tuple[float, Grads]:
    """The training-mode loss and the gradient of every trainable body parameter (the set
    ``models.analysis`` names), in canonical layouts, float64."""
    loss, grads, _ = loss_gradients_and_output(model, weights, batch)
    return loss, grads


def loss_gradients_and_output(model: ir.Model, weights, batch: Batch
                              ) -> tuple[float, Grads, np.ndarray]:
    """``loss_and_gradients`` and the training-mode body output it differentiated (the
    inference output too where the model has no batch norm: dropout is the identity)."""
    x = np.asarray(batch.x)
    x = x.astype(np.int64) if model.input.kind == "tokens" else x.astype(np.float64)
    lengths = None if batch.lengths is None else np.asarray(batch.lengths, dtype=np.int64)
    tape = _Tape(weights, lengths, analyse(model).trainable_names)
    body_input = ref._Runner(weights, lengths, True, None).sequence(model.frozen, x)
    out, backward = tape.sequence(model.body, body_input, need_dx=False)
    kind = model.loss.kind
    if kind == "softmax_xent":
        labels = np.asarray(batch.labels, dtype=np.int64)
        log_p = ref.log_softmax(out)
        rows = np.arange(len(labels))
        loss = float(-log_p[rows, labels].mean())
        dout = np.exp(log_p)
        dout[rows, labels] -= 1.0
        dout /= len(labels)
    elif kind == "mse_reconstruction":
        loss = float(np.mean((out - body_input) ** 2))
        dout = 2.0 * (out - body_input) / out.size
    elif kind == "sum":
        loss, dout = float(out.sum()), np.ones_like(out)
    else:
        raise ValueError(f"unknown loss {kind!r}")
    backward(dout)
    missing = tape.trainable - set(tape.grads)
    if missing:
        raise RuntimeError(f"{model.name}: no gradient reached {sorted(missing)[:3]}")
    return loss, dict(sorted(tape.grads.items())), out
