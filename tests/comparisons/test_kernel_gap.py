"""The measured cause of a gap between dlbench and a twin (comparisons/kernel_gap.py): the
trace reduction, its table, the transformer kinds and dlbench-minus-twin, on recorded kernels
and a stand-in CUPTI (tests/fake_cupti.py), so nothing here needs a GPU or a framework."""

from __future__ import annotations

import argparse
import json

import pytest

from comparisons import kernel_gap
from suites.instruments.kernel_trace import KernelRecord, KernelTrace
from tests.fake_cupti import FakeCupti, install

MS = 1_000_000  # ns


def two_traced_iterations() -> KernelTrace:
    """Two iterations 5 ms apart: a convolution (2 ms), a layout transpose (0.5 ms), a
    max pool (0.5 ms) and an LRN (0.2 ms) in sequence on one stream, plus, in the first
    iteration only, a GEMM (0.5 ms) on another stream inside the convolution's time."""
    records = []
    for start in (0, 5 * MS):
        for name, begin, end in (
                ("sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_kernel_cudnn",
                 0, 2 * MS),
                ("void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<unsigned "
                 "int, 256, 32, 32, false>(unsigned int const*, int, int, int, unsigned int*)",
                 2 * MS, 2.5 * MS),
                ("void tensorflow::functor::MaxPoolForwardNHWC<float>(int, float const*)",
                 2.5 * MS, 3 * MS),
                ("void tensorflow::LRN_kernel<float>(float const*, float*)", 3 * MS,
                 3.2 * MS)):
            records.append(KernelRecord(name, int(start + begin), int(start + end)))
    records.append(KernelRecord("ampere_sgemm_128x64_nn", 1 * MS, int(1.5 * MS), stream_id=1))
    return KernelTrace(tuple(records), iterations=2, wall_ms=10.0)


def test_trace_summary_is_per_iteration_and_splits_the_kernel_time():
    summary = kernel_gap.trace_summary(two_traced_iterations(), "forward", timed_ms=4.0)
    assert summary["iterations"] == 2
    assert summary["wall_ms"] == pytest.approx(5.0)
    # Busy merges the overlapping GEMM; the sum counts it.
    assert summary["kernel_busy_ms"] == pytest.approx(3.2)
    assert summary["kernel_sum_ms"] == pytest.approx(3.45)
    assert summary["outside_kernels_ms"] == pytest.approx(1.8)
    assert summary["transpose_ms"] == pytest.approx(0.5)
    assert summary["kernels"] == pytest.approx(4.5)
    assert summary["by_layer_type"] == pytest.approx(
        {"conv": 2.0, "pool": 0.5, "relu": 0.0, "fc": 0.25, "concat": 0.0, "norm": 0.2,
         "other": 0.5})
    assert summary["conv_families"] == pytest.approx({"implicit GEMM": 2.0})
    top = summary["top_kernels"]
    assert len(top) == 5 and top[0]["name"].startswith("sm90_xmma_fprop")
    assert top[0]["ms"] == pytest.approx(2.0) and top[0]["calls"] == pytest.approx(1.0)
    assert summary["kernel_check"]["kernel_busy_ms"] == pytest.approx(3.2)
    json.dumps(summary)   # goes into the result's JSON as it is


def test_trace_table_is_one_row_per_side_and_their_top_kernels():
    summary = kernel_gap.trace_summary(two_traced_iterations(), "forward")
    lines = kernel_gap.format_trace("forward", {
        "dlbench": summary, "tf_keras": {"failed": "RuntimeError: CUPTI refused"}})
    assert lines[0].startswith("  trace forward, ms/it. (2 it.)") and "outside" in lines[0]
    assert lines[1].split()[:5] == ["dlbench", "5.000", "3.200", "1.800", "0.500"]
    assert lines[1].endswith("implicit GEMM 100%")
    assert "tf_keras" in lines[2] and "trace failed: RuntimeError: CUPTI refused" in lines[2]
    assert lines[3].startswith("    top dlbench: 2.000 sm90_xmma_fprop_implicit_gemm_f32f32")
    assert "| 0.500 tensorflow::functor::SwapDimension1And2In... |" in lines[3]
    assert lines[3].count("|") == kernel_gap.TRACE_PRINTED_TOP - 1
    assert len(lines) == 4


