"""JAX adapter: ``jax.jit`` of pure functions by default (the framework's standard fast
path), op-by-op dispatch ("eager") as a variant.

Compilation happens in the first call, which the harness times apart: ``prepare`` only
builds the functions and places the arrays. No argument is donated: every step reads the
same parameters and batch again, and a donated buffer is invalid after one call.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from adapters.base import Adapter, CaseConfig, DeviceUnavailable, Memory, Prepared, RunConfig, Unsupported
from adapters.jax.network import Context, Lengths, Numerics, build, loss_value
from adapters.memory import peak_rss, reset_peak_rss
from models.analysis import analyse
from models.inputs import Batch
from models.ir import Model
from models.weights import Weights

# Activations are NHWC on both devices. On the CPU, XLA's convolutions compute
# channels-last and an NCHW graph gains layout changes around them: on this project's
# 2-core AMD EPYC VM (jax 0.10.2) NHWC was as fast or faster, e.g. ResNet-50 batch 8 gradient
# 2.42 s vs 2.83 s, AlexNet batch 16 forward 124 ms vs 153 ms. On the GPU XLA's layout
# assignment chooses cuDNN's physical layouts whatever the logical one, and NHWC is the
# layout Flax models use (comparisons/flax_vs_dlbench.py runs one beside this adapter).
LAYOUT = {"cpu": "NHWC", "gpu": "NHWC"}

# precision -> (lax precision of every conv and dot, compute dtype, jax_default_matmul_precision)
PRECISIONS = {
    # fp32 is strict: HIGHEST keeps XLA's GPU convolutions and dots off TF32.
    "fp32": (lax.Precision.HIGHEST, jnp.float32, "highest"),
    "tf32": (lax.Precision.DEFAULT, jnp.float32, "tensorfloat32"),
    # Mixed precision: bf16 compute, float32 parameters, loss and BN statistics.
    "bf16": (lax.Precision.DEFAULT, jnp.bfloat16, "default"),
}


def numerics(precision: str, device: str) -> Numerics:
    if precision == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    lax_precision, dtype, default = PRECISIONS[precision]
    # Every conv and dot names its precision; the process default is set as well, so
    # nothing traced without one falls back to TF32.
    jax.config.update("jax_default_matmul_precision", default)
    return Numerics(LAYOUT[device], lax_precision, dtype)


def xla_pool_threads() -> int | None:
    """Threads of XLA's CPU intra-op (Eigen) pool, which XLA sizes from the affinity
    mask when the backend starts; None where /proc has no thread names."""
    try:
        return sum("XLAEigen" in (task / "comm").read_text()
                   for task in Path("/proc/self/task").iterdir())
    except OSError:
        return None


def start_cpu_backend(threads: int) -> None:
    """XLA's CPU client has no thread-count setting (``XLA_FLAGS=--intra_op_parallelism_
    threads`` is rejected as an unknown flag; ``--xla_cpu_multi_thread_eigen`` only
    turns Eigen's pool off) and sizes its pools from the CPUs this process may use when
    the backend starts. The worker pins the process before importing the adapter
    (suites.environment.limit_cpus); the same pinning is done here for callers outside
    the worker, while the backend has not started yet."""
    from jax._src import xla_bridge  # backends_are_initialized has no public alias

    started = getattr(xla_bridge, "backends_are_initialized", lambda: True)()
    if not started and hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        if threads < len(allowed):
            os.sched_setaffinity(0, allowed[:threads])
        # A CPU run does not start the CUDA backend on a GPU host.
        jax.config.update("jax_platforms", "cpu")
    jax.devices("cpu")  # start it now, under this mask


def cuda_versions() -> tuple[str | None, str | None]:
    """(CUDA runtime, cuDNN) of the CUDA plugin, in torch's formats ("13.0", "91002").
    jax._src.lib.cuda_versions is private, but it is what jax's own tests read."""
    try:
        from jax._src.lib import cuda_versions as versions
        runtime = versions.cuda_runtime_get_version()
        cudnn = versions.cudnn_get_version()
    except Exception:  # no plugin, or an API change: record unknown, do not fail
        return None, None
    return f"{runtime // 1000}.{runtime % 1000 // 10}", str(cudnn)


