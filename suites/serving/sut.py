"""The system under test, framework-neutral: LoadGen's queries answered by a ``serve``
callable (``adapters.base.Prepared.serve``) over the query set's seeded samples.

Each query's samples are served in batches of the prepared size; a short last batch is
padded with copies of its last sample and the padding's outputs are dropped (counted in
``Server.padded``). The callback answers a query before it returns (LoadGen's Python
demos do the same), so LoadGen's time from issue to completion is the serve calls: the
inputs' copy onto the device, the forward and the output's copy back. The outputs of
the checked samples (the first ``checked`` indices) are kept the first time each is
served. An exception in ``serve`` is kept (``error``) and every later query is completed
at once without serving, so LoadGen ends the run and the row says why.

In the Server scenario LoadGen issues one sample per query from its own issuing thread at
Poisson arrival times, and a callback that served there would hold back the next arrivals
(LoadGen measures from the scheduled time, so the wait would be charged, but the arrival
process would no longer be LoadGen's). ``Batcher`` takes the samples off that thread: the
callback only appends them to a queue, and one batcher thread serves up to ``max_batch``
pending samples at once, as soon as that many wait or the oldest has waited ``timeout_s``
(TensorFlow Serving's ``max_batch_size`` and ``batch_timeout_micros``), then completes
each sample with its own response id."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from models.inputs import Batch


def select(samples: Batch, indices: Sequence[int]) -> Batch:
    """The samples at ``indices`` as one batch (labels are not served)."""
    at = np.asarray(indices, dtype=np.int64)
    return Batch(samples.x[at], None, None if samples.lengths is None else samples.lengths[at])


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:500]


class Server:
    """``serve`` answers batches of ``batch``; ``smaller`` maps further prepared sizes
    (below ``batch``) to their own ``serve``: a chunk goes at the smallest size that holds
    it (TensorFlow Serving's ``allowed_batch_sizes``)."""

    def __init__(self, serve: Callable[[Batch], np.ndarray], samples: Batch, batch: int,
                 checked: int, smaller: dict[int, Callable[[Batch], np.ndarray]] | None = None):
        self.serves = {**(smaller or {}), batch: serve}
        self.samples = samples
        self.batch = batch
        self.checked = checked
        self.outputs: dict[int, np.ndarray] = {}
        self.padded = 0          # padding samples served and dropped
        self.served = 0          # real samples served
        self.calls_by_size: dict[int, int] = {}   # prepared size -> serve calls
        self.error = ""

    def serve_padded(self, chunk: Sequence[int]) -> np.ndarray:
        """One call of ``serve`` on the samples ``chunk`` (at most ``batch``), padded with
        copies of its last sample to the smallest prepared size that holds it; the outputs
        of ``chunk`` in its order, the padding's dropped. The checked samples' outputs are
        kept."""
        chunk = list(chunk)
        size = min(n for n in self.serves if n >= len(chunk))
        pad = size - len(chunk)
        output = self.serves[size](select(self.samples, chunk + [chunk[-1]] * pad))
        if len(output) != size:
            raise ValueError(f"serve returned {len(output)} outputs for a batch of {size}")
        self.calls_by_size[size] = self.calls_by_size.get(size, 0) + 1
        self.served += len(chunk)
        self.padded += pad
        for index, out in zip(chunk, output[:len(chunk)]):
            if index < self.checked and index not in self.outputs:
                self.outputs[index] = np.array(out)
        return output[:len(chunk)]

    @property
    def calls(self) -> int:
        """Serve calls so far (the warm-up's not counted)."""
        return sum(self.calls_by_size.values())

    def warm(self) -> None:
        """One uncounted serve at each prepared size, in the calling thread."""
        for size, serve in sorted(self.serves.items()):
            serve(select(self.samples, [i % len(self.samples.x) for i in range(size)]))

    def answer(self, indices: Sequence[int]) -> None:
        """Serve ``indices`` in batches of ``batch``, keeping the checked samples' outputs."""
        for start in range(0, len(indices), self.batch):
            self.serve_padded(indices[start:start + self.batch])

    def issue(self, lg: Any, query_samples: Sequence[Any]) -> None:
        """LoadGen's IssueQuery callback: answer, then complete every sample of the query
        (no response data: performance mode logs no accuracy)."""
        if not self.error:
            try:
                self.answer([int(q.index) for q in query_samples])
            except Exception as error:   # noqa: BLE001 - any failure of serve becomes the row's reason
                self.error = one_line(error)
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in query_samples])

    def missing_checked(self) -> list[int]:
        return [i for i in range(self.checked) if i not in self.outputs]


