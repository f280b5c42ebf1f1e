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
from models.ops import builder_table
from models.weights import Weights

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


class Builder:
    """Turns IR nodes into ONNX nodes; every value name is unique in the graph."""

    def __init__(self, weights: Weights, layers: dict[str, LayerInfo], lengths: Value | None,
                 steps: int):
        self.weights = weights
        self.layers = layers        # per-example shapes of every node, from models.analysis
        self.lengths = lengths
        self.steps = steps          # sequence length of a token batch (static)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.names: set[str] = {INPUT, LENGTHS, OUTPUT}
        self.dense_weights: dict[str, str] = {}   # Dense name -> its weight initializer

    def fresh(self, name: str) -> str:
        candidate, index = name, 1
        while candidate in self.names:
            candidate, index = f"{name}_{index}", index + 1
        self.names.add(candidate)
        return candidate

    def initializer(self, name: str, array: np.ndarray) -> str:
        name = self.fresh(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def param(self, name: str) -> str:
        """A canonical weight, under its canonical name."""
        return self.initializer(name, self.weights[name])

    def op(self, op_type: str, inputs: list[str], name: str, **attributes) -> str:
        output = self.fresh(name)
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output,
                                           **attributes))
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
        self.dense_weights[node.name] = weight
        bias = self.param(f"{node.name}.bias") if node.bias else None
        return self.affine(node.name, x, weight, bias, transpose=False)

    def tied_dense(self, node: ir.TiedDense, x: Value) -> Value:
        # The decoder reads the encoder's own initializer with transB=1: one tensor in
        # the graph, so the tie holds by construction (no transposed copy).
        bias = self.param(f"{node.name}.bias") if node.bias else None
        return self.affine(node.name, x, self.dense_weights[node.tied_to], bias, transpose=True)

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
        return Value(self.op("Gather", [self.param(f"{node.name}.table"), x.name], node.name,
                             axis=0), x.rank + 1)

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
          with_lengths: bool) -> onnx.ModelProto:
    """The frozen prefix and the body as one checked ONNX model with inputs ``input``
    (and ``lengths`` where ``with_lengths``) and output ``output``. The frozen prefix
    needs no separate graph: an inference graph has no gradients to stop."""
    tokens = model.input.kind == "tokens"
    x_type = TensorProto.INT32 if tokens else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(INPUT, x_type, list(x_shape))]
    lengths = None
    if with_lengths:
        inputs.append(helper.make_tensor_value_info(LENGTHS, TensorProto.INT32, [x_shape[0]]))
        lengths = Value(LENGTHS, 1)
    stats = analyse(model)
    builder = Builder(weights, {layer.name: layer for layer in stats.layers}, lengths,
                      x_shape[1] if tokens else 0)
    x = builder.sequence(model.frozen + model.body, Value(INPUT, len(x_shape)))
    last = builder.nodes[-1] if builder.nodes else None
    if last is not None and last.output[0] == x.name:
        last.output[0] = OUTPUT   # the last node writes the graph output itself, no copy
    else:                         # a network of identities only
        builder.nodes.append(helper.make_node("Identity", [x.name], [OUTPUT], name=OUTPUT))
    # The output shape the IR analysis predicts: the strict check below fails if the
    # graph's own shape inference disagrees.
    out_shape = [x_shape[0], *stats.output_shape]
    graph = helper.make_graph(builder.nodes, model.name, inputs,
                              [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT,
                                                             out_shape)],
                              builder.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="dlbench")
    # full_check adds strict shape inference, which costs little next to serialising the
    # weights that every check does.
    onnx.checker.check_model(proto, full_check=True)
    return proto
