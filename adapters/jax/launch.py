"""How JAX's data-parallel engine starts (framework-free: the launcher reads it).

One process drives all local devices over a ``jax.sharding.Mesh``; across hosts, one
process per host joined by ``jax.distributed.initialize``. Its shard_map step is one XLA
executable, which the persistent compilation cache keeps between processes.
"""

from adapters.base import EngineLaunch

# XLA's latency-hiding scheduler moves collectives so that they run beside compute. Its
# flag defaults to false (xla/debug_options_flags.cc); JAX's GPU performance guide
# (docs.jax.dev, "GPU performance tips") and NVIDIA's JAX images turn it on for work over
# several GPUs. jax 0.11.2 on H200s already overlapped NCCL kernels without the flag, as
# much as with it (h200x4-2026-11d (at 2efa0ce) against published/h200x2-scaling), and with it set
# false they overlapped nothing, yet no N = 2 step took over 2.9% longer and most took
# less (h200x2-2026-11c (at 2efa0ce)).
# Setting it keeps that schedule whatever a JAX version's default, and the row records it.
# Every N of a JAX GPU scaling run gets it, N = 1 too; a caller's XLA_FLAGS naming the flag wins.
LATENCY_HIDING = "--xla_gpu_enable_latency_hiding_scheduler"

LAUNCH = EngineLaunch(
    process_per_device=False, compile_cache=True,
    # As adapters/jax/__init__.py: no preallocation, so peak memory says something.
    env_defaults={"*": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}},
    # Host "devices" for JAX on the CPU: must be set before jax is imported.
    env={"cpu": {"JAX_PLATFORMS": "cpu"}},
    xla_flag_defaults={"gpu": {LATENCY_HIDING: "true"}},
    xla_flags={"cpu": {"--xla_force_host_platform_device_count": "{devices}"}})
