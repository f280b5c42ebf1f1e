"""LSTM: a masked single-layer LSTM over (N, T, F), gates (i, f, g, o), weights (in, 4H)
and (H, 4H) and one bias (4H). Past a sequence's length its state is held; its outputs
there are unspecified, so only a MeanOverTime may consume them."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import (
    ForwardContext,
    Op,
    Shape,
    ShapeContext,
    TapeContext,
    Terms,
    matmul,
    sigmoid,
)
from models.params import ParamSpec


def shape(node: ir.LSTM, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 2 or shape[1] != node.input_size:
        ctx.fail(node, f"expects (T, {node.input_size}) input, got {shape}")
    return (shape[0], node.hidden_size)


def params(node: ir.LSTM, ctx: ShapeContext) -> list[ParamSpec]:
    h4 = 4 * node.hidden_size
    return [
        ParamSpec(f"{node.name}.w_ih", (node.input_size, h4), "lstm", node.hidden_size),
        ParamSpec(f"{node.name}.w_hh", (node.hidden_size, h4), "lstm", node.hidden_size),
        ParamSpec(f"{node.name}.bias", (h4,), "lstm", node.hidden_size),
    ]


def flops(node: ir.LSTM, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    steps, h4 = in_shape[0], 4 * node.hidden_size
    return 2 * steps * (node.input_size * h4 + node.hidden_size * h4)


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
    projected = matmul(x, w_ih, macs) + bias  # the input part of every step at once
    for t in range(steps):
        gates = projected[:, t] + matmul(h, w_hh, macs)
        i, f, g, o = np.split(gates, 4, axis=1)  # gate order (i, f, g, o)
        c_next = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h_next = sigmoid(o) * np.tanh(c_next)
        live = (t < lengths)[:, None]
        c = np.where(live, c_next, c)
        h = np.where(live, h_next, h)
        outputs[:, t] = h
    return outputs, h, c


def forward(node: ir.LSTM, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    p = node.name
    outputs, _, _ = lstm(x, ctx.param(f"{p}.w_ih"), ctx.param(f"{p}.w_hh"),
                         ctx.param(f"{p}.bias"), ctx.lengths_for(x), macs)
    return outputs


def backward(node: ir.LSTM, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """Back-propagation through time of ``lstm``: a sequence past its length holds its
    state, so its gradient passes through those steps unchanged."""
    p, add = node.name, tape.adder(node.name)
    w_ih, w_hh, bias = (tape.param(f"{p}.{k}") for k in ("w_ih", "w_hh", "bias"))
    lengths = tape.lengths_for(x)
    n, steps, _ = x.shape
    hidden = w_hh.shape[0]
    h, c = np.zeros((n, hidden)), np.zeros((n, hidden))
    outputs = np.zeros((n, steps, hidden))
    projected = x @ w_ih + bias
    tape_steps = []
    for t in range(steps):
        gates = projected[:, t] + h @ w_hh
        i, f, g, o = np.split(gates, 4, axis=1)
        i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
        c_next = f * c + i * g
        tanh_c = np.tanh(c_next)
        live = (t < lengths)[:, None].astype(np.float64)
        tape_steps.append((h, c, i, f, g, o, tanh_c, live))
        c = live * c_next + (1 - live) * c
        h = live * (o * tanh_c) + (1 - live) * h
        outputs[:, t] = h

    def back(dout):
        dh, dc = np.zeros((n, hidden)), np.zeros((n, hidden))
        dproj = np.zeros_like(projected)
        dw_hh = np.zeros_like(w_hh)
        for t in reversed(range(steps)):
            h_prev, c_prev, i, f, g, o, tanh_c, live = tape_steps[t]
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
    return outputs, back


def bound(layer, batch: int) -> Terms:
    """An LSTM's input + hidden products once per time step, each step a product layer."""
    steps, hidden = layer.out_shape
    k = layer.in_shape[1] + hidden
    return Terms(forward=steps * k, backward=steps * k, wgrad=batch * steps, products=steps)


OP = Op(ir.LSTM, "lstm", shape, forward, backward, params, flops, bound,
        only_before=(ir.MeanOverTime,))
