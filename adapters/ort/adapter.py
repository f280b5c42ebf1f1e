"""ONNX Runtime adapter: the IR as an ONNX graph (network.py) in an InferenceSession with
full graph optimisation and IOBinding (device-resident input and output), ONNX Runtime's
standard fast path; lower optimisation levels and cuDNN algorithm searches as variants;
for transformers, ``ort_fused``: the graph through ONNX Runtime's own transformer optimizer
(fused attention, SkipLayerNormalization, GELU), in fp32 or, on the GPU, fp16; on the GPU,
``ort_cuda_graph``: the CUDA EP's CUDA graphs over fixed bound buffers (serving), fp32 or
fp16. Decoder-only transformers also generate greedily with a key/value cache
(``OrtPrepared.generator``, generate.py).

ONNX Runtime's training API ships in other packages (onnxruntime-training), so this
adapter times forward, the host-to-device copy and an epoch of forward passes, and profiles
forward with ONNX Runtime's own profiler (profile.py; on a GPU the worker's CUPTI kernel
tracer, suites/instruments/kernel_trace.py, gives the kernel times this profiler cannot record there).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

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
from adapters.memory import peak_rss, reset_peak_rss
from adapters.ort.generate import GenerationGraphs, OrtGenerator
from adapters.ort.network import (
    ATTENTION,
    FUSED_ATTENTION,
    INPUT,
    LENGTHS,
    LOGITS,
    OUTPUT,
    FusedGraph,
    build,
    build_generation,
    float16_graph,
    optimise_transformer,
)
from adapters.ort.profile import profile_steps
from adapters.ort.summary import summarise_bound_output
from adapters.summary import DEVICE_SUMMARY_VALUES, OutputSummary
from models import ir
from models.inputs import Batch
from models.ir import Model
from models.weights import Weights

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
NO_GRADIENTS = ("ONNX Runtime runs here as an inference engine: its training API "
                "(onnxruntime-training) is not part of the pinned onnxruntime packages")
NO_GPU_PEAK = ("ONNX Runtime's Python API exposes no statistics of its CUDA memory arena, "
               "and nvidia-smi's per-process figure (CUDA context plus arena reservation, "
               "never released) is not an allocator peak, so none is reported")


@dataclass(frozen=True)
class VariantSettings:
    """What a variant sets: the graph optimisation level and, on GPU, cuDNN's convolution
    algorithm search (ORT's default is EXHAUSTIVE: CUDA EP docs, cudnn_conv_algo_search).

    The search decides fp32 numerics too: on an H100 (onnxruntime-gpu 1.31.1, cuDNN 9.14)
    ResNet-50's fp32 forward at batch 256 came out 8.2e-5 from float64 with EXHAUSTIVE or
    HEURISTIC, 3.8e-7 with DEFAULT (98.7 ms instead of 72.1), and under
    ``NVIDIA_TF32_OVERRIDE=0`` EXHAUSTIVE found no engine for one convolution, which points
    to engines that use TF32 for some shapes although ``use_tf32`` is 0 (not confirmed
    kernel by kernel; published/h100-practice/README.md). The float64 check flags
    such a row."""

    optimization: ort.GraphOptimizationLevel
    conv_algo_search: str = "EXHAUSTIVE"
    gpu_only: bool = False
    # The graph goes through onnxruntime.transformers' optimizer before the session
    # (network.optimise_transformer); transformers only.
    transformer_optimizer: bool = False
    # The CUDA EP captures the session's run as a CUDA graph and replays it
    # (``enable_cuda_graph``), over one bound set of device buffers (BoundBatch, fixed).
    cuda_graph: bool = False
    # Whether the variant has an fp16 form: its graph through ONNX Runtime's float16
    # conversion (network.float16_graph, or the transformer optimizer's own).
    float16: bool = False


VARIANT_SETTINGS = {
    "ort_all": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    "ort_extended": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    "ort_basic": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    "ort_disabled": VariantSettings(ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    "cudnn_heuristic": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                       "HEURISTIC", gpu_only=True),
    "cudnn_default_algo": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                          "DEFAULT", gpu_only=True),
    "ort_fused": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                 transformer_optimizer=True, float16=True),
    "ort_cuda_graph": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL, gpu_only=True,
                                      cuda_graph=True, float16=True),
}

# ONNX Runtime's CUDA graphs (CUDA EP docs, "Using CUDA Graphs", onnxruntime.ai/docs/
# execution-providers/CUDA-ExecutionProvider.html; the constraints of their introduction,
# microsoft/onnxruntime PR #9978, 1.11): every node on the CUDA EP, no control flow,
# tensor inputs and outputs of shapes that never change, bound through IOBinding at
# addresses that never change; ORT captures after its first runs and then replays the
# graph whatever is bound, so new inputs are copied into the bound buffers
# (OrtValue.update_inplace), never bound anew. A session captures one graph (more need
# the ``gpu_graph_id`` run option, microsoft/onnxruntime PR #19636): one session and one
# bound set per batch size served, which is what the serving harness prepares (one
# Prepared per batch size).
NO_CUDA_GRAPH_ON_CPU = ("ort_cuda_graph is the CUDA execution provider's enable_cuda_graph "
                        "(a CUDA graph captured and replayed); the CPU provider has no graphs")
ONE_BOUND_SET = ("ort_cuda_graph replays one captured CUDA graph over the one bound set of "
                 "buffers it was captured with")

NOT_A_TRANSFORMER = (
    "ort_fused runs ONNX Runtime's transformer optimizer (onnxruntime.transformers), whose "
    "fusions are self-attention, LayerNorm and GELU patterns; this network has no "
    "self-attention, so ort_fused would time ort_all's graph under another name")


def check_precision(precision: str, on_gpu: bool, variant: str) -> None:
    if precision == "tf32" and not on_gpu:
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    if precision == "fp16":
        if not VARIANT_SETTINGS[variant].float16:
            raise Unsupported("fp16 is ort_fused's and ort_cuda_graph's: ONNX Runtime's "
                              "float16 conversion of their graphs; other ONNX Runtime variants "
                              "run the fp32 graph")
        if not on_gpu:
            # onnxruntime.transformers.optimizer's own warning (1.31.1): "Most operators
            # have no float16 implementation in CPU, so Cast nodes are added to compute
            # them in float32".
            raise Unsupported("fp16 runs on the CUDA execution provider only: ONNX "
                              "Runtime's CPU provider has no float16 kernels for most ops "
                              "and computes them in float32 behind Cast nodes, so the row "
                              "would time casts, not fp16 arithmetic")
    if precision == "bf16":
        raise Unsupported("ONNX Runtime has no automatic mixed precision: bf16 would need a "
                          "graph rewritten to bf16 tensors, not the bf16-compute/fp32-weights "
                          "mode the other frameworks run")


ALLOW_SPINNING = "session.intra_op.allow_spinning"


def session_options(config: RunConfig, variant: str) -> ort.SessionOptions:
    """Thread counts are always explicit: ONNX Runtime sizes its pools from the host's
    cores, not from the process's CPU affinity mask that the worker sets."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = config.threads
    options.inter_op_num_threads = config.interop_threads
    # Sequential: nodes run one after another, each using the intra-op pool, as the other
    # frameworks' eager/jit paths do (inter-op threads only serve ORT_PARALLEL).
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = VARIANT_SETTINGS[variant].optimization
    options.log_severity_level = 3   # errors only: fallback warnings would flood the log
    # Lets the GPU rows list the nodes ORT placed on the CPU (ORT >= 1.24; older releases
    # keep the unknown key and ignore it).
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return options


def cuda_provider_options(variant: str, precision: str) -> dict[str, str]:
    """fp32 is strict: ORT's CUDA EP enables TF32 unless ``use_tf32`` is 0 (CUDA EP docs;
    provider option name kUseTF32 in cuda_execution_provider_info.cc)."""
    options = {"device_id": "0",
               "cudnn_conv_algo_search": VARIANT_SETTINGS[variant].conv_algo_search,
               "use_tf32": "1" if precision == "tf32" else "0"}
    if VARIANT_SETTINGS[variant].cuda_graph:
        options["enable_cuda_graph"] = "1"
    return options


def preload_cuda_libraries() -> None:
    """onnxruntime-gpu finds CUDA and cuDNN from pip's nvidia packages or torch only after
    ``preload_dlls`` (added in 1.21; GPU-HOST.md: needed on the GPU host)."""
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()


def gpu_name() -> str | None:
    """ORT does not name its device; nvidia-smi does (the first visible GPU)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def nodes_on_cpu(session: ort.InferenceSession) -> list[str] | None:
    """Op types of the nodes the CUDA session placed on the CPU (ORT keeps shape
    arithmetic there on purpose); None where this onnxruntime cannot tell."""
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception:  # older onnxruntime: no such method
        return None
    return sorted({node.op_type for graph in subgraphs if graph.ep_name == CPU
                   for node in graph.get_nodes()})


def needs_lengths(model: Model, batch: Batch) -> bool:
    """Whether the graph reads the lengths: the masked recurrent ops, and attention with a
    padding mask."""
    return batch.lengths is not None and any(
        isinstance(node, (ir.LSTM, ir.MeanOverTime))
        or (isinstance(node, ir.SelfAttention) and node.padding)
        for node in ir.all_nodes(model))


def graph_inputs(model: Model, batch: Batch) -> dict[str, np.ndarray]:
    """The graph's inputs for one batch as contiguous host arrays, keyed by input name."""
    inputs = {INPUT: np.ascontiguousarray(batch.x)}
    if needs_lengths(model, batch):
        inputs[LENGTHS] = np.ascontiguousarray(batch.lengths, dtype=np.int32)
    return inputs


def input_signature(inputs: dict[str, np.ndarray]) -> tuple:
    """What a static-shape graph is built for: each input's name, shape and type."""
    return tuple((name, array.shape, array.dtype.str) for name, array in inputs.items())


# The numpy type of a session's output type (keep_io_types: float32 in every variant).
OUTPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


@dataclass
class BoundBatch:
    """One batch resident on the device and bound to the session that runs it. The inputs
    are copied to the device once, when bound; the output is bound to the device, so ORT
    allocates it from its arena and nothing is copied back inside a timed run.

    ``fixed`` (CUDA graphs): inputs and output at device buffers allocated once
    (``OrtValue.ortvalue_from_shape_and_type``, the output at the session's static output
    shape), so every run reads and writes the same addresses; the inputs are the buffers'
    own memory on the CPU too, never the caller's arrays."""

    session: ort.InferenceSession
    binding: ort.IOBinding
    device_inputs: dict[str, ort.OrtValue]

    @classmethod
    def place(cls, session: ort.InferenceSession, inputs: dict[str, np.ndarray],
              device: str, fixed: bool = False) -> BoundBatch:
        if fixed:
            device_inputs = {name: ort.OrtValue.ortvalue_from_shape_and_type(
                array.shape, array.dtype, device, 0) for name, array in inputs.items()}
            for name, array in inputs.items():
                device_inputs[name].update_inplace(array)
        else:
            device_inputs = {name: ort.OrtValue.ortvalue_from_numpy(array, device, 0)
                             for name, array in inputs.items()}
        binding = session.io_binding()
        for name, value in device_inputs.items():
            binding.bind_ortvalue_input(name, value)
        if fixed:
            binding.bind_ortvalue_output(OUTPUT, fixed_output(session, device))
        else:
            binding.bind_output(OUTPUT, device, 0)
        return cls(session, binding, device_inputs)

    def run(self, run_options: ort.RunOptions) -> ort.IOBinding:
        self.session.run_with_iobinding(self.binding, run_options)
        return self.binding


def fixed_output(session: ort.InferenceSession, device: str) -> ort.OrtValue:
    """A device buffer for the session's output, of its static shape and type."""
    (output,) = (value for value in session.get_outputs() if value.name == OUTPUT)
    if not all(isinstance(dim, int) for dim in output.shape) or output.type not in OUTPUT_TYPES:
        raise Unsupported(f"a fixed output buffer needs a static shape and a float type; the "
                          f"graph's output is {output.type} {output.shape}")
    return ort.OrtValue.ortvalue_from_shape_and_type(output.shape, OUTPUT_TYPES[output.type],
                                                     device, 0)


class OrtPrepared(Prepared):
    def __init__(self, adapter: OrtAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.on_gpu = adapter.config.device == "gpu"
        self.device = "cuda" if self.on_gpu else "cpu"
        # Kept to build more sessions of the same graph, options and providers: one per
        # input shape of an epoch, and a profiled one.
        self.model, self.weights = model, weights
        self.config, self.variant, self.precision = adapter.config, variant, case.precision
        self.cuda_graph = VARIANT_SETTINGS[variant].cuda_graph
        # What the transformer optimizer did (ort_fused), from the first session's graph.
        self.fused: FusedGraph | None = None
        self.providers = [(CUDA, cuda_provider_options(variant, case.precision)), CPU] \
            if self.on_gpu else [CPU]
        self.inputs = graph_inputs(model, batch)
        self.session = self.new_session(self.inputs)
        if self.on_gpu and CUDA not in self.session.get_providers():
            raise DeviceUnavailable("onnxruntime created no CUDA execution provider")
        # The batch goes to the device once, here; the forward step reads it in place.
        self.host_x = self.inputs[INPUT]
        self.bound = BoundBatch.place(self.session, self.inputs, self.device, self.cuda_graph)
        self.binding, self.device_inputs = self.bound.binding, self.bound.device_inputs
        self.run_options = ort.RunOptions()
        self.epoch: list[BoundBatch] = []
        self.serving: BoundBatch | None = None   # made by the first serve
        self.extra = {
            "providers": self.session.get_providers(),
            "graph_optimization": VARIANT_SETTINGS[variant].optimization.name,
            "execution_mode": "ORT_SEQUENTIAL",
            "intra_op_threads": adapter.config.threads,
            "inter_op_threads": adapter.config.interop_threads,
        }
        if has_attention(model):
            self.extra["attention"] = (
                f"{FUSED_ATTENTION if self.fused else ATTENTION}, "
                f"{VARIANT_SETTINGS[variant].optimization.name}")
        if self.fused is not None:
            # The row names the fusions that happened and those that did not.
            self.extra["transformer_optimizer"] = {
                "model_type": self.fused.model_type, "fusions": self.fused.fusions,
                "written_by_builder": self.fused.written,
                "not_fused": list(self.fused.not_fused) or None,
                "float16": self.fused.float16}
        if self.on_gpu:
            applied = self.session.get_provider_options().get(CUDA, {})
            self.extra["cuda_provider_options"] = {
                key: applied.get(key) for key in ("cudnn_conv_algo_search", "use_tf32",
                                                  "enable_cuda_graph")}
            self.extra["nodes_on_cpu"] = nodes_on_cpu(self.session)
            self.extra["peak_memory_note"] = NO_GPU_PEAK

    def new_session(self, inputs: dict[str, np.ndarray],
                    options: ort.SessionOptions | None = None) -> ort.InferenceSession:
        """A session of the graph built for these inputs' shapes, with this case's options
        (or ``options``, made by ``session_options``) and providers."""
        fused = VARIANT_SETTINGS[self.variant].transformer_optimizer
        proto = build(self.model, self.weights, inputs[INPUT].shape, LENGTHS in inputs,
                      fused_attention=fused)
        if fused:
            graph = optimise_transformer(self.model, proto, self.precision == "fp16")
            self.fused = self.fused or graph
            proto = graph.proto
        elif self.precision == "fp16":
            proto = float16_graph(proto)
        try:
            return ort.InferenceSession(proto.SerializeToString(),
                                        options if options is not None
                                        else session_options(self.config, self.variant),
                                        providers=self.providers)
        except Exception as error:
            # ORT refuses graph capture where a node runs outside the CUDA EP (its message
            # names "graph capture" or "CUDA Graph"): a property of this model's graph.
            text = " ".join(str(error).split())
            if self.cuda_graph and ("graph capture" in text.lower() or "cuda graph" in text.lower()):
                raise Unsupported(f"ONNX Runtime cannot capture this graph: {text[:300]}") from None
            raise

    # --- the computations ---------------------------------------------------------
    def _forward(self) -> ort.IOBinding:
        return self.bound.run(self.run_options)

    # --- the step hooks (models/measures.py) ----------------------------------------
    def step_forward(self) -> Callable[[], Any]:
        return self._forward

    def step_gradient(self) -> Callable[[], Any]:
        raise Unsupported(NO_GRADIENTS)

    def step_train(self) -> Callable[[], Any]:
        raise Unsupported(NO_GRADIENTS)

    def step_grad_input(self) -> Callable[[], Any]:
        raise Unsupported(NO_GRADIENTS)

    def step_grad_weight(self) -> Callable[[], Any]:
        raise Unsupported(NO_GRADIENTS)

    def step_transfer(self) -> Callable[[], Any]:
        require_device_memory(self.on_gpu)
        return self._transfer

    def _transfer(self) -> None:
        # A copy into the already allocated device input: the copy, not an allocation.
        self.device_inputs[INPUT].update_inplace(self.host_x)

    def step_transfer_pinned(self) -> Callable[[], Any]:
        raise Unsupported("not measured for ONNX Runtime: the adapter binds its inputs "
                          "from numpy arrays (pageable host memory); 'transfer' times "
                          "that copy")

    def epoch_step(self, measure: str, batches: list[Batch]) -> Callable[[], Any]:
        """Forward over every batch in order, each resident on the device and bound to a
        session of its input shape (Bahrampour et al. 2016, 4.4).

        One session per distinct shape rather than one graph with a dynamic time axis: the
        epoch then runs the very graph the forward measure runs (static shapes that ORT
        folds and plans memory for, at the same optimisation level), and an IMDB epoch has
        few distinct padded lengths (14 in 124 batches of 16). An epoch of one shape reuses
        the forward session; every batch has its own binding, device inputs and output, so
        no two batches share anything a run writes."""
        if measure == "gradient":
            raise Unsupported(NO_GRADIENTS)
        if measure != "forward":
            raise Unsupported(f"unknown measure '{measure}'")
        if self.cuda_graph:
            raise Unsupported(f"{ONE_BOUND_SET}: an epoch binds a buffer set per batch")
        if not batches:
            raise ValueError("an epoch needs at least one batch")
        self.epoch = []   # a previous epoch's device memory goes first
        all_inputs = [graph_inputs(self.model, batch) for batch in batches]
        options = None
        sessions = {input_signature(self.inputs): self.session}
        if {input_signature(inputs) for inputs in all_inputs} != set(sessions):
            # Several sessions run in turn, each with its own intra-op pool, whose threads
            # spin after a run by default and so take the cores from the next session's
            # run (a 2-thread LSTM epoch on 2 cores ran 4x slower than a 1-thread one).
            # Spinning is off for every session of such an epoch, the first one included.
            options = session_options(self.config, self.variant)
            options.add_session_config_entry(ALLOW_SPINNING, "0")
            sessions = {}
        for inputs in all_inputs:
            signature = input_signature(inputs)
            if signature not in sessions:
                sessions[signature] = self.new_session(inputs, options)
            self.epoch.append(BoundBatch.place(sessions[signature], inputs, self.device))
        epoch, run_options = self.epoch, self.run_options

        def run_epoch() -> ort.IOBinding:
            for bound in epoch:
                bound.run(run_options)
            return epoch[-1].binding

        return run_epoch

    def profile(self, measure: str, iterations: int) -> Profile:
        """ONNX Runtime's own profiler (profile.py), in a session of its own so that the
        timed session stays unprofiled; same graph, options and providers otherwise."""
        if measure == "gradient":
            raise Unsupported(NO_GRADIENTS)
        if measure != "forward":
            raise Unsupported(f"unknown measure '{measure}'")
        return profile_steps(self._profiled_batch, self.run_options, self.sync, measure,
                             iterations, self.on_gpu)

    def _profiled_batch(self, file_prefix: str) -> BoundBatch:
        """The batch bound to a new session of this case that profiles into files named
        from ``file_prefix``."""
        options = session_options(self.config, self.variant)
        options.enable_profiling = True
        options.profile_file_prefix = file_prefix
        return BoundBatch.place(self.new_session(self.inputs, options), self.inputs,
                                self.device, self.cuda_graph)

    def sync(self, handle: Any) -> None:
        if self.on_gpu:
            binding = handle if isinstance(handle, ort.IOBinding) else self.binding
            binding.synchronize_outputs()
            binding.synchronize_inputs()

    def reset_peak_memory(self) -> None:
        if not self.on_gpu:
            reset_peak_rss()

    def peak_memory(self) -> Memory:
        if self.on_gpu:
            return Memory(None, "allocator")
        return peak_rss()

    def forward_output(self) -> np.ndarray:
        self._forward()
        return np.asarray(self.binding.copy_outputs_to_cpu()[0])

    def serve(self, batch: Batch) -> np.ndarray:
        # The host arrays copied into device inputs of serving's own (update_inplace: a
        # copy, no allocation), one run of the session, the output copied back to the host.
        # Serving's own binding: on the CPU an OrtValue made from a numpy array wraps that
        # array's memory, so writing into the forward's inputs would write into the
        # caller's batch (seen: the query set's first samples overwritten). The session's
        # graph has static shapes: a batch of other shapes is refused.
        inputs = graph_inputs(self.model, batch)
        if input_signature(inputs) != input_signature(self.inputs):
            raise ValueError(f"serve: inputs {input_signature(inputs)} are not the shapes the "
                             f"session was built for {input_signature(self.inputs)}")
        if self.serving is None:
            # ort_cuda_graph: the one bound set the session's graph is captured with
            # (its inputs are buffers of their own, so the copy writes no caller's array).
            self.serving = self.bound if self.cuda_graph else BoundBatch.place(
                self.session, {name: array.copy() for name, array in self.inputs.items()},
                self.device)
        for name, array in inputs.items():
            self.serving.device_inputs[name].update_inplace(array)
        self.serving.run(self.run_options)
        return np.array(self.serving.binding.copy_outputs_to_cpu()[0])

    def generator(self, max_length: int) -> Generator:
        """Greedy generation with a key/value cache (generate.py): the prefill and decode
        graphs of this case's model through this case's options, providers and, for
        ort_fused, the transformer optimizer (com.microsoft Attention with past/present;
        fp16 converts the cache too, so it stays float16 between steps, logits float32)."""
        if self.cuda_graph:
            raise Unsupported(f"{ONE_BOUND_SET}; a decode step's cache grows by a position "
                              "each step, so its shapes and buffers change")
        tables = [node.positions for node in ir.all_nodes(self.model)
                  if isinstance(node, ir.PositionEmbedding)]
        if tables and max_length > min(tables):
            raise Unsupported(f"a cache of {max_length} positions is beyond {self.model.name}'s "
                              f"{min(tables)} positions")
        fused = VARIANT_SETTINGS[self.variant].transformer_optimizer
        sessions = []
        for decode in (False, True):
            proto = build_generation(self.model, self.weights, decode, fused)
            if fused:
                proto = optimise_transformer(self.model, proto, self.precision == "fp16",
                                             keep_io_types=[LOGITS]).proto
            sessions.append(ort.InferenceSession(proto.SerializeToString(),
                                                 session_options(self.config, self.variant),
                                                 providers=self.providers))
        cache = ("com.microsoft Attention's past/present" if fused
                 else "Concat of the past and the new keys and values")
        self.extra["generation"] = (f"prefill and decode sessions, {cache}, ArgMax in the graph, "
                                    "the cache bound from step to step on the device (IOBinding)")
        return OrtGenerator(GenerationGraphs(*sessions, self.device), max_length)

    def output_summary(self, examples: int) -> OutputSummary:
        """A large output is reduced where the session left it, by a second graph
        (summary.py); the head and four numbers per example reach the host. A small one is
        fetched whole."""
        self._forward()
        self.sync(self.binding)
        output = self.binding.get_outputs()[0]
        if int(np.prod(output.shape())) < DEVICE_SUMMARY_VALUES:
            return OutputSummary.of(np.asarray(self.binding.copy_outputs_to_cpu()[0]), examples)
        return summarise_bound_output(output, examples, self.on_gpu, self.config)

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        raise Unsupported(NO_GRADIENTS)

    def close(self) -> None:
        del self.epoch, self.serving, self.bound, self.binding, self.device_inputs, self.session


class OrtAdapter(Adapter):
    name = "ort"
    variants = {
        "ort_all": "InferenceSession, ORT_ENABLE_ALL graph optimisation, ORT_SEQUENTIAL, "
                   "IOBinding with device-resident input and output",
        "ort_extended": "ORT_ENABLE_EXTENDED graph optimisation (fusions such as Conv+ReLU, "
                        "no layout optimisations), ORT_SEQUENTIAL, IOBinding",
        "ort_basic": "ORT_ENABLE_BASIC graph optimisation (constant folding, batch norm "
                     "folded into convolutions), ORT_SEQUENTIAL, IOBinding",
        "ort_disabled": "ORT_DISABLE_ALL: no graph optimisation, ORT_SEQUENTIAL, IOBinding",
        "cudnn_heuristic": "as ort_all, cuDNN conv algorithm search HEURISTIC "
                           "(cudnnGetConvolutionForwardAlgorithm_v7; GPU only)",
        "cudnn_default_algo": "as ort_all, cuDNN conv algorithm search DEFAULT: always "
                              "IMPLICIT_PRECOMP_GEMM, no search (GPU only)",
        "ort_fused": "transformers: com.microsoft Attention and onnxruntime.transformers' "
                     "optimizer (SkipLayerNormalization, GELU fusions; fp16 by its float16 "
                     "conversion, inputs and outputs float32), then as ort_all, IOBinding",
        "ort_cuda_graph": "as ort_all, the CUDA EP's enable_cuda_graph: one CUDA graph per "
                          "session (batch size) replayed over fixed device buffers, inputs "
                          "copied in place (IOBinding); fp16 by ONNX Runtime's float16 "
                          "conversion, inputs and outputs float32 (GPU only)",
    }
    precisions = ("fp32", "tf32", "bf16", "fp16")

    def __init__(self, config: RunConfig):
        super().__init__(config)
        # Errors only on ORT's process-wide logger too. Some warnings are logged there, not
        # through the session's logger (log_severity_level below): onnxruntime-gpu 1.31's
        # "No registered plugin EP device found for 'CUDAExecutionProvider'", once per
        # session made with CUDA provider options (its bundled CUDA plugin EP registers at
        # import, and a session given options for the built-in CUDA EP looks it up first).
        ort.set_default_logger_severity(3)
        if config.device == "gpu":
            preload_cuda_libraries()
            if CUDA not in ort.get_available_providers():
                raise DeviceUnavailable(f"onnxruntime {ort.__version__} has no {CUDA} "
                                        "(install onnxruntime-gpu)")
            try:
                ort.OrtValue.ortvalue_from_numpy(np.zeros(1, np.float32), "cuda", 0)
            except Exception as error:  # the build has CUDA, the machine has no GPU
                raise DeviceUnavailable(f"onnxruntime {ort.__version__} sees no CUDA GPU: "
                                        f"{' '.join(str(error).split())[:200]}") from None

    def environment(self) -> dict[str, Any]:
        on_gpu = self.config.device == "gpu"
        from onnxruntime.capi import build_and_package_info as build_info
        return {
            "framework_version": ort.__version__,
            "gpu_model": gpu_name() if on_gpu else None,
            "cuda": getattr(build_info, "cuda_version", None) if on_gpu else None,
            "cudnn": getattr(build_info, "cudnn_version", None) if on_gpu else None,
        }

    def describe(self, case: CaseConfig) -> str:
        """The variant's text, then what the device adds: on GPU the CUDA EP options that
        decide the numbers (cuDNN algorithm search, TF32)."""
        variant = self.resolve_variant(case.variant)
        if self.config.device != "gpu":
            return f"{self.variants[variant]}; {CPU}"
        options = cuda_provider_options(variant, case.precision)
        graph = (f", enable_cuda_graph={options['enable_cuda_graph']}"
                 if "enable_cuda_graph" in options else "")
        return (f"{self.variants[variant]}; {CUDA}, cudnn_conv_algo_search="
                f"{options['cudnn_conv_algo_search']}, use_tf32={options['use_tf32']}{graph}")

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        on_gpu = self.config.device == "gpu"
        check_precision(case.precision, on_gpu, variant)
        if VARIANT_SETTINGS[variant].gpu_only and not on_gpu:
            raise Unsupported(NO_CUDA_GRAPH_ON_CPU if VARIANT_SETTINGS[variant].cuda_graph
                              else "cuDNN exists on GPU only")
        if VARIANT_SETTINGS[variant].transformer_optimizer and not has_attention(model):
            raise Unsupported(NOT_A_TRANSFORMER)
        return OrtPrepared(self, model, weights, batch, case, variant)

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, MemoryError):
            return True
        text = str(error)
        # CUDA: "CUDA failure 2: out of memory", cuDNN/cuBLAS "*_STATUS_ALLOC_FAILED"; the
        # arenas (CPU and CUDA BFC): "Failed to allocate memory for requested buffer";
        # host allocations that throw std::bad_alloc: "bad allocation" / "std::bad_alloc".
        return any(marker in text for marker in (
            "out of memory", "Failed to allocate memory", "STATUS_ALLOC_FAILED",
            "bad_alloc", "bad allocation"))
