"""The framework-neutral intermediate representation (IR) of a network.

Every node is a frozen dataclass with a stable ``name``: canonical weights, gradient
fingerprints and per-layer analysis all key on it. Canonical layouts, which every
adapter converts from:

* activations NCHW (images) or (N, T, F) (sequences);
* convolution weights OIHW, i.e. (out, in / groups, kh, kw);
* dense weights (in, out);
* LSTM gates stacked in the order (i, f, g, o), weights (in, 4H) and (H, 4H).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Pair = tuple[int, int]


def pair(value: int | Pair) -> Pair:
    """Expand a scalar size to a (height, width) pair."""
    if isinstance(value, int):
        return (value, value)
    return (int(value[0]), int(value[1]))


@dataclass(frozen=True)
class Conv2d:
    name: str
    in_channels: int
    out_channels: int
    kernel: Pair
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    groups: int = 1
    bias: bool = True


@dataclass(frozen=True)
class Pool2d:
    """Max or average pooling. ``ceil_mode`` follows Caffe/Torch7, whose AlexNet and
    GoogLeNet round the output size up (BVLC prototxt)."""

    name: str
    kind: Literal["max", "avg"]
    kernel: Pair
    stride: Pair
    padding: Pair = (0, 0)
    ceil_mode: bool = False


@dataclass(frozen=True)
class GlobalAvgPool:
    """Mean over H and W, keeping N and C: (N, C, H, W) -> (N, C)."""

    name: str


@dataclass(frozen=True)
class Activation:
    name: str
    kind: Literal["relu", "tanh", "sigmoid"]


@dataclass(frozen=True)
class LRN:
    """Caffe's cross-channel local response normalisation:
    ``y = x / (k + alpha / size * sum_{window} x^2) ** beta`` (Krizhevsky et al. 2012, 3.3)."""

    name: str
    size: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0


@dataclass(frozen=True)
class BatchNorm:
    """Batch normalisation over channels (dim 1). Forward (inference) uses the running
    statistics; the gradient pass uses batch statistics, as training does."""

    name: str
    num_features: int
    eps: float = 1e-5


@dataclass(frozen=True)
class LayerNorm:
    """Normalises each example over its last axis (Ba et al. 2016, "Layer Normalization",
    arXiv:1607.06450), then scales and shifts: ``gamma * (x - mean) / sqrt(var + eps) +
    beta``, with the biased variance, in training and inference alike. The last axis is the
    features of a vector (F,) or of each step of a sequence (T, F)."""

    name: str
    features: int
    eps: float = 1e-5


@dataclass(frozen=True)
class Dense:
    name: str
    in_features: int
    out_features: int
    bias: bool = True


@dataclass(frozen=True)
class TiedDense:
    """A decoder whose weight is the transpose of the Dense named ``tied_to``; only the
    bias is its own (Bahrampour et al. 2016, 4.3: "decoder weights are transpose of the
    encoder weights")."""

    name: str
    tied_to: str
    bias: bool = True


@dataclass(frozen=True)
class Dropout:
    """Kept in definitions for fidelity; identity when benchmarking, as the seeds ran it
    (convnet-benchmarks: "I ignored dropout and softmax layers")."""

    name: str
    rate: float = 0.5


@dataclass(frozen=True)
class Flatten:
    name: str


@dataclass(frozen=True)
class Residual:
    """``body(x) + shortcut(x)``; an empty shortcut is the identity."""

    name: str
    body: tuple[Node, ...]
    shortcut: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Concat:
    """Runs every branch on the same input and concatenates along channels (Inception)."""

    name: str
    branches: tuple[tuple[Node, ...], ...]


@dataclass(frozen=True)
class Embedding:
    name: str
    vocab: int
    dim: int


@dataclass(frozen=True)
class LSTM:
    """A single-layer LSTM over (N, T, F) with per-sequence lengths. Steps past a
    sequence's length must not change its state; their outputs are unspecified, so only a
    masked reduction (MeanOverTime) may consume them."""

    name: str
    input_size: int
    hidden_size: int


@dataclass(frozen=True)
class MeanOverTime:
    """Mean over the valid steps of each sequence: (N, T, F) -> (N, F)."""

    name: str


Node = (Conv2d | Pool2d | GlobalAvgPool | Activation | LRN | BatchNorm | LayerNorm | Dense
        | TiedDense | Dropout | Flatten | Residual | Concat | Embedding | LSTM | MeanOverTime)

LEAF_TYPES = (
    Conv2d, Pool2d, GlobalAvgPool, Activation, LRN, BatchNorm, LayerNorm, Dense, TiedDense,
    Dropout, Flatten, Embedding, LSTM, MeanOverTime,
)


@dataclass(frozen=True)
class InputSpec:
    """Per-example input. ``image``: float (C, H, W); ``vector``: float (F,);
    ``tokens``: int ids of shape (T,) padded to ``shape[0]`` with per-example lengths."""

    kind: Literal["image", "vector", "tokens"]
    shape: tuple[int, ...]
    vocab: int = 0


@dataclass(frozen=True)
class Loss:
    """``softmax_xent``: mean softmax cross-entropy against integer labels.
    ``mse_reconstruction``: mean squared error between the body's output and the body's
    input (the output of the frozen prefix, or the raw input when there is none).
    ``sum``: the sum of all outputs, so the output gradient is all ones; single-layer
    benchmarks use it (convnet-benchmarks times backward with a given gradOutput)."""

    kind: Literal["softmax_xent", "mse_reconstruction", "sum"]
    classes: int = 0


@dataclass(frozen=True)
class Model:
    """A network: an untrainable ``frozen`` prefix, then the trainable ``body``.

    The frozen prefix models layer-wise pre-training (Bahrampour et al. 2016, 4.3: lower
    encoders are fixed and each batch goes through them before the AE being trained).
    """

    name: str
    family: str
    input: InputSpec
    body: tuple[Node, ...]
    loss: Loss
    frozen: tuple[Node, ...] = ()
    description: str = ""
    source: str = ""
    tags: tuple[str, ...] = field(default=())


def walk(nodes: tuple[Node, ...]):
    """Yield every node depth-first, containers before their children."""
    for node in nodes:
        yield node
        if isinstance(node, Residual):
            yield from walk(node.body)
            yield from walk(node.shortcut)
        elif isinstance(node, Concat):
            for branch in node.branches:
                yield from walk(branch)


def all_nodes(model: Model):
    yield from walk(model.frozen)
    yield from walk(model.body)
