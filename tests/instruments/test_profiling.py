"""Layer-type classification of profiler names, across the frameworks' naming schemes."""

import pytest

from suites.instruments.profiling import (
    LAYER_TYPES,
    device_timeline,
    is_layout_transpose,
    layer_type,
    summarise,
)


@pytest.mark.parametrize("name, kind", [
    ("aten::cudnn_convolution", "conv"),
    ("aten::convolution_backward", "conv"),
    ("aten::mkldnn_convolution", "conv"),
    ("Conv2DBackpropFilter", "conv"),
    ("FusedConv", "conv"),
    ("convolution.3", "conv"),
    ("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", "conv"),
    ("cudnn::engines_precompiled::nchwToNhwcKernel", "other"),
    ("aten::max_pool2d_with_indices", "pool"),
    ("aten::max_pool2d_with_indices_backward", "pool"),
    ("MaxPool", "pool"),
    ("reduce-window.1", "pool"),
    ("aten::relu", "relu"),
    ("aten::threshold_backward", "relu"),
    ("Relu", "relu"),
    ("aten::addmm", "fc"),
    ("aten::mm", "fc"),
    ("Gemm", "fc"),
    ("MatMul", "fc"),
    ("dot.4", "fc"),
    ("ampere_sgemm_128x64_tn", "fc"),
    ("aten::cat", "concat"),
    ("Concat", "concat"),
    ("ConcatV2", "concat"),
    ("concatenate.2", "concat"),
    ("aten::native_batch_norm", "norm"),
    ("FusedBatchNormV3", "norm"),
    ("LRN", "norm"),
    ("LRNGrad", "norm"),
    ("lrnForward_evenC", "norm"),
    ("bn_fw_inf_1C11_kernel_NCHW", "norm"),
    ("aten::add_", "other"),
    ("loop_fusion", "other"),
])
def test_layer_type(name, kind):
    assert layer_type(name) == kind


def test_summarise_is_per_iteration_and_ranks_kernels():
    profile = summarise("tool", "gradient", 2,
                        ops=[("aten::conv2d", 8.0, 2), ("aten::relu", 2.0, 2), ("aten::cat", 1.0, 2)],
                        kernels=[("k_small", 1.0, 2), ("k_big", 6.0, 4)])
    assert profile.by_layer_type == {**dict.fromkeys(LAYER_TYPES, 0.0),
                                     "conv": 4.0, "relu": 1.0, "concat": 0.5}
    assert profile.total_ms == 5.5
    assert [k.name for k in profile.top_kernels] == ["k_big", "k_small"]
    assert profile.top_kernels[0].ms == 3.0 and profile.top_kernels[0].calls == 2.0
    assert profile.kernel_level


def test_summarise_ranks_operations_without_kernels():
    profile = summarise("tool", "forward", 1, ops=[("Relu", 1.0, 1), ("Conv", 3.0, 1)])
    assert [k.name for k in profile.top_kernels] == ["Conv", "Relu"]
    assert not profile.kernel_level


@pytest.mark.parametrize("kernel, op, transpose", [
    ("cudnn::engines_precompiled::nchwToNhwcKernel", "Conv2D", True),
    ("void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<...>", "Transpose", True),
    ("void tensorflow::functor::ShuffleInTensor3Simple<float, 2, 1, 0>", "", True),
    ("redzone_checker", "conv1/Conv2D-0-TransposeNHWCToNCHW-LayoutOptimizer", True),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nchw", "Conv2D", False),
    ("bn_fw_inf_1C11_kernel_NCHW", "FusedBatchNormV3", False),
])
def test_layout_transposes_are_recognised_by_kernel_or_op(kernel, op, transpose):
    assert is_layout_transpose(kernel, op) is transpose


def test_device_timeline_counts_overlaps_once_and_gaps_as_idle():
    """Two streams: a kernel on the second overlaps the first's (counted once in busy,
    twice in kernel time); a 2 ms gap before the last kernel is idle. Two iterations."""
    kernels = [(0.0, 3.0, "fprop", "Conv2D"), (2.0, 4.0, "nchwToNhwcKernel", "Conv2D"),
               (4.0, 5.0, "relu", "Relu"), (7.0, 8.0, "gemm", "MatMul")]
    timeline = device_timeline(kernels, iterations=2)
    assert timeline == {"span_ms": 4.0, "busy_ms": 3.0, "idle_ms": 1.0, "kernel_ms": 3.5,
                        "transpose_ms": 1.0, "kernels": 2.0}
    with pytest.raises(ValueError):
        device_timeline([], 1)
