"""The host's cache of large seeded arrays: canonical weights (models/weights.py) and
input batches (models/inputs.py).

A matrix builds each job in every framework's worker, in its wall and device phases and in
the float64 reference, and each build draws the same numbers again. On an H100 host,
drawing VGG-16's 138 M weights took 20 of the 180 s of PyTorch's ``default-gpu`` worker;
drawing the inputs took 11 of the 158 s of JAX's worker over ``li2016``'s batch sweep and
Table I (25 M values at batch 512). Reading an array back takes a fraction of that.

The cache is ``$DLBENCH_ARRAY_CACHE``, else ``~/.cache/dlbench/arrays``; ``off`` for none.
Only arrays of ``CACHED_VALUES`` values and more are kept: smaller ones are drawn faster
than read. Each file is keyed by everything its draw reads, the source files that draw it
and numpy's version (NEP 19 does not promise the same stream across numpy versions, and
each framework's venv has its own numpy). A file that cannot be read, or holds another
shape or dtype, is drawn again and replaced; a cache that cannot be written leaves the
array uncached. Either way the caller gets exactly the array a draw gives.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHED_VALUES = 1 << 20


def cache_dir() -> Path | None:
    found = os.environ.get("DLBENCH_ARRAY_CACHE", "")
    if found == "off":
        return None
    return Path(found) if found else Path.home() / ".cache" / "dlbench" / "arrays"


def cache_path(root: Path, label: str, key: str, sources: tuple[Path, ...]) -> Path:
    """The file of one array: ``label`` names it for a reader, ``key`` and the sources'
    bytes decide which numbers it holds."""
    digest = hashlib.sha256(f"{key}|{np.__version__}|".encode())
    for source in sources:
        digest.update(source.read_bytes())
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in label)
    return root / f"{safe}_{digest.hexdigest()[:16]}.npy"


def _read(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if values.shape != tuple(shape) or values.dtype != dtype:
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


def cached(label: str, key: str, sources: tuple[Path, ...], shape: tuple[int, ...],
           dtype: np.dtype | type, draw: Callable[[], np.ndarray]) -> np.ndarray:
    """``draw()``, an array of ``shape`` and ``dtype``, read from the host's cache where
    it holds that array."""
    dtype = np.dtype(dtype)
    root = cache_dir()
    if root is None or int(np.prod(shape)) < CACHED_VALUES:
        return draw()
    path = cache_path(root, label, key, sources)
    values = _read(path, shape, dtype)
    if values is None:
        values = draw()
        _write(path, values)
    return values
