"""An independent numpy reference for the IR's forward pass and losses.

The adapter conformance kit takes its forward goldens from here. Each node kind's float64
forward is declared with its op (``models/ops/<op>.py``: small functions over float64
arrays, which ``tests/models/test_reference.py`` checks against ``torch.nn.functional``); this
module only walks the model and dispatches through the registry. Shapes come from the
arrays themselves, never from ``models.analysis``, so a wrong shape or FLOP rule there
shows up as a mismatch instead of being copied (``tests/models/test_models.py`` compares the two).

Conventions (docs of ``models.ir``): activations NCHW or (N, T, F); conv weights OIHW;
dense weights (in, out); LSTM gates (i, f, g, o) with ``w_ih`` (in, 4H), ``w_hh`` (H, 4H)
and one bias (4H). Dropout is the identity; ``train`` only switches batch norm to batch
statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models import ir, ops
from models.inputs import Batch
from models.ops import losses

# The float64 kernels, under the names the tests and adapters' checks call them by.
from models.ops.activation import activation  # noqa: F401
from models.ops.base import sigmoid  # noqa: F401
from models.ops.batch_norm import batch_norm  # noqa: F401
from models.ops.conv2d import batch_chunk, conv2d  # noqa: F401
from models.ops.global_avg_pool import global_avg_pool  # noqa: F401
from models.ops.losses import log_softmax  # noqa: F401
from models.ops.lrn import lrn  # noqa: F401
from models.ops.lstm import lstm  # noqa: F401
from models.ops.mean_over_time import mean_over_time  # noqa: F401
from models.ops.pool2d import pool2d, pool_out_size  # noqa: F401


@dataclass(frozen=True)
class LayerTrace:
    """What one leaf node did: its output shape per example and the multiply-accumulates
    of its matrix products for the whole batch."""

    name: str
    kind: str
    out_shape: tuple[int, ...]
    macs: int


class _Runner:
    """The forward context each op's ``forward`` reads (``models.ops.base``)."""

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
        op = ops.REGISTRY.get(type(node))
        if op is None:
            raise TypeError(f"reference has no rule for {type(node).__name__} '{node.name}'")
        macs: list[int] = []
        y = op.forward(node, x, self, macs)
        if self.trace is not None and not op.container:
            self.trace.append(LayerTrace(node.name, type(node).__name__, y.shape[1:],
                                         sum(macs)))
        return y

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


def loss(model: ir.Model, weights: dict[str, np.ndarray], batch: Batch,
         train: bool = True) -> float:
    """The model's loss on ``batch`` (``models.ir.Loss`` defines the kinds)."""
    body_input, out = run(model, weights, batch, train)
    return loss_of_output(model, body_input, out, batch)


def loss_of_output(model: ir.Model, body_input: np.ndarray, out: np.ndarray,
                   batch: Batch) -> float:
    """The loss of a body output ``out`` that ``run`` computed from ``batch``."""
    if model.loss.kind in ("softmax_xent", "token_xent") and batch.labels is None:
        raise ValueError(f"{model.name}: softmax loss needs labels")
    return losses.value(model.loss.kind, out, body_input, batch.labels)
