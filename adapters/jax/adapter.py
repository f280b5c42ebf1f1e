"""JAX adapter: ``jax.jit`` of pure functions by default (the framework's standard fast
path), op-by-op dispatch ("eager") as a variant.

Compilation happens in the first call, which the harness times apart: ``prepare`` only
builds the functions and places the arrays. Forward and gradient donate no argument: every
step reads the same parameters and batch again, and a donated buffer is invalid after one
call. ``train_step`` donates its training copy's parameters and optimizer state, which each
call replaces (the network's declared optimizer as optax's ``sgd`` or ``adamw``, as JAX
training loops run it).

``epoch_step`` runs the same step functions over a list of batches placed on the device
beforehand; ``profile`` runs the step under jax.profiler (profile.py), which reduces the
trace to operations (XLA:CPU thunks, or on a GPU the HLO operations of CUDA kernels) and
kernels.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
from jax import lax

from adapters.base import (
    Adapter,
    CaseConfig,
    DeviceUnavailable,
    Generator,
    Memory,
    Prepared,
    Profile,
    RunConfig,
    Unsupported,
    has_attention,
    require_device_memory,
)
from adapters.jax.network import ATTENTION, Context, Decode, Lengths, Numerics, build, loss_value
from adapters.jax.profile import profile_steps
from adapters.memory import peak_rss, reset_peak_rss
from adapters.summary import DEVICE_SUMMARY_VALUES, GradientSummary, OutputSummary
from models.analysis import analyse
from models.families.transformer import not_a_decoder
from models.inputs import Batch
from models.ir import Model, SelfAttention, walk
from models.optimizers import AdamW, Optimizer, SGDMomentum, optimizer_for
from models.weights import Weights
from suites.instruments.profiling import WARMUP_RUNS

try:
    import optax
except ImportError:   # forward and gradient need no optimizer; train_step says why
    optax = None

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


def numerics(precision: str, device: str, attention: str | None = None) -> Numerics:
    if precision == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    lax_precision, dtype, default = PRECISIONS[precision]
    # Every conv and dot names its precision; the process default is set as well, so
    # nothing traced without one falls back to TF32.
    jax.config.update("jax_default_matmul_precision", default)
    return Numerics(LAYOUT[device], lax_precision, dtype, attention)


# The variants that jit the whole step.
JITTED = ("jit", "cudnn_attention")


def attention(variant: str, case: CaseConfig, model: Model, device: str) -> str | None:
    """jax.nn.dot_product_attention's implementation for a variant, or why it cannot run.
    cuDNN's fused attention exists on NVIDIA GPUs only and takes float16 or bfloat16
    operands (jax.nn.dot_product_attention API doc: "cudnn" needs a GPU and fp16/bf16), so
    an fp32 or TF32 case is unsupported rather than silently run on XLA's attention."""
    if variant != "cudnn_attention":
        return None
    if not has_attention(model):
        raise Unsupported(f"cudnn_attention chooses self-attention's kernel: {model.name} "
                          "has no self-attention")
    if device != "gpu":
        raise Unsupported("cudnn_attention: cuDNN's fused attention runs on an NVIDIA GPU only")
    if case.precision != "bf16":
        raise Unsupported(f"cudnn_attention: cuDNN's fused attention takes bf16 or fp16 operands, "
                          f"not {case.precision}")
    return "cudnn"


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
    (suites.instruments.environment.limit_cpus); the same pinning is done here for callers outside
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


# --- where a first call's time goes ------------------------------------------------------
#
# JAX reports each trace, lowering and backend compilation (and each persistent-cache hit
# or miss) through jax.monitoring. A step's compilations happen in its first call, so the
# events between ``step`` and the row's writing say what that first call spent on each, and
# whether its executable was compiled or read from a persistent compilation cache (only
# then is first_call_ms a cache load rather than a compile). Recorded from ``step`` (or
# ``epoch_step``) to the end of the timed calls (``peak_memory`` follows them in the worker,
# and its memory plan's re-lowering is not counted) in every row's timing as
# ``compile_events``: a compile after the first call would show there as a second one.
COMPILE_DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "backend_compile_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read_s",
}
COMPILE_COUNTS = {
    "/jax/core/compile/backend_compile_duration": "backend_compiles",
    "/jax/compilation_cache/cache_hits": "persistent_cache_hits",
    "/jax/compilation_cache/cache_misses": "persistent_cache_misses",
}


