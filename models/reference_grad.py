"""Float64 gradients for the numpy reference (``models.reference``): loss and the gradient
of every trainable body parameter, as each framework's ``gradient`` measure computes them
(batch norm on batch statistics, dropout as identity, the frozen prefix constant).

Reverse mode by hand: running the body records, per node, a closure that maps the
output's gradient to the input's and adds the node's parameter gradients into one dict.
Each rule is declared with its op (``models/ops/<op>.py``, ``backward``), next to the
forward it differentiates; this module only walks the model and keeps the tape.
``tests/models/test_reference_grad.py`` checks every rule against central finite differences
and the tiny models against the conformance kit's gradient goldens.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models import ir, ops
from models import reference as ref
from models.analysis import analyse
from models.inputs import Batch
from models.ops import losses

Grads = dict[str, np.ndarray]
Backward = Callable[[np.ndarray], np.ndarray | None]


class _Tape:
    """The tape context each op's ``backward`` reads (``models.ops.base``)."""

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
        op = ops.REGISTRY.get(type(node))
        if op is None:
            raise TypeError(f"reference gradient has no rule for {type(node).__name__} "
                            f"'{node.name}'")
        return op.backward(node, x, need_dx, self)

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
    loss, dout = losses.value_and_gradient(model.loss.kind, out, body_input, batch.labels)
    backward(dout)
    missing = tape.trainable - set(tape.grads)
    if missing:
        raise RuntimeError(f"{model.name}: no gradient reached {sorted(missing)[:3]}")
    return loss, dict(sorted(tape.grads.items())), out
