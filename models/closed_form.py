"""Loss and gradients of a single convolution layer under the "sum" loss, in closed form.

The single-layer benchmarks (``models/families/conv_layers.py``; convnet-benchmarks' L1–L5 and
Li et al. 2016's sweeps) train one ``Conv2d`` under L = Σ y, so dL/dy = 1 everywhere and
every quantity the float64 truth needs is linear in box sums of the input. With x_pad the
zero-padded input, stride s, output size H_out × W_out and

    S[c, i, j] = Σ_{n, h, w} x_pad[n, c, h·s + i, w·s + j]   (h < H_out, w < W_out),

the chain rule through y[n,o,h,w] = b[o] + Σ_{c,i,j} W[o,c,i,j]·x_pad[n,c,h·s+i,w·s+j]
gives

    dL/dW[o, c, i, j] = S[c_o + c, i, j]   (c_o: first input channel of o's group),
    dL/db[o]          = P = N·H_out·W_out,
    L                 = Σ_o (⟨W[o], dL/dW[o]⟩ + b[o]·P).

S costs one pass over the input plus C·kh·kw·H_out·W_out additions — the cost of the
forward pass divided by the number of filters — where the reference would run the whole
convolution and its backward (``tests/models/test_reference_grad.py`` checks this against
``models/reference_grad.py`` to 1e-12). Every value is a float64 sum of float32 inputs
and weights, so it is the float64 truth, only summed in another order.
"""

from __future__ import annotations

import numpy as np

from models import ir

Grads = dict[str, np.ndarray]


def applies(model: ir.Model) -> bool:
    """Whether ``model`` is one trainable convolution under the "sum" loss."""
    return (model.loss.kind == "sum" and not model.frozen and len(model.body) == 1
            and isinstance(model.body[0], ir.Conv2d))


def output_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def window_sums(x: np.ndarray, kernel: ir.Pair, stride: ir.Pair, padding: ir.Pair
                ) -> tuple[np.ndarray, int]:
    """S[c, i, j] of the module docstring for NCHW ``x``, and P = N·H_out·W_out."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, _, h, w = x.shape
    oh, ow = output_size(h, kh, sh, ph), output_size(w, kw, sw, pw)
    # Summing over the batch first: every later sum runs over the same examples.
    total = np.pad(np.sum(x, axis=0, dtype=np.float64), ((0, 0), (ph, ph), (pw, pw)))
    sums = np.empty((total.shape[0], kh, kw))
    for i in range(kh):
        rows = total[:, i:i + sh * (oh - 1) + 1:sh, :].sum(axis=1)       # (C, W_pad)
        for j in range(kw):
            sums[:, i, j] = rows[:, j:j + sw * (ow - 1) + 1:sw].sum(axis=1)
    return sums, n * oh * ow


def loss_and_gradients(node: ir.Conv2d, weight: np.ndarray, bias: np.ndarray | None,
                       x: np.ndarray) -> tuple[float, Grads]:
    """L = Σ conv(x) and its weight and bias gradients (module docstring), float64."""
    weight = np.asarray(weight, dtype=np.float64)
    out_c, group_c = weight.shape[:2]
    if x.shape[1] != group_c * node.groups or out_c % node.groups:
        raise ValueError(f"{node.name}: input channels {x.shape[1]} and weight "
                         f"{weight.shape} do not fit groups={node.groups}")
    sums, positions = window_sums(x, node.kernel, node.stride, node.padding)
    per_group = out_c // node.groups
    # Filter o sees input channels [g·C/g, (g+1)·C/g) of its group g = o // (O/g).
    first_channel = (np.arange(out_c) // per_group) * group_c
    dweight = np.stack([sums[c:c + group_c] for c in first_channel])
    grads = {f"{node.name}.weight": dweight}
    loss = float(np.einsum("ocij,ocij->", weight, dweight))
    if bias is not None:
        grads[f"{node.name}.bias"] = np.full(out_c, float(positions))
        loss += float(np.asarray(bias, dtype=np.float64).sum()) * positions
    return loss, dict(sorted(grads.items()))
