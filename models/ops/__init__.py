"""One module per IR op, each declaring its shape, parameters, FLOPs, float64 forward and
backward and error-bound terms (``models.ops.base.Op``); the registry below maps each IR
node type to its declaration, and ``builder_table`` each adapter's builder to its methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models import ir
from models.ops import (
    activation,
    batch_norm,
    concat,
    conv2d,
    dense,
    dropout,
    embedding,
    flatten,
    global_avg_pool,
    layer_norm,
    lrn,
    lstm,
    mean_over_time,
    pool2d,
    residual,
    tied_dense,
)
from models.ops.base import Op
from models.ops.transformer import attention, first_token, patch_embedding, position_embedding

# In the order of models.ir: the adapters' builders define their methods in this order.
OPS: tuple[Op, ...] = (
    conv2d.OP, pool2d.OP, global_avg_pool.OP, activation.OP, lrn.OP, batch_norm.OP,
    layer_norm.OP, dense.OP, tied_dense.OP, dropout.OP, flatten.OP, residual.OP, concat.OP, embedding.OP,
    position_embedding.OP, patch_embedding.OP, attention.OP, first_token.OP, lstm.OP,
    mean_over_time.OP,
)
REGISTRY: dict[type, Op] = {op.node: op for op in OPS}
BY_KIND: dict[str, Op] = {op.node.__name__: op for op in OPS}


def op_for(node: ir.Node) -> Op:
    """The declaration of ``node``'s type; TypeError for a type no op declares."""
    op = REGISTRY.get(type(node))
    if op is None:
        raise TypeError(f"no op declares {type(node).__name__} ('{node.name}')")
    return op


def builder_table(builder: type) -> dict[type, Callable[..., Any]]:
    """IR node type -> the method of ``builder`` (a network builder class) that realises
    it, looked up by the op's declared ``builder`` name. Raises TypeError naming every op
    the builder has no method for, so an adapter missing an op fails when it is imported,
    not when a model first uses the op."""
    missing = [op.builder for op in OPS if not callable(getattr(builder, op.builder, None))]
    if missing:
        raise TypeError(f"{builder.__module__}.{builder.__qualname__} has no method for "
                        f"op(s) {', '.join(missing)}")
    return {op.node: getattr(builder, op.builder) for op in OPS}
