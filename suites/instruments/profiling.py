"""Shared by the adapters' ``profile``: which layer type an operation or kernel belongs
to, and the reduction of profiler events to a ``Profile``.

Li et al. 2016 (Fig. 2) split a training iteration of AlexNet, GoogLeNet, VGG and Overfeat
into convolution, pooling, ReLU, fully connected and concat layers. Profilers name
operations differently (PyTorch ``aten::cudnn_convolution``, TensorFlow
``Conv2DBackpropFilter``, ONNX ``FusedConv``, XLA ``convolution.3``, cuDNN kernels such as
``sm90_xmma_fprop_implicit_gemm_...``), so the patterns below cover each framework's
names; what matches none (element-wise work, softmax, loss, copies, XLA fusions whose
contents the name does not tell) is "other".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from adapters.base import KernelTime, Profile

LAYER_TYPES = ("conv", "pool", "relu", "fc", "concat", "norm", "other")
TOP_KERNELS = 10
# Unprofiled runs before the profiled ones: the first compiles or traces, runs cuDNN's
# algorithm search and allocates; the second runs as every later one does.
WARMUP_RUNS = 2

# Order matters: a convolution kernel's name may contain "gemm" (implicit GEMM), so conv
# is tried before fc; "relu" inside a fused convolution's name ("FusedConv", cuDNN's
# "..._relu" epilogues) still counts as conv.
_PATTERNS = (
    # Kernel names (suites/instruments/kernel_trace.py sees only these): cuDNN's legacy
    # implicit_convolve_sgemm / fft2d_r2c_* / flip_filter / winograd kernels, cuDNN 9's
    # xmma_fprop/dgrad/wgrad engines, cutlass ..._cudnn fprop kernels. cuDNN's FFT
    # algorithm multiplies in the frequency domain with complex GEMMs (cgemm), which no
    # fp32 dense layer runs.
    ("conv", re.compile(r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|im2col|col2im|"
                        r"fft|flip_filter|cgemm")),
    ("pool", re.compile(r"pool|reduce[_-]window|select[_-]and[_-]scatter")),
    # PyTorch's CUDA ReLU runs clamp_min (forward) and threshold (backward) kernels.
    ("relu", re.compile(r"relu|threshold|clamp_min")),
    # cuBLAS: sgemm/xmma_gemm/cutlass gemm kernels, gemv, and split-K reductions.
    ("fc", re.compile(r"addmm|\bmm\b|aten::mm|matmul|gemm|gemv|linear|dense|\bdot\b|"
                      r"^dot|batchmatmul|einsum|splitkreduce")),
    ("concat", re.compile(r"\bcat\b|aten::cat|concat")),
    # "lrn" starts TensorFlow's LRNGrad and cuDNN's lrnForward kernels; "bn_" cuDNN's
    # batch-norm kernels (bn_fw_inf_...).
    ("norm", re.compile(r"batch_?norm|fusedbatchnorm|\blrn|local_?response|\bbn_|"
                        r"layer_?norm|instance_?norm")),
)


# Layout conversions between NCHW and NHWC: cuDNN's own (nchwToNhwcKernel,
# nhwcToNchwKernel), TensorFlow's Transpose kernels (SwapDimension1And2InTensor3UsingTiles,
# ShuffleInTensor3Simple, in tensorflow/core/kernels/conv_2d_gpu.h) and anything launched by
# a Transpose op (Grappler's layout optimiser names the ones it inserts
# "...-TransposeNHWCToNCHW-LayoutOptimizer"), PyTorch's and XLA's transpose/copy kernels
# named so.
_LAYOUT = re.compile(r"nchwtonhwc|nhwctonchw|transpose|swapdimension|shuffleintensor3")


def is_layout_transpose(*names: str) -> bool:
    """Whether a kernel (or the op that launched it: pass both) converts a layout."""
    return any(_LAYOUT.search(name.lower()) for name in names if name)


def device_timeline(kernels: Iterable[tuple[float, float, str, str]],
                    iterations: int) -> dict[str, float]:
    """Per iteration, from (start ms, end ms, kernel, launching op) of every device kernel
    on every stream: ``span_ms`` from the first kernel's start to the last one's end,
    ``busy_ms`` the time at least one kernel ran (overlapping kernels count once),
    ``idle_ms`` = span - busy (the device waiting: for the host to launch work, or for a
    copy or sync), ``kernel_ms`` the sum of kernel times, ``transpose_ms`` the layout
    transposes' part of it and ``kernels`` the number of kernels launched."""
    spans = sorted((start, end, is_layout_transpose(kernel, op))
                   for start, end, kernel, op in kernels)
    if not spans:
        raise ValueError("no kernels to lay on a timeline")
    busy = kernel = transposes = 0.0
    covered_until = spans[0][0]
    for start, end, transpose in spans:
        kernel += end - start
        transposes += (end - start) if transpose else 0.0
        if end > covered_until:
            busy += end - max(start, covered_until)
            covered_until = end
    span = max(end for _, end, _ in spans) - spans[0][0]
    return {"span_ms": span / iterations, "busy_ms": busy / iterations,
            "idle_ms": (span - busy) / iterations, "kernel_ms": kernel / iterations,
            "transpose_ms": transposes / iterations, "kernels": len(spans) / iterations}


def layer_type(name: str) -> str:
    """The layer type of one operation or kernel name (case-insensitive)."""
    text = name.lower()
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return "other"


def summarise(tool: str, measure: str, iterations: int,
              ops: Iterable[tuple[str, float, float]],
              kernels: Iterable[tuple[str, float, float]] | None = None,
              timeline: dict[str, float] | None = None) -> Profile:
    """``ops``: (operation name, total ms, calls) over all profiled iterations, without
    double counting (self time); ``kernels``: the same for device kernels, where the
    profiler reports them. Times become per-iteration. ``timeline``: device_timeline's,
    kept as it is."""
    by_type: dict[str, float] = defaultdict(float)
    op_totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, ms, calls in ops:
        by_type[layer_type(name)] += ms / iterations
        op_totals[name][0] += ms
        op_totals[name][1] += calls
    kernel_totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, ms, calls in kernels or ():
        kernel_totals[name][0] += ms
        kernel_totals[name][1] += calls
    ranked = kernel_totals or op_totals
    top = sorted(ranked.items(), key=lambda item: -item[1][0])[:TOP_KERNELS]
    return Profile(
        tool=tool, measure=measure, iterations=iterations,
        total_ms=sum(by_type.values()),
        by_layer_type={kind: by_type.get(kind, 0.0) for kind in LAYER_TYPES},
        top_kernels=tuple(KernelTime(name, ms / iterations, calls / iterations)
                          for name, (ms, calls) in top),
        kernel_level=bool(kernel_totals), timeline=timeline)
