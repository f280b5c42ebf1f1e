"""The Adapter protocol: what every framework provides to the harness.

The harness (suites/harness/worker.py) owns the timing; an adapter only builds the network from
the IR, loads the canonical weights, places the seeded batch on the device and hands back
one callable per measurement plus a ``sync`` that waits for the device. Nothing an
adapter does in ``prepare`` is timed.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from adapters.summary import HEAD_EXAMPLES, GradientSummary, OutputSummary
from models.inputs import Batch
from models.ir import Model, SelfAttention, all_nodes
from models.measures import BY_NAME
from models.weights import Weights


class Unsupported(Exception):
    """This framework cannot run this case; the message says why (becomes the row's
    reason with status ``unsupported``)."""


class DeviceUnavailable(Exception):
    """The requested device does not exist here (no GPU visible to the framework)."""


# A transfer measure's reason on the CPU, the same in every adapter.
HOST_IS_DEVICE = "host and device are the same on cpu"


def require_device_memory(on_gpu: bool) -> None:
    """A host-to-device transfer needs a device with memory of its own."""
    if not on_gpu:
        raise Unsupported(HOST_IS_DEVICE)


def has_attention(model: Model) -> bool:
    """Whether the model has self-attention: its rows then record the attention
    implementation that ran (``Prepared.extra["attention"]``, each adapter's own words)."""
    return any(isinstance(node, SelfAttention) for node in all_nodes(model))


@dataclass(frozen=True)
class RunConfig:
    """Process-wide settings, applied before the framework's first operation."""

    device: str            # "cpu" or "gpu"
    threads: int           # intra-op threads
    interop_threads: int   # inter-op threads


@dataclass(frozen=True)
class CaseConfig:
    """Per-case settings."""

    precision: str = "fp32"
    variant: str = "default"


@dataclass(frozen=True)
class Fingerprint:
    """A small summary of one forward and one gradient pass on the canonical weights and
    the seeded batch; equal across frameworks up to floating-point tolerance."""

    output_head: tuple[float, ...]
    output_mean: float
    output_std: float
    loss: float | None = None
    grad_norms: dict[str, float] | None = None

    @staticmethod
    def from_summaries(output: OutputSummary, gradients: GradientSummary | None = None
                       ) -> Fingerprint:
        head = np.asarray(output.head).ravel()[:8]
        return Fingerprint(tuple(float(v) for v in head), output.mean, output.std,
                           None if gradients is None else gradients.loss,
                           None if gradients is None else dict(sorted(gradients.norms.items())))

    @staticmethod
    def from_arrays(output: np.ndarray, loss: float | None = None,
                    grads: dict[str, np.ndarray] | None = None) -> Fingerprint:
        return Fingerprint.from_summaries(
            OutputSummary.of(output),
            None if grads is None else GradientSummary.of(loss, grads, keep_arrays=False))


@dataclass(frozen=True)
class KernelTime:
    """One operation or device kernel in a profile, per profiled iteration."""

    name: str
    ms: float
    calls: float


@dataclass(frozen=True)
class Profile:
    """What a framework's profiler saw over ``iterations`` runs of ``measure``.

    ``by_layer_type`` splits the profiled time (ms per iteration) over
    ``suites.instruments.profiling.LAYER_TYPES`` (Li et al.'s conv, pool, ReLU, FC and concat, plus
    norm and other); ``top_kernels`` are the most expensive device kernels on a GPU, or
    the most expensive operations where the profiler sees no kernels (a CPU);
    ``timeline``, where present, says how much of the profiled span the device spent in
    kernels and how much in layout transposes."""

    tool: str
    measure: str
    iterations: int
    total_ms: float
    by_layer_type: dict[str, float]
    top_kernels: tuple[KernelTime, ...]
    kernel_level: bool       # True: top_kernels are device kernels; False: framework ops
    # Kernel-tracer profiles (suites/instruments/kernel_trace.py) only: host time per traced
    # iteration, for comparing the kernel total with it, and ms per convolution kernel
    # family (implicit GEMM, FFT, Winograd, ...), over the profiled measure and, traced
    # separately, over the forward pass alone (kernel names rarely tell the direction).
    wall_ms: float | None = None
    conv_families: dict[str, float] = field(default_factory=dict)
    forward_conv_families: dict[str, float] = field(default_factory=dict)
    # Where the profiler gives kernel start and end times: per iteration, the time from
    # the first kernel's start to the last one's end, the GPU busy within it, and the
    # layout-transpose kernels' share (suites.instruments.profiling.device_timeline).
    timeline: dict[str, float] | None = None


@dataclass(frozen=True)
class Memory:
    peak_bytes: int | None
    kind: str               # "allocator" (device allocator's peak) or "rss" (host)


class DeviceClock:
    """The device's own time for a block of iterations, without the host's launch gaps.
    Event clocks (PyTorch's CUDA events) need ``hold``: it queues a kernel that keeps the
    device busy for about the given seconds, so that every launch of the block is queued
    before the device reaches them (nvbench's blocking kernel); a tracing clock
    (``suites/instruments/cupti_clock.py``) times each kernel itself and holds nothing. ``start`` and
    ``end`` bracket the block's launches; ``elapsed`` (after the sync) returns the device
    seconds, or None; ``span``, where the clock knows it, the seconds from the block's
    first kernel start to its last kernel end. A host wall time well above the device
    time is launch and host overhead."""

    kind: str = ""          # what the device time is, in words, for the row
    reason: str = ""        # why the last block gave no time, where the clock can say
    # The last block received no device record at all (a tracing clock only): the step did
    # nothing on the device, or the tracer saw nothing of this process
    # (suites/harness/device_pass.py tells the two apart).
    recorded_nothing: bool = False

    def hold(self, seconds: float) -> None: ...

    def start(self) -> None: ...

    def end(self) -> None: ...

    def elapsed(self) -> float | None: ...

    def span(self) -> float | None:
        """None: this clock does not know the span (CUDA events)."""
        return None

    def abort(self) -> None:
        """The block raised: stop whatever ``start`` began (a trace), without a time."""



class Generator(Protocol):
    """Greedy decoding of one sequence at batch 1 with a key/value cache of fixed capacity
    (``Prepared.generator``; the ``generate`` measure, suites/serving/generate.py). The
    cache is preallocated at ``max_length`` positions, so a compiled framework traces or
    compiles once for the prefill and once for the decode step."""

    def prefill(self, prompt: np.ndarray) -> int:
        """``prompt``: int32 (P,) token ids; fills the cache from position 0 and returns
        the greedy next token id (argmax on the device; returning it to the host is the
        sync point)."""
        ...

    def decode(self, token: int) -> int:
        """Appends ``token`` at the next position and returns the next greedy token id."""
        ...

    def last_logits(self) -> np.ndarray:
        """The logits (vocab,) behind the token last returned, as float64 on the host: for
        the float64 check only, never inside a timed call."""
        ...


@dataclass
class Prepared(abc.ABC):
    """A network built, loaded and placed on its device, ready to be timed."""

    extra: dict[str, Any] = field(default_factory=dict)   # recorded in the row's timing

    def step(self, measure: str) -> Callable[[], Any]:
        """One iteration of ``measure``, built by the hook its declaration names
        (models/measures.py); raises ``Unsupported`` with a reason."""
        declared = BY_NAME.get(measure)
        if declared is None or declared.driver != "step":
            raise Unsupported(f"unknown measure '{measure}'")
        return getattr(self, declared.hook)()

    # The step hooks, one per step measure (models/measures.py names them). Each returns
    # one iteration's callable, whose handle ``sync`` waits on; building it (placing data,
    # tracing, compiling ahead) is untimed. An adapter overrides those it supports; the
    # defaults refuse with a reason, which becomes an ``unsupported`` row.

    @abc.abstractmethod
    def step_forward(self) -> Callable[[], Any]:
        """Inference on the seeded batch (the network in evaluation mode)."""

    def step_gradient(self) -> Callable[[], Any]:
        """Forward in training mode, the loss and every trainable parameter's gradient."""
        raise Unsupported("no gradient step in this framework")

    def step_train(self) -> Callable[[], Any]:
        """``gradient`` plus the update of the network's declared optimizer
        (models/optimizers.py ``optimizer_for``) as the framework implements it, on a copy
        of the network whose weights ``trained_weights`` returns; sets
        ``extra["optimizer"]``, the optimizer in words."""
        raise Unsupported("no train_step in this framework")

    def step_grad_input(self) -> Callable[[], Any]:
        """A single-layer case's backward product w.r.t. its input alone."""
        raise Unsupported("no grad_input step in this framework")

    def step_grad_weight(self) -> Callable[[], Any]:
        """A single-layer case's backward product w.r.t. its weights alone."""
        raise Unsupported("no grad_weight step in this framework")

    def step_transfer(self) -> Callable[[], Any]:
        """The batch from a pageable host buffer onto the device; sets
        ``extra["host_buffer"]`` where it says more than the default."""
        raise Unsupported("no transfer step in this framework")

    def step_transfer_pinned(self) -> Callable[[], Any]:
        """The batch from page-locked host memory onto the device."""
        raise Unsupported("no transfer_pinned step in this framework")

    def serve(self, batch: Batch) -> np.ndarray:
        """Answer a query as a server does (the ``serve`` measure, suites/serving/): the
        inference output for ``batch``, given as host arrays of the prepared batch's size
        and shapes, returned as a host array once computed. Placing the inputs on the
        device and fetching the output are part of it (a served request pays both), so
        LoadGen's time from issue to completion includes them."""
        raise Unsupported("no serve hook in this framework")

    def generator(self, max_length: int) -> Generator:
        """A ``Generator`` over the prepared decoder-only transformer (prepared at batch 1)
        whose cache holds ``max_length`` positions (prompt + new tokens); the ``generate``
        measure's hook."""
        raise Unsupported("no generator in this framework")

    @abc.abstractmethod
    def sync(self, handle: Any) -> None:
        """Wait until the work behind ``handle`` (or all queued work) is done."""

    @abc.abstractmethod
    def reset_peak_memory(self) -> None: ...

    @abc.abstractmethod
    def peak_memory(self) -> Memory: ...

    @abc.abstractmethod
    def forward_output(self) -> np.ndarray:
        """The inference output for the seeded batch, as a host array."""

    @abc.abstractmethod
    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        """One gradient pass: the loss and each trainable parameter's gradient, keyed by
        canonical name (any layout: only norms are compared). Raises ``Unsupported``
        where the framework has no gradients."""

    def canonical_gradient(self, name: str, grad: np.ndarray) -> np.ndarray:
        """A gradient of ``loss_and_gradients`` (parameter ``name``) in the IR's layout, for
        the element-wise comparison with the float64 truth (suites/truth/check.py). This
        default is for an adapter that keeps the IR's layouts; one that transposes or
        reorders a parameter undoes it here."""
        return grad

    def output_summary(self, examples: int) -> OutputSummary:
        """The inference output's shape, first ``examples`` examples, mean and standard
        deviation (``adapters/summary.py``). This default fetches the whole output; an
        adapter whose output lives on a GPU reduces it there and fetches the head only."""
        return OutputSummary.of(self.forward_output(), examples)

    def gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        """One gradient pass as the fingerprint reads it: the loss, each parameter's norm,
        and the gradients (as ``loss_and_gradients`` returns them) if ``keep_arrays``. This
        default fetches every gradient; a GPU adapter takes the norms on the device and
        fetches the arrays only when they are kept. Raises ``Unsupported`` as
        ``loss_and_gradients`` does."""
        loss, grads = self.loss_and_gradients()
        return GradientSummary.of(loss, grads, keep_arrays)

    def train_step_gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        """``gradient_summary`` of the training step itself: one call of the timed step's
        own program from the canonical weights and zeroed optimizer buffers, on the seeded
        batch, and its loss and gradients as the step computed them (read back from the
        optimizer's first-step state, or from the parameters' ``.grad``). The fingerprint
        of a job that times ``train_step`` and not ``gradient`` reads this: it checks the
        program that was timed, and compiles no gradient program for the fingerprint
        alone. Raises ``Unsupported`` where there is no training step."""
        raise Unsupported("no train_step")

    def trained_weights(self) -> dict[str, np.ndarray]:
        """The trainable body parameters as the ``train_step`` measure has left them, keyed
        by canonical name in the IR's layouts (as the weights given to ``prepare``).
        ``train_step`` trains a copy of the network with its own optimizer state, so the
        canonical network that ``forward_output`` and ``loss_and_gradients`` fingerprint
        never changes; before the first step this is the canonical weights. Raises
        ``Unsupported`` where the framework has no training step."""
        raise Unsupported("no train_step")

    def fingerprint(self) -> Fingerprint:
        output = self.output_summary(HEAD_EXAMPLES)
        try:
            gradients = self.gradient_summary(keep_arrays=False)
        except Unsupported:
            return Fingerprint.from_summaries(output)
        return Fingerprint.from_summaries(output, gradients)

    def epoch_step(self, measure: str, batches: list[Batch]) -> Callable[[], Any]:
        """One pass of ``measure`` ("forward" or "gradient") over ``batches`` in order,
        returning the last handle for ``sync``. Placing the batches on the device, and
        anything else that needs doing once, happens here, untimed (the whole epoch
        lives in device memory, as in Bahrampour et al. 4.4)."""
        raise Unsupported(f"no epoch support for {measure}")

    def profile(self, measure: str, iterations: int) -> Profile:
        """Run ``measure`` a few times untraced, then ``iterations`` times under the
        framework's own profiler; see ``Profile``."""
        raise Unsupported("no profiler support")

    def device_clock(self) -> DeviceClock | None:
        """A ``DeviceClock`` that times kernels on this case's device, or None
        where the framework offers none. The harness prefers CUPTI's clock, the same for
        every framework, where cupti-python imports; this one is the fallback
        (suites/instruments/device_time.py)."""
        return None

    def close(self) -> None:
        """Release device memory before the next case."""


class Adapter(abc.ABC):
    """One framework. Subclasses are listed in adapters/registry.toml."""

    name: ClassVar[str]
    # Execution modes this framework offers; "default" maps to the first.
    variants: ClassVar[dict[str, str]]
    # Whether the worker reads the GPU's clocks, power and temperature (NVML) while this
    # adapter's cases run on one; a stand-in that puts nothing on the GPU (the harness's
    # tests) has no GPU state to report.
    monitors_gpu: ClassVar[bool] = True
    # Whether this framework's AdamW adds epsilon to sqrt(v) before the bias correction
    # (Kingma & Ba's "efficient" order; models/optimizers.py AdamW.update's
    # ``epsilon_hat``) rather than after it: the conformance kit's float64 reference of
    # train_step follows the form the framework computes.
    adamw_epsilon_hat: ClassVar[bool] = False
    # The precisions (models.measures.PRECISIONS) this adapter knows; the worker makes any
    # other an unsupported row before ``prepare`` (fp16 is ONNX Runtime's alone: its
    # transformer optimizer's float16 conversion; the others run bf16 mixed precision).
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "tf32", "bf16")

    def check_precision(self, case: CaseConfig) -> None:
        if case.precision not in self.precisions:
            raise Unsupported(f"{self.name} has no {case.precision} precision here "
                              f"(has: {', '.join(self.precisions)})")

    def __init__(self, config: RunConfig):
        self.config = config

    @abc.abstractmethod
    def environment(self) -> dict[str, Any]:
        """framework_version, gpu_model, cuda, cudnn (None where not applicable)."""

    @abc.abstractmethod
    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared: ...

    def prepare_sizes(self, model: Model, weights: Weights, batches: Sequence[Batch],
                      case: CaseConfig) -> list[Prepared]:
        """``model`` prepared for each of ``batches`` as one case, every one usable while the
        others are (a Server's allowed batch sizes: suites/serving/run.py). By default a
        ``prepare`` each; an adapter whose ``prepare`` starts the case afresh (PyTorch clears
        torch.compile's state) does so once here, so that no size's compiled program is
        discarded by the next size's preparation."""
        return [self.prepare(model, weights, batch, case) for batch in batches]

    @abc.abstractmethod
    def is_out_of_memory(self, error: BaseException) -> bool: ...

    def reapply(self, case: CaseConfig) -> None:
        """Set again the process-wide settings ``prepare`` set for ``case`` (precision,
        cuDNN's algorithm search), before a job kept built runs again after others were
        prepared (suites/harness/kept_jobs.py). Nothing for a framework whose settings live in
        the job."""

    def bytes_in_use(self) -> int | None:
        """Device memory the framework's allocator has handed out now (the figure its
        ``peak_memory`` is a peak of), or None where it reports none: what jobs kept for
        the device phase hold is left out of a later job's peak (suites/harness/kept_jobs.py)."""
        return None

    def memory_used_fraction(self) -> float | None:
        """The share of the device's memory in use, where the worker has no NVML reading of
        its own (a stand-in framework); None: unknown, so no job is kept built."""
        return None

    def resolve_variant(self, variant: str) -> str:
        if variant == "default":
            return next(iter(self.variants))
        if variant not in self.variants:
            raise Unsupported(f"{self.name} has no variant '{variant}' "
                              f"(has: {', '.join(self.variants)})")
        return variant

    def describe(self, case: CaseConfig) -> str:
        """The execution mode in words, recorded in every row."""
        return self.variants[self.resolve_variant(case.variant)]


