"""A stand-in framework for the harness's own tests (tests/data/fake_registry.toml, read
through ``DLBENCH_REGISTRY``): it builds nothing and times a little numpy, so runners,
their worker processes and the matrix run in seconds where no framework is installed.
Every row names the process that measured it (``env["worker_pid"]``), and preparing a
model writes a line straight to file descriptor 2, as a framework's C++ logging does.

* ``FAKE_CRASH=<model>``: preparing that model kills the worker with SIGKILL, as a
  segfault or the kernel's OOM killer would. ``FAKE_ABORT=<model>``: preparing it writes a
  FATAL line and a stack trace to file descriptor 2 and aborts (SIGABRT), as a failed CHECK
  in TensorFlow's C++ does (``ABORT_LINES``).
* The ``cached`` variant keeps a "compilation cache": it writes a file into
  ``FAKE_CACHE_DIR`` (set from the registry's compile_cache env), as a framework's
  persistent cache does.
* Device ``"gpu"`` runs the same numpy, so that the runner's two GPU phases (wall, then
  device) run without a GPU: the worker reads no GPU state (``monitors_gpu``), and the
  device clock is the host's around each block. ``FAKE_GPU_LOCK=<file>``: a stand-in GPU
  that admits one process at a time, as a GPU in exclusive-process compute mode does: a
  worker takes an exclusive lock on the file when it starts and holds it until it exits,
  and a worker that finds it held stops with ``DeviceUnavailable`` (the worker's fatal
  event), naming the process that holds it. Each entry of ``CUDA_VISIBLE_DEVICES`` is a
  stand-in GPU of its own (``<file>.<entry>``), for a matrix's lanes (suites/matrix/lanes.py).
* ``FAKE_EVENTS=<file>``: each prepared case appends ``<pid> <device> <model> b<batch>``
  to the file, so a test can read the order in which processes ran their cases.
* ``FAKE_GPU_MEMORY_USED=<fraction>``: the share of the stand-in GPU's memory in use
  (default 0), which decides whether a job is kept built for the device phase
  (suites/harness/kept_jobs.py); ``FAKE_EVENTS`` shows which jobs were built again, and a
  kept job's settings set again (``<pid> reapply <precision> <variant>``).
* ``serve`` (the serving harness's one call, suites/serving/) answers with the float64
  reference rounded to float32, so a serving suite runs under the real LoadGen and its
  served outputs pass the float64 check; ``generator`` (the generate measure) greedily
  decodes with the float64 reference over the whole sequence (``ReferenceGenerator``, no
  cache), so a generation case passes the check too.
* ``FAKE_SERVE_HANG=<model>:<n>``: that model's ``serve`` never returns after its first
  ``n`` calls (it sleeps), as a deadlocked framework's would: the serving watchdog's case.
  ``FAKE_SERVE_SLOW=<model>:<n>:<k>``: after its first ``n`` calls each also sleeps ``k``
  times its own compute, as on a busy host (a run slower than its warm-up, yet answering).
* ``FAKE_OOM=<model>``: preparing that model raises an out-of-memory error.
  ``FAKE_OOM_AFTER_OTHERS=<model>``: only in a process that prepared another model
  before, as an allocator fragmented by earlier jobs refuses what a fresh process grants.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

import numpy as np

from adapters.base import (
    Adapter,
    DeviceClock,
    DeviceUnavailable,
    Memory,
    Prepared,
    RunConfig,
    Unsupported,
)

REGISTRY = Path(__file__).with_name("data") / "fake_registry.toml"
CRASH = "FAKE_CRASH"
ABORT = "FAKE_ABORT"
# What a failed CHECK writes before abort() (absl's format, as TensorFlow 2.21 wrote it on an
# H200 for a 16,384-token attention), the stack trace shortened, then a fresh worker's noise.
ABORT_LINES = (
    "I0000 00:00:1795916197.420224    6482 port.cc:153] oneDNN custom operations are on.\n"
    "F0000 00:00:1795916234.236931    6530 conv_2d_gpu.h:1028] Check failed: "
    "(::tsl::TfCheckOkDeprecationMarker(), GpuLaunchKernel(SwapDimension1And2InTensor3UsingTiles"
    "<T, kNumThreads, kTileSize, kTileSize, conjugate>, total_tiles_count, kNumThreads, 0, "
    "d.stream(), input, input_dims, output)) is OK (INTERNAL: an illegal memory access was "
    "encountered) \n"
    "*** Check failure stack trace: ***\n"
    "    @     0x7f714d51d314  absl::lts_20250814::log_internal::LogMessage::SendToLog()\n"
    "    @     0x7f7132d11745  tensorflow::EinsumOp<>::Compute()\n"
    "    @     0x7f71ec729ecc  (unknown)\n")
GPU_LOCK = "FAKE_GPU_LOCK"
EVENTS = "FAKE_EVENTS"
OOM = "FAKE_OOM"
OOM_AFTER_OTHERS = "FAKE_OOM_AFTER_OTHERS"
MEMORY_USED = "FAKE_GPU_MEMORY_USED"
SERVE_HANG = "FAKE_SERVE_HANG"
SERVE_SLOW = "FAKE_SERVE_SLOW"
PREPARED: list[str] = []     # the models this process prepared, in order


class FakeOutOfMemory(RuntimeError):
    """What the stand-in raises for FAKE_OOM and FAKE_OOM_AFTER_OTHERS."""


class HostClock(DeviceClock):
    """The stand-in's device clock on a "gpu": the host's time around the block."""

    kind = "the stand-in's host clock"

    def start(self) -> None:
        self.began = time.perf_counter()

    def end(self) -> None:
        self.ended = time.perf_counter()

    def elapsed(self) -> float | None:
        return self.ended - self.began


class ReferenceGenerator:
    """The float64 reference over the whole sequence each step (no cache: a stand-in),
    its logits rounded to float32 and moved by ``shift`` x max |y|; ``runner_up`` returns
    float64's second-best token at the first step; ``fail_after`` raises after that many
    prefills."""

    def __init__(self, model, weights, shift: float, runner_up: bool, fail_after: int | None):
        self.model, self.weights, self.shift = model, weights, shift
        self.runner_up, self.fail_after, self.prefills = runner_up, fail_after, 0
        self.memo: dict[tuple[int, ...], np.ndarray] = {}
        self.tokens: list[int] = []

    def _next(self) -> int:
        key = tuple(self.tokens)
        if key not in self.memo:
            from models import reference
            from models.inputs import Batch
            x = np.asarray(self.tokens, dtype=np.int32)[None]
            self.memo[key] = reference.forward(self.model, self.weights, Batch(x, None, None))[0, -1]
        logits = self.memo[key].astype(np.float32)
        self.logits = logits + np.float32(self.shift) * np.abs(logits).max()
        order = np.argsort(self.logits)
        return int(order[-2] if self.runner_up and len(self.tokens) == self.prompt else order[-1])

    def prefill(self, prompt: np.ndarray) -> int:
        self.prefills += 1
        if self.fail_after is not None and self.prefills > self.fail_after:
            raise RuntimeError("the generator fell over")
        self.tokens, self.prompt = [int(t) for t in prompt], len(prompt)
        return self._next()

    def decode(self, token: int) -> int:
        self.tokens.append(token)
        return self._next()

    def last_logits(self) -> np.ndarray:
        return self.logits.astype(np.float64)


class FakePrepared(Prepared):
    def __init__(self, batch: int, device: str, model=None, weights=None):
        super().__init__()
        self.batch = batch
        self.device = device
        self.model, self.weights = model, weights
        self.a = np.ones((8, 8), dtype=np.float32)
        self.serves = 0

    def serve(self, batch) -> np.ndarray:
        from models import reference
        self.serves += 1
        model, _, calls = os.environ.get(SERVE_HANG, "").partition(":")
        if self.model is not None and model == self.model.name and self.serves > int(calls or 0):
            while True:
                time.sleep(3600)
        began = time.perf_counter()
        out = reference.forward(self.model, self.weights, batch, train=False).astype(np.float32)
        slow = os.environ.get(SERVE_SLOW, "").split(":")
        if self.model is not None and slow[0] == self.model.name and self.serves > int(slow[1]):
            time.sleep(float(slow[2]) * (time.perf_counter() - began))
        return out

    def generator(self, max_length: int) -> ReferenceGenerator:
        from models.families.transformer import not_a_decoder
        if not_a_decoder(self.model):
            raise Unsupported(not_a_decoder(self.model))
        return ReferenceGenerator(self.model, self.weights, 0.0, False, None)

    def step_forward(self):
        return lambda: self.a @ self.a

    def step_gradient(self):
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

    def device_clock(self):
        return HostClock() if self.device == "gpu" else None


def record_event(text: str) -> None:
    """``<pid> <text>``, a line of FAKE_EVENTS' file, if set."""
    events = os.environ.get(EVENTS)
    if events:
        fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{os.getpid()} {text}\n".encode())
        os.close(fd)


