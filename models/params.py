"""The parameters each IR node owns, with canonical shapes.

A ``ParamSpec`` names one array; ``trainable`` is False for batch-norm running statistics
(buffers). Tied decoders own only their bias: their weight belongs to the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from models import ir

Init = Literal["he", "glorot", "bias", "gamma", "beta", "mean", "var", "lstm", "embedding"]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    init: Init
    fan_in: int
    trainable: bool = True

    @property
    def size(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


def node_params(node: ir.Node, in_features: int | None = None) -> list[ParamSpec]:
    """Parameters of a leaf node. ``in_features`` is only needed for TiedDense (its bias
    has the size of the tied encoder's input), which the caller resolves."""
    if isinstance(node, ir.Conv2d):
        kh, kw = node.kernel
        fan_in = node.in_channels // node.groups * kh * kw
        specs = [ParamSpec(f"{node.name}.weight",
                           (node.out_channels, node.in_channels // node.groups, kh, kw),
                           "he", fan_in)]
        if node.bias:
            specs.append(ParamSpec(f"{node.name}.bias", (node.out_channels,), "bias", fan_in))
        return specs
    if isinstance(node, ir.Dense):
        specs = [ParamSpec(f"{node.name}.weight", (node.in_features, node.out_features),
                           "he", node.in_features)]
        if node.bias:
            specs.append(ParamSpec(f"{node.name}.bias", (node.out_features,), "bias",
                                   node.in_features))
        return specs
    if isinstance(node, ir.TiedDense):
        if not node.bias:
            return []
        assert in_features is not None, "TiedDense needs its encoder's input size"
        return [ParamSpec(f"{node.name}.bias", (in_features,), "bias", in_features)]
    if isinstance(node, ir.BatchNorm):
        c = (node.num_features,)
        return [
            ParamSpec(f"{node.name}.gamma", c, "gamma", 1),
            ParamSpec(f"{node.name}.beta", c, "beta", 1),
            ParamSpec(f"{node.name}.running_mean", c, "mean", 1, trainable=False),
            ParamSpec(f"{node.name}.running_var", c, "var", 1, trainable=False),
        ]
    if isinstance(node, ir.Embedding):
        return [ParamSpec(f"{node.name}.table", (node.vocab, node.dim), "embedding", 1)]
    if isinstance(node, ir.LSTM):
        h4 = 4 * node.hidden_size
        return [
            ParamSpec(f"{node.name}.w_ih", (node.input_size, h4), "lstm", node.hidden_size),
            ParamSpec(f"{node.name}.w_hh", (node.hidden_size, h4), "lstm", node.hidden_size),
            ParamSpec(f"{node.name}.bias", (h4,), "lstm", node.hidden_size),
        ]
    return []