# What the batcher hands back per batch: the samples' LoadGen response ids and their
# outputs, row i for id i (None once serve has failed: those samples are completed unserved).
Complete = Callable[[list[int], "np.ndarray | None"], None]


def loadgen_complete(lg: Any) -> Complete:
    """Completion through LoadGen: one response per sample with its own id, no data
    (performance mode logs no accuracy)."""
    def complete(ids: list[int], outputs: np.ndarray | None) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])
    return complete


class Batcher:
    """Server's dynamic batching over ``server`` (its ``serve_padded``, so every call has a
    prepared shape: one compiled graph, one CUDA graph, one set of buffers per prepared size,
    where a model per batch size would cost ``max_batch`` preparations and their memory; a
    short batch pays the compute of the size it is padded to, as a padded batch of
    TensorFlow Serving's ``allowed_batch_sizes`` does). ``submit`` is LoadGen's issue callback's whole work;
    ``flush`` (LoadGen's FlushQueries, sent once every query is issued) sends what waits
    without waiting for more. After an exception in ``serve`` the error is kept in
    ``server.error`` and every sample is completed at once unserved, so LoadGen ends."""

    def __init__(self, server: Server, timeout_s: float, complete: Complete):
        self.server = server
        self.max_batch = server.batch
        self.timeout_s = timeout_s
        self.complete = complete
        self.batch_sizes: dict[int, int] = {}   # samples per serve call -> calls
        self._pending: deque[tuple[int, int, float]] = deque()   # (response id, index, arrival)
        self._ready = threading.Condition()
        self._flushed = False
        self._stopped = False
        self._warmed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="serving-batcher", daemon=True)

    def __enter__(self) -> Batcher:
        # The batcher's thread serves once at each prepared size before LoadGen starts: a
        # framework's first call in a new thread pays that thread's setup (PyTorch creates
        # its cuBLAS and cuDNN handles per thread), which would stall the run's first samples
        # and every arrival behind them (one stall sets a 662-query run's p99).
        self._thread.start()
        self._warmed.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()
        self._thread.join()

    def submit(self, samples: Sequence[tuple[int, int]]) -> None:
        """Queue (response id, sample index) pairs; returns at once."""
        now = time.perf_counter()
        with self._ready:
            self._pending.extend((rid, index, now) for rid, index in samples)
            self._ready.notify()

    def issue(self, query_samples: Sequence[Any]) -> None:
        """LoadGen's IssueQuery callback."""
        self.submit([(int(q.id), int(q.index)) for q in query_samples])

    def flush(self) -> None:
        with self._ready:
            self._flushed = True
            self._ready.notify()

    def _next_batch(self) -> list[tuple[int, int, float]] | None:
        with self._ready:
            while not self._pending and not self._stopped:
                self._ready.wait()
            if not self._pending:
                return None
            deadline = self._pending[0][2] + self.timeout_s
            while (len(self._pending) < self.max_batch and not self._flushed and not self._stopped
                   and not self.server.error):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._ready.wait(left)
            return [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]

    def _loop(self) -> None:
        try:
            self.server.warm()
        except Exception as error:   # noqa: BLE001 - a failure of serve becomes the row's reason
            self.server.error = one_line(error)
        finally:
            self._warmed.set()
        while (batch := self._next_batch()) is not None:
            ids = [rid for rid, _, _ in batch]
            outputs = None
            if not self.server.error:
                try:
                    outputs = self.server.serve_padded([index for _, index, _ in batch])
                    self.batch_sizes[len(batch)] = self.batch_sizes.get(len(batch), 0) + 1
                except Exception as error:   # noqa: BLE001 - any failure of serve becomes the row's reason
                    self.server.error = one_line(error)
            self.complete(ids, outputs)
