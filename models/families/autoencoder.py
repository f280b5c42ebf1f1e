"""Stacked autoencoders (Bahrampour et al. 2016, 4.3) on MNIST vectors (784).

Each AE has a sigmoid encoder and a sigmoid decoder whose weight is the encoder's
transpose (tied). Pre-training phase AE\\ *k* trains encoder *k* and its decoder on the
output of the frozen encoders 1..k-1 with a mean-squared reconstruction loss; every batch
goes through the frozen encoders first (the paper's footnote 9). The fine-tuning stack SE
is encoders 1..3 with a 10-way softmax, decoders absent. Table 5 uses 400-200-100,
Table 7 800-1000-2000.
"""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import dense, sigmoid, softmax

MNIST = ir.InputSpec("vector", (784,))


def _encoders(sizes: tuple[int, ...], fin: int) -> tuple[ir.Node, ...]:
    nodes: list[ir.Node] = []
    for index, width in enumerate(sizes, start=1):
        nodes += [dense(f"enc{index}", fin, width), sigmoid(f"enc{index}.sigmoid")]
        fin = width
    return tuple(nodes)


def autoencoder_phase(phase: int, sizes: tuple[int, ...] = (400, 200, 100), inputs: int = 784,
                      name: str = "sae_ae1") -> ir.Model:
    """AE\\ *phase*: frozen encoders below it, then its own encoder and tied decoder."""
    if not 1 <= phase <= len(sizes):
        raise ValueError(f"phase must be 1..{len(sizes)}")
    widths = (inputs, *sizes)
    frozen = _encoders(sizes[: phase - 1], inputs)
    enc = f"enc{phase}"
    body = (dense(enc, widths[phase - 1], widths[phase]), sigmoid(f"{enc}.sigmoid"),
            ir.TiedDense(f"dec{phase}", tied_to=enc), sigmoid(f"dec{phase}.sigmoid"))
    label = "-".join(map(str, sizes))
    return ir.Model(name, "autoencoder", ir.InputSpec("vector", (inputs,)), body,
                    ir.Loss("mse_reconstruction"), frozen=frozen,
                    description=f"Stacked AE {label}, pre-training phase AE{phase}",
                    source="Bahrampour et al. 2016, 4.3, Tables 5 and 7")


def stacked_encoders(sizes: tuple[int, ...] = (400, 200, 100), inputs: int = 784,
                     classes: int = 10, name: str = "sae_se") -> ir.Model:
    """SE: the encoders stacked with a softmax classifier, for fine-tuning."""
    body = _encoders(sizes, inputs) + (dense("classifier", sizes[-1], classes),)
    label = "-".join(map(str, sizes))
    return ir.Model(name, "autoencoder", ir.InputSpec("vector", (inputs,)), body,
                    softmax(classes),
                    description=f"Stacked AE {label}, fine-tuning stack SE",
                    source="Bahrampour et al. 2016, 4.3, Tables 5 and 7")


SMALL = (400, 200, 100)  # Table 5
LARGE = (800, 1000, 2000)  # Table 7
TINY = (12, 8, 6)

sae_ae1 = partial(autoencoder_phase, 1, SMALL, name="sae_ae1")
sae_ae2 = partial(autoencoder_phase, 2, SMALL, name="sae_ae2")
sae_ae3 = partial(autoencoder_phase, 3, SMALL, name="sae_ae3")
sae_se = partial(stacked_encoders, SMALL, name="sae_se")
sae_large_ae1 = partial(autoencoder_phase, 1, LARGE, name="sae_large_ae1")
sae_large_ae2 = partial(autoencoder_phase, 2, LARGE, name="sae_large_ae2")
sae_large_ae3 = partial(autoencoder_phase, 3, LARGE, name="sae_large_ae3")
sae_large_se = partial(stacked_encoders, LARGE, name="sae_large_se")
sae_tiny_ae2 = partial(autoencoder_phase, 2, TINY, inputs=20, name="sae_tiny_ae2")
sae_tiny_se = partial(stacked_encoders, TINY, inputs=20, name="sae_tiny_se")
