"""A worker (``suites/harness/worker.py``) running one job of a stand-in framework on a simulated
GPU (``tests/fake_cupti.py``): every row field the worker assembles — wall and device
time, host overhead, host state, the profile's kernel check — comes out as on a GPU host,
with all times on the simulation's clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.base import KernelTime, Memory, Profile
from suites.harness.job import WorkerJob
from tests.fake_cupti import FakeCupti


class SimulatedPrepared:
    """Each step launches one kernel of ``kernel_ns`` and leaves the device idle for
    ``gap_ns`` (the host's launch and framework time); no device clock of its own (as
    JAX, ONNX Runtime and TensorFlow offer none)."""

    extra: dict = {}

    def __init__(self, cupti: FakeCupti, kernel_ns: int = 400_000, gap_ns: int = 100_000):
        self.cupti = cupti
        self.kernel_ns = kernel_ns
        self.gap_ns = gap_ns

    def step(self, measure: str):
        def run():
            self.cupti.launch(f"sm90_xmma_fprop_implicit_gemm_{measure}_kernel", self.kernel_ns)
            self.cupti.idle(self.gap_ns)
        return run

    def sync(self, handle) -> None:
        pass

    def reset_peak_memory(self) -> None:
        pass

    def peak_memory(self) -> Memory:
        return Memory(1024, "allocator")

    def device_clock(self):
        return None

    def profile(self, measure: str, iterations: int) -> Profile:
        return Profile("framework profiler", measure, iterations, 0.4, {"conv": 0.4},
                       (KernelTime("conv", 0.4, 1.0),), False)

    def close(self) -> None:
        pass


class SimulatedAdapter:
    def __init__(self, prepared: SimulatedPrepared):
        self.prepared = prepared

    def describe(self, case) -> str:
        return "simulated"

    def check_precision(self, case) -> None:
        pass

    def prepare(self, model, weights, batch, case) -> SimulatedPrepared:
        return self.prepared

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False


class Entry:
    measures = ("forward", "gradient")


TIMER = {"warmup": 1, "min_samples": 3, "max_samples": 6, "budget_s": 0.05,
         "steady_max_s": 0.0, "repetitions": 3, "max_repetitions": 3, "min_block_s": 0.002}


def run_job(tmp_path: Path, prepared: SimulatedPrepared, pending: list[str],
            framework: str = "jax", phase: str = "all",
            device_measures: tuple[str, ...] = (),
            compile_cache: str = "",
            recorded: dict[str, list[float | None]] | None = None) -> dict[str, dict[str, Any]]:
    """The rows one job writes, by measure."""
    path = tmp_path / f"rows-{phase}.jsonl"
    worker = make_worker(path, prepared, framework, phase)
    worker.run_job(job(pending, device_measures, compile_cache, recorded))
    return {row["measure"]: row for row in map(json.loads, path.read_text().splitlines())}


def make_worker(path: Path, prepared: SimulatedPrepared, framework: str = "jax",
                phase: str = "all"):
    """A worker writing its rows to ``path``, every job built as ``prepared``."""
    from suites.harness.worker import Plan, Worker
    from suites.instruments.host_state import HostMonitor
    from suites.rows.results import ResultsFile

    worker = Worker.__new__(Worker)
    worker.plan = Plan("s", framework, "gpu", 1, 1, str(path), 0, [], phase=phase)
    worker.entry = Entry()
    worker.adapter = SimulatedAdapter(prepared)
    worker.env = {}
    worker.results = ResultsFile(path)
    worker.gpu_monitor, worker.gpu_state_reason = None, "no NVML in the simulation"
    worker.host_monitor = HostMonitor(periodic=False)
    worker.timed = {}
    return worker


def job(pending: list[str], device_measures: tuple[str, ...] = (), compile_cache: str = "",
        recorded: dict[str, list[float | None]] | None = None,
        model: str = "sae_tiny_ae2") -> WorkerJob:
    """One job as the runner sends it."""
    return WorkerJob.from_dict({"model": model, "batch": 2, "precision": "fp32", "variant": "default",
            "compile_cache": compile_cache, "pending": pending, "timer": TIMER,
            "profile_iterations": 3, "device_measures": list(device_measures),
            "recorded": recorded or {}})
