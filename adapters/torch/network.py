"""The IR realised as a torch ``nn.Module``, with the canonical weights loaded.

Every IR node becomes the standard torch module a hand-written model would use
(nn.Conv2d, nn.MaxPool2d, nn.BatchNorm2d, nn.LSTM ...), so the adapter runs the same
kernels as torchvision's models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models import ir
from models.inputs import StepMask
from models.ops import builder_table
from models.weights import Weights


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


@dataclass(frozen=True)
class Lengths:
    """Sequence lengths in the forms the LSTM, the masked mean and attention's padding
    mask need, made once."""

    sorted_host: torch.Tensor  # int64 on the CPU, longest first, for pack_padded_sequence
    order: torch.Tensor        # int64 on the device: the batch's rows, longest first
    restore: torch.Tensor      # int64 on the device: the inverse of ``order``
    mask: torch.Tensor         # float (N, T) on the device, 1 where a step is valid
    count: torch.Tensor        # float (N,) on the device
    keys: torch.Tensor         # bool (N, 1, 1, T) on the device, True where a key is valid

    @staticmethod
    def of(lengths: np.ndarray, steps: int, device: torch.device) -> Lengths:
        mask = StepMask.of(lengths, steps)   # computed once in numpy (models.inputs)
        return Lengths(torch.from_numpy(mask.sorted_lengths),
                       torch.from_numpy(mask.order).to(device),
                       torch.from_numpy(mask.restore).to(device),
                       torch.from_numpy(mask.weight).to(device),
                       torch.from_numpy(mask.count).to(device),
                       torch.from_numpy(mask.valid)[:, None, None, :].to(device))


class Sequence(nn.Module):
    """Runs IR nodes in order; ``lengths`` reaches the LSTM, the masked mean and
    attention, also inside residual blocks and branches."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, lengths: Lengths | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, lengths) if isinstance(layer, _WITH_LENGTHS) else layer(x)
        return x


class Residual(nn.Module):
    def __init__(self, body: Sequence, shortcut: Sequence | None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor, lengths: Lengths | None = None) -> torch.Tensor:
        return self.body(x, lengths) + (x if self.shortcut is None
                                        else self.shortcut(x, lengths))


class Concat(nn.Module):
    def __init__(self, branches: list[Sequence]):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor, lengths: Lengths | None = None) -> torch.Tensor:
        return torch.cat([branch(x, lengths) for branch in self.branches], dim=1)


class TiedLinear(nn.Module):
    """Decoder using the transpose of an encoder's weight (Bahrampour et al. 2016, 4.3),
    or a language model's output layer using an embedding table (Press & Wolf 2017):
    nn.Linear stores (out, in), so a Dense encoder's weight is transposed, while an
    nn.Embedding's (vocab, dim) table already is the decoder's (out, in) weight."""

    def __init__(self, encoder: nn.Linear | nn.Embedding, bias: torch.Tensor | None):
        super().__init__()
        self.encoder = [encoder]  # a list, so the encoder is not registered twice
        self.transpose = isinstance(encoder, nn.Linear)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.encoder[0].weight
        return F.linear(x, weight.t() if self.transpose else weight, self.bias)


