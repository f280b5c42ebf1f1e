"""The IR realised as an ONNX graph built with ``onnx.helper``, the canonical weights as
initializers, so this adapter needs no other framework to make its model.

Every IR node becomes the standard ONNX operator an exporter would emit (Conv, MaxPool,
BatchNormalization, Gemm, LSTM ...), so ONNX Runtime runs its own kernels and graph
optimisations on a graph it would also get from ``torch.onnx.export``. Shapes are static
(the batch is known when the graph is built), which lets ORT plan memory and fold shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from adapters.base import Unsupported
from models import ir
from models.analysis import LayerInfo, analyse
from models.families.transformer import not_a_decoder
from models.ops import builder_table
from models.ops.activation import GELU_A, GELU_C
from models.weights import Weights

# What self_attention (below) writes, recorded in each row of a model with attention with
# the session's graph optimisation level.
ATTENTION = "ONNX MatMul Q·Kᵀ, Where mask, Softmax, MatMul P·V (opset 21: no Attention op)"
# What self_attention writes where the builder is asked for ONNX Runtime's fused op.
FUSED_ATTENTION = "com.microsoft Attention (QKV projection, scaled dot product, mask: one kernel)"
# ONNX Runtime's contrib operators (Attention, and those its transformer optimizer writes:
# SkipLayerNormalization, FastGelu, BiasGelu ...) live in this domain, version 1
# (onnxruntime docs/ContribOperators.md).
MS_DOMAIN = "com.microsoft"

# Opset 21 with IR version 10 is ONNX 1.16's pairing (onnx docs/Versioning.md); ONNX
# Runtime implements it from release 1.18 on (onnxruntime docs/Versioning.md, version
# matrix), so both the pinned onnxruntime 1.31.1 and the GPU host's preinstalled 1.30 load
# these graphs. Nothing newer is needed: every operator used here is older than opset 21.
OPSET = 21
IR_VERSION = 10

INPUT = "input"       # the batch: float (N, ...) or int32 token ids (N, T)
LENGTHS = "lengths"   # int32 (N,): valid steps per sequence (token models only)
OUTPUT = "output"

# ONNX LSTM stacks its gates as (i, o, f, c) (onnx Operators.md, LSTM); the IR's canonical
# order is (i, f, g, o), g being ONNX's c. These are the IR gate indices in ONNX order.
ONNX_GATE_ORDER = (0, 3, 1, 2)


@dataclass(frozen=True)
class Value:
    """A tensor of the graph being built and its rank (Dense picks Gemm for rank 2)."""

    name: str
    rank: int


def lstm_weights(w_ih: np.ndarray, w_hh: np.ndarray, bias: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Canonical (in, 4H), (H, 4H), (4H,) in gate order (i, f, g, o) → ONNX's W
    (1, 4H, in), R (1, 4H, H) and B (1, 8H) in gate order (i, o, f, c). ONNX adds an
    input bias and a recurrent bias; the IR has one, so the recurrent half is zero."""
    hidden = w_hh.shape[0]

    def reorder(matrix: np.ndarray) -> np.ndarray:  # gates along the last axis
        gates = np.split(matrix, 4, axis=-1)
        return np.concatenate([gates[i] for i in ONNX_GATE_ORDER], axis=-1)

    w = reorder(w_ih).T[None]
    r = reorder(w_hh).T[None]
    b = np.concatenate([reorder(bias), np.zeros(4 * hidden, bias.dtype)])[None]
    return (np.ascontiguousarray(w, np.float32), np.ascontiguousarray(r, np.float32),
            np.ascontiguousarray(b, np.float32))


def cache_names(kind: str, layer: int, stacked: bool) -> tuple[str, ...]:
    """The graph's names of one attention layer's cache, ``kind`` "past" (decode input) or
    "present" (output): keys and values apart, or ``stacked`` in one tensor."""
    return (f"{kind}.{layer}",) if stacked else (f"{kind}.{layer}.key", f"{kind}.{layer}.value")


@dataclass
class KVCache:
    """What a cached pass of a decoder (greedy generation, adapters/ort/generate.py) adds
    to the graph: each self-attention's keys and values over every position so far leave
    the graph as outputs (``present``); in the decode graph those of the earlier positions
    come in as inputs (``past``, of symbolic length) that the new position's are
    concatenated to. Standard ops keep keys and values apart, (N, heads, S, d) each;
    ``stacked``: com.microsoft Attention's one (2, N, heads, S, d) ``past``/``present``
    (onnxruntime docs/ContribOperators.md, Attention). Layers are numbered in the order
    the builder meets them (``take``)."""

    decode: bool
    stacked: bool
    layers: int = 0

    def take(self) -> int:
        self.layers += 1
        return self.layers - 1


