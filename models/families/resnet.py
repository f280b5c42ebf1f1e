"""ResNets (He et al. 2016, Table 1) in the fb.resnet.torch / torchvision form that
cnn-benchmarks timed: batch norm after every convolution, bias-free convolutions, the
bottleneck's stride on its 3×3 convolution ("v1.5"), projection shortcuts where the
shape changes. ResNet-200 is fb.resnet.torch's (3, 24, 36, 3) bottleneck network."""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import conv, dense, image, maxpool, relu, softmax


def _conv_bn(name: str, cin: int, cout: int, kernel: int, stride: int = 1) -> tuple[ir.Node, ...]:
    return (conv(name, cin, cout, kernel, stride, kernel // 2, bias=False),
            ir.BatchNorm(f"{name}.bn", cout))


def _block(name: str, cin: int, width: int, stride: int, bottleneck: bool
           ) -> tuple[tuple[ir.Node, ...], int]:
    if bottleneck:
        cout = width * 4
        body = (*_conv_bn(f"{name}.conv1", cin, width, 1), relu(f"{name}.relu1"),
                *_conv_bn(f"{name}.conv2", width, width, 3, stride), relu(f"{name}.relu2"),
                *_conv_bn(f"{name}.conv3", width, cout, 1))
    else:
        cout = width
        body = (*_conv_bn(f"{name}.conv1", cin, width, 3, stride), relu(f"{name}.relu1"),
                *_conv_bn(f"{name}.conv2", width, width, 3))
    shortcut: tuple[ir.Node, ...] = ()
    if stride != 1 or cin != cout:
        shortcut = _conv_bn(f"{name}.downsample", cin, cout, 1, stride)
    return (ir.Residual(name, body, shortcut), relu(f"{name}.relu")), cout


def resnet(stages: tuple[int, ...] = (3, 4, 6, 3), bottleneck: bool = True,
           widths: tuple[int, ...] = (64, 128, 256, 512), stem: int = 64, size: int = 224,
           classes: int = 1000, name: str = "resnet50") -> ir.Model:
    body: list[ir.Node] = [*_conv_bn("conv1", 3, stem, 7, 2), relu("conv1.relu"),
                           maxpool("maxpool", 3, 2, 1)]
    cin = stem
    for stage, (blocks, width) in enumerate(zip(stages, widths), start=1):
        for index in range(blocks):
            stride = 2 if stage > 1 and index == 0 else 1
            nodes, cin = _block(f"layer{stage}.{index}", cin, width, stride, bottleneck)
            body += nodes
    body += [ir.GlobalAvgPool("avgpool"), dense("fc", cin, classes)]
    depth = sum(stages) * (3 if bottleneck else 2) + 2
    return ir.Model(name, "resnet", image(3, size), tuple(body), softmax(classes),
                    description=f"ResNet-{depth}",
                    source="He et al. 2016, arXiv:1512.03385, Table 1; fb.resnet.torch")


resnet18 = partial(resnet, stages=(2, 2, 2, 2), bottleneck=False, name="resnet18")
resnet34 = partial(resnet, stages=(3, 4, 6, 3), bottleneck=False, name="resnet34")
resnet50 = partial(resnet, stages=(3, 4, 6, 3), bottleneck=True, name="resnet50")
resnet101 = partial(resnet, stages=(3, 4, 23, 3), bottleneck=True, name="resnet101")
resnet152 = partial(resnet, stages=(3, 8, 36, 3), bottleneck=True, name="resnet152")
resnet200 = partial(resnet, stages=(3, 24, 36, 3), bottleneck=True, name="resnet200")
resnet_tiny = partial(resnet, stages=(1, 1), bottleneck=True, widths=(4, 8), stem=8,
                      size=32, classes=10, name="resnet_tiny")
