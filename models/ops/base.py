"""What one op declares, and the helpers several ops share.

An ``Op`` puts side by side everything the project knows about one IR node type, as
JAX's ``lax.py`` keeps each primitive's shape rule, derivative and lowering together:

* ``shape``: the per-example output shape, validating the node against its input;
* ``params``: the parameters it owns, in canonical shapes (``models.params.ParamSpec``);
* ``flops``: forward FLOPs per example (``models.analysis`` states the convention);
* ``forward``: the float64 forward (``models.reference``);
* ``backward``: the float64 forward and a closure mapping the output's gradient to the
  input's, adding parameter gradients on the way (``models.reference_grad``);
* ``bound``: its reduction lengths for the error bounds (``models.error_bounds``);
* ``builder``: the name of the method every adapter's network builder has for it.

The contexts are the walkers' own objects (analysis, reference runner, gradient tape);
the protocols below name what an op may ask of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from models import ir
from models.params import ParamSpec

if TYPE_CHECKING:
    from models.analysis import LayerInfo

Shape = tuple[int, ...]
Backward = Callable[[np.ndarray], "np.ndarray | None"]


class ShapeContext(Protocol):
    """What ``models.analysis`` offers an op while it infers shapes."""

    input_kind: str

    def fail(self, node: ir.Node, message: str) -> None: ...

    def earlier(self, name: str) -> ir.Node | None:
        """The node of that name analysed before this one, if any."""

    def sequence(self, nodes: tuple[ir.Node, ...], shape: Shape) -> Shape: ...


class ForwardContext(Protocol):
    """What ``models.reference`` offers an op while it runs forward in float64."""

    train: bool

    def param(self, name: str) -> np.ndarray: ...

    def lengths_for(self, x: np.ndarray) -> np.ndarray: ...

    def sequence(self, nodes: tuple[ir.Node, ...], x: np.ndarray) -> np.ndarray: ...


class TapeContext(Protocol):
    """What ``models.reference_grad`` offers an op while it records a backward pass."""

    def param(self, name: str) -> np.ndarray: ...

    def adder(self, prefix: str) -> Callable[[str, np.ndarray], None]: ...

    def lengths_for(self, x: np.ndarray) -> np.ndarray: ...

    def sequence(self, nodes: tuple[ir.Node, ...], x: np.ndarray, need_dx: bool
                 ) -> tuple[np.ndarray, Backward]: ...


@dataclass(frozen=True)
class Terms:
    """One layer's share of the error bound's reduction lengths (``models.error_bounds``):
    Σ K of the inference pass, of batch-norm statistics in training, of the data
    gradients, the weight gradient's reduction length, and matrix-product layers."""

    forward: float = 0.0
    statistics: float = 0.0
    backward: float = 0.0
    wgrad: float = 0.0
    products: int = 0


def no_params(node: Any, ctx: ShapeContext) -> list[ParamSpec]:
    return []


def no_flops(node: Any, in_shape: Shape, out_shape: Shape, ctx: ShapeContext) -> int:
    return 0


def no_terms(layer: LayerInfo, batch: int) -> Terms:
    return Terms()


def no_kink(node: Any) -> bool:
    return False


def same_shape(node: Any, shape: Shape, ctx: ShapeContext) -> Shape:
    return shape


@dataclass(frozen=True)
class Op:
    node: type
    builder: str
    shape: Callable[[Any, Shape, ShapeContext], Shape]
    forward: Callable[[Any, np.ndarray, ForwardContext, list[int]], np.ndarray]
    backward: Callable[[Any, np.ndarray, bool, TapeContext], tuple[np.ndarray, Backward]]
    params: Callable[[Any, ShapeContext], list[ParamSpec]] = no_params
    flops: Callable[[Any, Shape, Shape, ShapeContext], int] = no_flops
    bound: Callable[[LayerInfo, int], Terms] = no_terms
    # Whether the node makes the gradient piecewise (models.error_bounds: not judged).
    kink: Callable[[Any], bool] = no_kink
    # Nodes made of other nodes (Residual, Concat): no trace of their own.
    container: bool = False
    # Node types that alone may consume this one's output (an LSTM's padded steps).
    only_before: tuple[type, ...] = ()


# --------------------------------------------------------------------------------------
# Shared numerics.


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


def check_window(node: ir.Conv2d | ir.Pool2d, ctx: ShapeContext) -> None:
    # A zero stride would divide by zero below and a zero kernel would pass as a
    # layer without work; both can come from a parametric name such as conv:...,s=0.
    if min(node.kernel) < 1 or min(node.stride) < 1 or min(node.padding) < 0:
        ctx.fail(node, f"kernel {node.kernel} and stride {node.stride} must be at "
                       f"least 1 and padding {node.padding} at least 0")


# Matrix products, with an optional multiply-accumulate count taken from the operands'
# actual shapes (tests compare it with the analysis' FLOPs).


def tensordot(a: np.ndarray, b: np.ndarray, axes: tuple[list[int], list[int]],
              macs: list[int] | None) -> np.ndarray:
    out = np.tensordot(a, b, axes)
    if macs is not None:
        # Every output element is a sum of as many products as the contracted size.
        macs.append(out.size * math.prod(a.shape[i] for i in axes[0]))
    return out


def matmul(x: np.ndarray, w: np.ndarray, macs: list[int] | None) -> np.ndarray:
    """``x @ w`` over the last axis of ``x``."""
    return tensordot(x, w, ([x.ndim - 1], [0]), macs)


def sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) without overflow for large negative x.
    return np.exp(-np.logaddexp(0.0, -x))


def product_terms(layer: LayerInfo, batch: int) -> Terms:
    """A convolution's or dense layer's reductions: K products per output element
    forward; the data gradient sums over out_channels/g·kh·kw, the forward's K scaled by
    the channel ratio, so the forward's K is a fair estimate; the weight gradient sums
    over the batch and, for a convolution, its output positions (a sequence's steps for a
    dense layer over a sequence)."""
    out = math.prod(layer.out_shape)
    k = layer.flops / 2 / out                     # products per output element
    if layer.kind == "Conv2d":
        spatial = out // layer.out_shape[0]       # output positions
    elif len(layer.out_shape) == 2:
        spatial = layer.out_shape[0]              # steps of a sequence
    else:
        spatial = 1
    return Terms(forward=k, backward=k, wgrad=batch * spatial, products=1)


def reduction_terms(layer: LayerInfo, batch: int) -> Terms:
    """A reduction over a window (global average, masked mean, LRN's channel window):
    its input elements per output element, forward only."""
    out = math.prod(layer.out_shape)
    return Terms(forward=max(math.prod(layer.in_shape) // max(out, 1), 1))