class PositionEmbedding(nn.Module):
    """Adds row t of the position table to step t (and row 0 of the token-type table)."""

    def __init__(self, table: nn.Parameter, segments: nn.Parameter | None):
        super().__init__()
        self.table = table
        self.segments = segments

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.at(x, self.table[:x.shape[1]])

    def at(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``x`` plus the given rows of the table (a cached decode's positions)."""
        if self.segments is not None:
            rows = rows + self.segments[0]
        return x + rows


class PatchEmbedding(nn.Module):
    """ViT's patch projection as a convolution of kernel and stride p (as Hugging Face's
    ViTPatchEmbeddings and timm's PatchEmbed do), its (N, dim, H/p, W/p) output read in
    row-major patch order, after the class token."""

    def __init__(self, conv: nn.Conv2d, class_token: nn.Parameter | None):
        super().__init__()
        self.conv = conv
        self.class_token = class_token

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.conv(x).flatten(2).transpose(1, 2)        # (N, HW/p², dim)
        if self.class_token is None:
            return patches
        token = self.class_token.expand(patches.shape[0], 1, -1)    # (N, 1, dim)
        return torch.cat([token, patches], dim=1)


class SelfAttention(nn.Module):
    """Multi-head self-attention through torch.nn.functional.scaled_dot_product_attention,
    PyTorch's fused attention (it picks a flash, memory-efficient or math kernel for the
    device and dtype; its default scale is 1/sqrt(head size), the IR's). The fused q|k|v
    projection and the output projection are nn.Linear, as GPT-2's c_attn and c_proj."""

    def __init__(self, node: ir.SelfAttention, qkv: nn.Linear, out: nn.Linear):
        super().__init__()
        self.heads = node.heads
        self.causal = node.causal
        self.padding = node.padding
        self.qkv = qkv
        self.out = out

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(N, T, 3·dim) -> three (N, heads, T, d): the IR's q | k | v columns, heads
        contiguous inside each."""
        n, steps, dim = x.shape
        return tuple(part.view(n, steps, self.heads, dim // self.heads).transpose(1, 2)
                     for part in self.qkv(x).split(dim, dim=-1))

    def _merge(self, o: torch.Tensor) -> torch.Tensor:
        """(N, heads, T, d) -> the output projection of (N, T, dim)."""
        n, heads, steps, d = o.shape
        return self.out(o.transpose(1, 2).reshape(n, steps, heads * d))

    def cached(self, x: torch.Tensor, cache: KVCache, step: DecodeStep) -> torch.Tensor:
        """Causal attention of ``x``'s steps (at ``step.positions``) over the cache: their
        keys and values written in at those positions (``index_copy_``, in place), then
        every query attends to the cache's positions up to its own (``step.mask``), the
        rest of the fixed-capacity cache masked out, as Hugging Face's StaticCache does
        for torch.compile (transformers 4.x, cache_utils.StaticCache)."""
        q, k, v = self._heads(x)
        cache.keys.index_copy_(2, step.positions, k.to(cache.keys.dtype))
        cache.values.index_copy_(2, step.positions, v.to(cache.values.dtype))
        o = F.scaled_dot_product_attention(q.to(cache.keys.dtype), cache.keys, cache.values,
                                           attn_mask=step.mask)
        return self._merge(o)

    def forward(self, x: torch.Tensor, lengths: Lengths | None) -> torch.Tensor:
        steps = x.shape[1]
        q, k, v = self._heads(x)
        mask = None
        if self.padding and lengths is not None:
            # A boolean attn_mask is True where a key may be attended to (the
            # scaled_dot_product_attention docs); every query row, padded ones too,
            # sees the example's valid keys.
            mask = lengths.keys
            if self.causal:
                mask = mask & torch.ones(steps, steps, dtype=torch.bool,
                                         device=x.device).tril()
        # is_causal and attn_mask are exclusive: the causal triangle goes into the
        # mask when there is a padding mask too.
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           is_causal=self.causal and mask is None)
        return self._merge(o)


@dataclass(frozen=True)
class KVCache:
    """One attention layer's keys and values, (1, heads, capacity, d) each, preallocated."""

    keys: torch.Tensor
    values: torch.Tensor


@dataclass(frozen=True)
class DecodeStep:
    """Where a cached pass's steps go: their positions (T,) on the device, and the
    attention mask (T, capacity), True where a query may attend to a cached key (positions
    up to its own)."""

    positions: torch.Tensor
    mask: torch.Tensor


def cached_pass(module: nn.Module, x: torch.Tensor, caches: dict[SelfAttention, KVCache],
                step: DecodeStep) -> torch.Tensor:
    """The built network's forward over new steps of one sequence, with the key/value
    cache: the same modules as ``forward``, attention through ``SelfAttention.cached`` and
    position rows through ``PositionEmbedding.at``; every other module acts on each step
    alone and is called as it is."""
    if isinstance(module, Sequence):
        for layer in module.layers:
            x = cached_pass(layer, x, caches, step)
        return x
    if isinstance(module, Residual):
        shortcut = x if module.shortcut is None else cached_pass(module.shortcut, x, caches, step)
        return cached_pass(module.body, x, caches, step) + shortcut
    if isinstance(module, SelfAttention):
        return module.cached(x, caches[module], step)
    if isinstance(module, PositionEmbedding):
        return module.at(x, module.table.index_select(0, step.positions))
    if isinstance(module, _WITH_LENGTHS):
        raise TypeError(f"{type(module).__name__} has no cached decode")
    return module(x)


class FirstToken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


class LSTMLayer(nn.Module):
    """nn.LSTM over a packed batch: cuDNN's fused kernel on GPU, and steps past each
    sequence's length are skipped, as the masked LISA Lab LSTM specifies."""

    def __init__(self, node: ir.LSTM, weights: Weights):
        super().__init__()
        self.lstm = nn.LSTM(node.input_size, node.hidden_size, batch_first=True)
        with torch.no_grad():
            self.lstm.weight_ih_l0.copy_(_tensor(weights[f"{node.name}.w_ih"].T))
            self.lstm.weight_hh_l0.copy_(_tensor(weights[f"{node.name}.w_hh"].T))
            self.lstm.bias_ih_l0.copy_(_tensor(weights[f"{node.name}.bias"]))
            self.lstm.bias_hh_l0.zero_()
        # The IR has one bias; torch's second one stays zero and untrained.
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x: torch.Tensor, lengths: Lengths | None) -> torch.Tensor:
        # Packing needs the lengths on the host, longest first. Left to sort them
        # (enforce_sorted=False), pack_padded_sequence copies its order to the device and
        # pad_packed_sequence copies it back, two copies that wait for the GPU every step
        # (torch/nn/utils/rnn.py); the order is found once instead (Lengths.of) and the
        # rows are permuted on the device, as those functions do themselves.
        packed = nn.utils.rnn.pack_padded_sequence(x.index_select(0, lengths.order),
                                                   lengths.sorted_host, batch_first=True)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=x.shape[1])
        return out.index_select(0, lengths.restore)