def hold_the_gpu(path: str) -> int:
    """Take the stand-in GPU for this process (the module's docstring): the descriptor
    holding the lock, kept open until the process exits."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode().strip() or "unknown"
        os.close(fd)
        raise DeviceUnavailable(f"the stand-in GPU is held by process {holder}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


class FakeAdapter(Adapter):
    name = "fake"
    variants = {"eager": "a little numpy", "cached": "a little numpy, with a cache on disk"}
    monitors_gpu = False

    def __init__(self, config: RunConfig):
        super().__init__(config)
        lock = os.environ.get(GPU_LOCK)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if lock and visible:
            lock = f"{lock}.{visible}"
        self.gpu = hold_the_gpu(lock) if config.device == "gpu" and lock else None

    def environment(self) -> dict:
        return {"framework_version": "0", "worker_pid": os.getpid()}

    def prepare(self, model, weights, batch, case) -> FakePrepared:
        os.write(2, f"fake: preparing {model.name} b{batch.size}\n".encode())
        record_event(f"{self.config.device} {model.name} b{batch.size}")
        if os.environ.get(CRASH) == model.name:
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get(ABORT) == model.name:
            os.write(2, ABORT_LINES.encode())
            os.abort()
        others = [name for name in PREPARED if name != model.name]
        PREPARED.append(model.name)
        if os.environ.get(OOM) == model.name or \
                (os.environ.get(OOM_AFTER_OTHERS) == model.name and others):
            raise FakeOutOfMemory(f"out of memory preparing {model.name} "
                                  f"(after {len(others)} other models)")
        if self.resolve_variant(case.variant) == "cached":
            folder = Path(os.environ["FAKE_CACHE_DIR"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{model.name}.bin").write_bytes(b"compiled")
        return FakePrepared(batch.size, self.config.device, model, weights)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, FakeOutOfMemory)

    def reapply(self, case) -> None:
        record_event(f"reapply {case.precision} {case.variant}")

    def memory_used_fraction(self) -> float | None:
        return float(os.environ.get(MEMORY_USED, "0")) if self.config.device == "gpu" else None