class CompileLog:
    """Sums JAX's compile events into the dict of the measure being run (one at a time)."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        jax.monitoring.register_event_duration_secs_listener(self.on_duration)
        jax.monitoring.register_event_listener(self.on_event)

    def start(self) -> None:
        self.current = {**dict.fromkeys(COMPILE_DURATIONS.values(), 0.0),
                        **dict.fromkeys(COMPILE_COUNTS.values(), 0)}

    def stop(self) -> dict[str, float]:
        """What was recorded since ``start``; later events go nowhere until the next one.
        JAX times a persistent-cache hit as a backend compile too (the event wraps "compile
        or load"), so compiles and their seconds are the backend events less the hits and
        their read time: ``compiles`` = executables XLA built, ``compile_s`` its seconds."""
        recorded, self.current = self.current, {}
        if not recorded:
            return {}
        backend_s = recorded.pop("backend_compile_s")
        backend = recorded.pop("backend_compiles")
        return {"trace_s": recorded["trace_s"], "lower_s": recorded["lower_s"],
                "compile_s": round(max(backend_s - recorded["cache_read_s"], 0.0), 4),
                "compiles": backend - recorded["persistent_cache_hits"],
                **{k: recorded[k] for k in ("cache_read_s", "persistent_cache_hits",
                                            "persistent_cache_misses")}}

    def on_duration(self, event: str, duration: float, **_: Any) -> None:
        if event in COMPILE_DURATIONS and self.current:
            key = COMPILE_DURATIONS[event]
            self.current[key] = round(self.current[key] + duration, 4)
        self.on_event(event)

    def on_event(self, event: str, **_: Any) -> None:
        if event in COMPILE_COUNTS and self.current:
            self.current[COMPILE_COUNTS[event]] += 1


COMPILE_LOG = CompileLog()


@functools.partial(jax.jit, static_argnums=1)
def _summary_parts(out: jax.Array, examples: int) -> tuple[jax.Array, ...]:
    """Everything ``output_summary`` reads of a device output, as one program: its first
    ``examples`` examples, and per example the float32 sum, the centre (sum / count) and
    the sum of squared deviations from that centre. One program, so one compilation per
    output shape: separate sum, squares and head slice were three. On an H100 the summary
    of a fresh shape of ``li2016``'s 11×11 convolution at batch 64 took a median 0.22 s
    this way, 0.33 s with the three (12 shapes, alternated in one process)."""
    flat = out.astype(jnp.float32).reshape(out.shape[0], -1)
    sums = jnp.sum(flat, axis=1)
    centres = sums / flat.shape[1]
    deviation = flat - centres[:, None]
    return out[:examples], sums, centres, jnp.sum(deviation * deviation, axis=1)


def make_optimizer(declared: Optimizer) -> tuple[Any, str]:
    """optax's own optimizer for the declared one (models/optimizers.py), and its
    description for the row. Its buffers are in the parameters' dtype (float32, also under
    bf16 compute).

    ``optax.sgd`` is heavy-ball momentum b <- m*b + g, w <- w - lr*b (optax.trace, no
    Nesterov). ``optax.adamw`` (optax 0.2.8) chains scale_by_adam (m_hat/(sqrt(v_hat +
    eps_root) + eps), eps_root 0: eps after the bias correction), add_decayed_weights
    (+ wd*w, the pre-update weights) and the rate: w <- w - lr*(adam + wd*w), the same as
    models/optimizers.py's ``AdamW``. mask None: every trainable parameter decays."""
    if isinstance(declared, SGDMomentum):
        return (optax.sgd(declared.learning_rate, momentum=declared.momentum, nesterov=False),
                f"{declared.describe()}: optax.sgd")
    if isinstance(declared, AdamW):
        return (optax.adamw(declared.learning_rate, b1=declared.beta1, b2=declared.beta2,
                            eps=declared.eps, weight_decay=declared.weight_decay, mask=None),
                f"{declared.describe()}: optax.adamw")
    raise Unsupported(f"no optax optimizer for {declared!r}")


