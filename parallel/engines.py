"""How a framework's data-parallel engine is started (no framework is imported here): each
adapter declares it in an ``adapters.base.EngineLaunch`` record (``adapters/<fw>/launch.py``:
one process per device or one per host, torchrun or direct, its environment), which this
module turns into commands and environments.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
from dataclasses import dataclass

from adapters.base import EngineLaunch
from parallel.spec import RankSpec


@dataclass(frozen=True)
class Launch:
    commands: list[list[str]]
    envs: list[dict[str, str]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def engine_launch(framework: str) -> EngineLaunch:
    """The framework's launch record (its adapter's ``launch.py``; imports no framework)."""
    return importlib.import_module(f"adapters.{framework}.launch").LAUNCH


def processes(framework: str, devices: int, hosts: int) -> int:
    """Processes a case starts: one per device, or one per (stand-in) host."""
    return devices if engine_launch(framework).process_per_device else hosts


# NVLink multicast (NVLS: NVSwitch-side reductions) off in NCCL, PyTorch's symmetric memory
# and NVSHMEM, in every process a launch starts, whatever the caller's environment says:
# the engines' NCCL builds differ in whether and how they use it, so with it on a scaling
# comparison would compare NCCL configurations; on shared multi-GPU hosts a program using
# multicast can also take every GPU of the host out of service. Rows record these values.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def collective_settings(env: dict[str, str]) -> dict[str, str]:
    """The launch environment's NCCL and multicast variables and XLA's flags, as a row
    records them."""
    return {key: value for key, value in sorted(env.items())
            if key.startswith("NCCL_") or key in MULTICAST_OFF or key == "XLA_FLAGS"}


def _add_xla_flag(env: dict[str, str], flag: str, value: object) -> None:
    """Append ``flag=value`` to XLA_FLAGS (XLA reads the last of repeated flags)."""
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}={value}".strip()


def base_env(device: str, devices: int, framework: str) -> dict[str, str]:
    """Every process's environment: the caller's, multicast off, and what the framework's
    launch record sets for ``device``; ``devices``: the devices one process drives."""
    launch = engine_launch(framework)
    env = {**os.environ, **MULTICAST_OFF}
    env.setdefault("OMP_NUM_THREADS", "1")    # torch would warn; ranks set their threads
    for where in ("*", device):
        for key, value in launch.env_defaults.get(where, {}).items():
            env.setdefault(key, value)
    for flag, value in launch.xla_flag_defaults.get(device, {}).items():
        if flag not in env.get("XLA_FLAGS", ""):
            _add_xla_flag(env, flag, value)   # unless the caller decided
    for flag, value in launch.xla_flags.get(device, {}).items():
        _add_xla_flag(env, flag, value.format(devices=devices))
    for where in ("*", device):
        env.update(launch.env.get(where, {}))
    return env


def plan(spec: RankSpec, paths: list[str], hosts: int = 1,
         extra_env: dict[str, str] | None = None) -> Launch:
    """The commands for one launch: the cases whose specs are at ``paths`` (one, or several
    of the same framework, device and N in turn; ``spec`` the first). ``hosts`` > 1 stands
    several hosts in with processes on this one, through the same multi-host path a real
    cluster uses. ``extra_env`` goes to every process (the persistent compilation cache's
    variables, suites/matrix/compile_cache.py)."""
    python = sys.executable
    rank = [python, "-m", "parallel.rank", *paths]
    launch = engine_launch(spec.framework)
    # The devices one process drives: a host's share where one process drives a host's.
    env = {**base_env(spec.device, spec.devices if launch.process_per_device
                      else spec.devices // max(1, hosts), spec.framework),
           **(extra_env or {})}
    if launch.torchrun:
        per_host = spec.devices // hosts
        port = free_port()
        commands, envs = [], []
        for node in range(hosts):
            if hosts == 1:
                where = ["--standalone"]
            else:
                where = ["--nnodes", str(hosts), "--node-rank", str(node),
                         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                         "--rdzv-id", "dlbench"]
            commands.append([python, "-m", "torch.distributed.run", *where,
                             "--nproc-per-node", str(per_host), "--max-restarts", "0",
                             "--monitor-interval", "0.5", "-m", "parallel.rank", *paths])
            envs.append(env)
        return Launch(commands, envs)
    if launch.process_per_device or hosts > 1:
        count = spec.devices if launch.process_per_device else hosts
        port = free_port()
        envs = [{**env, "RANK": str(i), "WORLD_SIZE": str(count),
                 # One host here: process i uses the i-th slice of its devices.
                 "LOCAL_RANK": str(i),
                 "DLBENCH_COORDINATOR": f"127.0.0.1:{port}"} for i in range(count)]
        if launch.gpu_per_process and spec.device == "gpu":
            for index, env_i in enumerate(envs):
                env_i["CUDA_VISIBLE_DEVICES"] = str(index)   # session i on GPU i
        if launch.tf_config:
            ports = [free_port() for _ in range(count)]
            for index, env_i in enumerate(envs):
                env_i["TF_CONFIG"] = json.dumps({
                    "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                    "task": {"type": "worker", "index": index}})
        return Launch([rank] * count, envs)
    return Launch([rank], [env])

