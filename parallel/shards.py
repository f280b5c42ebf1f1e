"""Splitting the global batch into per-device shards (numpy only).

Every rank draws the same seeded global batch and takes its own contiguous slice, so the
concatenated shards are exactly the batch a one-device run of the global size sees (the
correctness check relies on it). Token batches keep the global padded length."""

from __future__ import annotations

from models.inputs import Batch


def shard(batch: Batch, index: int, count: int) -> Batch:
    if batch.size % count:
        raise ValueError(f"a batch of {batch.size} does not split into {count} equal shards")
    size = batch.size // count
    part = slice(index * size, (index + 1) * size)
    return Batch(batch.x[part],
                 None if batch.labels is None else batch.labels[part],
                 None if batch.lengths is None else batch.lengths[part])
