"""Single convolution layers.

* convnet-benchmarks' layer-wise table, L1–L5 (inputs, feature maps and kernels as its
  README lists them; stride 1, no padding; batch 128 there).
* Li et al. 2016's (b, i, f, k, s) tuples: batch, input size, filters, kernel, stride.
  The paper gives no input-channel count. Its Table I configurations Conv1, Conv3–Conv5
  are convnet-benchmarks' L1, L3–L5, so we take their channels (3, 128, 128, 384) and use
  3 for Conv2 and for the sweeps around (64, 128, 64, 11, 1), as L1 does.

Batch is a property of the benchmark case, not of the model.
"""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import conv, image


def conv_layer(channels: int = 3, size: int = 128, filters: int = 64, kernel: int = 11,
               stride: int = 1, padding: int = 0, name: str = "conv") -> ir.Model:
    body = (conv("conv", channels, filters, kernel, stride, padding),)
    return ir.Model(name, "conv_layer", image(channels, size), body, ir.Loss("sum"),
                    description=f"conv {channels}->{filters}, {kernel}x{kernel}/{stride}, "
                                f"{size}x{size} input",
                    source="convnet-benchmarks layer-wise table; Li et al. 2016 Table I")


# convnet-benchmarks L1–L5: (channels, input size, filters, kernel).
CONVNET_BENCHMARKS_LAYERS = {
    "conv_l1": (3, 128, 96, 11), "conv_l2": (64, 64, 128, 9), "conv_l3": (128, 32, 128, 9),
    "conv_l4": (128, 16, 128, 7), "conv_l5": (384, 13, 384, 3),
}
# Li et al. 2016 Table I, (b, i, f, k, s) with b = 128: (channels, i, f, k, s).
LI_TABLE_I = {
    "li_conv1": (3, 128, 96, 11, 1), "li_conv2": (3, 128, 96, 3, 1),
    "li_conv3": (128, 32, 128, 9, 1), "li_conv4": (128, 16, 128, 7, 1),
    "li_conv5": (384, 13, 384, 3, 1),
}

LAYERS = {
    **{name: partial(conv_layer, c, i, f, k, 1, name=name)
       for name, (c, i, f, k) in CONVNET_BENCHMARKS_LAYERS.items()},
    **{name: partial(conv_layer, c, i, f, k, s, name=name)
       for name, (c, i, f, k, s) in LI_TABLE_I.items()},
}
conv_tiny = partial(conv_layer, 3, 9, 4, 3, 2, 1, name="conv_tiny")