@dataclass(frozen=True)
class EngineLaunch:
    """How a framework's data-parallel engine is started (parallel/engines.py reads it,
    without importing the framework: each adapter's ``launch.py`` holds its record).

    ``process_per_device``: one process per device on a host, else one process driving
    every local device (and one per host across hosts). ``torchrun``: the processes are
    started by ``torch.distributed.run`` (a c10d rendezvous across hosts) rather than
    directly. ``env_defaults`` / ``env``: per device ("cpu", "gpu", or "*" for both),
    variables set unless the caller's environment has them / set whatever it has.
    ``xla_flag_defaults``: per device, XLA flags appended unless the caller's XLA_FLAGS
    names them; ``xla_flags``: appended always (XLA reads the last of repeated flags); a
    value "{devices}" is the devices one process drives. ``gpu_per_process``: process i
    sees only GPU i (CUDA_VISIBLE_DEVICES). ``tf_config``: each process gets a TF_CONFIG
    cluster spec when several processes meet. ``compile_cache``: the engine's step is a
    program a persistent compilation cache keeps between processes."""

    process_per_device: bool
    torchrun: bool = False
    env_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    xla_flag_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    xla_flags: dict[str, dict[str, str]] = field(default_factory=dict)
    gpu_per_process: bool = False
    tf_config: bool = False
    compile_cache: bool = False


