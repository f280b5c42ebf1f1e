"""Environment capture for every row: host, CPU, cores, GPU, driver, versions, commit."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent


def usable_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or usable_cpus()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def limit_cpus(threads: int) -> list[int]:
    """Pin this process to ``threads`` CPUs before any framework starts. JAX/XLA on CPU
    ignores thread flags and only an affinity mask limits it; pinning every framework the
    same way keeps the comparison fair."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if allowed and threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
        return allowed[:threads]
    return allowed


@cache
def nvidia_smi(field: str) -> str | None:
    """One ``nvidia-smi --query-gpu`` field of the first GPU, or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_driver() -> str | None:
    return nvidia_smi("driver_version")


@cache
def dlbench_commit() -> str:
    """The checkout's commit, with '-dirty' for local changes; DLBENCH_COMMIT overrides
    it where the tree travels without its .git (a copied working tree)."""
    if os.environ.get("DLBENCH_COMMIT"):
        return os.environ["DLBENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def host_environment(threads: int, affinity: list[int]) -> dict[str, Any]:
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "physical_cores": physical_cores(),
        "logical_cores": psutil.cpu_count(logical=True),
        "threads_used": threads,
        "cpu_affinity": affinity,
        "gpu_driver": gpu_driver(),
        "dlbench_commit": dlbench_commit(),
    }