def first_step_gradients(opt_state: Any, declared: Optimizer) -> dict[str, np.ndarray]:
    """The gradients of a first step from zeroed buffers, read off optax's state after it
    (optax 0.2.8): ``scale_by_adam``'s first moment is mu = b1*0 + (1 - b1)*g
    (``update_moment``), ``trace``'s momentum buffer is m*0 + g. Divided here in float64:
    fp32's (1 - b1)*g is within one rounding of the exact product, so g comes back within
    about 2 units of fp32's last place, far inside any gradient's error bound."""
    for part in jax.tree.leaves(opt_state,
                                is_leaf=lambda node: hasattr(node, "mu") or hasattr(node, "trace")):
        if isinstance(declared, AdamW) and hasattr(part, "mu"):
            return {name: np.asarray(m, np.float64) / (1 - declared.beta1)
                    for name, m in part.mu.items()}
        if isinstance(declared, SGDMomentum) and hasattr(part, "trace"):
            return {name: np.asarray(b, np.float64) for name, b in part.trace.items()}
    raise Unsupported(f"no first moment in optax's state for {declared!r}")


class Inputs(NamedTuple):
    """One batch on the device (a pytree: ``jax.device_put`` places it whole)."""

    x: jax.Array
    labels: jax.Array | None
    lengths: Lengths | None