@pytest.mark.parametrize(("name", "short"), [
    ("void tensorflow::functor::MaxPoolForwardNHWC<float>(int, float const*)",
     "tensorflow::functor::MaxPoolForwardNHWC"),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)",
     "cudnn::winograd_nonfused::winogradForward..."),
])
def test_short_kernel_name(name, short):
    assert kernel_gap.short_kernel_name(name) == short


def test_trace_side_warms_up_then_traces_under_cupti(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    runs = []

    def run():
        runs.append(1)
        fake.launch("sm90_xmma_fprop_implicit_gemm_f32f32_kernel__5x_cudnn", 400_000)
        fake.idle(100_000)

    summary = kernel_gap.trace_side(run, lambda handle: None, 3, "test", "forward",
                                          timed_ms=0.5)
    assert len(runs) == 2 + 3    # warm-up, then the traced iterations
    assert summary["iterations"] == 3
    assert summary["wall_ms"] == pytest.approx(0.5)
    assert summary["kernel_busy_ms"] == pytest.approx(0.4)
    assert summary["outside_kernels_ms"] == pytest.approx(0.1)
    assert summary["by_layer_type"]["conv"] == pytest.approx(0.4)


def test_trace_side_records_a_tracer_failure_instead_of_raising(monkeypatch):
    fake = FakeCupti()
    fake.refuse = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    install(monkeypatch, fake)
    summary = kernel_gap.trace_side(lambda: None, lambda handle: None, 2, "test",
                                          "gradient")
    assert summary.keys() == {"failed"}
    assert "MULTIPLE_SUBSCRIBERS" in summary["failed"]


def test_trace_is_skipped_on_a_cpu_with_the_reason():
    assert "--device gpu" in kernel_gap.tracer_unavailable("cpu")


# --- transformers ----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "kind"), [
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0",
     "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(...)",
     "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)",
     "attention"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
    ("triton_tem_fused_addmm_3", "gemm"),
    ("gemm_fusion_dot_12", "gemm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(...)",
     "layer norm"),
    ("triton_red_fused_native_layer_norm_7", "layer norm"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(...)", "softmax"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...AdamFunctor...>",
     "optimizer"),
    ("void at::native::elementwise_kernel<128, 4, ...direct_copy_kernel_cuda...>", "copy/transpose"),
    ("wrapped_transpose_3", "copy/transpose"),
    ("triton_poi_fused_add_gelu_5", kernel_gap.OTHER_KIND),
    ("loop_multiply_fusion_2", kernel_gap.OTHER_KIND),
])
def test_transformer_kernel_kinds(name, kind):
    assert kernel_gap.transformer_kind(name) == kind