class Builder:
    """Turns IR nodes into ONNX nodes; every value name is unique in the graph."""

    def __init__(self, weights: Weights, layers: dict[str, LayerInfo], lengths: Value | None,
                 steps: int, fused_attention: bool = False, cache: KVCache | None = None):
        self.weights = weights
        self.fused_attention = fused_attention
        self.cache = cache
        self.layers = layers        # per-example shapes of every node, from models.analysis
        self.lengths = lengths
        self.steps = steps          # sequence length of a token batch (static)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.names: set[str] = {INPUT, LENGTHS, OUTPUT}
        # Dense or Embedding name -> its weight initializer, which a TiedDense reads
        self.tied_weights: dict[str, str] = {}
        self.masks: dict[tuple[bool, bool], str] = {}   # (causal, padding) -> boolean mask

    def fresh(self, name: str) -> str:
        candidate, index = name, 1
        while candidate in self.names:
            candidate, index = f"{name}_{index}", index + 1
        self.names.add(candidate)
        return candidate

    def initializer(self, name: str, array: np.ndarray) -> str:
        name = self.fresh(name)
        # asarray keeps a 0-d array a scalar (ascontiguousarray would make it (1,)).
        self.initializers.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name

    def param(self, name: str) -> str:
        """A canonical weight, under its canonical name."""
        return self.initializer(name, self.weights[name])

    def op(self, op_type: str, inputs: list[str], name: str, domain: str | None = None,
           **attributes) -> str:
        output = self.fresh(name)
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output,
                                           domain=domain, **attributes))
        return output

    def sequence(self, nodes: tuple[ir.Node, ...], x: Value) -> Value:
        for node in nodes:
            x = self.node(node, x)
        return x

    def node(self, node: ir.Node, x: Value) -> Value:
        method = _TABLE.get(type(node))
        if method is None:
            raise Unsupported(f"ONNX has no mapping for IR node '{node.name}' "
                              f"({type(node).__name__})")
        return method(self, node, x)

    # --- one method per op, in the order of models.ops.OPS --------------------------------
    def conv2d(self, node: ir.Conv2d, x: Value) -> Value:
        n = node.name
        inputs = [x.name, self.param(f"{n}.weight")]
        if node.bias:
            inputs.append(self.param(f"{n}.bias"))
        (ph, pw) = node.padding
        return Value(self.op("Conv", inputs, n, kernel_shape=list(node.kernel),
                             strides=list(node.stride), pads=[ph, pw, ph, pw],
                             group=node.groups), 4)

    def pool2d(self, node: ir.Pool2d, x: Value) -> Value:
        if node.kind == "avg" and node.padding != (0, 0):
            raise Unsupported(f"IR node '{node.name}': padded average pooling has no defined "
                              "semantics in the IR")
        # count_include_pad=0: windows that run past the input average their valid elements
        # only, as Caffe and the IR do (it is also ONNX's default).
        extra = {"count_include_pad": 0} if node.kind == "avg" else {}
        op_type = "MaxPool" if node.kind == "max" else "AveragePool"
        return Value(self.op(op_type, [x.name], node.name, kernel_shape=list(node.kernel),
                             strides=list(node.stride), **self.pool_padding(node), **extra), 4)

    def global_avg_pool(self, node: ir.GlobalAvgPool, x: Value) -> Value:
        pooled = self.op("GlobalAveragePool", [x.name], f"{node.name}.pool")
        return Value(self.op("Flatten", [pooled], node.name, axis=1), 2)

    def activation(self, node: ir.Activation, x: Value) -> Value:
        if node.kind in ("gelu_erf", "gelu_tanh"):
            return Value(self.gelu(node, x.name), x.rank)
        kind = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[node.kind]
        return Value(self.op(kind, [x.name], node.name), x.rank)

    def lrn(self, node: ir.LRN, x: Value) -> Value:
        # ONNX LRN divides alpha by size, as Caffe's (and the IR's) formula does:
        # y = x / (bias + alpha / size * square_sum) ** beta (onnx Operators.md, LRN).
        return Value(self.op("LRN", [x.name], node.name, size=node.size, alpha=node.alpha,
                             beta=node.beta, bias=node.k), x.rank)

    def batch_norm(self, node: ir.BatchNorm, x: Value) -> Value:
        # Inference form: the running statistics (training_mode defaults to 0).
        inputs = [x.name] + [self.param(f"{node.name}.{p}") for p in
                             ("gamma", "beta", "running_mean", "running_var")]
        return Value(self.op("BatchNormalization", inputs, node.name, epsilon=node.eps), x.rank)

    def layer_norm(self, node: ir.LayerNorm, x: Value) -> Value:
        # LayerNormalization (opset 17 on, onnx Operators.md): mean and biased variance
        # over the axes from ``axis`` on, here the last, then Scale and B per feature.
        inputs = [x.name, self.param(f"{node.name}.gamma"), self.param(f"{node.name}.beta")]
        return Value(self.op("LayerNormalization", inputs, node.name, axis=-1,
                             epsilon=node.eps), x.rank)

    def dense(self, node: ir.Dense, x: Value) -> Value:
        weight = self.param(f"{node.name}.weight")   # canonical (in, out): Gemm's B as it is
        self.tied_weights[node.name] = weight
        bias = self.param(f"{node.name}.bias") if node.bias else None
        return self.affine(node.name, x, weight, bias, transpose=False)

    def tied_dense(self, node: ir.TiedDense, x: Value) -> Value:
        # The decoder reads the encoder's own initializer, transposed (transB=1 for a
        # vector, a Transpose before MatMul for a sequence): one tensor in the graph, so the
        # tie holds by construction. Tied to a Dense (in, out), x @ weight.T; tied to an
        # Embedding (vocab, dim), the logits x @ table.T: the same product either way.
        bias = self.param(f"{node.name}.bias") if node.bias else None
        return self.affine(node.name, x, self.tied_weights[node.tied_to], bias, transpose=True)

    def dropout(self, node: ir.Dropout, x: Value) -> Value:
        return x   # identity when benchmarking (models.ir.Dropout)

    def flatten(self, node: ir.Flatten, x: Value) -> Value:
        return Value(self.op("Flatten", [x.name], node.name, axis=1), 2)

    def residual(self, node: ir.Residual, x: Value) -> Value:
        body = self.sequence(node.body, x)
        shortcut = self.sequence(node.shortcut, x) if node.shortcut else x
        return Value(self.op("Add", [body.name, shortcut.name], node.name), body.rank)

    def concat(self, node: ir.Concat, x: Value) -> Value:
        branches = [self.sequence(branch, x).name for branch in node.branches]
        return Value(self.op("Concat", branches, node.name, axis=1), 4)

    def embedding(self, node: ir.Embedding, x: Value) -> Value:
        table = self.param(f"{node.name}.table")
        self.tied_weights[node.name] = table
        return Value(self.op("Gather", [table, x.name], node.name, axis=0), x.rank + 1)

    def position_embedding(self, node: ir.PositionEmbedding, x: Value) -> Value:
        # The first T rows of the table, T read from the input (Shape-15's start/end): a
        # padded batch is as long as its longest sequence, which can be shorter than the
        # model's steps. Plus row 0 of the token-type table, broadcast over the batch by
        # Add's numpy-style broadcasting.
        # In a cached decode the new steps start at the cache's length (cache_offset).
        n = node.name
        steps = self.op("Shape", [x.name], f"{n}.steps", start=1, end=2)
        if self.cache is not None and self.cache.decode:
            start = self.cache_offset(n)
            steps = self.op("Add", [start, steps], f"{n}.end")
        else:
            start = self.shape_constant(f"{n}.start", [0])
        rows = self.op("Slice", [self.param(f"{n}.table"), start, steps,
                                 self.shape_constant(f"{n}.axes", [0])], f"{n}.rows")
        if node.segments:
            segment = self.slice(self.param(f"{n}.segments"), 0, 1, f"{n}.segment")
            rows = self.op("Add", [rows, segment], f"{n}.added")
        return Value(self.op("Add", [x.name, rows], n), x.rank)

    def patch_embedding(self, node: ir.PatchEmbedding, x: Value) -> Value:
        # A Conv of kernel and stride p is the patches' linear projection (Dosovitskiy et
        # al. 2021, 3.1); (N, dim, H/p, W/p) -> (N, HW/p², dim) is row-major patch order.
        n, p = node.name, node.patch
        conv = self.op("Conv", [x.name, self.param(f"{n}.weight"), self.param(f"{n}.bias")],
                       f"{n}.conv", kernel_shape=[p, p], strides=[p, p])
        flat = self.op("Reshape", [conv, self.shape_constant(f"{n}.flat_shape",
                                                              [0, node.dim, -1])], f"{n}.flat")
        if not node.class_token:
            return Value(self.op("Transpose", [flat], n, perm=[0, 2, 1]), 3)
        patches = self.op("Transpose", [flat], f"{n}.patches", perm=[0, 2, 1])
        token = self.op("Reshape", [self.param(f"{n}.class_token"),
                                    self.shape_constant(f"{n}.token_shape", [1, 1, node.dim])],
                        f"{n}.token")
        # Expand to (N, 1, dim): the batch size from the input's shape (Shape-15's
        # start/end), which ORT folds to a constant in this static graph.
        batch = self.op("Shape", [x.name], f"{n}.batch", start=0, end=1)
        shape = self.op("Concat", [batch, self.shape_constant(f"{n}.token_rest", [1, node.dim])],
                        f"{n}.tokens_shape", axis=0)
        tokens = self.op("Expand", [token, shape], f"{n}.tokens")
        return Value(self.op("Concat", [tokens, patches], n, axis=1), 3)

    def self_attention(self, node: ir.SelfAttention, x: Value) -> Value:
        # Standard ONNX ops, the decomposition torch.onnx.export also writes for scaled
        # dot-product attention below opset 23 (which adds an Attention op; the pinned
        # opset 21 has none): MatMul for Q Kᵀ, a boolean mask applied with Where(-inf),
        # Softmax over the keys (Softmax-13 normalises the one axis given), MatMul with V.
        # From ORT_ENABLE_EXTENDED on, ORT folds the Kᵀ transpose and the 1/√d scale into
        # one com.microsoft FusedMatMul (seen in its optimised graph).
        if self.fused_attention:
            return self.contrib_attention(node, x)
        n, heads = node.name, node.heads
        head = node.dim // heads
        qkv = self.affine(f"{n}.qkv", x, self.param(f"{n}.qkv.weight"),
                          self.param(f"{n}.qkv.bias"), transpose=False).name
        # (N, T, 3·dim) -> (N, T, 3, heads, d) -> (3, N, heads, T, d): columns q | k | v,
        # heads contiguous inside each (models/ir.py).
        split = self.op("Reshape", [qkv, self.shape_constant(f"{n}.heads_shape",
                                                             [0, 0, 3, heads, head])],
                        f"{n}.heads")
        stacked = self.op("Transpose", [split], f"{n}.stacked", perm=[2, 0, 3, 1, 4])
        q, k, v = (self.op("Gather", [stacked, self.initializer(f"{n}.{part}_index",
                                                                 np.array(i, np.int64))],
                           f"{n}.{part}", axis=0) for i, part in enumerate("qkv"))
        if self.cache is not None:
            k, v = self.cached_keys(k, v)
        keys_t = self.op("Transpose", [k], f"{n}.k_t", perm=[0, 1, 3, 2])
        scores = self.op("MatMul", [q, keys_t], f"{n}.qk")
        scale = self.initializer(f"{n}.scale", np.array(1.0 / np.sqrt(head), np.float32))
        scores = self.op("Mul", [scores, scale], f"{n}.scores")
        # A decode step's one query is the newest position: every cached key is visible.
        decoding = self.cache is not None and self.cache.decode
        mask = None if decoding else self.attention_mask(node, x)
        if mask is not None:
            minus_inf = self.initializer(f"{n}.minus_inf", np.array(-np.inf, np.float32))
            scores = self.op("Where", [mask, scores, minus_inf], f"{n}.masked")
        weights = self.op("Softmax", [scores], f"{n}.softmax", axis=-1)
        attended = self.op("MatMul", [weights, v], f"{n}.attended")        # (N, heads, T, d)
        merged = self.op("Transpose", [attended], f"{n}.merged", perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [merged, self.shape_constant(f"{n}.merge_shape",
                                                                 [0, 0, node.dim])],
                         f"{n}.concat")
        return self.affine(n, Value(merged, 3), self.param(f"{n}.out.weight"),
                           self.param(f"{n}.out.bias"), transpose=False)

    def first_token(self, node: ir.FirstToken, x: Value) -> Value:
        # Gather with a scalar index drops the step axis: (N, T, F) -> (N, F).
        index = self.initializer(f"{node.name}.index", np.array(0, np.int64))
        return Value(self.op("Gather", [x.name, index], node.name, axis=1), x.rank - 1)

    def lstm(self, node: ir.LSTM, x: Value) -> Value:
        n = node.name
        w, r, b = lstm_weights(*(self.weights[f"{n}.{p}"] for p in ("w_ih", "w_hh", "bias")))
        # ONNX LSTM's default layout is (T, N, F) in and (T, directions, N, H) out.
        steps_first = self.op("Transpose", [x.name], f"{n}.in", perm=[1, 0, 2])
        inputs = [steps_first, self.initializer(f"{n}.W", w), self.initializer(f"{n}.R", r),
                  self.initializer(f"{n}.B", b)]
        if self.lengths is not None:
            # sequence_lens: state is held past each length, as the masked IR LSTM says.
            inputs.append(self.lengths.name)
        y = self.op("LSTM", inputs, f"{n}.lstm", hidden_size=node.hidden_size)
        one = self.initializer(f"{n}.direction_axis", np.array([1], np.int64))
        y = self.op("Squeeze", [y, one], f"{n}.squeeze")
        return Value(self.op("Transpose", [y], n, perm=[1, 0, 2]), 3)

    def mean_over_time(self, node: ir.MeanOverTime, x: Value) -> Value:
        n = node.name
        time_axis = self.initializer(f"{n}.time_axis", np.array([1], np.int64))
        if self.lengths is None:   # no mask: every step is valid
            return Value(self.op("ReduceMean", [x.name, time_axis], n, keepdims=0), 2)
        # mask[b, t] = t < lengths[b], made in the graph from the lengths input; the step
        # indices are a constant because shapes are static.
        steps = self.initializer(f"{n}.steps", np.arange(self.steps, dtype=np.int32))
        lengths = self.op("Unsqueeze", [self.lengths.name, time_axis], f"{n}.lengths")
        mask = self.op("Cast", [self.op("Less", [steps, lengths], f"{n}.valid")],
                       f"{n}.mask", to=TensorProto.FLOAT)
        feature_axis = self.initializer(f"{n}.feature_axis", np.array([2], np.int64))
        masked = self.op("Mul", [x.name, self.op("Unsqueeze", [mask, feature_axis],
                                                f"{n}.mask3")], f"{n}.masked")
        total = self.op("ReduceSum", [masked, time_axis], f"{n}.sum", keepdims=0)
        count = self.op("Cast", [lengths], f"{n}.count", to=TensorProto.FLOAT)
        return Value(self.op("Div", [total, count], n), 2)


    # --- helpers ---------------------------------------------------------------------
    def contrib_attention(self, node: ir.SelfAttention, x: Value) -> Value:
        """ONNX Runtime's fused com.microsoft Attention (contrib op, version 1;
        onnxruntime docs/ContribOperators.md): input (N, T, dim), weights (dim, 3·dim) with
        columns q | k | v and heads contiguous inside each, the IR's own packed layout
        (models/ir.py), bias (3·dim), scale 1/√d by default. ``unidirectional`` is the
        causal mask; the padding mask is the 1-D ``mask_index`` form, each sequence's
        valid length (keys at or past it are masked), which is the graph's ``lengths``
        input as it is. Masked scores get ``mask_filter_value`` (-10000) rather than -inf:
        after the row maximum is subtracted their exponent underflows to 0 in fp32 as -inf's
        does, since every row keeps at least its first key."""
        n = node.name
        inputs = [x.name, self.param(f"{n}.qkv.weight"), self.param(f"{n}.qkv.bias")]
        if node.padding and self.lengths is not None:
            inputs.append(self.lengths.name)
        if self.cache is None:
            attended = self.op("Attention", inputs, f"{n}.fused", domain=MS_DOMAIN,
                               num_heads=node.heads, unidirectional=int(node.causal))
        else:
            # With ``past`` (input 4, after an empty mask_index) the queries are the
            # positions after it, and ``unidirectional`` masks each one's later keys.
            layer = self.cache.take()
            if self.cache.decode:
                inputs += ["", cache_names("past", layer, True)[0]]
            present = cache_names("present", layer, True)[0]
            self.names.add(present)
            attended = self.fresh(f"{n}.fused")
            self.nodes.append(helper.make_node(
                "Attention", inputs, [attended, present], name=attended, domain=MS_DOMAIN,
                num_heads=node.heads, unidirectional=int(node.causal)))
        return self.affine(n, Value(attended, 3), self.param(f"{n}.out.weight"),
                           self.param(f"{n}.out.bias"), transpose=False)

    def cached_keys(self, k: str, v: str) -> tuple[str, str]:
        """One attention layer's keys and values (N, heads, T, d) in a cached pass: those of
        every position so far, which leave the graph as ``present``. Prefill: the prompt's
        own, the producing nodes renamed to the outputs; decode: ``past`` with the new
        position's appended (Concat on the step axis), as ONNX Runtime's GPT-2 graphs with
        past state do (onnxruntime.transformers gpt2_helper, its Concat-based past)."""
        layer = self.cache.take()
        present = cache_names("present", layer, False)
        if self.cache.decode:
            past = cache_names("past", layer, False)
            return (self.op("Concat", [past[0], k], present[0], axis=2),
                    self.op("Concat", [past[1], v], present[1], axis=2))
        for value, name in zip((k, v), present):
            producer = next(node for node in reversed(self.nodes) if node.output[0] == value)
            producer.output[0] = producer.name = name
            self.names.add(name)
        return present

    def cache_offset(self, name: str) -> str:
        """The first new position of a decode step, int64 (1,): the cache's length, read
        from the first layer's ``past`` (its step axis)."""
        axis = 3 if self.cache.stacked else 2
        return self.op("Shape", [cache_names("past", 0, self.cache.stacked)[0]],
                       f"{name}.offset", start=axis, end=axis + 1)

    def gelu(self, node: ir.Activation, x: str) -> str:
        """GELU as the formula of models/ops/activation.py in standard ops (Erf or Tanh),
        as torch.onnx.export writes it below opset 20. The node order is the one ORT's
        optimiser matches (onnxruntime/core/optimizer gelu_fusion.cc, and the Pow(x, 3)
        form of fast_gelu_fusion.cc): at ORT_ENABLE_EXTENDED and above the erf form runs as
        one Gelu kernel and the tanh form as one FastGelu kernel (tests/adapters/test_ort.py
        checks both)."""
        n = node.name

        def constant(label: str, value: float) -> str:
            return self.initializer(f"{n}.{label}", np.array(value, np.float32))

        if node.kind == "gelu_erf":      # ½x(1 + erf(x / √2))
            inner = self.op("Erf", [self.op("Div", [x, constant("sqrt2", np.sqrt(2.0))],
                                            f"{n}.scaled")], f"{n}.erf")
        else:                            # ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
            cube = self.op("Pow", [x, constant("three", 3.0)], f"{n}.cube")
            cubic = self.op("Add", [x, self.op("Mul", [cube, constant("a", GELU_A)],
                                               f"{n}.cube_a")], f"{n}.cubic")
            inner = self.op("Tanh", [self.op("Mul", [cubic, constant("c", GELU_C)],
                                             f"{n}.tanh_in")], f"{n}.tanh")
        one_plus = self.op("Add", [inner, constant("one", 1.0)], f"{n}.one_plus")
        half_x = self.op("Mul", [x, constant("half", 0.5)], f"{n}.half_x")
        return self.op("Mul", [half_x, one_plus], n)

    def attention_mask(self, node: ir.SelfAttention, x: Value) -> str | None:
        """Boolean (N or 1, 1, T, T), True where query t may attend to key s
        (models/ops/transformer/attention.py ``mask``); one per kind of mask, shared by
        every layer that uses it. None where nothing is masked. T is read from the input:
        a padded batch is as long as its longest sequence, which can be shorter than the
        model's steps."""
        padding = node.padding and self.lengths is not None
        key = (node.causal, padding)
        if key in self.masks:
            return self.masks[key]
        if not (node.causal or padding):
            return None
        n = node.name
        steps = self.op("Shape", [x.name], f"{n}.steps", start=1, end=2)
        count = self.op("Squeeze", [steps], f"{n}.step_count")
        positions = self.op("Range", [self.initializer(f"{n}.zero", np.array(0, np.int64)), count,
                                      self.initializer(f"{n}.one", np.array(1, np.int64))],
                            f"{n}.positions")
        mask = None
        if node.causal:   # key s <= query t: (1, 1, T, T)
            queries = self.op("Unsqueeze", [positions, self.shape_constant(f"{n}.query_axis", [1])],
                              f"{n}.queries")
            allowed = self.op("LessOrEqual", [positions, queries], f"{n}.causal_tt")
            mask = self.op("Unsqueeze", [allowed, self.shape_constant(f"{n}.causal_axes", [0, 1])],
                           f"{n}.causal")
        if padding:       # key s is valid where s < lengths[b]: (N, 1, 1, T)
            lengths = self.op("Cast", [self.lengths.name], f"{n}.lengths64", to=TensorProto.INT64)
            lengths = self.op("Unsqueeze", [lengths, self.shape_constant(f"{n}.lengths_axis", [1])],
                              f"{n}.lengths")
            valid = self.op("Less", [positions, lengths], f"{n}.valid_keys")
            keys = self.op("Unsqueeze", [valid, self.shape_constant(f"{n}.key_axes", [1, 2])],
                           f"{n}.key_mask")
            mask = keys if mask is None else self.op("And", [mask, keys], f"{n}.mask")
        self.masks[key] = mask
        return mask

    def slice(self, data: str, start: int, end: int, name: str) -> str:
        """Rows start:end of a tensor (axis 0)."""
        return self.op("Slice", [data, self.shape_constant(f"{name}.start", [start]),
                                 self.shape_constant(f"{name}.end", [end]),
                                 self.shape_constant(f"{name}.axes", [0])], name)

    def shape_constant(self, name: str, values: list[int]) -> str:
        return self.initializer(name, np.array(values, np.int64))

    def pool_padding(self, node: ir.Pool2d) -> dict[str, Any]:
        """ONNX's ceil mode gives ceil((size + 2 pad - kernel) / stride) + 1 outputs, but
        Caffe, PyTorch and the IR drop a last window that would start in the right padding
        (the IR's output size comes from models.analysis). Where the two differ, the IR's
        size is reached with ceil_mode=0 and a right padding just long enough for the last
        window, which pooling ignores like any padding."""
        layer = self.layers[node.name]
        begin, end, ceil = list(node.padding), list(node.padding), node.ceil_mode
        for axis in range(2):
            size, out = layer.in_shape[1 + axis], layer.out_shape[1 + axis]
            k, s, p = node.kernel[axis], node.stride[axis], node.padding[axis]
            if ceil and -(-(size + 2 * p - k) // s) + 1 != out:
                ceil = False
        if ceil != node.ceil_mode:
            for axis in range(2):
                size, out = layer.in_shape[1 + axis], layer.out_shape[1 + axis]
                k, s, p = node.kernel[axis], node.stride[axis], node.padding[axis]
                end[axis] = max(0, (out - 1) * s + k - size - p)
        return {"pads": begin + end, "ceil_mode": int(ceil)}

    def affine(self, name: str, x: Value, weight: str, bias: str | None,
               transpose: bool) -> Value:
        """``x @ weight (+ bias)``: Gemm for rank 2, MatMul and Add otherwise."""
        if x.rank == 2:
            inputs = [x.name, weight] + ([bias] if bias else [])
            return Value(self.op("Gemm", inputs, name, transB=int(transpose)), 2)
        if transpose:
            weight = self.op("Transpose", [weight], f"{name}.weight_t", perm=[1, 0])
        y = self.op("MatMul", [x.name, weight], f"{name}.matmul" if bias else name)
        return Value(self.op("Add", [y, bias], name) if bias else y, x.rank)

# Every op's method, checked when this module is imported (models.ops.builder_table).
_TABLE = builder_table(Builder)


def build(model: ir.Model, weights: Weights, x_shape: tuple[int, ...],
          with_lengths: bool, fused_attention: bool = False) -> onnx.ModelProto:
    """The frozen prefix and the body as one checked ONNX model with inputs ``input``
    (and ``lengths`` where ``with_lengths``) and output ``output``. The frozen prefix
    needs no separate graph: an inference graph has no gradients to stop.
    ``fused_attention``: self-attention as ONNX Runtime's com.microsoft Attention
    (``Builder.contrib_attention``) instead of standard ops."""
    tokens = model.input.kind == "tokens"
    x_type = TensorProto.INT32 if tokens else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(INPUT, x_type, list(x_shape))]
    lengths = None
    if with_lengths:
        inputs.append(helper.make_tensor_value_info(LENGTHS, TensorProto.INT32, [x_shape[0]]))
        lengths = Value(LENGTHS, 1)
    stats = analyse(model)
    builder = Builder(weights, {layer.name: layer for layer in stats.layers}, lengths,
                      x_shape[1] if tokens else 0, fused_attention)
    x = builder.sequence(model.frozen + model.body, Value(INPUT, len(x_shape)))
    last = builder.nodes[-1] if builder.nodes else None
    if last is not None and last.output[0] == x.name:
        last.output[0] = OUTPUT   # the last node writes the graph output itself, no copy
    else:                         # a network of identities only
        builder.nodes.append(helper.make_node("Identity", [x.name], [OUTPUT], name=OUTPUT))
    # The output shape the IR analysis predicts: the strict check below fails if the
    # graph's own shape inference disagrees. A per-step output is as long as this batch,
    # which a padded batch can make shorter than the model's steps.
    out_shape = [x_shape[0], *stats.output_shape]
    if tokens and len(stats.output_shape) == 2:
        out_shape[1] = x_shape[1]
    graph = helper.make_graph(builder.nodes, model.name, inputs,
                              [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT,
                                                             out_shape)],
                              builder.initializers)
    contrib = any(node.domain == MS_DOMAIN for node in builder.nodes)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(MS_DOMAIN, 1)]
                                                 if contrib else [])
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION,
                              producer_name="dlbench")
    # full_check adds strict shape inference, which costs little next to serialising the
    # weights that every check does. ONNX's checker knows no com.microsoft schema, so a
    # graph with contrib ops is checked without it (ONNX Runtime checks it when it loads).
    onnx.checker.check_model(proto, full_check=not contrib)
    return proto


