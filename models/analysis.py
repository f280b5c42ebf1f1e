"""Shape inference, validation, parameter counts and forward FLOPs, per layer and total,
from each op's declaration (``models.ops``).

FLOPs follow the common convention (fvcore, ``torch.utils.flop_counter``): 2 × the
multiply-accumulates of convolutions, dense layers and LSTM matrix products, per example.
Element-wise work (activations, pooling, normalisation, bias adds) is not counted; it is a
small share of every zoo model's total.
"""

from __future__ import annotations

from dataclasses import dataclass

from models import ir, ops
from models.ops import losses
from models.params import ParamSpec


class ModelError(ValueError):
    """A model definition that cannot be realised (bad shape, bad reference, bad name)."""


@dataclass(frozen=True)
class LayerInfo:
    name: str
    kind: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    params: int
    flops: int
    frozen: bool


@dataclass(frozen=True)
class ModelStats:
    name: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    params: int
    trainable_params: int
    flops: int
    layers: tuple[LayerInfo, ...]
    param_specs: tuple[ParamSpec, ...]
    frozen_params: frozenset[str]   # parameters of the frozen prefix: no gradients

    @property
    def trainable_names(self) -> set[str]:
        return {s.name for s in self.param_specs
                if s.trainable and s.name not in self.frozen_params}


class _Analyser:
    """Walks the model and asks each node's op (``models.ops``) for its shape,
    parameters and FLOPs; the op's shape rule calls back ``fail``, ``earlier`` and
    ``sequence``."""

    def __init__(self, model: ir.Model):
        self.model = model
        self.input_kind = model.input.kind
        self.layers: list[LayerInfo] = []
        self.specs: list[ParamSpec] = []
        self.done: dict[str, ir.Node] = {}
        self.seen: set[str] = set()
        self.frozen = False
        self.frozen_params: set[str] = set()

    def fail(self, node: ir.Node, message: str) -> None:
        raise ModelError(f"{self.model.name}: layer '{node.name}' ({type(node).__name__}): {message}")

    def earlier(self, name: str) -> ir.Node | None:
        return self.done.get(name)

    def run(self) -> ModelStats:
        shape = tuple(self.model.input.shape)
        if any(d <= 0 for d in shape):
            raise ModelError(f"{self.model.name}: input shape {shape} has a non-positive size")
        self.frozen = True
        shape = self.sequence(self.model.frozen, shape)
        self.frozen = False
        body_in = shape
        shape = self.sequence(self.model.body, shape)
        problem = losses.output_error(self.model.loss, shape, body_in)
        if problem:
            raise ModelError(f"{self.model.name}: {problem}")
        return ModelStats(
            name=self.model.name,
            input_shape=tuple(self.model.input.shape),
            output_shape=shape,
            params=sum(s.size for s in self.specs if s.trainable),
            trainable_params=sum(s.size for s in self.specs
                                 if s.trainable and s.name not in self.frozen_params),
            flops=sum(layer.flops for layer in self.layers),
            layers=tuple(self.layers),
            param_specs=tuple(self.specs),
            frozen_params=frozenset(self.frozen_params),
        )

    def sequence(self, nodes: tuple[ir.Node, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
        previous: ops.Op | None = None
        for node in nodes:
            if previous and previous.only_before and not isinstance(node, previous.only_before):
                self.fail(node, f"a {previous.node.__name__}'s output may only feed "
                                f"{_names(previous.only_before)}")
            shape = self.node(node, shape)
            previous = ops.REGISTRY[type(node)]
        if previous and previous.only_before:
            self.fail(nodes[-1], f"a {previous.node.__name__} must be followed by "
                                 f"{_names(previous.only_before)}")
        return shape

    def record(self, node: ir.Node, in_shape, out_shape, flops: int, specs: list[ParamSpec]):
        if any(d <= 0 for d in out_shape):
            self.fail(node, f"input {in_shape} gives an empty output {out_shape}")
        self.specs.extend(specs)
        if self.frozen:
            self.frozen_params.update(s.name for s in specs)
        self.layers.append(LayerInfo(node.name, type(node).__name__, tuple(in_shape),
                                     tuple(out_shape), sum(s.size for s in specs
                                                           if s.trainable),
                                     int(flops), self.frozen))

    def node(self, node: ir.Node, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not node.name or node.name in self.seen:
            self.fail(node, "layer names must be non-empty and unique")
        self.seen.add(node.name)
        op = ops.REGISTRY.get(type(node))
        if op is None:
            self.fail(node, "unknown node type")
        out = op.shape(node, shape, self)
        self.record(node, shape, out, op.flops(node, shape, out, self), op.params(node, self))
        self.done[node.name] = node
        return out


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(f"a {t.__name__}" for t in types)


def analyse(model: ir.Model) -> ModelStats:
    """Validate ``model`` and return its shapes, parameter counts and FLOPs."""
    return _Analyser(model).run()
