"""Python's garbage-collector pauses during a LoadGen run, counted and timed into the row.

A full (generation 2) collection scans every object the collector tracks, and a process that
has imported a framework and built a model tracks 10^5 or more: with PyTorch and ResNet-50
built, one ``gc.collect(2)`` took 89 ms on a 2-core CPU. A collection holds the GIL, so the
batcher, LoadGen's callbacks and every framework call that needs the interpreter wait for
it: at a few hundred QPS, one such pause delays more samples than a p99 over 2000 queries
leaves room for (20). Whether any run meets one depends on what it allocates (in
serving-cpu's PyTorch cases the LoadGen runs met 0 to 7 collections, none full; preparing
and warming up, outside the runs, set off many more). Each run's row says how many
collections of each generation ran and how long the longest took (``gc.callbacks``,
Python's documented hook), so a tail latency the collector explains can be told from one
the framework made."""

from __future__ import annotations

import gc
import time
from typing import Any


class GcPauses:
    """A ``with`` block's garbage collections: per generation their count, and the longest
    and the total pause in milliseconds. Collections run one at a time (each holds the
    GIL), so one start time serves whichever thread set a collection off."""

    def __init__(self) -> None:
        self.counts = {0: 0, 1: 0, 2: 0}
        self.longest_ms = {0: 0.0, 1: 0.0, 2: 0.0}
        self.total_ms = 0.0
        self._started = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        ms = (time.perf_counter() - self._started) * 1e3
        self.counts[generation] += 1
        self.longest_ms[generation] = max(self.longest_ms[generation], ms)
        self.total_ms += ms

    def to_dict(self) -> dict[str, Any]:
        return {"collections": {str(g): n for g, n in sorted(self.counts.items())},
                "longest_ms": {str(g): round(ms, 3) for g, ms in sorted(self.longest_ms.items())},
                "total_ms": round(self.total_ms, 3)}
