"""ONNX Runtime adapter: the IR as an ONNX graph (network.py) in an InferenceSession with
full graph optimisation and IOBinding (device-resident input and output), ONNX Runtime's
standard fast path; lower optimisation levels and cuDNN algorithm searches as variants.

ONNX Runtime's training API ships in other packages (onnxruntime-training), so this
adapter times forward and the host-to-device copy only.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from adapters.base import Adapter, CaseConfig, DeviceUnavailable, Memory, Prepared, RunConfig, Unsupported
from adapters.memory import peak_rss, reset_peak_rss
from adapters.ort.network import INPUT, LENGTHS, OUTPUT, build
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
    algorithm search (ORT's default is EXHAUSTIVE: CUDA EP docs, cudnn_conv_algo_search)."""

    optimization: ort.GraphOptimizationLevel
    conv_algo_search: str = "EXHAUSTIVE"
    gpu_only: bool = False


VARIANT_SETTINGS = {
    "ort_all": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    "ort_extended": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    "ort_basic": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    "ort_disabled": VariantSettings(ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    "cudnn_heuristic": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                       "HEURISTIC", gpu_only=True),
    "cudnn_default_algo": VariantSettings(ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                          "DEFAULT", gpu_only=True),
}


def check_precision(precision: str, on_gpu: bool) -> None:
    if precision == "tf32" and not on_gpu:
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    if precision == "bf16":
        raise Unsupported("ONNX Runtime has no automatic mixed precision: bf16 would need a "
                          "graph rewritten to bf16 tensors, not the bf16-compute/fp32-weights "
                          "mode the other frameworks run")


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
    return {"device_id": "0",
            "cudnn_conv_algo_search": VARIANT_SETTINGS[variant].conv_algo_search,
            "use_tf32": "1" if precision == "tf32" else "0"}


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
    return batch.lengths is not None and any(
        isinstance(node, (ir.LSTM, ir.MeanOverTime)) for node in ir.all_nodes(model))


class OrtPrepared(Prepared):
    def __init__(self, adapter: OrtAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.on_gpu = adapter.config.device == "gpu"
        self.device = "cuda" if self.on_gpu else "cpu"
        with_lengths = needs_lengths(model, batch)
        proto = build(model, weights, batch.x.shape, with_lengths)
        providers = [(CUDA, cuda_provider_options(variant, case.precision)), CPU] \
            if self.on_gpu else [CPU]
        self.session = ort.InferenceSession(proto.SerializeToString(),
                                            session_options(adapter.config, variant),
                                            providers=providers)
        del proto
        if self.on_gpu and CUDA not in self.session.get_providers():
            raise DeviceUnavailable("onnxruntime created no CUDA execution provider")
        # The batch goes to the device once, here; the forward step reads it in place.
        self.host_x = np.ascontiguousarray(batch.x)
        self.inputs = {INPUT: self.host_x}
        if with_lengths:
            self.inputs[LENGTHS] = np.ascontiguousarray(batch.lengths, dtype=np.int32)
        self.device_inputs = {name: ort.OrtValue.ortvalue_from_numpy(array, self.device, 0)
                              for name, array in self.inputs.items()}
        self.binding = self.session.io_binding()
        for name, value in self.device_inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        # Bound to the device: ORT allocates the output from its arena, and nothing is
        # copied back inside the timed step.
        self.binding.bind_output(OUTPUT, self.device, 0)
        self.run_options = ort.RunOptions()
        self.extra = {
            "providers": self.session.get_providers(),
            "graph_optimization": VARIANT_SETTINGS[variant].optimization.name,
            "execution_mode": "ORT_SEQUENTIAL",
            "intra_op_threads": adapter.config.threads,
            "inter_op_threads": adapter.config.interop_threads,
        }
        if self.on_gpu:
            applied = self.session.get_provider_options().get(CUDA, {})
            self.extra["cuda_provider_options"] = {
                key: applied.get(key) for key in ("cudnn_conv_algo_search", "use_tf32")}
            self.extra["nodes_on_cpu"] = nodes_on_cpu(self.session)
            self.extra["peak_memory_note"] = NO_GPU_PEAK

    # --- the computations ---------------------------------------------------------
    def _forward(self) -> None:
        self.session.run_with_iobinding(self.binding, self.run_options)

    def _transfer(self) -> None:
        # A copy into the already allocated device input: the copy, not an allocation.
        self.device_inputs[INPUT].update_inplace(self.host_x)

    def step(self, measure: str) -> Callable[[], Any]:
        if measure == "forward":
            return self._forward
        if measure in ("gradient", "grad_input", "grad_weight"):
            raise Unsupported(NO_GRADIENTS)
        if measure == "transfer":
            if not self.on_gpu:
                raise Unsupported("host and device are the same on cpu")
            return self._transfer
        raise Unsupported(f"unknown measure '{measure}'")

    def sync(self, handle: Any) -> None:
        if self.on_gpu:
            self.binding.synchronize_outputs()
            self.binding.synchronize_inputs()

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

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        raise Unsupported(NO_GRADIENTS)

    def close(self) -> None:
        del self.binding, self.device_inputs, self.session


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
    }

    def __init__(self, config: RunConfig):
        super().__init__(config)
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
        return (f"{self.variants[variant]}; {CUDA}, cudnn_conv_algo_search="
                f"{options['cudnn_conv_algo_search']}, use_tf32={options['use_tf32']}")

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        on_gpu = self.config.device == "gpu"
        check_precision(case.precision, on_gpu)
        if VARIANT_SETTINGS[variant].gpu_only and not on_gpu:
            raise Unsupported("cuDNN exists on GPU only")
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
