"""ONNX Runtime, an inference engine, scales by running one ``InferenceSession`` per
device in its own process: the adapter's own session (IOBinding, input and output on the
device), one per GPU. The launcher gives process i only GPU i (``CUDA_VISIBLE_DEVICES``),
so each session's device 0 is its own GPU. The processes share nothing: they meet at a
file barrier so that all N run their forward passes at the same time, and the row is rank
0's forward time under that load. There is no communication to measure.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from adapters.base import CaseConfig, DataParallelEngine, RunConfig, Unsupported
from adapters.ort.adapter import OrtAdapter
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from parallel.shards import shard

BARRIER_TIMEOUT_S = 300.0


class DataParallel(DataParallelEngine):
    engine = "onnxruntime: one InferenceSession per device, one process each"
    backend = "none (independent sessions)"
    communication_method = "none: inference sessions exchange nothing"
    step_kind = "forward"

    def __init__(self, spec, info, threads: int):
        self.spec, self.info = spec, info
        self.adapter = OrtAdapter(RunConfig(spec.device, threads, 1))
        model = get_model(spec.model)
        batch = shard(make_batch(model, spec.global_batch, spec.seed), info.rank,
                      info.world_size)
        self.prepared = self.adapter.prepare(model, canonical_weights(model, spec.seed), batch,
                                             CaseConfig(spec.precision, "default"))
        self.forward = self.prepared.step("forward")
        self.barrier_dir = Path(spec.result).parent / "barrier"

    def _barrier(self) -> None:
        self.barrier_dir.mkdir(exist_ok=True)
        (self.barrier_dir / f"rank{self.info.rank}").touch()
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while len(list(self.barrier_dir.iterdir())) < self.info.world_size:
            if time.monotonic() > deadline:
                raise TimeoutError("not every inference process reached the barrier")
            time.sleep(0.01)

    def step(self):
        self._barrier()
        return self.forward

    def local_step(self):
        return self.forward

    def sync(self, handle: Any) -> None:
        self.prepared.sync(handle)

    def gradients(self) -> tuple[float, dict]:
        raise Unsupported("onnxruntime computes no gradients")

    def peak_memory(self) -> dict[str, Any] | None:
        return None

    def environment(self) -> dict[str, Any]:
        return self.adapter.environment()

    def close(self) -> None:
        self.prepared.close()
