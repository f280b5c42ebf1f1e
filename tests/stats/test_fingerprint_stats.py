"""The fingerprint's output mean and standard deviation, computed chunk by chunk in float64
(adapters/summary.py: mean_std), equal numpy's float64 mean and std of the whole array."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adapters.base import Fingerprint
from adapters.summary import CHUNK, OutputSummary, mean_std


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_chunked_mean_and_std_equal_numpy_in_float64(offset):
    rng = np.random.default_rng(7)
    values = (offset + rng.standard_normal(int(3.5 * CHUNK))).astype(np.float32)
    reference = values.astype(np.float64)
    mean, std = mean_std(values)
    # Both sum about 3.7 M float64 terms (pairwise within chunks): relative errors of a
    # few 1e-15 each; 1e-12 leaves room without hiding a single-precision accumulation
    # (about 1e-7).
    assert mean == pytest.approx(float(reference.mean()), rel=1e-12)
    assert std == pytest.approx(float(reference.std()), rel=1e-12)


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_per_example_moments_pool_to_the_whole_arrays_mean_and_std(offset):
    """What a device hands over (per example: sum, centre, squared deviations from the
    centre) pools on the host to the whole array's float64 mean and std. The moments here
    are exact (float64), the centres deliberately off the examples' means (float32-rounded
    and shifted), so any error left is the pooling's: relative 1e-12."""
    rng = np.random.default_rng(11)
    values = offset + rng.standard_normal((6, 3, 7, 5)) * np.linspace(0.5, 2, 6)[:, None, None, None]
    flat = values.reshape(6, -1)
    sums = flat.sum(axis=1)
    centres = (sums / flat.shape[1]).astype(np.float32).astype(np.float64) + 1e-3
    squares = ((flat - centres[:, None]) ** 2).sum(axis=1)
    summary = OutputSummary.from_example_moments(values.shape, values[:2], sums, centres,
                                                 squares)
    assert summary.shape == values.shape and summary.head.shape == (2, 3, 7, 5)
    assert summary.mean == pytest.approx(values.mean(), rel=1e-12)
    assert summary.std == pytest.approx(values.std(), rel=1e-12)


def test_fingerprint_of_an_array_with_shape_and_of_an_empty_one():
    output = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    fingerprint = Fingerprint.from_arrays(output)
    assert fingerprint.output_head == tuple(float(v) for v in range(8))
    assert fingerprint.output_mean == pytest.approx(11.5)
    assert fingerprint.output_std == pytest.approx(float(np.arange(24).std()))
    empty = Fingerprint.from_arrays(np.zeros((0, 3), dtype=np.float32))
    assert math.isnan(empty.output_mean) and empty.output_head == ()