class MaskedMean(nn.Module):
    def forward(self, x: torch.Tensor, lengths: Lengths | None) -> torch.Tensor:
        return (x * lengths.mask[:, :, None]).sum(1) / lengths.count[:, None]


# The modules whose forward takes the batch's sequence lengths.
_WITH_LENGTHS = (LSTMLayer, MaskedMean, SelfAttention, Residual, Concat)


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


class Builder:
    """Turns IR nodes into modules and remembers which torch parameter holds each
    canonical trainable parameter (for gradient fingerprints)."""

    def __init__(self, weights: Weights, device: torch.device):
        self.weights = weights
        # Modules are made on the device, their parameters left uninitialised
        # (torch.nn.utils.skip_init), and the canonical arrays copied in: torch's own
        # random init of VGG-16's 138 M parameters, then a copy on the host and another
        # to the device, took 18 of the 180 s of PyTorch's default-gpu worker on an H100.
        self.device = device
        # The encoders a TiedDense may name: Dense layers and Embedding tables.
        self.encoders: dict[str, nn.Linear | nn.Embedding] = {}
        self.params: dict[str, nn.Parameter] = {}

    def sequence(self, nodes: tuple[ir.Node, ...]) -> Sequence:
        return Sequence([self.node(node) for node in nodes])

    def _load(self, param: nn.Parameter, name: str, array: np.ndarray,
              transposed: bool = False) -> None:
        """Copies ``array`` in; ``transposed``: its transpose, taken on the device."""
        with torch.no_grad():
            values = _tensor(array).to(param.device)
            param.copy_(values.T if transposed else values)
        self.params[name] = param

    def _module(self, kind: type[nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
        return nn.utils.skip_init(kind, *args, device=self.device, **kwargs)

    def node(self, node: ir.Node) -> nn.Module:
        method = _TABLE.get(type(node))
        if method is None:
            raise TypeError(f"no torch realisation for {type(node).__name__}")
        return method(self, node)

    # --- one method per op, in the order of models.ops.OPS --------------------------------
    def conv2d(self, node: ir.Conv2d) -> nn.Module:
        w = self.weights
        conv = self._module(nn.Conv2d, node.in_channels, node.out_channels, node.kernel,
                            node.stride, node.padding, groups=node.groups, bias=node.bias)
        self._load(conv.weight, f"{node.name}.weight", w[f"{node.name}.weight"])
        if node.bias:
            self._load(conv.bias, f"{node.name}.bias", w[f"{node.name}.bias"])
        return conv

    def pool2d(self, node: ir.Pool2d) -> nn.Module:
        if node.kind == "max":
            return nn.MaxPool2d(node.kernel, node.stride, node.padding, ceil_mode=node.ceil_mode)
        return nn.AvgPool2d(node.kernel, node.stride, 0, ceil_mode=node.ceil_mode)

    def global_avg_pool(self, node: ir.GlobalAvgPool) -> nn.Module:
        return GlobalAvgPool()

    def activation(self, node: ir.Activation) -> nn.Module:
        # In-place ReLU, as torchvision's models use it.
        # GELU: nn.GELU's default is the exact (erf) form; approximate="tanh" is GPT-2's.
        return {"relu": lambda: nn.ReLU(inplace=True), "tanh": nn.Tanh,
                "sigmoid": nn.Sigmoid, "gelu_erf": nn.GELU,
                "gelu_tanh": lambda: nn.GELU(approximate="tanh")}[node.kind]()

    def lrn(self, node: ir.LRN) -> nn.Module:
        return nn.LocalResponseNorm(node.size, node.alpha, node.beta, node.k)

    def batch_norm(self, node: ir.BatchNorm) -> nn.Module:
        w = self.weights
        # momentum 0 keeps the running statistics canonical while gradient passes
        # run in training mode; the update kernel still runs, as in training.
        bn = nn.BatchNorm2d(node.num_features, eps=node.eps, momentum=0.0, device=self.device)
        self._load(bn.weight, f"{node.name}.gamma", w[f"{node.name}.gamma"])
        self._load(bn.bias, f"{node.name}.beta", w[f"{node.name}.beta"])
        with torch.no_grad():
            bn.running_mean.copy_(_tensor(w[f"{node.name}.running_mean"]).to(self.device))
            bn.running_var.copy_(_tensor(w[f"{node.name}.running_var"]).to(self.device))
        return bn

    def layer_norm(self, node: ir.LayerNorm) -> nn.Module:
        norm = self._module(nn.LayerNorm, node.features, eps=node.eps)
        self._load(norm.weight, f"{node.name}.gamma", self.weights[f"{node.name}.gamma"])
        self._load(norm.bias, f"{node.name}.beta", self.weights[f"{node.name}.beta"])
        return norm

    def dense(self, node: ir.Dense) -> nn.Module:
        w = self.weights
        linear = self._module(nn.Linear, node.in_features, node.out_features, bias=node.bias)
        self._load(linear.weight, f"{node.name}.weight", w[f"{node.name}.weight"],
                   transposed=True)
        if node.bias:
            self._load(linear.bias, f"{node.name}.bias", w[f"{node.name}.bias"])
        self.encoders[node.name] = linear
        return linear

    def tied_dense(self, node: ir.TiedDense) -> nn.Module:
        # nn.Linear applies to the last axis, so vectors and sequences alike.
        bias = _tensor(self.weights[f"{node.name}.bias"]).clone() if node.bias else None
        tied = TiedLinear(self.encoders[node.tied_to], bias)
        if node.bias:
            self.params[f"{node.name}.bias"] = tied.bias
        return tied

    def dropout(self, node: ir.Dropout) -> nn.Module:
        return nn.Identity()

    def flatten(self, node: ir.Flatten) -> nn.Module:
        return Flatten()

    def residual(self, node: ir.Residual) -> nn.Module:
        shortcut = self.sequence(node.shortcut) if node.shortcut else None
        return Residual(self.sequence(node.body), shortcut)

    def concat(self, node: ir.Concat) -> nn.Module:
        return Concat([self.sequence(branch) for branch in node.branches])

    def embedding(self, node: ir.Embedding) -> nn.Module:
        embedding = self._module(nn.Embedding, node.vocab, node.dim)
        self._load(embedding.weight, f"{node.name}.table", self.weights[f"{node.name}.table"])
        self.encoders[node.name] = embedding
        return embedding

    def _parameter(self, name: str) -> nn.Parameter:
        """A parameter holding the canonical array ``name`` as stored, on the device."""
        param = nn.Parameter(_tensor(self.weights[name]).to(self.device))
        self.params[name] = param
        return param

    def position_embedding(self, node: ir.PositionEmbedding) -> nn.Module:
        segments = self._parameter(f"{node.name}.segments") if node.segments else None
        return PositionEmbedding(self._parameter(f"{node.name}.table"), segments)

    def patch_embedding(self, node: ir.PatchEmbedding) -> nn.Module:
        conv = self.conv2d(ir.Conv2d(node.name, node.in_channels, node.dim,
                                     (node.patch, node.patch), (node.patch, node.patch)))
        token = self._parameter(f"{node.name}.class_token") if node.class_token else None
        return PatchEmbedding(conv, token)

    def self_attention(self, node: ir.SelfAttention) -> nn.Module:
        qkv = self.dense(ir.Dense(f"{node.name}.qkv", node.dim, 3 * node.dim))
        out = self.dense(ir.Dense(f"{node.name}.out", node.dim, node.dim))
        return SelfAttention(node, qkv, out)

    def first_token(self, node: ir.FirstToken) -> nn.Module:
        return FirstToken()

    def lstm(self, node: ir.LSTM) -> nn.Module:
        layer = LSTMLayer(node, self.weights)
        self.params[f"{node.name}.w_ih"] = layer.lstm.weight_ih_l0
        self.params[f"{node.name}.w_hh"] = layer.lstm.weight_hh_l0
        self.params[f"{node.name}.bias"] = layer.lstm.bias_ih_l0
        return layer

    def mean_over_time(self, node: ir.MeanOverTime) -> nn.Module:
        return MaskedMean()


# Every op's method, checked when this module is imported (models.ops.builder_table).
_TABLE = builder_table(Builder)


def build(model: ir.Model, weights: Weights, device: torch.device | str = "cpu",
          ) -> tuple[Sequence, Sequence, dict[str, nn.Parameter]]:
    """(frozen prefix, trainable body, canonical name → body parameter), on ``device``."""
    builder = Builder(weights, torch.device(device))
    frozen = builder.sequence(model.frozen)
    frozen_names = set(builder.params)
    body = builder.sequence(model.body)
    for param in frozen.parameters():
        param.requires_grad_(False)
    trainable = {name: p for name, p in builder.params.items()
                 if name not in frozen_names and p.requires_grad}
    return frozen, body, trainable
