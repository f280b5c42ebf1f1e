"""Pool2d: max or average pooling; ``ceil_mode`` follows Caffe/Torch7 (``models.ir``)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import ir
from models.ops.base import (
    ForwardContext,
    Op,
    Shape,
    ShapeContext,
    TapeContext,
    check_window,
    window_output_size,
)

Pair = tuple[int, int]


def shape(node: ir.Pool2d, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 3:
        ctx.fail(node, f"expects (C, H, W) input, got {shape}")
    check_window(node, ctx)
    if node.kind == "avg" and node.padding != (0, 0):
        ctx.fail(node, "padded average pooling is not defined the same way "
                       "across frameworks")
    (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
    if ph * 2 > kh or pw * 2 > kw:
        ctx.fail(node, "padding may be at most half the kernel")
    return (shape[0], window_output_size(shape[1], kh, sh, ph, node.ceil_mode),
            window_output_size(shape[2], kw, sw, pw, node.ceil_mode))


def pool_out_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape`` (aten/src/ATen/native/Pool.h), which Caffe
    shares: in ceil mode a last window that would start in the right padding is dropped."""
    span = size + 2 * pad - kernel
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def pool2d(x: np.ndarray, kind: str, kernel: Pair, stride: Pair, padding: Pair = (0, 0),
           ceil_mode: bool = False) -> np.ndarray:
    """Max or average pooling. Padding counts as -inf for max; average pooling allows no
    padding. Ceil-mode windows that run past the input cover only its valid elements,
    and an average divides by their number (PyTorch's avg_pool2d divides by the window
    clipped to input + padding, which with no padding is the same)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if kind == "avg" and (ph, pw) != (0, 0):
        raise ValueError("padded average pooling is not part of the IR")
    n, c, h, w = x.shape
    oh = pool_out_size(h, kh, sh, ph, ceil_mode)
    ow = pool_out_size(w, kw, sw, pw, ceil_mode)
    # Pad on the left by the padding, on the right by whatever the last window needs.
    right_h = max(ph, (oh - 1) * sh + kh - h - ph)
    right_w = max(pw, (ow - 1) * sw + kw - w - pw)
    pads = ((0, 0), (0, 0), (ph, right_h), (pw, right_w))

    def windows(a: np.ndarray) -> np.ndarray:
        view = sliding_window_view(a, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return view[:, :, :oh, :ow]  # (N, C, OH, OW, kh, kw)

    if kind == "max":
        # The window's maximum as kh * kw element-wise maxima of strided slices, one per
        # offset: the same values as reducing the windows view (max is exact in any
        # order), without numpy reducing two short strided axes of a 6-D view, which
        # took 2.1 of GoogLeNet's 4.7 s at batch 16 (one core of a 2-core AMD EPYC).
        padded = np.pad(x, pads, constant_values=-np.inf)
        found = None
        for di in range(kh):
            for dj in range(kw):
                part = padded[:, :, di:di + (oh - 1) * sh + 1:sh, dj:dj + (ow - 1) * sw + 1:sw]
                found = part.copy() if found is None else np.maximum(found, part, out=found)
        return found
    if kind == "avg":
        total = windows(np.pad(x, pads)).sum(axis=(4, 5))
        valid = windows(np.pad(np.ones((1, 1, h, w)), pads)).sum(axis=(4, 5))
        return total / valid
    raise ValueError(f"unknown pooling {kind!r}")


def forward(node: ir.Pool2d, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    return pool2d(x, node.kind, node.kernel, node.stride, node.padding, node.ceil_mode)


def backward(node: ir.Pool2d, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """Max pooling sends each window's gradient to its (first) largest element; average
    pooling spreads it evenly over the window's valid elements."""
    y = pool2d(x, node.kind, node.kernel, node.stride, node.padding, node.ceil_mode)
    (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
    n, c, h, w = x.shape
    oh, ow = y.shape[2:]
    right_h = max(ph, (oh - 1) * sh + kh - h - ph)
    right_w = max(pw, (ow - 1) * sw + kw - w - pw)
    pads = ((0, 0), (0, 0), (ph, right_h), (pw, right_w))

    def taps(a):
        view = sliding_window_view(a, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
        return view.reshape(*view.shape[:4], kh * kw)

    if node.kind == "max":
        winner = taps(np.pad(x, pads, constant_values=-np.inf)).argmax(axis=-1)
    else:
        valid = taps(np.pad(np.ones((1, 1, h, w)), pads)).sum(axis=-1)

    def back(dy):
        dxp = np.zeros((n, c, h + ph + right_h, w + pw + right_w))
        share = None if node.kind == "max" else dy / valid
        for di in range(kh):
            for dj in range(kw):
                part = dy * (winner == di * kw + dj) if node.kind == "max" else share
                dxp[:, :, di:di + sh * (oh - 1) + 1:sh, dj:dj + sw * (ow - 1) + 1:sw] += part
        return dxp[:, :, ph:ph + h, pw:pw + w]
    return y, back


def kink(node: ir.Pool2d) -> bool:
    return node.kind == "max"


OP = Op(ir.Pool2d, "pool2d", shape, forward, backward, kink=kink)
