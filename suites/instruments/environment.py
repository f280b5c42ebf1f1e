"""Environment capture for every row: host, CPU, cores, GPU, driver, versions, commit."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]


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


# The widest x86 vector extension the CPU reports, from /proc/cpuinfo's flags: oneDNN, XLA
# and ONNX Runtime's MLAS pick their kernels by it, and one model name does not fix it (a
# 2-core "AMD EPYC" VM of one host id ran the CPU reference without AVX-512 and later had it).
ISA_FLAGS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"))


def cpu_isa(cpuinfo: str | None = None) -> str:
    """"AVX-512", "AVX2", "AVX", or "" where the CPU reports none of them (or no flags:
    another architecture, another OS)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return next((name for flag, name in ISA_FLAGS if flag in flags), "")
    return ""


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
    """The checkout's commit by its full hash (40 hex digits: a short one may name two
    commits as the history grows), with '-dirty' for local changes; DLBENCH_COMMIT
    overrides it where the tree travels without its .git (a copied working tree)."""
    if os.environ.get("DLBENCH_COMMIT"):
        return os.environ["DLBENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# systemd's and D-Bus's machine ids, then the firmware's (SMBIOS) system UUID: some VM
# images ship an empty /etc/machine-id (a GPU host used for dlbench's published data does).
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"),
                    Path("/sys/class/dmi/id/product_uuid"))


def gpu_uuids() -> tuple[str, ...]:
    """Every NVIDIA GPU's UUID on this host, sorted (NVML through ``pynvml`` where it
    imports, else ``nvidia-smi --query-gpu=uuid``); () without GPUs or either tool. NVML
    lists every GPU of the host whatever CUDA_VISIBLE_DEVICES says, so the set names the
    machine, not the run."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                found = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                         for i in range(pynvml.nvmlDeviceGetCount())]
            finally:
                pynvml.nvmlShutdown()
            uuids = [u.decode() if isinstance(u, bytes) else str(u) for u in found]
            if uuids:
                return tuple(sorted(uuids))
        except Exception:   # noqa: S110 - no driver or no permission: try nvidia-smi
            pass
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted(line.strip() for line in out.splitlines() if line.strip()))


@cache
def host_id() -> str:
    """The host's name plus a short hash of its machine id, so that two machines with one
    hostname (two VMs both called ``vm``) write and report apart. The machine id is
    systemd's /etc/machine-id (D-Bus's copy, or the firmware's system UUID, where that is
    missing or empty); GPU hosts whose images ship none of these (two H100 hosts both
    wrote rows as ``vm``) are named by their GPUs' UUIDs (``gpu_uuids``); without any, the
    hash is of the primary network interface's MAC address, and without that the bare
    hostname is used. DLBENCH_HOST_ID overrides it. Safe as one path component."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", platform.node() or "host")
    if os.environ.get("DLBENCH_HOST_ID"):
        return re.sub(r"[^A-Za-z0-9._-]", "_", os.environ["DLBENCH_HOST_ID"])
    for path in MACHINE_ID_FILES:
        try:
            machine = path.read_text().strip()
        except OSError:
            continue
        if machine:
            return f"{name}-{hashlib.sha256(machine.encode()).hexdigest()[:8]}"
    gpus = gpu_uuids()
    if gpus:
        return f"{name}-{hashlib.sha256(','.join(gpus).encode()).hexdigest()[:8]}"
    import uuid
    node = uuid.getnode()
    if not node >> 40 & 1:   # the multicast bit is set when getnode() had to make one up
        return f"{name}-{hashlib.sha256(str(node).encode()).hexdigest()[:8]}"
    return name


# How many lanes of a several-GPU matrix ran side by side (suites/matrix/lanes.py sets it).
MATRIX_LANES = "DLBENCH_MATRIX_LANES"


def gpu_placement(monitor) -> dict[str, Any]:
    """Which GPU and CPUs a GPU worker ran on: its GPU's UUID (NVML), CUDA_VISIBLE_DEVICES,
    its CPUs where confined to some of the host's (a lane of a several-GPU matrix:
    suites/matrix/lanes.py, which also says how many lanes ran side by side)."""
    placement: dict[str, Any] = {
        "gpu_uuid": monitor.uuid() if monitor is not None else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < (os.cpu_count() or len(cpus)):
            placement["cpu_affinity"] = cpus
    if os.environ.get(MATRIX_LANES, "").isdigit():
        placement["matrix_lanes"] = int(os.environ[MATRIX_LANES])
    return placement


def host_environment(threads: int, affinity: list[int]) -> dict[str, Any]:
    return {
        "host": host_id(),                # hostname + machine-id hash: see host_id()
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "physical_cores": physical_cores(),
        "logical_cores": psutil.cpu_count(logical=True),
        "threads_used": threads,
        "cpu_affinity": affinity,
        "gpu_driver": gpu_driver(),
        "dlbench_commit": dlbench_commit(),
    }