class JaxPrepared(Prepared):
    def __init__(self, adapter: JaxAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.device = adapter.device
        self.on_gpu = adapter.config.device == "gpu"
        self.model = model
        self.variant = variant
        self.num = numerics(case.precision, adapter.config.device)
        self.net = build(model, weights, self.num, analyse(model).trainable_names)

        def put(array: Any) -> Any:
            return jax.device_put(array, self.device)

        self.trainable = put(self.net.trainable)
        self.fixed = put(self.net.fixed)
        # The batch converted to the activation layout once, here, on the host.
        x = batch.x
        if model.input.kind == "image" and self.num.layout == "NHWC":
            x = np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))
        self.host_x = x
        self.x = put(x)
        self.labels = None if batch.labels is None else put(batch.labels.astype(np.int32))
        self.lengths = None if batch.lengths is None else \
            put(Lengths.of(batch.lengths, batch.x.shape[1]))
        jax.block_until_ready((self.trainable, self.fixed, self.x, self.labels, self.lengths))
        self.jit = variant == "jit"
        compile_ = jax.jit if self.jit else (lambda fn: fn)
        self.forward_fn = compile_(self._forward)
        # Gradients with respect to the body's trainable parameters only (argument 0).
        self.gradient_fn = compile_(jax.value_and_grad(self._loss))
        self.backward_fn = compile_(lambda backward, grad_out: backward(grad_out))
        self.measured: tuple[Callable, tuple] | None = None   # for the memory plan
        self.peak_before = self.in_use_before = 0
        self.extra = {"layout": self.num.layout,
                      "precision_config": self.num.precision.name,
                      "compute_dtype": jnp.dtype(self.num.dtype).name}

    # --- the computations (pure functions of their arguments, traced by jax.jit) -------
    def _features(self, params, x, ctx: Context) -> jax.Array:
        if jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(self.num.dtype)
        return self.net.frozen(params, x, ctx)

    def _forward(self, trainable, fixed, x, lengths) -> jax.Array:
        params, ctx = {**fixed, **trainable}, Context(False, lengths)
        return self.net.body(params, self._features(params, x, ctx), ctx)

    def _loss(self, trainable, fixed, x, labels, lengths) -> jax.Array:
        params, ctx = {**fixed, **trainable}, Context(True, lengths)
        features = self._features(params, x, ctx)
        out = self.net.body(params, features, ctx)
        return loss_value(self.model.loss.kind, out, features, labels)

    def _single_layer_backward(self, measure: str) -> Callable[[], Any]:
        """Forward once here, untimed, keeping JAX's residuals; the step then runs only
        the backward kernel for the input or for the weights (+ bias), given an all-ones
        output gradient (convnet-benchmarks' updateGradInput / accGradParameters)."""
        if len(self.model.body) != 1 or self.model.frozen:
            raise Unsupported("grad_input and grad_weight are single-layer measures")
        ctx = Context(True, self.lengths)
        x = self._features(self.fixed, self.x, ctx)
        if measure == "grad_input":
            out, backward = jax.vjp(
                lambda x: self.net.body({**self.fixed, **self.trainable}, x, ctx), x)
        else:
            out, backward = jax.vjp(
                lambda trainable: self.net.body({**self.fixed, **trainable}, x, ctx),
                self.trainable)
        grad_out = jnp.ones_like(out)  # the gradient of the "sum" loss
        jax.block_until_ready((backward, grad_out))
        self.measured = (self.backward_fn, (backward, grad_out))
        return lambda: self.backward_fn(backward, grad_out)

    def step(self, measure: str) -> Callable[[], Any]:
        self.measured = None
        if measure == "forward":
            args = (self.trainable, self.fixed, self.x, self.lengths)
            self.measured = (self.forward_fn, args)
            return lambda: self.forward_fn(*args)
        if measure == "gradient":
            args = (self.trainable, self.fixed, self.x, self.labels, self.lengths)
            self.measured = (self.gradient_fn, args)
            return lambda: self.gradient_fn(*args)
        if measure in ("grad_input", "grad_weight"):
            return self._single_layer_backward(measure)
        if measure == "transfer":
            if not self.on_gpu:
                raise Unsupported("host and device are the same on cpu")
            # A pageable numpy buffer, as a framework's plain feed uses (Li et al. 2016, Fig. 7).
            return lambda: jax.device_put(self.host_x, self.device)
        raise Unsupported(f"unknown measure '{measure}'")

    def sync(self, handle: Any) -> None:
        # A device executes a process's computations in dispatch order, so the last
        # handle being ready means every earlier one is (tests/adapters/test_jax.py).
        if handle is not None:
            jax.block_until_ready(handle)

    # --- memory -----------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        if not self.on_gpu:
            reset_peak_rss()
            return
        # JAX cannot reset its allocator's peak (Device.memory_stats() only reads it),
        # so remember where it stood.
        stats = self.device.memory_stats() or {}
        self.peak_before = stats.get("peak_bytes_in_use", 0)
        self.in_use_before = stats.get("bytes_in_use", 0)

    def peak_memory(self) -> Memory:
        if not self.on_gpu:
            return peak_rss()
        stats = self.device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        self.extra["peak_bytes_since_start"] = peak
        if peak is not None and peak > self.peak_before:
            # A new high during this measure: the allocator peak is this measure's.
            self.extra["memory_source"] = "allocator peak, a new high in this measure"
            return Memory(int(peak), "allocator")
        planned = self._planned_bytes()
        self.extra["memory_source"] = (
            "live buffers + XLA's buffer assignment (temp + outputs) of the step: the "
            "allocator's peak since process start was set by an earlier case"
            if planned is not None else "unknown: below an earlier case's allocator peak")
        return Memory(planned, "xla_plan")

    def _planned_bytes(self) -> int | None:
        if self.measured is None:   # transfer: the batch's copy on top of what is live
            return self.in_use_before + self.host_x.nbytes
        fn, args = self.measured
        if not self.jit:
            return None
        # Lowering and compiling again hit jax's caches: the step was compiled already.
        plan = fn.lower(*args).compile().memory_analysis()
        if plan is None:
            return None
        return int(self.in_use_before + plan.temp_size_in_bytes + plan.output_size_in_bytes
                   - plan.alias_size_in_bytes)

    # --- fingerprint ------------------------------------------------------------------
    def forward_output(self) -> np.ndarray:
        out = np.asarray(self.forward_fn(self.trainable, self.fixed, self.x, self.lengths),
                         dtype=np.float32)
        if out.ndim == 4 and self.num.layout == "NHWC":
            out = np.transpose(out, (0, 3, 1, 2))  # canonical NCHW
        return out

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.gradient_fn(self.trainable, self.fixed, self.x, self.labels,
                                       self.lengths)
        return float(loss), {name: self.net.canonical(name, np.asarray(g, dtype=np.float32))
                             for name, g in grads.items()}

    def hlo_text(self, measure: str) -> str:
        """The StableHLO the step's jit traces to (tests read its precision configs)."""
        self.step(measure)
        fn, args = self.measured
        return fn.lower(*args).as_text()

    def close(self) -> None:
        del self.trainable, self.fixed, self.x, self.labels, self.lengths, self.measured
        del self.forward_fn, self.gradient_fn, self.backward_fn
        # Drops this case's compiled executables, which would otherwise stay in host
        # memory (and in the next case's RSS) for the life of the worker.
        jax.clear_caches()


