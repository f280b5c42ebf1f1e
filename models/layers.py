"""Short constructors for IR nodes, so zoo definitions read like the papers' tables."""

from __future__ import annotations

from models import ir


def conv(name: str, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0,
         groups: int = 1, bias: bool = True) -> ir.Conv2d:
    return ir.Conv2d(name, cin, cout, ir.pair(kernel), ir.pair(stride), ir.pair(padding),
                     groups, bias)


def relu(name: str) -> ir.Activation:
    return ir.Activation(name, "relu")


def sigmoid(name: str) -> ir.Activation:
    return ir.Activation(name, "sigmoid")


def maxpool(name: str, kernel: int, stride: int, padding: int = 0,
            ceil_mode: bool = False) -> ir.Pool2d:
    return ir.Pool2d(name, "max", ir.pair(kernel), ir.pair(stride), ir.pair(padding),
                     ceil_mode)


def avgpool(name: str, kernel: int, stride: int, ceil_mode: bool = False) -> ir.Pool2d:
    return ir.Pool2d(name, "avg", ir.pair(kernel), ir.pair(stride), (0, 0), ceil_mode)


def dense(name: str, fin: int, fout: int, bias: bool = True) -> ir.Dense:
    return ir.Dense(name, fin, fout, bias)


def conv_relu(name: str, cin: int, cout: int, kernel: int, stride: int = 1,
              padding: int = 0, groups: int = 1) -> tuple[ir.Node, ...]:
    return (conv(name, cin, cout, kernel, stride, padding, groups), relu(f"{name}.relu"))


def classifier(prefix: str, fin: int, hidden: tuple[int, ...], classes: int,
               dropout: bool = True) -> tuple[ir.Node, ...]:
    """Dense-ReLU(-Dropout) stack ending in a linear layer of ``classes`` logits."""
    nodes: list[ir.Node] = []
    for index, width in enumerate(hidden, start=1):
        name = f"{prefix}{index}"
        nodes += [dense(name, fin, width), relu(f"{name}.relu")]
        if dropout:
            nodes.append(ir.Dropout(f"{name}.dropout"))
        fin = width
    nodes.append(dense(f"{prefix}{len(hidden) + 1}", fin, classes))
    return tuple(nodes)


def image(channels: int, size: int) -> ir.InputSpec:
    return ir.InputSpec("image", (channels, size, size))


def softmax(classes: int) -> ir.Loss:
    return ir.Loss("softmax_xent", classes)
