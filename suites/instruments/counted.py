"""The process Nsight Compute profiles for a ``counters`` row (``suites/instruments/counters.py``):
``python -m suites.instruments.counted JOB.json`` builds the job's model exactly as the worker does,
runs the step ``suites.instruments.profiling.WARMUP_RUNS`` times untraced, then the measured
iterations inside the NVTX start/end range that ncu's filter selects (and between
cuProfilerStart and cuProfilerStop, the other filter), each synced."""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    import nvtx

    from adapters.base import CaseConfig, RunConfig
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.weights import canonical_weights
    from models.zoo import get_model
    from suites.instruments.counters import NVTX_DOMAIN, NVTX_RANGE
    from suites.instruments.profiling import WARMUP_RUNS

    entry = load_registry()[job["framework"]]
    adapter = entry.load()(RunConfig(job["device"], job["threads"], job["interop_threads"]))
    model = get_model(job["model"])
    prepared = adapter.prepare(model, canonical_weights(model, job["seed"]),
                               make_batch(model, job["batch"], job["seed"]),
                               CaseConfig(job["precision"], job["variant"]))
    step = prepared.step(job["measure"])
    for _ in range(WARMUP_RUNS):
        prepared.sync(step())
    prepared.sync(None)
    profiler = ProfilerApi()
    measured = nvtx.start_range(message=NVTX_RANGE, domain=NVTX_DOMAIN)
    profiler.start()
    for _ in range(job["iterations"]):
        prepared.sync(step())
    profiler.stop()
    nvtx.end_range(measured)
    prepared.close()
    return 0


class ProfilerApi:
    """cuProfilerStart/Stop through the driver library, with the device's primary context
    (the one every framework here runs in) current: ncu's ``--profile-from-start off``
    filter. Without a driver library it does nothing (the NVTX range still marks the
    iterations)."""

    def __init__(self):
        try:
            self.cuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            self.cuda = None
            return
        self.context = ctypes.c_void_p()
        device = ctypes.c_int()
        self.cuda.cuInit(0)
        self.cuda.cuDeviceGet(ctypes.byref(device), 0)
        self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device)

    def _call(self, name: str) -> None:
        if self.cuda is None:
            return
        self.cuda.cuCtxPushCurrent_v2(self.context)
        getattr(self.cuda, name)()
        self.cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def start(self) -> None:
        self._call("cuProfilerStart")

    def stop(self) -> None:
        self._call("cuProfilerStop")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