# --- greedy generation with a key/value cache (adapters/ort/generate.py) ------------------

LOGITS = "logits"     # float (1, 1, vocab): the last position's logits
NEXT = "next"         # int64 (1, 1): their argmax, the greedy next token


def build_generation(model: ir.Model, weights: Weights, decode: bool,
                     fused_attention: bool = False) -> onnx.ModelProto:
    """One of the two graphs of greedy generation at batch 1, by the same ``Builder`` as
    ``build`` with a ``KVCache``: the prefill graph takes the prompt (``input``, int32
    (1, P), P symbolic) and the decode graph one token (1, 1) and every layer's ``past``;
    both give ``present`` per layer, the last position's ``logits`` and ``next``, their
    ArgMax, so that a timed step fetches one int. The blocks that mix positions
    (attention, position embedding) run over every position; the ones after the last of
    them act on each position alone, so the prefill gives them its last position only
    (GPT-2's final LayerNorm and LM head: the vocabulary-wide product once, not P times)."""
    reason = not_a_decoder(model)
    if reason:
        raise Unsupported(reason)
    attention = [node for node in ir.walk(model.body) if isinstance(node, ir.SelfAttention)]
    heads, head = attention[0].heads, attention[0].dim // attention[0].heads
    stats = analyse(model)
    vocab = stats.output_shape[-1]
    mixing = (ir.SelfAttention, ir.PositionEmbedding)
    last = max(i for i, node in enumerate(model.body)
               if any(isinstance(inner, mixing) for inner in ir.walk((node,))))
    cache = KVCache(decode, stacked=fused_attention)
    builder = Builder(weights, {layer.name: layer for layer in stats.layers}, None, 0,
                      fused_attention, cache)
    steps: int | str = 1 if decode else "prompt"
    x = builder.sequence(model.body[:last + 1], Value(INPUT, 2))
    if not decode:
        x = Value(builder.op("Slice", [x.name, builder.shape_constant("last.start", [-1]),
                                       builder.shape_constant("last.end", [np.iinfo(np.int64).max]),
                                       builder.shape_constant("last.axes", [1])],
                             "last_position"), 3)
    x = builder.sequence(model.body[last + 1:], x)
    builder.nodes[-1].output[0] = builder.nodes[-1].name = LOGITS
    builder.nodes.append(helper.make_node("ArgMax", [LOGITS], [NEXT], name=NEXT, axis=-1,
                                          keepdims=0))

    def cache_info(kind: str, length: int | str) -> list[onnx.ValueInfoProto]:
        shape = [2, 1, heads, length, head] if fused_attention else [1, heads, length, head]
        return [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                for layer in range(len(attention))
                for name in cache_names(kind, layer, fused_attention)]

    inputs = [helper.make_tensor_value_info(INPUT, TensorProto.INT32, [1, steps])]
    if decode:
        inputs += cache_info("past", "past")
    outputs = [helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, [1, 1, vocab]),
               helper.make_tensor_value_info(NEXT, TensorProto.INT64, [1, 1]),
               *cache_info("present", "total" if decode else steps)]
    graph = helper.make_graph(builder.nodes, f"{model.name}.{'decode' if decode else 'prefill'}",
                              inputs, outputs, builder.initializers)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(MS_DOMAIN, 1)]
                                                 if fused_attention else [])
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION,
                              producer_name="dlbench")
    onnx.checker.check_model(proto, full_check=not fused_attention)
    return proto


