"""Canonical seeded weights: the same numbers, in canonical layouts, for every adapter.

Each array is drawn from its own generator seeded by (seed, parameter name), so a
parameter's values do not depend on which other layers the model has: AE2's frozen
``enc1`` equals AE1's and SE's ``enc1``.

Large arrays are drawn once per host and kept on disk (``$DLBENCH_WEIGHTS_CACHE``, else
``~/.cache/dlbench/weights``; ``off`` for none): a matrix builds each job in every
framework's worker, in its wall and device phases and in the float64 reference, and
drawing VGG-16's 138 M values took 20 of the 180 s of PyTorch's ``default-gpu`` worker on
an H100 host, where reading them back takes a fraction of a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import zlib
from pathlib import Path

import numpy as np

from models.analysis import analyse
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
    else:
        raise ValueError(f"unknown init {spec.init!r} for {spec.name}")
    return np.ascontiguousarray(values, dtype=np.float32)


# Arrays from this many values up are cached; smaller ones are drawn faster than read.
CACHED_VALUES = 1 << 20


def cache_dir() -> Path | None:
    found = os.environ.get("DLBENCH_WEIGHTS_CACHE", "")
    if found == "off":
        return None
    return Path(found) if found else Path.home() / ".cache" / "dlbench" / "weights"


def cache_path(spec: ParamSpec, seed: int, root: Path) -> Path:
    """The file of one drawn array: keyed by everything ``draw`` reads, its own source
    and numpy's version (NEP 19 does not promise the same stream across numpy versions,
    and each framework's venv has its own numpy)."""
    digest = hashlib.sha256()
    digest.update(f"{spec.name}|{spec.shape}|{spec.init}|{spec.fan_in}|{seed}|"
                  f"{np.__version__}|".encode())
    digest.update(Path(__file__).read_bytes())
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in spec.name)
    return root / f"{safe}_s{seed}_{digest.hexdigest()[:16]}.npy"


def _read(path: Path, spec: ParamSpec) -> np.ndarray | None:
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if values.shape != spec.shape or values.dtype != np.float32:
        return None
    return values


def _write(path: Path, values: np.ndarray) -> None:
    """Atomically: a reader never sees half a file, and processes that draw the same
    array at once each replace it with the same bytes. A full or read-only disk leaves
    the array uncached."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                np.save(out, values, allow_pickle=False)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def cached_draw(spec: ParamSpec, seed: int = 0) -> np.ndarray:
    """``draw``, read from the host's cache where it holds the array."""
    root = cache_dir()
    if root is None or spec.size < CACHED_VALUES:
        return draw(spec, seed)
    path = cache_path(spec, seed, root)
    values = _read(path, spec)
    if values is None:
        values = draw(spec, seed)
        _write(path, values)
    return values


def canonical_weights(model: Model, seed: int = 0) -> Weights:
    """All parameters and buffers of ``model`` keyed by canonical name."""
    return {spec.name: cached_draw(spec, seed) for spec in analyse(model).param_specs}
