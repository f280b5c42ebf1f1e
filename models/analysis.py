"""Shape inference, validation, parameter counts and forward FLOPs, per layer and total.

FLOPs follow the common convention (fvcore, ``torch.utils.flop_counter``): 2 × the
multiply-accumulates of convolutions, dense layers and LSTM matrix products, per example.
Element-wise work (activations, pooling, normalisation, bias adds) is not counted; it is a
small share of every zoo model's total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models import ir
from models.params import ParamSpec, node_params


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


def window_output_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """Output length of a convolution or pooling window along one axis. Adapters whose
    framework has no ceil mode pad explicitly to reach this size."""
    span = size + 2 * pad - kernel
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = math.ceil(span / stride) + 1
    # Torch and Caffe drop a last window that would start inside the right padding.
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


class _Analyser:
    def __init__(self, model: ir.Model):
        self.model = model
        self.layers: list[LayerInfo] = []
        self.specs: list[ParamSpec] = []
        self.dense_by_name: dict[str, ir.Dense] = {}
        self.seen: set[str] = set()
        self.frozen = False
        self.frozen_params: set[str] = set()

    def fail(self, node: ir.Node, message: str) -> None:
        raise ModelError(f"{self.model.name}: layer '{node.name}' ({type(node).__name__}): {message}")

    def run(self) -> ModelStats:
        shape = tuple(self.model.input.shape)
        if any(d <= 0 for d in shape):
            raise ModelError(f"{self.model.name}: input shape {shape} has a non-positive size")
        self.frozen = True
        shape = self.sequence(self.model.frozen, shape)
        self.frozen = False
        body_in = shape
        shape = self.sequence(self.model.body, shape)
        loss = self.model.loss
        if loss.kind == "softmax_xent" and shape != (loss.classes,):
            raise ModelError(f"{self.model.name}: output shape {shape} does not match a "
                             f"{loss.classes}-way softmax loss")
        if loss.kind == "mse_reconstruction" and shape != body_in:
            raise ModelError(f"{self.model.name}: reconstruction {shape} does not match "
                             f"its target {body_in}")
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
        previous: ir.Node | None = None
        for node in nodes:
            if isinstance(previous, ir.LSTM) and not isinstance(node, ir.MeanOverTime):
                self.fail(node, "an LSTM's padded outputs may only feed a MeanOverTime")
            shape = self.node(node, shape)
            previous = node
        if isinstance(previous, ir.LSTM):
            self.fail(previous, "an LSTM must be followed by a MeanOverTime")
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
        if isinstance(node, ir.Residual):
            body = self.sequence(node.body, shape)
            short = self.sequence(node.shortcut, shape) if node.shortcut else shape
            if body != short:
                self.fail(node, f"body gives {body} but shortcut gives {short}")
            self.record(node, shape, body, 0, [])
            return body
        if isinstance(node, ir.Concat):
            outs = [self.sequence(branch, shape) for branch in node.branches]
            if not outs or len(outs[0]) != 3 or any(o[1:] != outs[0][1:] for o in outs):
                self.fail(node, f"branches give incompatible shapes {outs}")
            out = (sum(o[0] for o in outs),) + outs[0][1:]
            self.record(node, shape, out, 0, [])
            return out
        return self.leaf(node, shape)

    def check_window(self, node: ir.Conv2d | ir.Pool2d) -> None:
        # A zero stride would divide by zero below and a zero kernel would pass as a
        # layer without work; both can come from a parametric name such as conv:...,s=0.
        if min(node.kernel) < 1 or min(node.stride) < 1 or min(node.padding) < 0:
            self.fail(node, f"kernel {node.kernel} and stride {node.stride} must be at "
                            f"least 1 and padding {node.padding} at least 0")

    def leaf(self, node: ir.Node, shape: tuple[int, ...]) -> tuple[int, ...]:
        if isinstance(node, ir.Conv2d):
            if len(shape) != 3 or shape[0] != node.in_channels:
                self.fail(node, f"expects ({node.in_channels}, H, W) input, got {shape}")
            self.check_window(node)
            if node.groups < 1:
                self.fail(node, f"groups must be at least 1, got {node.groups}")
            if node.in_channels % node.groups or node.out_channels % node.groups:
                self.fail(node, f"channels not divisible by groups={node.groups}")
            (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
            out = (node.out_channels, window_output_size(shape[1], kh, sh, ph, False),
                   window_output_size(shape[2], kw, sw, pw, False))
            macs = out[0] * out[1] * out[2] * (node.in_channels // node.groups) * kh * kw
            self.record(node, shape, out, 2 * macs, node_params(node))
            return out
        if isinstance(node, ir.Pool2d):
            if len(shape) != 3:
                self.fail(node, f"expects (C, H, W) input, got {shape}")
            self.check_window(node)
            if node.kind == "avg" and node.padding != (0, 0):
                self.fail(node, "padded average pooling is not defined the same way "
                                "across frameworks")
            (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
            if ph * 2 > kh or pw * 2 > kw:
                self.fail(node, "padding may be at most half the kernel")
            out = (shape[0], window_output_size(shape[1], kh, sh, ph, node.ceil_mode),
                   window_output_size(shape[2], kw, sw, pw, node.ceil_mode))
            self.record(node, shape, out, 0, [])
            return out
        if isinstance(node, ir.GlobalAvgPool):
            if len(shape) != 3:
                self.fail(node, f"expects (C, H, W) input, got {shape}")
            out = (shape[0],)
            self.record(node, shape, out, 0, [])
            return out
        if isinstance(node, (ir.Activation, ir.Dropout)):
            self.record(node, shape, shape, 0, [])
            return shape
        if isinstance(node, ir.LRN):
            if len(shape) != 3 or node.size < 1 or node.size % 2 == 0:
                self.fail(node, "needs (C, H, W) input and an odd window size")
            self.record(node, shape, shape, 0, [])
            return shape
        if isinstance(node, ir.BatchNorm):
            if shape[0] != node.num_features:
                self.fail(node, f"expects {node.num_features} channels, got {shape}")
            self.record(node, shape, shape, 0, node_params(node))
            return shape
        if isinstance(node, ir.Flatten):
            out = (math.prod(shape),)
            self.record(node, shape, out, 0, [])
            return out
        if isinstance(node, ir.Dense):
            if shape != (node.in_features,):
                self.fail(node, f"expects ({node.in_features},) input, got {shape}")
            self.dense_by_name[node.name] = node
            out = (node.out_features,)
            self.record(node, shape, out, 2 * node.in_features * node.out_features,
                        node_params(node))
            return out
        if isinstance(node, ir.TiedDense):
            encoder = self.dense_by_name.get(node.tied_to)
            if encoder is None:
                self.fail(node, f"is tied to '{node.tied_to}', which is no earlier Dense")
            if shape != (encoder.out_features,):
                self.fail(node, f"expects ({encoder.out_features},) input, got {shape}")
            out = (encoder.in_features,)
            self.record(node, shape, out, 2 * encoder.in_features * encoder.out_features,
                        node_params(node, encoder.in_features))
            return out
        if isinstance(node, ir.Embedding):
            if self.model.input.kind != "tokens" or len(shape) != 1:
                self.fail(node, "needs token input")
            out = (shape[0], node.dim)
            self.record(node, shape, out, 0, node_params(node))
            return out
        if isinstance(node, ir.LSTM):
            if len(shape) != 2 or shape[1] != node.input_size:
                self.fail(node, f"expects (T, {node.input_size}) input, got {shape}")
            steps, h4 = shape[0], 4 * node.hidden_size
            out = (steps, node.hidden_size)
            macs = steps * (node.input_size * h4 + node.hidden_size * h4)
            self.record(node, shape, out, 2 * macs, node_params(node))
            return out
        if isinstance(node, ir.MeanOverTime):
            if len(shape) != 2:
                self.fail(node, f"expects (T, F) input, got {shape}")
            out = (shape[1],)
            self.record(node, shape, out, 0, [])
            return out
        self.fail(node, "unknown node type")
        raise AssertionError


def analyse(model: ir.Model) -> ModelStats:
    """Validate ``model`` and return its shapes, parameter counts and FLOPs."""
    return _Analyser(model).run()
