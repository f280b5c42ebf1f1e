"""The ``counters`` measure: Nsight Compute (``ncu``) runs a separate process around a
worker of one job (``python -m suites.instruments.counted``), which warms the step up and then runs
the measured iterations inside one NVTX start/end range; ncu profiles only the kernels
launched inside that range (``--nvtx-include``), so compilation, autotuning and warm-up
stay out. A start/end range, unlike a push/pop one, spans threads: TensorFlow's executor
and XLA launch kernels from threads other than the one that opened it.

With ``DLBENCH_NCU_RANGE=profiler-api`` ncu starts profiling at the child's
cuProfilerStart instead (the child calls both around the measured iterations).

The per-kernel CSV is reduced by ``suites/instruments/ncu_metrics.py`` as Li et al. 2016 did.

``ncu`` is found in ``$DLBENCH_NCU``, on PATH, or in /usr/local/cuda/bin; where it is
absent, where the job is on a CPU, where the ``nvtx`` package is missing, or where the
driver does not let this user read counters (ERR_NVGPUCTRPERM), the row is
``unsupported`` with that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from adapters.base import Unsupported
from suites.instruments.ncu_metrics import ncu_metric_names, parse_ncu_csv, reduce_counters

NCU_ENV = "DLBENCH_NCU"
RANGE_ENV = "DLBENCH_NCU_RANGE"
DEFAULT_NCU = Path("/usr/local/cuda/bin/ncu")
NVTX_DOMAIN = "dlbench"
NVTX_RANGE = "measured"
TIMEOUT_S = 1800
ROOT = Path(__file__).resolve().parents[2]     # where `python -m suites.instruments.counted` resolves
TOOL = "Nsight Compute (ncu), kernels inside the NVTX range dlbench@measured"


def find_ncu() -> str | None:
    configured = os.environ.get(NCU_ENV)
    if configured:
        return configured if Path(configured).is_file() else None
    found = shutil.which("ncu")
    if found:
        return found
    return str(DEFAULT_NCU) if DEFAULT_NCU.is_file() else None


def unsupported_reason(device: str) -> str | None:
    if device != "gpu":
        return "hardware counters need a CUDA GPU and Nsight Compute (ncu); this job runs on the CPU"
    if find_ncu() is None:
        return (f"Nsight Compute (ncu) not found: set {NCU_ENV}, put ncu on PATH, "
                f"or install it in {DEFAULT_NCU.parent}")
    if importlib.util.find_spec("nvtx") is None:
        return "the nvtx package (nvtx==0.2.17) is not installed: ncu needs its range"
    return None


def range_filter() -> list[str]:
    """How ncu selects the measured iterations: the NVTX range (default), or, with
    ``DLBENCH_NCU_RANGE=profiler-api``, the cuProfilerStart/Stop pair the child also
    calls around them (``--profile-from-start off``), for an ncu that does not match
    the nvtx package's registered-string range names."""
    mode = os.environ.get(RANGE_ENV, "nvtx")
    if mode == "profiler-api":
        return ["--profile-from-start", "off"]
    if mode != "nvtx":
        raise Unsupported(f"{RANGE_ENV}={mode!r}: expected 'nvtx' or 'profiler-api'")
    return ["--nvtx", "--nvtx-include", f"{NVTX_DOMAIN}@{NVTX_RANGE}"]


def ncu_command(ncu: str, csv_path: Path, child_plan: Path) -> list[str]:
    return [ncu, *range_filter(),
            "--metrics", ",".join(ncu_metric_names()), "--csv", "--page", "raw",
            "--print-units", "base", "--target-processes", "all",
            "--log-file", str(csv_path),
            sys.executable, "-m", "suites.instruments.counted", str(child_plan)]


def counters_fields(plan: Any, job: dict[str, Any], measure: str) -> dict[str, Any]:
    """The row fields of one ``counters`` measurement (``plan``: the worker's Plan)."""
    reason = unsupported_reason(plan.device)
    if reason:
        raise Unsupported(reason)
    ncu = find_ncu()
    iterations = job["profile_iterations"]
    with tempfile.TemporaryDirectory(prefix="dlbench-ncu-") as folder:
        child_plan = Path(folder) / "job.json"
        child_plan.write_text(json.dumps({
            "framework": plan.framework, "device": plan.device, "threads": plan.threads,
            "interop_threads": plan.interop_threads, "seed": plan.seed,
            "model": job["model"], "batch": job["batch"], "precision": job["precision"],
            "variant": job["variant"], "measure": measure, "iterations": iterations}))
        csv_path = Path(folder) / "counters.csv"
        done = subprocess.run(ncu_command(ncu, csv_path, child_plan), capture_output=True,
                              text=True, timeout=TIMEOUT_S, check=False, cwd=ROOT)
        log = done.stdout + done.stderr
        if "ERR_NVGPUCTRPERM" in log:
            raise Unsupported("the driver does not let this user read GPU performance "
                              "counters (ERR_NVGPUCTRPERM)")
        if done.returncode != 0:
            tail = " ".join(log.split()[-60:])
            raise RuntimeError(f"ncu exited with {done.returncode}: {tail}")
        kernels = parse_ncu_csv(csv_path.read_text() if csv_path.exists() else "")
    if not kernels:
        raise RuntimeError(f"ncu profiled no kernels inside the measured range "
                           f"({' '.join(range_filter())}; {RANGE_ENV}=profiler-api is the "
                           f"other filter)")
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip().splitlines()
    return {"counters": {"tool": TOOL, "ncu_version": version[-1] if version else "",
                         "measure": measure, **reduce_counters(kernels, iterations)}}
