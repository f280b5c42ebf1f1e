"""Seeded input batches, identical for every adapter.

Token batches follow an IMDB-like length distribution: review lengths in words are about
log-normal with a median near 174 (IMDB training set, Maas et al. 2011); reviews longer
than the model's ``max_len`` are dropped, as the LISA Lab tutorial's ``maxlen`` filter
does, and a batch is padded to its longest review (Bahrampour et al. 2016, 4.4).
Token id 0 is padding.

A large image or vector input is drawn once per host and read back after
(models/array_cache.py): the same numbers either way.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.array_cache import cached
from models.ir import Model

IMDB_MEDIAN_WORDS = 174
IMDB_LOG_SIGMA = 0.75


@dataclass(frozen=True)
class Batch:
    """``x``: float32 (N, ...) or int32 tokens (N, T); ``labels``: int32 (N,) for
    classification, (N, T) for a per-step loss (-1: not counted); ``lengths``: int32 (N,)
    for token batches."""

    x: np.ndarray
    labels: np.ndarray | None = None
    lengths: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class StepMask:
    """The valid steps of a padded token batch, in every form the adapters' LSTMs and
    masked means need, computed once here in numpy: each adapter only converts these
    arrays to its own tensors (models/ops/lstm.py and mean_over_time.py define the
    semantics: past its length a sequence holds its state and its steps do not count)."""

    lengths: np.ndarray   # int64 (N,): valid steps per sequence
    valid: np.ndarray     # bool (N, T): step t of sequence n is valid
    order: np.ndarray     # int64 (N,): the rows, longest first (stable), for packing
    restore: np.ndarray   # int64 (N,): the inverse permutation of ``order``

    @staticmethod
    def of(lengths: np.ndarray, steps: int) -> StepMask:
        lengths = np.asarray(lengths).astype(np.int64)
        # A stable sort of the negated lengths: longest first, ties in batch order, as
        # torch.sort(descending=True, stable=True) orders them.
        order = np.argsort(-lengths, kind="stable")
        return StepMask(lengths, np.arange(steps)[None, :] < lengths[:, None], order,
                        np.argsort(order))

    @property
    def sorted_lengths(self) -> np.ndarray:
        """int64 (N,): the lengths in ``order``."""
        return self.lengths[self.order]

    @property
    def weight(self) -> np.ndarray:
        """float32 (N, T): ``valid`` as numbers, for a masked sum."""
        return self.valid.astype(np.float32)

    @property
    def count(self) -> np.ndarray:
        """float32 (N,): the divisor of the masked mean."""
        return self.lengths.astype(np.float32)


def head(batch: Batch, count: int) -> Batch:
    """The first ``count`` examples of ``batch``. A token batch keeps its padded length
    (the longest review of the whole batch): padded steps are masked, so each example's
    output is the one it has inside the whole batch."""
    def first(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[:count]
    return Batch(batch.x[:count], first(batch.labels), first(batch.lengths))


def sequence_lengths(rng: np.random.Generator, count: int, max_len: int) -> np.ndarray:
    scale = IMDB_MEDIAN_WORDS / 100.0 * max_len
    lengths: list[int] = []
    while len(lengths) < count:
        draw = rng.lognormal(np.log(scale), IMDB_LOG_SIGMA, size=4 * count)
        lengths += [int(round(v)) for v in draw if 1 <= round(v) <= max_len]
    return np.asarray(lengths[:count], dtype=np.int32)


def _features(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "image":
        return rng.standard_normal(shape, dtype=np.float32)
    # MNIST pixel intensities lie in [0, 1]; the sigmoid decoder targets them.
    return rng.uniform(0.0, 1.0, shape).astype(np.float32)


def make_batch(model: Model, batch: int, seed: int = 0) -> Batch:
    rng = np.random.default_rng([seed, batch, zlib.crc32(model.name.encode())])
    spec = model.input
    labels = None
    if model.loss.kind == "softmax_xent":
        labels = rng.integers(0, model.loss.classes, size=batch, dtype=np.int32)
    if spec.kind in ("image", "vector"):
        # The input is the last draw from rng: a large one is read back from the host's
        # cache instead (models/array_cache.py), keyed by everything drawn before it.
        shape = (batch, *spec.shape)
        key = (f"input|{model.name}|{spec.kind}|{shape}|{model.loss.kind}|"
               f"{model.loss.classes}|{seed}")
        return Batch(cached(f"input_{model.name}_b{batch}_s{seed}", key, (Path(__file__),),
                            shape, np.float32, lambda: _features(rng, spec.kind, shape)),
                     labels)
    if spec.lengths == "full":
        lengths = np.full(batch, spec.shape[0], dtype=np.int32)
    else:
        lengths = sequence_lengths(rng, batch, spec.shape[0])
    steps = int(lengths.max())
    tokens = rng.integers(1, spec.vocab, size=(batch, steps), dtype=np.int32)
    valid = np.arange(steps)[None, :] < lengths[:, None]
    tokens[~valid] = 0
    if model.loss.kind == "token_xent":
        labels = step_labels(rng, valid, model.loss.classes, model.loss.labelled)
    return Batch(tokens, labels, lengths)


def step_labels(rng: np.random.Generator, valid: np.ndarray, classes: int,
                labelled: float) -> np.ndarray:
    """int32 (N, T): a class for each labelled step, -1 elsewhere. Each valid step is
    labelled with probability ``labelled``; at least one is, so the mean has a count."""
    labels = rng.integers(0, classes, size=valid.shape, dtype=np.int32)
    chosen = valid & (rng.random(valid.shape) < labelled)
    if not chosen.any():
        chosen[0, 0] = True
    labels[~chosen] = -1
    return labels


def make_epoch(model: Model, batch: int, count: int, seed: int = 0) -> list[Batch]:
    """A fixed, unshuffled sequence of ``count`` batches: every framework sees the same
    batches in the same order and so does the same work (Bahrampour et al. 2016, 4.4: one
    epoch of 124 IMDB batches of 16, no shuffling). Token batches differ in padded
    length, drawn from the IMDB-like distribution above."""
    return [make_batch(model, batch, seed * 1_000_003 + index) for index in range(count)]