class JaxAdapter(Adapter):
    name = "jax"
    variants = {
        "jit": "jax.jit of the whole step (XLA-compiled); NHWC activations, no donation",
        "eager": "op-by-op dispatch, no jax.jit (each primitive compiled once and cached)",
    }

    def __init__(self, config: RunConfig):
        super().__init__(config)
        if config.device == "gpu":
            try:
                self.device = jax.devices("gpu")[0]
            except RuntimeError as error:
                raise DeviceUnavailable(f"jax {jax.__version__} sees no GPU: "
                                        f"{' '.join(str(error).split())[:200]}") from None
        else:
            start_cpu_backend(config.threads)
            self.device = jax.devices("cpu")[0]
        # JAX has no inter-op pool to size: a jitted step is one XLA executable.

    def environment(self) -> dict[str, Any]:
        on_gpu = self.config.device == "gpu"
        cuda, cudnn = cuda_versions() if on_gpu else (None, None)
        try:
            jaxlib = importlib.metadata.version("jaxlib")
        except importlib.metadata.PackageNotFoundError:
            jaxlib = None
        return {
            "framework_version": jax.__version__,
            "jaxlib_version": jaxlib,
            "gpu_model": self.device.device_kind if on_gpu else None,
            "cuda": cuda,
            "cudnn": cudnn,
            "xla_cpu_pool_threads": None if on_gpu else xla_pool_threads(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
        }

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        return JaxPrepared(self, model, weights, batch, case, variant)

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, MemoryError):
            return True
        # XLA reports allocation failures as JaxRuntimeError (XlaRuntimeError before
        # jax 0.4.36), a RuntimeError subclass: "RESOURCE_EXHAUSTED: Out of memory ...".
        text = str(error)
        return isinstance(error, RuntimeError) and (
            "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())
