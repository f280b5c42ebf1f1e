"""GoogLeNet / Inception-v1 (Szegedy et al. 2015, Table 1), as BVLC Caffe's
``bvlc_googlenet`` defines it: LRN after the stem convolutions, ceil-mode pooling, no
batch norm. The two auxiliary classifiers only matter for training accuracy and are left
out, as cnn-benchmarks' Inception-V1 timing did."""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import conv_relu, dense, image, maxpool, softmax

# Table 1: #1×1, #3×3 reduce, #3×3, #5×5 reduce, #5×5, pool proj.
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def inception(label: str, cin: int, widths: tuple[int, ...]) -> tuple[ir.Concat, int]:
    n1, r3, n3, r5, n5, proj = widths
    p = f"inception_{label}"
    branches = (
        conv_relu(f"{p}.1x1", cin, n1, 1),
        conv_relu(f"{p}.3x3_reduce", cin, r3, 1) + conv_relu(f"{p}.3x3", r3, n3, 3, 1, 1),
        conv_relu(f"{p}.5x5_reduce", cin, r5, 1) + conv_relu(f"{p}.5x5", r5, n5, 5, 1, 2),
        (maxpool(f"{p}.pool", 3, 1, 1),) + conv_relu(f"{p}.pool_proj", cin, proj, 1),
    )
    return ir.Concat(p, branches), n1 + n3 + n5 + proj


def googlenet(scale: float = 1.0, size: int = 224, classes: int = 1000,
              name: str = "googlenet") -> ir.Model:
    def w(value: int) -> int:
        return max(1, int(value * scale))

    stem_out = w(192)
    body: list[ir.Node] = [
        *conv_relu("conv1", 3, w(64), 7, 2, 3), maxpool("pool1", 3, 2, ceil_mode=True),
        ir.LRN("norm1", 5, 1e-4, 0.75),
        *conv_relu("conv2_reduce", w(64), w(64), 1), *conv_relu("conv2", w(64), stem_out, 3, 1, 1),
        ir.LRN("norm2", 5, 1e-4, 0.75), maxpool("pool2", 3, 2, ceil_mode=True),
    ]
    cin = stem_out
    for label, widths in INCEPTION.items():
        if label in ("4a", "5a"):
            body.append(maxpool(f"pool{label[0]}", 3, 2, ceil_mode=True))
        block, cin = inception(label, cin, tuple(w(v) for v in widths))
        body.append(block)
    body += [ir.GlobalAvgPool("avgpool"), ir.Dropout("dropout", 0.4),
             dense("classifier", cin, classes)]
    return ir.Model(name, "googlenet", image(3, size), tuple(body), softmax(classes),
                    description="GoogLeNet / Inception-v1 (BVLC Caffe, no aux heads)",
                    source="Szegedy et al. 2015, arXiv:1409.4842, Table 1; BVLC bvlc_googlenet")


googlenet_tiny = partial(googlenet, scale=0.125, size=64, classes=10, name="googlenet_tiny")
