"""A stand-in framework for the harness's own tests (tests/data/fake_registry.toml, read
through ``DLBENCH_REGISTRY``): it builds nothing and times a little numpy, so runners,
their worker processes and the matrix run in seconds where no framework is installed.
Every row names the process that measured it (``env["worker_pid"]``), and preparing a
model writes a line straight to file descriptor 2, as a framework's C++ logging does.

* ``FAKE_CRASH=<model>``: preparing that model kills the worker with SIGKILL, as a
  segfault or the kernel's OOM killer would.
* The ``cached`` variant keeps a "compilation cache": it writes a file into
  ``FAKE_CACHE_DIR`` (set from the registry's compile_cache env), as a framework's
  persistent cache does.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np

from adapters.base import Adapter, Memory, Prepared, Unsupported

REGISTRY = Path(__file__).with_name("data") / "fake_registry.toml"
CRASH = "FAKE_CRASH"


class FakePrepared(Prepared):
    def __init__(self, batch: int):
        super().__init__()
        self.batch = batch
        self.a = np.ones((8, 8), dtype=np.float32)

    def step(self, measure: str):
        return lambda: self.a @ self.a

    def sync(self, handle) -> None:
        pass

    def reset_peak_memory(self) -> None:
        pass

    def peak_memory(self) -> Memory:
        return Memory(None, "rss")

    def forward_output(self) -> np.ndarray:
        return np.full((self.batch, 2), 0.5, dtype=np.float32)

    def loss_and_gradients(self):
        raise Unsupported("the stand-in has no gradients")


class FakeAdapter(Adapter):
    name = "fake"
    variants = {"eager": "a little numpy", "cached": "a little numpy, with a cache on disk"}

    def environment(self) -> dict:
        return {"framework_version": "0", "worker_pid": os.getpid()}

    def prepare(self, model, weights, batch, case) -> FakePrepared:
        os.write(2, f"fake: preparing {model.name} b{batch.size}\n".encode())
        if os.environ.get(CRASH) == model.name:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.resolve_variant(case.variant) == "cached":
            folder = Path(os.environ["FAKE_CACHE_DIR"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{model.name}.bin").write_bytes(b"compiled")
        return FakePrepared(batch.size)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False