def transformer_step(gemm_ns: int, attention_ns: int, gap_ns: int, iterations: int = 2,
                     start: int = 0) -> KernelTrace:
    """``iterations`` steps of a GEMM, an attention kernel and a LayerNorm (0.1 ms), each
    step followed by ``gap_ns`` of host time in which the GPU waits."""
    records, at = [], start
    for _ in range(iterations):
        for name, ns in (("nvjet_tst_128x256_64x4_1x2_h_bz_TNT", gemm_ns),
                         ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_kernel0_0",
                          attention_ns),
                         ("vectorized_layer_norm_kernel", MS // 10)):
            records.append(KernelRecord(name, at, at + ns))
            at += ns
        at += gap_ns
    return KernelTrace(tuple(records), iterations, wall_ms=(at - start) / MS)


def test_gap_cause_names_the_kinds_that_differ_most_and_the_time_outside_kernels():
    ours = kernel_gap.trace_summary(transformer_step(3 * MS, MS, MS // 2), "train_step",
                                    by_kind=kernel_gap.by_transformer_kind)
    theirs = kernel_gap.trace_summary(transformer_step(2 * MS, MS, MS // 5), "train_step",
                                      by_kind=kernel_gap.by_transformer_kind)
    assert ours["by_kind"] == pytest.approx({"gemm": 3.0, "attention": 1.0, "layer norm": 0.1})
    assert ours["outside_kernels_ms"] == pytest.approx(0.5)
    cause = kernel_gap.gap_cause(ours, theirs, "hf")
    assert cause["delta_ms"] == pytest.approx({"gemm": 1.0, "outside kernels": 0.3,
                                               "attention": 0.0, "layer norm": 0.0})
    assert list(cause["delta_ms"])[:2] == ["gemm", "outside kernels"]
    assert cause["cause"].startswith("per step, dlbench minus hf: gemm +1.00 ms, "
                                     "outside kernels +0.30 ms")
    assert "traced wall 4.60 against 3.30 ms" in cause["cause"]
    json.dumps(cause)


def test_a_kind_only_one_side_runs_counts_in_full():
    ours = {"by_kind": {"gemm": 2.0, "softmax": 0.4}, "outside_kernels_ms": 0.0,
            "wall_ms": 2.4, "kernels": 3}
    theirs = {"by_kind": {"gemm": 2.0, "attention": 0.1}, "outside_kernels_ms": 0.0,
              "wall_ms": 2.1, "kernels": 2}
    delta = kernel_gap.gap_cause(ours, theirs, "keras_hub")["delta_ms"]
    assert delta == pytest.approx({"softmax": 0.4, "attention": -0.1, "gemm": 0.0,
                                   "outside kernels": 0.0})


def test_kernel_pair_traces_each_side_under_cupti_and_says_the_cause(monkeypatch):
    fake = install(monkeypatch, FakeCupti())

    def step(gemm_ns, idle_ns):
        def run():
            fake.launch("nvjet_tst_128x256_64x4_1x2_h_bz_TNT", gemm_ns)
            fake.launch("flash_fwd_kernel", MS // 2)
            fake.idle(idle_ns)
        return run

    traced = kernel_gap.kernel_pair({"dlbench": step(2 * MS, MS // 10),
                                     "hf": step(MS, MS // 10)},
                                    lambda handle: None, 4, "hf", "train_step",
                                    {"dlbench": 2.6, "hf": 1.6})
    assert traced["iterations"] == 4
    assert traced["sides"]["dlbench"]["by_kind"] == pytest.approx({"gemm": 2.0, "attention": 0.5})
    assert traced["sides"]["hf"]["wall_ms"] == pytest.approx(1.6)
    assert traced["delta_ms"]["gemm"] == pytest.approx(1.0)
    assert kernel_gap.kernel_said(traced) == traced["cause"]
    assert traced["cause"].startswith("per step, dlbench minus hf: gemm +1.00 ms")


def test_kernel_pair_keeps_a_failed_side_and_gives_no_cause(monkeypatch):
    fake = FakeCupti()
    fake.refuse = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    install(monkeypatch, fake)
    traced = kernel_gap.kernel_pair({"dlbench": lambda: None, "hf": lambda: None},
                                    lambda handle: None, 2, "hf", "forward", {})
    assert "cause" not in traced and traced["sides"]["hf"].keys() == {"failed"}
    assert kernel_gap.kernel_said(traced).startswith("dlbench: trace failed: RuntimeError")


def test_kernel_pair_without_cupti_says_why(monkeypatch):
    from suites.instruments import kernel_trace
    monkeypatch.setattr(kernel_trace, "unavailable_reason", lambda: "no cupti-python here")
    traced = kernel_gap.kernel_pair({"dlbench": lambda: None, "hf": lambda: None},
                                    lambda handle: None, 2, "hf", "forward", {})
    assert traced == {"unavailable": "no cupti-python here"}
    assert kernel_gap.kernel_said(traced) == "no cupti-python here"


def test_kernels_option_takes_a_count_of_steps():
    assert kernel_gap.kernel_iterations("0") == 0 and kernel_gap.kernel_iterations("5") == 5
    with pytest.raises(argparse.ArgumentTypeError, match="-1: a number of steps"):
        kernel_gap.kernel_iterations("-1")
