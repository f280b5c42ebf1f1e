"""Overfeat "fast" (Sermanet et al. 2014, Table 1), as convnet-benchmarks times it:
231×231 input, 96-256-512-1024-1024 filters, dense 3072-4096-1000."""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import classifier, conv_relu, image, maxpool, softmax


def overfeat(channels: tuple[int, int, int, int, int] = (96, 256, 512, 1024, 1024),
             hidden: tuple[int, int] = (3072, 4096), size: int = 231, classes: int = 1000,
             name: str = "overfeat") -> ir.Model:
    c1, c2, c3, c4, c5 = channels
    body = (
        *conv_relu("conv1", 3, c1, 11, 4), maxpool("pool1", 2, 2),
        *conv_relu("conv2", c1, c2, 5), maxpool("pool2", 2, 2),
        *conv_relu("conv3", c2, c3, 3, 1, 1),
        *conv_relu("conv4", c3, c4, 3, 1, 1),
        *conv_relu("conv5", c4, c5, 3, 1, 1), maxpool("pool5", 2, 2),
        ir.Flatten("flatten"),
    )
    s = (((size - 11) // 4 + 1) // 2 - 4) // 2 // 2
    body += classifier("fc", c5 * s * s, hidden, classes)
    return ir.Model(name, "overfeat", image(3, size), body, softmax(classes),
                    description="Overfeat fast (convnet-benchmarks)",
                    source="Sermanet et al. 2014, arXiv:1312.6229, Table 1")


overfeat_tiny = partial(overfeat, channels=(8, 16, 16, 16, 16), hidden=(32, 32), size=71,
                        classes=10, name="overfeat_tiny")
