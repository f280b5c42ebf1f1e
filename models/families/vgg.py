"""VGG (Simonyan & Zisserman 2015, Table 1): model A (VGG-11), VGG-16 (D), VGG-19 (E).
3×3 convolutions with padding 1, 2×2 max pools, dense 4096-4096-1000, no batch norm."""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import classifier, conv_relu, image, maxpool, softmax

# Convolutions per stage, Table 1 columns A, D and E.
STAGES = {"a": (1, 1, 2, 2, 2), "16": (2, 2, 3, 3, 3), "19": (2, 2, 4, 4, 4)}


def vgg(config: str = "16", widths: tuple[int, ...] = (64, 128, 256, 512, 512),
        hidden: int = 4096, size: int = 224, classes: int = 1000,
        name: str = "vgg16") -> ir.Model:
    body: list[ir.Node] = []
    cin = 3
    for stage, (count, width) in enumerate(zip(STAGES[config], widths), start=1):
        for index in range(1, count + 1):
            body += conv_relu(f"conv{stage}_{index}", cin, width, 3, 1, 1)
            cin = width
        body.append(maxpool(f"pool{stage}", 2, 2))
    body.append(ir.Flatten("flatten"))
    spatial = size // 32
    body += classifier("fc", cin * spatial * spatial, (hidden, hidden), classes)
    label = {"a": "VGG model A (VGG-11)", "16": "VGG-16 (D)", "19": "VGG-19 (E)"}[config]
    return ir.Model(name, "vgg", image(3, size), tuple(body), softmax(classes),
                    description=label,
                    source="Simonyan & Zisserman 2015, arXiv:1409.1556, Table 1")


vgg_a = partial(vgg, config="a", name="vgg_a")
vgg16 = partial(vgg, config="16", name="vgg16")
vgg19 = partial(vgg, config="19", name="vgg19")
vgg_tiny = partial(vgg, config="a", widths=(4, 8, 8, 16, 16), hidden=32, size=32,
                   classes=10, name="vgg_tiny")
