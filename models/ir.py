"""The framework-neutral intermediate representation (IR) of a network.

Every node is a frozen dataclass with a stable ``name``: canonical weights, gradient
fingerprints and per-layer analysis all key on it. Canonical layouts, which every
adapter converts from:

* activations NCHW (images) or (N, T, F) (sequences);
* convolution weights OIHW, i.e. (out, in / groups, kh, kw);
* dense weights (in, out);
* LSTM gates stacked in the order (i, f, g, o), weights (in, 4H) and (H, 4H);
* attention's fused projection (F, 3F), its columns q | k | v with the heads contiguous
  inside each (GPT-2's ``c_attn``).
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
    """Element-wise. ``gelu_tanh`` is GELU's tanh approximation (GPT-2's "gelu_new") and
    ``gelu_erf`` the exact form (BERT's, ViT's): Hendrycks & Gimpel 2016, arXiv:1606.08415."""

    name: str
    kind: Literal["relu", "tanh", "sigmoid", "gelu_tanh", "gelu_erf"]


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
    """``x @ weight + bias`` over the last axis, of a vector (F,) or of every step of a
    sequence (T, F)."""

    name: str
    in_features: int
    out_features: int
    bias: bool = True


@dataclass(frozen=True)
class TiedDense:
    """A decoder whose weight is the transpose of the Dense named ``tied_to``; only the
    bias is its own (Bahrampour et al. 2016, 4.3: "decoder weights are transpose of the
    encoder weights"). Tied to an Embedding, it is a language model's output layer, the
    logits ``x @ table.T`` (Press & Wolf 2017; GPT-2's and BERT's tied heads), over a
    vector or every step of a sequence; ``table`` says which of the two it is tied to."""

    name: str
    tied_to: str
    bias: bool = True
    table: bool = False


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
    """Token ids (T,) -> rows of a (vocab, dim) table. ``init``: ``embedding`` draws
    N(0, 1); ``normal`` N(0, 0.02²), the initializer_range of GPT-2's and BERT's configs."""

    name: str
    vocab: int
    dim: int
    init: Literal["embedding", "normal"] = "embedding"


@dataclass(frozen=True)
class PositionEmbedding:
    """Adds row t of a learned (positions, dim) table to step t of a sequence (T, dim),
    T <= positions (GPT-2's wpe, BERT's and ViT's position embeddings). ``segments`` > 0
    also adds row 0 of a (segments, dim) table: BERT's token-type embedding with every
    token in the first segment, as when no token_type_ids are given."""

    name: str
    positions: int
    dim: int
    segments: int = 0


@dataclass(frozen=True)
class PatchEmbedding:
    """ViT's input (Dosovitskiy et al. 2021, 3.1, arXiv:2010.11929): an image (C, H, W)
    cut into p×p patches, each projected linearly to ``dim`` (a convolution of kernel
    and stride p, weight OIHW), in row-major patch order, after a learned class token:
    (1 + (H/p)(W/p), dim) with ``class_token``, else ((H/p)(W/p), dim)."""

    name: str
    in_channels: int
    dim: int
    patch: int
    class_token: bool = True


@dataclass(frozen=True)
class SelfAttention:
    """Multi-head scaled dot-product self-attention over a sequence (T, dim) (Vaswani et
    al. 2017, 3.2.2): ``q | k | v = x @ qkv.weight + qkv.bias`` (one fused (dim, 3·dim)
    weight), per head ``softmax(q kᵀ / sqrt(dim / heads) + mask) v``, the heads
    concatenated, then ``@ out.weight + out.bias``. ``causal``: step t attends to steps
    s <= t (GPT-2). ``padding``: keys past the sequence's length are masked (BERT's
    attention_mask); the outputs at padded steps are then unspecified, like an LSTM's."""

    name: str
    dim: int
    heads: int
    causal: bool = False
    padding: bool = False


@dataclass(frozen=True)
class FirstToken:
    """Step 0 of a sequence: (T, F) -> (F,) (ViT's class token)."""

    name: str


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
        | TiedDense | Dropout | Flatten | Residual | Concat | Embedding | PositionEmbedding
        | PatchEmbedding | SelfAttention | FirstToken | LSTM | MeanOverTime)

LEAF_TYPES = (
    Conv2d, Pool2d, GlobalAvgPool, Activation, LRN, BatchNorm, LayerNorm, Dense, TiedDense,
    Dropout, Flatten, Embedding, PositionEmbedding, PatchEmbedding, SelfAttention, FirstToken,
    LSTM, MeanOverTime,
)


@dataclass(frozen=True)
class InputSpec:
    """Per-example input. ``image``: float (C, H, W); ``vector``: float (F,);
    ``tokens``: int ids of shape (T,) with per-example lengths. ``lengths``: ``imdb``
    draws them (models/inputs.py) and pads a batch to its longest; ``full`` fills all T
    steps, as packed language-model text does (Hugging Face's run_clm and run_mlm
    ``group_texts``)."""

    kind: Literal["image", "vector", "tokens"]
    shape: tuple[int, ...]
    vocab: int = 0
    lengths: Literal["imdb", "full"] = "imdb"


@dataclass(frozen=True)
class Loss:
    """``softmax_xent``: mean softmax cross-entropy against integer labels.
    ``mse_reconstruction``: mean squared error between the body's output and the body's
    input (the output of the frozen prefix, or the raw input when there is none).
    ``sum``: the sum of all outputs, so the output gradient is all ones; single-layer
    benchmarks use it (convnet-benchmarks times backward with a given gradOutput).
    ``token_xent``: a sequence output (T, classes); the mean softmax cross-entropy over
    the labelled steps of the batch, each valid step labelled with probability
    ``labelled`` (1: a language model's every next token; 0.15: BERT's masked-LM
    positions, Devlin et al. 2019, 3.1), the others and the padding labelled -1."""

    kind: Literal["softmax_xent", "mse_reconstruction", "sum", "token_xent"]
    classes: int = 0
    labelled: float = 1.0


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