# --- ONNX Runtime's transformer optimizer (the ort_fused variant) --------------------------

# The optimizer's fused op types per pattern (onnxruntime.transformers, 1.31:
# fusion_layernorm.py, fusion_skiplayernorm.py, fusion_gelu.py, fusion_fastgelu.py,
# fusion_biasgelu.py, fusion_attention.py). A fused op type the builder wrote itself
# (Attention; LayerNormalization, a standard op from opset 17 on) proves no fusion: the
# row lists those apart (FusedGraph.written).
FUSED_KINDS = {
    "attention": ("Attention", "MultiHeadAttention"),
    "gelu": ("Gelu", "FastGelu", "BiasGelu", "GemmFastGelu"),
    "skip_layer_norm": ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"),
}


@dataclass(frozen=True)
class FusedGraph:
    """The graph ONNX Runtime's transformer optimizer returned, and what it fused: its own
    statistics (``get_fused_operator_statistics``, op type -> count) less the ops of those
    types that the graph had before (``written``: the builder's, not fusions) and, per kind
    of fusion the IR calls for, what the graph still lacks (empty when nothing)."""

    proto: onnx.ModelProto
    model_type: str
    fusions: dict[str, int]
    written: dict[str, int]
    not_fused: tuple[str, ...]
    float16: bool


