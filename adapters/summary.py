"""What a fingerprint needs of one forward and one gradient pass, so that the arrays
themselves never have to reach the host where they are large.

A fingerprint row (``suites/truth/check.py``) reads of the inference output only its
shape, its first few examples (those the float64 truth judges, ``models/truth.py``) and
its mean and standard deviation; of the gradients, each parameter's 2-norm, and the
arrays themselves only where the truth judges them element by element. Fetching whole
outputs cost more than the measurements they check: on an H100, a single 11×11
convolution of Li et al.'s sweeps at batch 512 (456 M output values, 1.8 GB) took 5–7 s
per fingerprint in PyTorch and TensorFlow (PyTorch's timed forward row of the same case:
2.9 s), and fingerprints were half of PyTorch's `li2016` (197 of 378 s). Reduced on the
device, that fingerprint takes 0.12 s (PyTorch) and 0.22 s (TensorFlow).

The default (``Prepared.output_summary`` and ``gradient_summary`` in ``adapters/base.py``)
builds the summaries from the host arrays; an adapter whose arrays live on a GPU reduces
them there and fetches only the head, the per-parameter norms and two numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Examples of the output a summary keeps: at least the truth's (models/truth.py
# OUTPUT_EXAMPLES, 4), and enough for the fingerprint's first 8 values whatever an
# example's size.
HEAD_EXAMPLES = 8

# Elements converted to float64 at a time by mean_std: 8 MiB of float64.
CHUNK = 1 << 20


# Values a device converts to float64 at a time for the squared deviations: 128 MiB.
DEVICE_CHUNK = 1 << 24

# Outputs of at least this many values (4 M, 16 MB in float32) are summarised where they
# live by the adapters whose summary is a compiled program (JAX's jit, ONNX Runtime's second
# graph): the copy and host reduction of an output grow with its size, while the device's
# summary costs a compilation or a run setup per output shape at any size.
DEVICE_SUMMARY_VALUES = 1 << 22


def examples_per_chunk(shape: tuple[int, ...]) -> int:
    """How many examples (leading-axis slices) of an output of ``shape`` hold about
    ``DEVICE_CHUNK`` values: a device reduces its output in float64 this many at a time,
    so that no float64 copy of the whole output is ever made."""
    per_example = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, DEVICE_CHUNK // max(per_example, 1))


def mean_std(flat: np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation of a 1-D array in float64, chunk by chunk
    (no float64 copy of the whole array). Two passes (mean, then squared deviations) as
    numpy's own ``std`` does."""
    if flat.size == 0:
        return math.nan, math.nan
    total = sum(float(flat[i:i + CHUNK].sum(dtype=np.float64))
                for i in range(0, flat.size, CHUNK))
    mean = total / flat.size
    squares = 0.0
    for i in range(0, flat.size, CHUNK):
        deviation = flat[i:i + CHUNK].astype(np.float64)
        deviation -= mean
        squares += float(np.dot(deviation, deviation))
    return mean, math.sqrt(squares / flat.size)


@dataclass(frozen=True)
class OutputSummary:
    """An inference output as the fingerprint reads it: the shape, the first
    ``HEAD_EXAMPLES`` examples (float32, canonical NCHW layout) and the float64 mean and
    population standard deviation of every value."""

    shape: tuple[int, ...]
    head: np.ndarray
    mean: float
    std: float

    @staticmethod
    def of(output: np.ndarray, examples: int = HEAD_EXAMPLES) -> OutputSummary:
        array = np.asarray(output)
        mean, std = mean_std(array.ravel())
        return OutputSummary(tuple(array.shape), np.array(array[:examples]), mean, std)

    @staticmethod
    def from_example_moments(shape: tuple[int, ...], head: np.ndarray, sums: np.ndarray,
                             centres: np.ndarray, squares: np.ndarray) -> OutputSummary:
        """The summary of an output reduced on its device example by example: per example
        the float32 sum of its values, the centre the device subtracted (its float32 mean)
        and the sum of squared deviations from that centre. Combined here in float64: each
        example's squares moved from its centre c to its own mean m (Σ(x − m)² =
        Σ(x − c)² − n(m − c)²), then the examples pooled about the overall mean (Chan,
        Golub and LeVeque 1979's pairwise update)."""
        per_example = math.prod(shape[1:]) if len(shape) > 1 else 1
        means = np.asarray(sums, dtype=np.float64) / per_example
        mean = float(means.mean())
        own = np.asarray(squares, dtype=np.float64) \
            - per_example * (means - np.asarray(centres, dtype=np.float64)) ** 2
        total = float(own.sum() + per_example * ((means - mean) ** 2).sum())
        values = per_example * shape[0]
        return OutputSummary(tuple(int(n) for n in shape), np.asarray(head, dtype=np.float32),
                             mean, math.sqrt(max(total / values, 0.0)))


@dataclass(frozen=True)
class GradientSummary:
    """One gradient pass as the fingerprint reads it: the loss, each parameter's float64
    2-norm, and the gradients themselves (as ``Prepared.loss_and_gradients`` returns them)
    only where they were asked for."""

    loss: float
    norms: dict[str, float]
    grads: dict[str, np.ndarray] | None = None

    @staticmethod
    def of(loss: float, grads: dict[str, np.ndarray], keep_arrays: bool) -> GradientSummary:
        norms = {name: float(np.linalg.norm(np.asarray(g, dtype=np.float64).ravel()))
                 for name, g in grads.items()}
        return GradientSummary(float(loss), norms, grads if keep_arrays else None)
