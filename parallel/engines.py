"""How each framework's data-parallel engine is started (no framework is imported here).

torch: one process per device, started by ``torch.distributed.run`` (torchrun) as a
module, so no console script is needed; several hosts are several torchrun invocations
meeting at a c10d rendezvous. JAX and TensorFlow: one process drives all local devices
(JAX over a ``jax.sharding.Mesh``; TensorFlow's ``MirroredStrategy``); JAX across hosts is
one process per host joined by ``jax.distributed.initialize``. ONNX Runtime: one process
and one inference session per GPU.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass

from parallel.spec import RankSpec

# Frameworks whose single-host engine is one process per device.
PROCESS_PER_DEVICE = {"torch", "ort"}


@dataclass(frozen=True)
class Launch:
    commands: list[list[str]]
    envs: list[dict[str, str]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def processes(framework: str, devices: int, hosts: int) -> int:
    """Processes a case starts: one per device, or one per (stand-in) host."""
    return devices if framework in PROCESS_PER_DEVICE else hosts


# NVLink multicast (NVLS: NVSwitch-side reductions) off in NCCL, PyTorch's symmetric memory
# and NVSHMEM, in every process a launch starts, whatever the caller's environment says:
# the engines' NCCL builds differ in whether and how they use it, so with it on a scaling
# comparison would compare NCCL configurations; on shared multi-GPU hosts a program using
# multicast can also take every GPU of the host out of service. Rows record these values.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


# The engines whose step is a program a persistent compilation cache keeps: JAX's shard_map
# step is one XLA executable. DDP runs PyTorch eager, MirroredStrategy a TensorFlow graph
# without XLA, ONNX Runtime a session per GPU: nothing of theirs is kept between processes.
CACHED_ENGINES = frozenset({"jax"})


# XLA's latency-hiding scheduler moves collectives so that they run beside compute. Its
# flag defaults to false (xla/debug_options_flags.cc); JAX's GPU performance guide
# (docs.jax.dev, "GPU performance tips") and NVIDIA's JAX images turn it on for work over
# several GPUs. jax 0.11.2 on H200s already overlapped NCCL kernels without the flag, as
# much as with it (published/h200x4-2026-11d against h200x2-2026-11b), and with it set
# false they overlapped nothing, yet no N = 2 step took over 2.9% longer and most took
# less (published/h200x2-2026-11c).
# Setting it keeps that schedule whatever a JAX version's default, and the row records it.
# Every N of a JAX GPU scaling run gets it, N = 1 too; a caller's XLA_FLAGS naming the flag wins.
LATENCY_HIDING = "--xla_gpu_enable_latency_hiding_scheduler"


def collective_settings(env: dict[str, str]) -> dict[str, str]:
    """The launch environment's NCCL and multicast variables and XLA's flags, as a row
    records them."""
    return {key: value for key, value in sorted(env.items())
            if key.startswith("NCCL_") or key in MULTICAST_OFF or key == "XLA_FLAGS"}


def _add_xla_flag(env: dict[str, str], flag: str, value: object) -> None:
    """Append ``flag=value`` to XLA_FLAGS (XLA reads the last of repeated flags)."""
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}={value}".strip()


def base_env(device: str, devices: int, framework: str) -> dict[str, str]:
    env = {**os.environ, **MULTICAST_OFF}
    env.setdefault("OMP_NUM_THREADS", "1")    # torch would warn; ranks set their threads
    if framework == "torch" and device == "cpu":
        # Every rank of a launch here is on this host (the multi-host test stands hosts
        # in with local processes), so gloo pairs over loopback. Left to itself gloo binds
        # the address the hostname resolves to, an external interface on most VMs, whose
        # firewall and resets a single-host launch has no reason to depend on (a gloo
        # connection fault aborts the rank with SIGABRT).
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if framework == "jax":
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if framework == "jax" and device == "gpu" and LATENCY_HIDING not in env.get("XLA_FLAGS", ""):
        _add_xla_flag(env, LATENCY_HIDING, "true")   # unless the caller decided
    if framework == "jax" and device == "cpu":
        # Host "devices" for JAX on the CPU: must be set before jax is imported.
        _add_xla_flag(env, "--xla_force_host_platform_device_count", devices)
        env["JAX_PLATFORMS"] = "cpu"
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
    env = {**base_env(spec.device, spec.devices // max(1, hosts)
                      if spec.framework == "jax" else spec.devices, spec.framework),
           **(extra_env or {})}
    if spec.framework == "torch":
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
    if spec.framework == "ort" or hosts > 1:
        count = spec.devices if spec.framework == "ort" else hosts
        port = free_port()
        envs = [{**env, "RANK": str(i), "WORLD_SIZE": str(count),
                 # One host here: process i uses the i-th slice of its devices.
                 "LOCAL_RANK": str(i),
                 "DLBENCH_COORDINATOR": f"127.0.0.1:{port}"} for i in range(count)]
        if spec.framework == "ort" and spec.device == "gpu":
            for index, env_i in enumerate(envs):
                env_i["CUDA_VISIBLE_DEVICES"] = str(index)   # session i on GPU i
        if spec.framework == "tf":
            ports = [free_port() for _ in range(count)]
            for index, env_i in enumerate(envs):
                env_i["TF_CONFIG"] = json.dumps({
                    "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                    "task": {"type": "worker", "index": index}})
        return Launch([rank] * count, envs)
    return Launch([rank], [env])