class DataParallelEngine(abc.ABC):
    """One rank's data-parallel engine for one scaling case (``adapters/<fw>/parallel.py``
    ``DataParallel``), built by parallel/rank.py from the case's ``RankSpec`` and the
    rank's place (``RankInfo``). It times ``step`` (the gradient step with its
    collective, or the step ``step_kind`` names) and ``local_step`` (the same without
    communication); rank 0 writes the result."""

    engine: str = ""                # the engine, in words, for the row
    backend: str = ""               # the collective backend, in words
    communication_method: str = ""  # how the communication share is measured
    step_kind: str = "gradient"     # "forward" where the processes exchange nothing
    adapter: Adapter

    @abc.abstractmethod
    def __init__(self, spec: Any, info: Any, threads: int): ...

    @abc.abstractmethod
    def step(self) -> Callable[[], Any]:
        """One data-parallel step, collectives included."""

    @abc.abstractmethod
    def local_step(self) -> Callable[[], Any]:
        """The same step on this rank's shard without communication."""

    @abc.abstractmethod
    def sync(self, handle: Any) -> None: ...

    @abc.abstractmethod
    def gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        """The loss and the all-reduced gradients by canonical name (the correctness
        check); raises ``Unsupported`` where the engine computes none."""

    @abc.abstractmethod
    def peak_memory(self) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    def environment(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @classmethod
    def finish(cls) -> None:
        """After the launch's last case, in this process: end whatever every case shared
        (a process group). Nothing by default."""