class JaxGenerator:
    """Greedy decoding with a preallocated key/value cache (adapters.base.Generator): the
    body's own functions over the new steps only (network.Decode), the caches
    (1, max_length, heads, d) per attention layer in the compute dtype. With jit the step
    is one ``jax.jit`` program, compiled once for the prefill's shape and once for the
    decode step's (the position is a traced int32 scalar, the caches keep their shape),
    the caches donated so XLA writes them in place (``lax.dynamic_update_slice``)."""

    def __init__(self, prepared: JaxPrepared, max_length: int):
        self.prepared = prepared
        self.capacity = max_length
        shapes = {node.name: (1, max_length, node.heads, node.dim // node.heads)
                  for node in walk(prepared.model.body) if isinstance(node, SelfAttention)}
        self.caches = jax.device_put(
            {name: (jnp.zeros(shape, prepared.num.dtype), jnp.zeros(shape, prepared.num.dtype))
             for name, shape in shapes.items()}, prepared.device)
        self.step = jax.jit(prepared._cached_step, donate_argnums=(2,)) if prepared.jit \
            else prepared._cached_step
        self.length = 0
        self.logits: jax.Array | None = None

    def _run(self, tokens: np.ndarray) -> int:
        steps = tokens.shape[1]
        if self.length + steps > self.capacity:
            raise ValueError(f"position {self.length + steps} beyond the cache's {self.capacity}")
        self.logits, token, self.caches = self.step(
            self.prepared.trainable, self.prepared.fixed, self.caches,
            jax.device_put(tokens, self.prepared.device), np.int32(self.length))
        self.length += steps
        return int(token)   # the copy to the host waits for the device

    def prefill(self, prompt: np.ndarray) -> int:
        self.length = 0
        return self._run(np.asarray(prompt, dtype=np.int32)[None])

    def decode(self, token: int) -> int:
        return self._run(np.array([[token]], dtype=np.int32))

    def last_logits(self) -> np.ndarray:
        return np.asarray(self.logits, dtype=np.float64)


class JaxPrepared(Prepared):
    def __init__(self, adapter: JaxAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.device = adapter.device
        self.on_gpu = adapter.config.device == "gpu"
        self.model = model
        self.variant = variant
        self.num = numerics(case.precision, adapter.config.device, attention(variant, case, model,
                                                                         adapter.config.device))
        self.net = build(model, weights, self.num, analyse(model).trainable_names)

        def put(array: Any) -> Any:
            return jax.device_put(array, self.device)

        self.trainable = put(self.net.trainable)
        self.fixed = put(self.net.fixed)
        self.host_x = self._host_x(batch)
        self.x, self.labels, self.lengths = self._place(batch, self.host_x)
        jax.block_until_ready((self.trainable, self.fixed, self.x, self.labels, self.lengths))
        self.jit = variant in JITTED
        compile_ = jax.jit if self.jit else (lambda fn: fn)
        self.forward_fn = compile_(self._forward)
        # Gradients with respect to the body's trainable parameters only (argument 0).
        self.gradient_fn = compile_(jax.value_and_grad(self._loss))
        self.backward_fn = compile_(lambda backward, grad_out: backward(grad_out))
        # train_step: the whole iteration in one program whose parameters and optimizer
        # state (arguments 0 and 1) are donated, so XLA updates them in place.
        self.train_fn = jax.jit(self._train, donate_argnums=(0, 1)) if self.jit else self._train
        self.train_state: tuple[Any, Any] | None = None   # (params, opt_state), made by step
        self.optimizer: Any = None                        # optax's, made with train_state
        self.measured: tuple[Callable, tuple] | None = None   # for the memory plan
        self.peak_before = self.in_use_before = 0
        self.extra = {"layout": self.num.layout,
                      "precision_config": self.num.precision.name,
                      "compute_dtype": jnp.dtype(self.num.dtype).name,
                      **({"attention": ATTENTION[self.num.attention]}
                         if has_attention(model) else {})}

    def _host_x(self, batch: Batch) -> np.ndarray:
        """The batch's input in the activation layout, converted once on the host."""
        if self.model.input.kind == "image" and self.num.layout == "NHWC":
            return np.ascontiguousarray(np.transpose(batch.x, (0, 2, 3, 1)))
        return batch.x

    def _place(self, batch: Batch, host_x: np.ndarray | None = None) -> Inputs:
        """One batch on the device, in the form the step functions take."""
        x = self._host_x(batch) if host_x is None else host_x
        labels = None if batch.labels is None else batch.labels.astype(np.int32)
        lengths = None if batch.lengths is None else Lengths.of(batch.lengths, batch.x.shape[1])
        return jax.device_put(Inputs(x, labels, lengths), self.device)

    def _arguments(self, measure: str, inputs: Inputs) -> tuple:
        """The arguments of forward_fn or gradient_fn for one batch."""
        if measure == "forward":
            return self.trainable, self.fixed, inputs.x, inputs.lengths
        return self.trainable, self.fixed, inputs.x, inputs.labels, inputs.lengths

    # --- the computations (pure functions of their arguments, traced by jax.jit) -------
    def _features(self, params, x, ctx: Context) -> jax.Array:
        if jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(self.num.dtype)
        return self.net.frozen(params, x, ctx)

    def _forward(self, trainable, fixed, x, lengths) -> jax.Array:
        params, ctx = {**fixed, **trainable}, Context(False, lengths)
        return self.net.body(params, self._features(params, x, ctx), ctx)

    def _cached_step(self, trainable, fixed, caches, tokens, start):
        """A cached pass over new steps of one sequence (JaxGenerator): the last step's
        logits, their argmax and the caches with the new steps written in."""
        decode = Decode(start, caches)
        logits = self.net.body({**fixed, **trainable}, tokens, Context(False, None, decode))[0, -1]
        return logits, jnp.argmax(logits), decode.written

    def _loss(self, trainable, fixed, x, labels, lengths) -> jax.Array:
        params, ctx = {**fixed, **trainable}, Context(True, lengths)
        features = self._features(params, x, ctx)
        out = self.net.body(params, features, ctx)
        return loss_value(self.model.loss.kind, out, features, labels)

    def _train(self, params, opt_state, fixed, x, labels, lengths):
        """One training iteration: the gradient pass of ``gradient_fn``, then the optax
        optimizer's update.
        As there, batch norm normalises with the batch's statistics and leaves the running
        statistics canonical in ``fixed`` (momentum 0 in effect), and bf16 computes on
        float32 parameters, so the gradients, the optimizer's buffers and the update are
        float32."""
        loss, grads = jax.value_and_grad(self._loss)(params, fixed, x, labels, lengths)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def step(self, measure: str) -> Callable[[], Any]:
        self.measured = None
        run = super().step(measure)
        # From here on every compilation belongs to the timed calls (the first one).
        COMPILE_LOG.start()
        return run

    def step_forward(self) -> Callable[[], Any]:
        return self._measured_step("forward")

    def step_gradient(self) -> Callable[[], Any]:
        return self._measured_step("gradient")

    def _measured_step(self, measure: str) -> Callable[[], Any]:
        fn = self._step_fn(measure)
        args = self._arguments(measure, Inputs(self.x, self.labels, self.lengths))
        self.measured = (fn, args)
        return lambda: fn(*args)

    def step_train(self) -> Callable[[], Any]:
        """The training copy (made at the first call, then trained on by every later
        ``step``) and a step that replaces it with what ``train_fn`` returns. With jit the
        handle is the loss: all outputs of one executable become ready together, and the
        donated state of a call is deleted by the next one. Op by op the update is
        dispatched after the loss, so the handle is the whole new state."""
        if self.train_state is None:
            self.train_state = self._fresh_train_state()
            jax.block_until_ready(self.train_state)
        fn, jit, batch = self.train_fn, self.jit, (self.fixed, self.x, self.labels, self.lengths)
        # The memory plan and the profile's HLO lower the step after the timed calls, when
        # the state they would pass has been donated: its shapes, dtypes and placements
        # describe the same program (and hit jit's cache).
        state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                            sharding=a.sharding),
                             self.train_state)
        self.measured = (fn, (*state, *batch))

        def run() -> Any:
            params, opt_state, loss = fn(*self.train_state, *batch)
            self.train_state = (params, opt_state)
            return loss if jit else (params, opt_state, loss)
        return run

    def _fresh_train_state(self) -> tuple[Any, Any]:
        """Parameters and optimizer state as before a first training step: copies of the
        canonical parameters made on the device (a donated buffer must be the copy's own,
        never the canonical network's: jax.device_put of a numpy array may alias host
        memory on the CPU) and the optimizer's initial (zeroed) buffers, all committed to
        the device. optax makes some of its buffers (AdamW's step count, created from a
        constant) uncommitted, and jit keys its cache on each argument's placement: the
        step's own outputs, which the next call takes, are committed, so from an uncommitted
        state the second call compiled the whole step again (published/h200-transformers:
        15 of JAX's 16 train_step rows say "compiles": 2, GPT-2's bf16 step 21.5 s for both)."""
        if optax is None:
            raise Unsupported("train_step needs optax (adapters/registry.toml pins it)")
        if self.optimizer is None:
            self.optimizer, self.extra["optimizer"] = make_optimizer(optimizer_for(self.model))
        params = jax.tree.map(lambda a: jnp.array(a, copy=True), self.trainable)
        return jax.device_put((params, self.optimizer.init(params)), self.device)

    def train_step_gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        """One call of the training step's program on a fresh state (the timed copy's state
        is left as it is: the state passed here is its own, donated), and the gradients
        read off the optimizer's state after it (``first_step_gradients``)."""
        params, opt_state = self._fresh_train_state()
        _, opt_state, loss = self.train_fn(params, opt_state, self.fixed, self.x,
                                           self.labels, self.lengths)
        grads = first_step_gradients(opt_state, optimizer_for(self.model))
        return GradientSummary.of(float(loss), {
            name: self.net.canonical(name, g) for name, g in grads.items()}, keep_arrays)

    def step_grad_input(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_input")

    def step_grad_weight(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_weight")

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

    def step_transfer(self) -> Callable[[], Any]:
        require_device_memory(self.on_gpu)
        # A pageable numpy buffer, as a framework's plain feed uses (Li et al. 2016, Fig. 7).
        self.extra["host_buffer"] = "pageable (numpy array in ordinary host memory)"
        return lambda: jax.device_put(self.host_x, self.device)

    def step_transfer_pinned(self) -> Callable[[], Any]:
        """The batch placed once (untimed) in page-locked host memory, JAX's "pinned_host"
        memory kind, then timed onto the device (Li et al. 2016, Fig. 7's discussion)."""
        require_device_memory(self.on_gpu)
        single = jax.sharding.SingleDeviceSharding
        try:
            pinned = jax.device_put(self.host_x, single(self.device, memory_kind="pinned_host"))
            jax.block_until_ready(pinned)
            # The device's own memory named explicitly: device_put(array, device) refuses an
            # array whose memory kind differs from the target's ("memory kind mismatch").
            target = single(self.device, memory_kind=self.device.default_memory().kind)
        except (ValueError, RuntimeError, NotImplementedError) as error:
            raise Unsupported(f"no pinned host memory kind on this backend: {error}") from None
        self.extra["host_buffer"] = "pinned (page-locked, jax memory_kind='pinned_host')"
        return lambda: jax.device_put(pinned, target)

    def trained_weights(self) -> dict[str, np.ndarray]:
        params = self.trainable if self.train_state is None else self.train_state[0]
        # np.array copies: the next step donates (and so deletes) these buffers.
        return {name: self.net.canonical(name, np.array(a, dtype=np.float32))
                for name, a in params.items()}

    def _step_fn(self, measure: str) -> Callable:
        return self.forward_fn if measure == "forward" else self.gradient_fn

    def epoch_step(self, measure: str, batches: list[Batch]) -> Callable[[], Any]:
        """Every batch placed on the device here, untimed, then one pass of the same
        forward_fn or gradient_fn as ``step`` over them in order (Bahrampour et al. 2016,
        4.4: the epoch resident in device memory, no shuffling). With jit, each new
        padded length traces and compiles once, in the first epoch; later epochs find
        every shape in jit's cache (tests/adapters/test_jax.py counts the compilations)."""
        if measure not in ("forward", "gradient"):
            raise Unsupported(f"no epoch of {measure}")
        placed = [self._place(batch) for batch in batches]
        jax.block_until_ready(placed)
        fn = self._step_fn(measure)
        calls = [self._arguments(measure, inputs) for inputs in placed]
        # The memory plan is the largest batch's: it has the largest temporaries.
        self.measured = (fn, max(calls, key=lambda args: args[2].size)) if calls else None
        COMPILE_LOG.start()

        def epoch() -> Any:
            handle = None
            for args in calls:
                handle = fn(*args)
            return handle
        return epoch

    def profile(self, measure: str, iterations: int) -> Profile:
        run = self.step(measure)
        for _ in range(WARMUP_RUNS):
            self.sync(run())
        return profile_steps(run, self.sync, measure, iterations, self.on_gpu,
                             self._optimised_hlo())

    def _optimised_hlo(self) -> str | None:
        """The profiled step's HLO module after XLA's passes; none in the eager variant,
        whose every primitive is a module of its own."""
        if not self.jit or self.measured is None:
            return None
        fn, args = self.measured
        return fn.lower(*args).compile().as_text()

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
        self.extra["compile_events"] = COMPILE_LOG.stop()   # the timed calls are over
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
        return self.canonical_output(np.asarray(
            self.forward_fn(self.trainable, self.fixed, self.x, self.lengths), dtype=np.float32))

    def serve(self, batch: Batch) -> np.ndarray:
        # The host arrays onto the device (_place, as prepare places the seeded batch),
        # the variant's forward in inference mode (with jit the forward step's executable:
        # compiled for the batch's shapes at its first call, found in jit's cache by every
        # later one), the output back to the host: np.asarray waits for it. A batch of
        # other shapes is refused: jit would trace and compile anew inside a timed query.
        inputs = self._place(batch)
        if (inputs.x.shape, inputs.x.dtype) != (self.x.shape, self.x.dtype):
            raise ValueError(f"serve: input {inputs.x.shape} {inputs.x.dtype} is not the "
                             f"batch prepared, {self.x.shape} {self.x.dtype}")
        return self.canonical_output(np.asarray(
            self.forward_fn(*self._arguments("forward", inputs)), dtype=np.float32))

    def generator(self, max_length: int) -> Generator:
        reason = not_a_decoder(self.model)
        if reason:
            raise Unsupported(reason)
        if self.num.attention == "cudnn":
            # The cache is masked by position (network.py's decode path), and cuDNN's fused
            # attention takes no boolean mask: generation would run XLA's attention.
            raise Unsupported("cudnn_attention: generation masks its key/value cache by "
                              "position, and cuDNN's fused attention takes no boolean mask")
        return JaxGenerator(self, max_length)

    def output_summary(self, examples: int) -> OutputSummary:
        """A large output is reduced on its device, the head alone fetched
        (adapters/summary.py): float32 sums and squared deviations per example there (JAX
        runs without float64 here), combined in float64 on the host. A small one is
        fetched whole: a compilation per output shape is not worth saving a small copy."""
        out = self.forward_fn(self.trainable, self.fixed, self.x, self.lengths)
        if out.size < DEVICE_SUMMARY_VALUES:
            return OutputSummary.of(self.canonical_output(np.asarray(out, dtype=np.float32)),
                                    examples)
        head, sums, centres, squares = (np.asarray(part) for part in
                                        _summary_parts(out, min(examples, out.shape[0])))
        head = self.canonical_output(head.astype(np.float32))
        return OutputSummary.from_example_moments((int(out.shape[0]), *head.shape[1:]), head,
                                                  sums, centres, squares)

    def canonical_output(self, out: np.ndarray) -> np.ndarray:
        """An output in the IR's layout: NHWC activations back to NCHW."""
        if out.ndim == 4 and self.num.layout == "NHWC":
            return np.transpose(out, (0, 3, 1, 2))
        return out

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.gradient_fn(self.trainable, self.fixed, self.x, self.labels,
                                       self.lengths)
        return float(loss), {name: self.net.canonical(name, np.asarray(g, dtype=np.float32))
                             for name, g in grads.items()}

    def canonical_gradient(self, name: str, grad: np.ndarray) -> np.ndarray:
        """``loss_and_gradients`` already returns the IR's layouts (``net.canonical``)."""
        return grad

    def lowered(self, measure: str, batch: Batch | None = None) -> Any:
        """The forward or gradient step lowered for this case's batch (or ``batch``, placed
        here), ready for XLA to compile: ``adapters/jax/compile_probe.py`` times that."""
        inputs = Inputs(self.x, self.labels, self.lengths) if batch is None else self._place(batch)
        return self._step_fn(measure).lower(*self._arguments(measure, inputs))

    def hlo_text(self, measure: str) -> str:
        """The StableHLO the step's jit traces to (tests read its precision configs)."""
        self.step(measure)
        fn, args = self.measured
        return fn.lower(*args).as_text()

    def close(self) -> None:
        del self.trainable, self.fixed, self.x, self.labels, self.lengths, self.measured
        del self.forward_fn, self.gradient_fn, self.backward_fn, self.train_fn, self.train_state
        # Drops this case's compiled executables, which would otherwise stay in host
        # memory (and in the next case's RSS) for the life of the worker.
        jax.clear_caches()


class JaxAdapter(Adapter):
    name = "jax"
    variants = {
        "jit": "jax.jit of the whole step (XLA-compiled); NHWC activations; only "
               "train_step donates (its parameters and optimizer state)",
        "eager": "op-by-op dispatch, no jax.jit (each primitive compiled once and cached)",
        "cudnn_attention": "jax.jit, jax.nn.dot_product_attention on cuDNN's fused attention "
                           "(implementation='cudnn'; GPU, bf16)",
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
            "optax_version": None if optax is None else optax.__version__,   # train_step's
            "gpu_model": self.device.device_kind if on_gpu else None,
            "cuda": cuda,
            "cudnn": cudnn,
            "xla_cpu_pool_threads": None if on_gpu else xla_pool_threads(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            # A persistent compilation cache (JAX_COMPILATION_CACHE_DIR): first calls that
            # hit it load an executable instead of compiling (compile_events says which).
            "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir or None,
        }

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        return JaxPrepared(self, model, weights, batch, case, variant)

    def reapply(self, case: CaseConfig) -> None:
        numerics(case.precision, self.config.device)

    def bytes_in_use(self) -> int | None:
        if self.config.device != "gpu":
            return None
        return (self.device.memory_stats() or {}).get("bytes_in_use")

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, MemoryError):
            return True
        # XLA reports allocation failures as JaxRuntimeError (XlaRuntimeError before
        # jax 0.4.36), a RuntimeError subclass: "RESOURCE_EXHAUSTED: Out of memory ...".
        text = str(error)
        return isinstance(error, RuntimeError) and (
            "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())
