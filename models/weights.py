"""Canonical seeded weights: the same numbers, in canonical layouts, for every adapter.

Each array is drawn from its own generator seeded by (seed, parameter name), so a
parameter's values do not depend on which other layers the model has: AE2's frozen
``enc1`` equals AE1's and SE's ``enc1``.

Large arrays are drawn once per host and read back after (models/array_cache.py).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from models.analysis import analyse
from models.array_cache import cached
from models.ir import Model
from models.params import ParamSpec

Weights = dict[str, np.ndarray]


def _rng(seed: int, label: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(label.encode())])


def draw(spec: ParamSpec, seed: int = 0) -> np.ndarray:
    rng = _rng(seed, spec.name)
    shape = spec.shape
    if spec.init == "he":
        # He et al. 2015 normal init keeps activations at unit scale through ReLU stacks,
        # so deep networks without batch norm (VGG-19) neither overflow nor vanish.
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / spec.fan_in))
    elif spec.init in ("bias", "beta", "mean"):
        values = rng.uniform(-0.1, 0.1, shape)
    elif spec.init in ("gamma", "var"):
        values = rng.uniform(0.8, 1.2, shape)
    elif spec.init == "lstm":
        bound = 1.0 / np.sqrt(spec.fan_in)
        values = rng.uniform(-bound, bound, shape)
    elif spec.init == "embedding":
        values = rng.standard_normal(shape, dtype=np.float32)
    elif spec.init == "normal":
        # N(0, 0.02²): the initializer_range of GPT-2's, BERT's and ViT's configs
        # (Hugging Face transformers), for transformer tables and attention projections.
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    else:
        raise ValueError(f"unknown init {spec.init!r} for {spec.name}")
    return np.ascontiguousarray(values, dtype=np.float32)


def cached_draw(spec: ParamSpec, seed: int = 0) -> np.ndarray:
    """``draw``, read from the host's cache where it holds the array
    (models/array_cache.py)."""
    key = f"weight|{spec.name}|{spec.shape}|{spec.init}|{spec.fan_in}|{seed}"
    return cached(f"{spec.name}_s{seed}", key, (Path(__file__),), spec.shape, np.float32,
                  lambda: draw(spec, seed))


def canonical_weights(model: Model, seed: int = 0) -> Weights:
    """All parameters and buffers of ``model`` keyed by canonical name."""
    return {spec.name: cached_draw(spec, seed) for spec in analyse(model).param_specs}
