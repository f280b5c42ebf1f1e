"""The system under test, framework-neutral: LoadGen's queries answered by a ``serve``
callable (``adapters.base.Prepared.serve``) over the query set's seeded samples.

Each query's samples are served in batches of the prepared size; a short last batch is
padded with copies of its last sample and the padding's outputs are dropped (counted in
``Server.padded``). The callback answers a query before it returns (LoadGen's Python
demos do the same), so LoadGen's time from issue to completion is the serve calls: the
inputs' copy onto the device, the forward and the output's copy back. The outputs of
the checked samples (the first ``checked`` indices) are kept the first time each is
served. An exception in ``serve`` is kept (``error``) and every later query is completed
at once without serving, so LoadGen ends the run and the row says why."""

from __future__ import annotations

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
    def __init__(self, serve: Callable[[Batch], np.ndarray], samples: Batch, batch: int,
                 checked: int):
        self.serve_batch = serve
        self.samples = samples
        self.batch = batch
        self.checked = checked
        self.outputs: dict[int, np.ndarray] = {}
        self.padded = 0          # padding samples served and dropped
        self.served = 0          # real samples served
        self.calls = 0
        self.error = ""

    def answer(self, indices: Sequence[int]) -> None:
        """Serve ``indices`` in batches of ``batch``, keeping the checked samples' outputs."""
        for start in range(0, len(indices), self.batch):
            chunk = list(indices[start:start + self.batch])
            pad = self.batch - len(chunk)
            output = self.serve_batch(select(self.samples, chunk + [chunk[-1]] * pad))
            if len(output) != self.batch:
                raise ValueError(f"serve returned {len(output)} outputs for a batch of {self.batch}")
            self.calls += 1
            self.served += len(chunk)
            self.padded += pad
            for index, out in zip(chunk, output[:len(chunk)]):
                if index < self.checked and index not in self.outputs:
                    self.outputs[index] = np.array(out)

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
