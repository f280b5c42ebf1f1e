"""Conv2d: cross-correlation of NCHW input with an OIHW weight (PyTorch/Caffe convolution)."""

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
    product_terms,
    tensordot,
    window_output_size,
)
from models.params import ParamSpec

Pair = tuple[int, int]


def shape(node: ir.Conv2d, shape: Shape, ctx: ShapeContext) -> Shape:
    if len(shape) != 3 or shape[0] != node.in_channels:
        ctx.fail(node, f"expects ({node.in_channels}, H, W) input, got {shape}")
    check_window(node, ctx)
    if node.groups < 1:
        ctx.fail(node, f"groups must be at least 1, got {node.groups}")
    if node.in_channels % node.groups or node.out_channels % node.groups:
        ctx.fail(node, f"channels not divisible by groups={node.groups}")
    (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
    return (node.out_channels, window_output_size(shape[1], kh, sh, ph, False),
            window_output_size(shape[2], kw, sw, pw, False))


def params(node: ir.Conv2d, ctx: ShapeContext) -> list[ParamSpec]:
    kh, kw = node.kernel
    fan_in = node.in_channels // node.groups * kh * kw
    specs = [ParamSpec(f"{node.name}.weight",
                       (node.out_channels, node.in_channels // node.groups, kh, kw),
                       "he", fan_in)]
    if node.bias:
        specs.append(ParamSpec(f"{node.name}.bias", (node.out_channels,), "bias", fan_in))
    return specs


def flops(node: ir.Conv2d, in_shape: Shape, out: Shape, ctx: ShapeContext) -> int:
    kh, kw = node.kernel
    return 2 * out[0] * out[1] * out[2] * (node.in_channels // node.groups) * kh * kw


# The windows a convolution multiplies are copied into one array (im2col); batches are
# split so that copy stays under this many bytes.
WINDOW_BYTES = 256 * 2**20


def batch_chunk(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Pair,
                padding: Pair) -> int:
    """How many examples one im2col copy of ``WINDOW_BYTES`` holds (at least one)."""
    _, c, h, w = x_shape
    _, _, kh, kw = w_shape
    oh = (h + 2 * padding[0] - kh) // stride[0] + 1
    ow = (w + 2 * padding[1] - kw) // stride[1] + 1
    per_example = 8 * c * kh * kw * oh * ow
    return max(1, WINDOW_BYTES // max(per_example, 1))


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
           stride: Pair = (1, 1), padding: Pair = (0, 0), groups: int = 1,
           macs: list[int] | None = None) -> np.ndarray:
    """Cross-correlation of NCHW ``x`` with OIHW ``weight`` (PyTorch/Caffe convolution)."""
    n, c, _, _ = x.shape
    out_c, group_c, kh, kw = weight.shape
    if c != group_c * groups or out_c % groups:
        raise ValueError(f"conv2d: input channels {c} and weight {weight.shape} "
                         f"do not fit groups={groups}")
    (sh, sw), (ph, pw) = stride, padding
    chunk = batch_chunk(x.shape, weight.shape, stride, padding)
    if chunk < n:  # bound the window copies' memory (a batch-128 11x11 layer: gigabytes)
        y = np.concatenate([conv2d(x[i:i + chunk], weight, None, stride, padding, groups, macs)
                            for i in range(0, n, chunk)])
        return y if bias is None else y + bias[None, :, None, None]
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # zero padding
    # windows[n, c, i, j, di, dj] = x[n, c, i*sh + di, j*sw + dj]
    windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = windows.shape[2:4]
    per_group = out_c // groups
    outputs = []
    for g in range(groups):
        w_g = weight[g * per_group:(g + 1) * per_group]            # (O/g, C/g, kh, kw)
        x_g = windows[:, g * group_c:(g + 1) * group_c]            # (N, C/g, OH, OW, kh, kw)
        y_g = tensordot(x_g, w_g, ([1, 4, 5], [1, 2, 3]), macs)    # (N, OH, OW, O/g)
        outputs.append(y_g.transpose(0, 3, 1, 2))
    y = np.concatenate(outputs, axis=1)
    assert y.shape == (n, out_c, oh, ow)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return y


def forward(node: ir.Conv2d, x: np.ndarray, ctx: ForwardContext, macs: list[int]) -> np.ndarray:
    p = node.name
    bias = ctx.param(f"{p}.bias") if node.bias else None
    return conv2d(x, ctx.param(f"{p}.weight"), bias, node.stride, node.padding, node.groups,
                  macs)


def backward(node: ir.Conv2d, x: np.ndarray, need_dx: bool, tape: TapeContext):
    """Convolution and its backward: weight gradient from the windows the forward pass
    multiplied, input gradient by adding each kernel tap's contribution back into place
    (col2im). Split over the batch as the forward pass is."""
    p, add = node.name, tape.adder(node.name)
    weight = tape.param(f"{p}.weight")
    bias = tape.param(f"{p}.bias") if node.bias else None
    stride, padding, groups = node.stride, node.padding, node.groups
    n = x.shape[0]
    y = conv2d(x, weight, bias, stride, padding, groups)
    chunk = batch_chunk(x.shape, weight.shape, stride, padding)

    def back(dy):
        if bias is not None:
            add("bias", dy.sum(axis=(0, 2, 3)))
        dw = np.zeros_like(weight)
        dx = np.zeros_like(x) if need_dx else None
        for i in range(0, n, chunk):
            part = _conv_backward(x[i:i + chunk], weight, dy[i:i + chunk], stride, padding,
                                  groups, need_dx)
            dw += part[0]
            if need_dx:
                dx[i:i + chunk] = part[1]
        add("weight", dw)
        return dx
    return y, back


def _conv_backward(x, weight, dy, stride, padding, groups, need_dx):
    out_c, group_c, kh, kw = weight.shape
    (sh, sw), (ph, pw) = stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = dy.shape[2:]
    windows = windows[:, :, :oh, :ow]
    per_group = out_c // groups
    dw = np.empty_like(weight)
    dxp = np.zeros_like(xp) if need_dx else None
    for g in range(groups):
        o = slice(g * per_group, (g + 1) * per_group)
        c = slice(g * group_c, (g + 1) * group_c)
        dy_g = dy[:, o]                                                  # (N, O/g, OH, OW)
        dw[o] = np.tensordot(dy_g, windows[:, c], ([0, 2, 3], [0, 2, 3]))
        if need_dx:
            cols = np.tensordot(dy_g, weight[o], ([1], [0]))             # (N, OH, OW, C/g, kh, kw)
            for di in range(kh):
                for dj in range(kw):
                    dxp[:, c, di:di + sh * (oh - 1) + 1:sh, dj:dj + sw * (ow - 1) + 1:sw] += \
                        cols[..., di, dj].transpose(0, 3, 1, 2)
    dx = None if dxp is None else dxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]
    return dw, dx


OP = Op(ir.Conv2d, "conv2d", shape, forward, backward, params, flops, product_terms)
