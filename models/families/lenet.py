"""LeNet as Bahrampour et al. (2016, 4.1) ran it: Caffe's ``examples/mnist/lenet``.

The paper's text mentions both tanh and ReLU; its Caffe model (the reference
implementation it names) has no activation after the convolutions and one ReLU after
the 500-unit dense layer, which we follow. Input: MNIST 1×28×28, 10 classes.
"""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import conv, dense, image, maxpool, relu, softmax


def lenet(filters: tuple[int, int] = (20, 50), hidden: int = 500, size: int = 28,
          classes: int = 10, name: str = "lenet") -> ir.Model:
    c1, c2 = filters
    spatial = ((size - 4) // 2 - 4) // 2
    body = (
        conv("conv1", 1, c1, 5), maxpool("pool1", 2, 2),
        conv("conv2", c1, c2, 5), maxpool("pool2", 2, 2),
        ir.Flatten("flatten"),
        dense("ip1", c2 * spatial * spatial, hidden), relu("ip1.relu"),
        dense("ip2", hidden, classes),
    )
    return ir.Model(name, "lenet", image(1, size), body, softmax(classes),
                    description="LeNet (Caffe MNIST), Bahrampour et al. 2016 Table 3",
                    source="BVLC Caffe examples/mnist/lenet_train_test.prototxt")


# size 20 leaves a 2×2 map before the dense layer, so the conformance kit catches an
# adapter that flattens in channels-last order.
lenet_tiny = partial(lenet, filters=(4, 6), hidden=16, size=20, name="lenet_tiny")
