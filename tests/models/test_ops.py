"""The op registry (models/ops): every IR node type is declared once, and every adapter's
network builder has one method per op, in the registry's order."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import numpy as np
import pytest

from models import ir, ops

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("torch", "tf", "jax", "ort")


def test_every_ir_node_type_has_exactly_one_op():
    node_types = set(typing.get_args(ir.Node))
    assert set(ops.REGISTRY) == node_types
    assert len(ops.OPS) == len(node_types)
    assert len({op.builder for op in ops.OPS}) == len(ops.OPS)
    assert {op.node for op in ops.OPS if not op.container} == set(ir.LEAF_TYPES)


def test_builder_table_names_every_missing_method():
    class Partial:
        def conv2d(self, node):
            return "conv"

    with pytest.raises(TypeError) as error:
        ops.builder_table(Partial)
    message = str(error.value)
    assert "pool2d" in message and "mean_over_time" in message and "conv2d," not in message


def test_builder_table_maps_each_node_type_to_its_method():
    methods = {op.builder: (lambda self, node, _name=op.builder: _name) for op in ops.OPS}
    builder = type("Complete", (), methods)
    table = ops.builder_table(builder)
    assert table[ir.Conv2d](builder(), None) == "conv2d"
    assert table[ir.MeanOverTime](builder(), None) == "mean_over_time"


def _builder_methods(framework: str) -> list[str]:
    tree = ast.parse((ROOT / "adapters" / framework / "network.py").read_text())
    builder = next(node for node in tree.body
                   if isinstance(node, ast.ClassDef) and node.name == "Builder")
    return [node.name for node in builder.body if isinstance(node, ast.FunctionDef)]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_adapters_define_the_op_methods_in_registry_order(framework):
    names = [op.builder for op in ops.OPS]
    methods = [name for name in _builder_methods(framework) if name in names]
    assert methods == names


def test_step_mask_orders_longest_first_and_restores():
    from models.inputs import StepMask

    mask = StepMask.of(np.array([2, 5, 3, 5, 1], np.int32), 6)
    assert mask.order.tolist() == [1, 3, 2, 0, 4]      # ties keep batch order
    assert mask.sorted_lengths.tolist() == [5, 5, 3, 2, 1]
    assert (mask.order[mask.restore] == np.arange(5)).all()
    assert mask.valid.shape == (5, 6) and mask.valid.sum(axis=1).tolist() == [2, 5, 3, 5, 1]
    assert not mask.valid[0, 2] and mask.valid[0, 1]
    assert mask.weight.dtype == np.float32 and mask.count.tolist() == [2, 5, 3, 5, 1]
