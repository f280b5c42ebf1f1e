"""The IR's losses (``models.ir.Loss``): the output shape each needs, its float64 value,
and its gradient with respect to the body's output."""

from __future__ import annotations

import numpy as np

from models import ir
from models.ops.base import Shape


def output_error(loss: ir.Loss, out: Shape, body_in: Shape) -> str | None:
    """Why a body output of shape ``out`` cannot feed ``loss``, or None."""
    if loss.kind == "softmax_xent" and out != (loss.classes,):
        return f"output shape {out} does not match a {loss.classes}-way softmax loss"
    if loss.kind == "mse_reconstruction" and out != body_in:
        return f"reconstruction {out} does not match its target {body_in}"
    if loss.kind == "token_xent" and (len(out) != 2 or out[1] != loss.classes):
        return f"output shape {out} is no (T, {loss.classes}) sequence for a per-step softmax loss"
    return None


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Over the last axis (the classes)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def token_xent(out: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean cross-entropy over the labelled steps of (N, T, C) logits, labels (N, T)
    with -1 where a step is not counted (PyTorch's cross_entropy with ignore_index), and
    its gradient."""
    labels = np.asarray(labels, dtype=np.int64)
    counted = labels >= 0
    log_p = log_softmax(out)
    picked = np.take_along_axis(log_p, np.where(counted, labels, 0)[..., None], axis=-1)[..., 0]
    count = int(counted.sum())
    loss = float(-(picked * counted).sum() / count)
    dout = np.exp(log_p)
    n, t = np.nonzero(counted)
    dout[n, t, labels[n, t]] -= 1.0
    dout *= counted[..., None] / count
    return loss, dout


def value(kind: str, out: np.ndarray, body_input: np.ndarray,
          labels: np.ndarray | None) -> float:
    if kind == "softmax_xent":
        labels = np.asarray(labels, dtype=np.int64)
        return float(-log_softmax(out)[np.arange(len(labels)), labels].mean())
    if kind == "mse_reconstruction":
        return float(np.mean((out - body_input) ** 2))
    if kind == "sum":
        return float(out.sum())
    if kind == "token_xent":
        return token_xent(out, labels)[0]
    raise ValueError(f"unknown loss {kind!r}")


def value_and_gradient(kind: str, out: np.ndarray, body_input: np.ndarray,
                       labels: np.ndarray | None) -> tuple[float, np.ndarray]:
    """The loss and its gradient with respect to ``out`` (the body input is a constant:
    a frozen prefix's output, or the raw input)."""
    if kind == "softmax_xent":
        labels = np.asarray(labels, dtype=np.int64)
        log_p = log_softmax(out)
        rows = np.arange(len(labels))
        loss = float(-log_p[rows, labels].mean())
        dout = np.exp(log_p)
        dout[rows, labels] -= 1.0
        dout /= len(labels)
        return loss, dout
    if kind == "mse_reconstruction":
        return float(np.mean((out - body_input) ** 2)), 2.0 * (out - body_input) / out.size
    if kind == "sum":
        return float(out.sum()), np.ones_like(out)
    if kind == "token_xent":
        return token_xent(out, labels)
    raise ValueError(f"unknown loss {kind!r}")