def optimizer_model_type(model: ir.Model) -> str:
    """The optimizer's model type (onnxruntime.transformers.optimizer MODEL_TYPES) whose
    fusions fit the IR: ViT's patch embedding, GPT-2's causal attention, else BERT's."""
    nodes = list(ir.all_nodes(model))
    if any(isinstance(node, ir.PatchEmbedding) for node in nodes):
        return "vit"
    if any(isinstance(node, ir.SelfAttention) and node.causal for node in nodes):
        return "gpt2"
    return "bert"


def expected_fusions(model: ir.Model) -> dict[str, int]:
    """The least number of each fused op the IR calls for: one Attention per
    self-attention, one fused GELU per GELU, and a SkipLayerNormalization per residual add
    that a LayerNorm reads next (post-LN: the block's own LayerNorm; pre-LN: the next
    block's first one, or the final one). The optimizer may fuse more (an embedding's Add
    before a LayerNorm)."""
    nodes = list(ir.all_nodes(model))

    def starts_with_norm(node: ir.Node) -> bool:
        return isinstance(node, ir.LayerNorm) or (
            isinstance(node, ir.Residual) and isinstance(node.body[0], ir.LayerNorm))

    body = model.frozen + model.body
    return {"attention": sum(isinstance(node, ir.SelfAttention) for node in nodes),
            "gelu": sum(isinstance(node, ir.Activation) and node.kind.startswith("gelu")
                        for node in nodes),
            "skip_layer_norm": sum(isinstance(node, ir.Residual) and starts_with_norm(after)
                                   for node, after in zip(body, body[1:]))}


