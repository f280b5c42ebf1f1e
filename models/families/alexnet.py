"""AlexNet, twice.

* ``alexnet`` — the single-column "one weird trick" variant (Krizhevsky 2014) that
  convnet-benchmarks times: 64-192-384-256-256 filters, 224×224 input.
* ``alexnet_bvlc`` — BVLC Caffe's ``bvlc_alexnet``: 96-256-384-384-256 filters, 227×227
  input, LRN after conv1 and conv2, grouped conv2/4/5 (two columns). Bahrampour et al.
  (2016, Table 4) also ran it without LRN and without grouping: ``lrn`` and ``grouped``
  switch those off.
"""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import classifier, conv_relu, image, maxpool, softmax


def alexnet(channels: tuple[int, int, int, int, int] = (64, 192, 384, 256, 256),
            hidden: int = 4096, size: int = 224, classes: int = 1000,
            name: str = "alexnet") -> ir.Model:
    """convnet-benchmarks' ``alexnet.lua`` (one weird trick), as torchvision's alexnet."""
    c1, c2, c3, c4, c5 = channels
    body = (
        *conv_relu("conv1", 3, c1, 11, 4, 2), maxpool("pool1", 3, 2),
        *conv_relu("conv2", c1, c2, 5, 1, 2), maxpool("pool2", 3, 2),
        *conv_relu("conv3", c2, c3, 3, 1, 1),
        *conv_relu("conv4", c3, c4, 3, 1, 1),
        *conv_relu("conv5", c4, c5, 3, 1, 1), maxpool("pool5", 3, 2),
        ir.Flatten("flatten"),
    )
    spatial = _pooled(size, stride1=4, pad1=2)
    body += classifier("fc", c5 * spatial * spatial, (hidden, hidden), classes)
    return ir.Model(name, "alexnet", image(3, size), body, softmax(classes),
                    description="AlexNet, one weird trick (convnet-benchmarks)",
                    source="Krizhevsky 2014, arXiv:1404.5997; convnet-benchmarks alexnet.lua")


def alexnet_bvlc(lrn: bool = True, grouped: bool = True,
                 channels: tuple[int, int, int, int, int] = (96, 256, 384, 384, 256),
                 hidden: int = 4096, size: int = 227, classes: int = 1000,
                 name: str = "alexnet_bvlc") -> ir.Model:
    """BVLC ``models/bvlc_alexnet/deploy.prototxt``; LRN(5, 1e-4, 0.75)."""
    c1, c2, c3, c4, c5 = channels
    g = 2 if grouped else 1

    def norm(label: str) -> tuple[ir.Node, ...]:
        return (ir.LRN(label, 5, 1e-4, 0.75, 1.0),) if lrn else ()

    body = (
        *conv_relu("conv1", 3, c1, 11, 4, 0), *norm("norm1"), maxpool("pool1", 3, 2),
        *conv_relu("conv2", c1, c2, 5, 1, 2, groups=g), *norm("norm2"),
        maxpool("pool2", 3, 2),
        *conv_relu("conv3", c2, c3, 3, 1, 1),
        *conv_relu("conv4", c3, c4, 3, 1, 1, groups=g),
        *conv_relu("conv5", c4, c5, 3, 1, 1, groups=g), maxpool("pool5", 3, 2),
        ir.Flatten("flatten"),
    )
    spatial = _pooled(size, stride1=4, pad1=0)
    body += classifier("fc", c5 * spatial * spatial, (hidden, hidden), classes)
    variant = ("" if lrn else " without LRN") + ("" if grouped else " without grouping")
    return ir.Model(name, "alexnet", image(3, size), body, softmax(classes),
                    description=f"AlexNet, BVLC Caffe{variant} (Bahrampour Table 4)",
                    source="BVLC Caffe models/bvlc_alexnet; Krizhevsky et al. 2012")


def _pooled(size: int, stride1: int, pad1: int) -> int:
    """Spatial size after conv1 (11×11) and three 3×3/2 max pools."""
    s = (size + 2 * pad1 - 11) // stride1 + 1
    for _ in range(3):
        s = (s - 3) // 2 + 1
    return s


alexnet_bvlc_plain = partial(alexnet_bvlc, lrn=False, grouped=False,
                             name="alexnet_bvlc_plain")
alexnet_tiny = partial(alexnet, channels=(8, 16, 16, 16, 16), hidden=32, size=67,
                       classes=10, name="alexnet_tiny")
alexnet_bvlc_tiny = partial(alexnet_bvlc, channels=(8, 16, 16, 16, 16), hidden=32,
                            size=67, classes=10, name="alexnet_bvlc_tiny")