def float16_graph(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` through ONNX Runtime's float16 conversion, the one ``optimise_transformer``
    applies to the fused graph (onnxruntime.transformers OnnxModel.convert_float_to_float16,
    1.31.1), without the transformer fusions: float16 weights and activations, float32
    input and output (``keep_io_types``), its default block list's ops kept in float32."""
    try:
        from onnxruntime.transformers.onnx_model import OnnxModel
    except ImportError as error:
        raise Unsupported(f"onnxruntime.transformers cannot be imported: {error}") from None
    converted = OnnxModel(proto)
    try:
        converted.convert_float_to_float16(keep_io_types=True)
    except ImportError as error:   # sympy, for symbolic shape inference
        raise Unsupported("ONNX Runtime's float16 conversion needs a package this environment "
                          f"lacks: {' '.join(str(error).split())}") from None
    return converted.model


def optimise_transformer(model: ir.Model, proto: onnx.ModelProto, float16: bool,
                         keep_io_types: bool | list[str] = True) -> FusedGraph:
    """``proto`` (built with ``fused_attention``) through ONNX Runtime's transformer
    optimizer, ``optimize_model`` (onnxruntime.transformers.optimizer, 1.31.1), with the
    model's heads and width; then, for ``float16``, its ``convert_float_to_float16`` with
    ``keep_io_types`` (float32 input and output, so the IOBinding path is unchanged;
    LayerNorm-like ops kept in float32 by its default block list), or those inputs and
    outputs it names (generation keeps its key/value cache in float16 between steps).

    opt_level 0: the optimizer's Python fusions alone. Its levels 1 and up first run an
    InferenceSession over the graph, which the session does here anyway at ORT_ENABLE_ALL,
    and in 1.31.1 ``optimize_by_onnxruntime`` imports torch for its version string, which
    this venv does not have. The Python fusions need sympy (symbolic shape inference).

    Attention is written by the builder as com.microsoft Attention: the optimizer's
    attention fusions match the node patterns torch.onnx.export writes for Hugging Face's
    modules (separate Q, K, V projections; GPT-2's Split), not this graph's packed QKV
    Gather, so left to them attention stayed unfused (seen on the tiny models)."""
    try:
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as error:
        raise Unsupported(f"onnxruntime.transformers cannot be imported: {error}") from None
    attention = next(node for node in ir.all_nodes(model) if isinstance(node, ir.SelfAttention))
    model_type = optimizer_model_type(model)
    # Counted first: at opt_level 0 the optimizer rewrites ``proto`` itself.
    before: dict[str, int] = {}
    for node in proto.graph.node:
        before[node.op_type] = before.get(node.op_type, 0) + 1
    try:
        optimizer = optimize_model(proto, model_type=model_type, num_heads=attention.heads,
                                   hidden_size=attention.dim, opt_level=0)
        statistics = optimizer.get_fused_operator_statistics()
        if float16:
            optimizer.convert_float_to_float16(keep_io_types=keep_io_types)
    except ImportError as error:   # sympy, for symbolic shape inference
        raise Unsupported("ONNX Runtime's transformer optimizer needs a package this "
                          f"environment lacks: {' '.join(str(error).split())}") from None
    fusions = {op: int(count) - before.get(op, 0) for op, count in statistics.items()
               if int(count) > before.get(op, 0)}
    written = {op: before[op] for op in statistics if before.get(op)}
    in_graph = {op: int(count) for op, count in statistics.items()}

    def present(kind: str) -> int:
        return sum(in_graph.get(op, 0) for op in FUSED_KINDS[kind])

    not_fused = tuple(f"{kind}: {present(kind)} of {count} in the graph"
                      for kind, count in expected_fusions(model).items() if present(kind) < count)
    return FusedGraph(optimizer.model, model_type, fusions, written, not_fused, float16)
