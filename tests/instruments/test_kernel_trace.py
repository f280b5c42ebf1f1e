"""The kernel tracer's and the counters measure's reductions, on recorded kernel data
(tests/data/kernels: CUPTI kernel records and an ``ncu --csv --page raw`` file), and the
``unsupported`` rows where CUPTI or Nsight Compute is missing. No GPU needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from adapters.base import KernelTime, Profile, Unsupported
from suites.instruments import counters
from suites.instruments.kernel_profile import profile_fields
from suites.instruments.kernel_trace import (
    KernelRecord,
    KernelTrace,
    conv_families,
    dominant_family,
    kernel_family,
    kernel_profile,
    unavailable_reason,
)
from suites.instruments.ncu_metrics import METRICS, ncu_metric_names, parse_ncu_csv, reduce_counters
from suites.instruments.profiling import layer_type
from tests.fake_cupti import FakeActivity, FakeCupti, install

DATA = Path(__file__).resolve().parents[1] / "data" / "kernels"
# Sums of a few dozen float64 durations: exact to ~1e-15 relative; 1e-9 leaves room.
REL = 1e-9


def recorded(name: str) -> KernelTrace:
    data = json.loads((DATA / name).read_text())
    records = tuple(KernelRecord(*fields) for fields in data["records"])
    return KernelTrace(records, data["iterations"], data["wall_ms_total"])


@pytest.mark.parametrize(("name", "family"), [
    ("void fft2d_r2c_32x32<float, false, 1u, false>(float2*, float const*)", "fft"),
    ("sm80_xmma_cgemm_f32f32_f32f32_f32_nt_n_tilesize64x64x8_execute_kernel__51_cudnn", "fft"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)", "winograd"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_kernel__5x_cudnn",
     "implicit GEMM"),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false>(...)",
     "implicit GEMM"),
    ("void explicit_convolve_sgemm<float, int, 128, 6, 7, 3, 3, 5, 0, false>(...)",
     "explicit GEMM (im2col)"),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(...)", "direct"),
    ("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>(...)", "other"),
])
def test_kernel_family(name, family):
    assert kernel_family(name) == family


@pytest.mark.parametrize(("name", "kind"), [
    ("void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*)", "conv"),
    ("void flip_filter<float, float>(float*, float const*, int, int, int, int)", "conv"),
    ("ampere_sgemm_128x64_nn", "fc"),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true>(...)", "fc"),
    ("void at::native::vectorized_elementwise_kernel<4, clamp_min_scalar_kernel_impl>", "relu"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(...)", "norm"),
    ("void cudnn::pooling_fw_4d_kernel<float, float, cudnn::maxpooling_func<float>>", "pool"),
])
def test_cudnn_and_cublas_kernel_names_have_layer_types(name, kind):
    assert layer_type(name) == kind


def test_traced_profile_of_an_fft_convolution():
    trace = recorded("cupti_tf_conv_l2_forward.json")
    profile = kernel_profile(trace, "forward")
    per_iteration = sum(r.ms for r in trace.records) / trace.iterations
    assert math.isclose(profile.total_ms, per_iteration, rel_tol=REL)
    assert math.isclose(sum(profile.by_layer_type.values()), profile.total_ms, rel_tol=REL)
    # Everything but TensorFlow's bias kernel is the convolution (FFT, its complex GEMM,
    # the flipped filter); the bias kernel matches no layer type.
    bias = next(r.ms for r in trace.records if "Bias" in r.name) * 2 / trace.iterations
    assert math.isclose(profile.by_layer_type["other"], bias, rel_tol=REL)
    assert profile.by_layer_type["fc"] == 0.0
    assert profile.kernel_level and profile.top_kernels[0].name.startswith("sm80_xmma_cgemm")
    assert profile.top_kernels[0].calls == 1.0
    assert dominant_family(profile.conv_families) == "fft"
    # The kernel total stays below the host's time of the same iterations (launch gaps).
    assert profile.total_ms < profile.wall_ms
    # The tracer's timeline: the summed kernel time is the profile's total, the GPU is
    # busy at most that long (overlaps count once) and at most the span.
    timeline = profile.timeline
    assert math.isclose(timeline["kernel_ms"], profile.total_ms, rel_tol=REL)
    assert timeline["busy_ms"] <= timeline["kernel_ms"] * (1 + REL)
    assert timeline["busy_ms"] <= timeline["span_ms"] * (1 + REL)
    assert math.isclose(timeline["idle_ms"], timeline["span_ms"] - timeline["busy_ms"],
                        rel_tol=REL, abs_tol=1e-9)
    assert timeline["kernels"] == len(trace.records) / trace.iterations


def test_traced_profile_of_an_implicit_gemm_convolution():
    profile = kernel_profile(recorded("cupti_torch_conv_l2_forward.json"), "forward")
    assert dominant_family(profile.conv_families) == "implicit GEMM"
    assert set(profile.conv_families) == {"implicit GEMM"}   # the add kernel is not conv
    assert profile.by_layer_type["conv"] > 0.99 * profile.total_ms


def test_conv_families_ignore_non_convolution_kernels():
    families = conv_families([("ampere_sgemm_128x64_nn", 5.0),
                              ("void fft2d_r2c_32x32<float>", 1.0),
                              ("void fft2d_c2r_32x32<float>", 1.5)])
    assert families == {"fft": 2.5}
    assert dominant_family({}) == ""


def test_ncu_csv_is_parsed_with_units_thousands_separators_and_na():
    kernels = parse_ncu_csv((DATA / "ncu_torch_li_conv1_gradient.csv").read_text())
    assert len(kernels) == 4
    assert kernels[0].duration_ns == 4_000_000
    assert kernels[0].values["launch__shared_mem_per_block_dynamic"] == 98_304
    assert kernels[1].values["smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct"] is None


def test_counters_are_time_weighted_over_the_top_kernels_as_li_et_al():
    kernels = parse_ncu_csv((DATA / "ncu_torch_li_conv1_gradient.csv").read_text())
    reduced = reduce_counters(kernels, iterations=1, top=3)
    metrics = {key: value["value"] for key, value in reduced["metrics"].items()}
    # Weights 4, 3, 2 (ms) for fprop, dgrad, wgrad; the fill kernel is not in the top 3.
    assert math.isclose(metrics["achieved_occupancy"], (12.5 * 4 + 12 * 3 + 40 * 2) / 9, rel_tol=REL)
    assert math.isclose(metrics["ipc"], (2.1 * 4 + 1.9 * 3 + 1.2 * 2) / 9, rel_tol=REL)
    assert math.isclose(metrics["warp_execution_efficiency"],
                        (31 * 4 + 30 * 3 + 28.8 * 2) / 9 / 32 * 100, rel_tol=REL)
    assert math.isclose(metrics["gld_efficiency"], (50 * 4 + 40 * 3 + 25 * 2) / 9, rel_tol=REL)
    # dgrad has no global stores ("n/a"): left out, and the covered weight says so.
    assert math.isclose(metrics["gst_efficiency"], (100 * 4 + 12.5 * 2) / 6, rel_tol=REL)
    assert math.isclose(reduced["metrics"]["gst_efficiency"]["weight_covered"], 6 / 9, rel_tol=REL)
    assert math.isclose(metrics["shared_efficiency"], (90 * 4 + 80 * 3 + 60 * 2) / 9, rel_tol=REL)
    assert math.isclose(metrics["registers_per_thread"], (232 * 4 + 232 * 3 + 64 * 2) / 9,
                        rel_tol=REL)
    assert math.isclose(metrics["shared_memory_per_block_kb"], (96 * 4 + 96 * 3 + 12 * 2) / 9,
                        rel_tol=REL)
    assert [k["name"][:24] for k in reduced["top_kernels"]] == [
        "sm90_xmma_fprop_implicit", "sm90_xmma_dgrad_implicit", "void cudnn::cnn::wgrad_a"]
    assert math.isclose(reduced["top_share"], 9e6 / (9e6 + 1e3), rel_tol=REL)


def test_every_ncu_metric_of_the_mapping_is_requested_once():
    names = ncu_metric_names()
    assert len(names) == len(set(names))
    assert {n for m in METRICS for n in m.ncu} <= set(names)
    assert {m.key for m in METRICS} >= {"achieved_occupancy", "ipc", "warp_execution_efficiency",
                                        "gld_efficiency", "gst_efficiency", "shared_efficiency",
                                        "registers_per_thread", "shared_memory_per_block_kb"}


def test_the_ncu_command_filters_on_the_measured_range(tmp_path):
    command = counters.ncu_command("/opt/ncu", tmp_path / "c.csv", tmp_path / "job.json")
    include = command[command.index("--nvtx-include") + 1]
    assert include == f"{counters.NVTX_DOMAIN}@{counters.NVTX_RANGE}"
    assert command[command.index("--metrics") + 1].split(",") == ncu_metric_names()
    assert command[-3:-1] == ["-m", "suites.instruments.counted"]


def test_counters_are_unsupported_on_a_cpu_and_without_ncu(monkeypatch, tmp_path):
    assert "CPU" in counters.unsupported_reason("cpu")
    monkeypatch.setenv(counters.NCU_ENV, str(tmp_path / "no-ncu"))
    assert "ncu" in counters.unsupported_reason("gpu")

    class Plan:
        device = "gpu"
    with pytest.raises(Unsupported, match="ncu"):
        counters.counters_fields(Plan(), {}, "gradient")


class FakePrepared:
    """A prepared case whose framework profiler works or not; steps count themselves."""

    def __init__(self, framework_supported: bool):
        self.framework_supported = framework_supported
        self.runs = 0

    def step(self, measure):
        def run():
            self.runs += 1
        return run

    def sync(self, handle):
        pass

    def profile(self, measure, iterations):
        if not self.framework_supported:
            raise Unsupported("release builds record no CUDA kernel events")
        return Profile("fake profiler", measure, iterations, 1.0,
                       {"conv": 1.0}, (KernelTime("aten::conv", 1.0, 1.0),), False)


@pytest.mark.skipif(unavailable_reason() is None, reason="CUPTI is installed here")
def test_profile_without_cupti_keeps_the_framework_profiler_and_says_why():
    fields = profile_fields(FakePrepared(True), "gpu", "gradient", 3)
    assert fields["profile"]["tool"] == "fake profiler"
    assert "cupti" in fields["framework_profile"]["kernel_tracer"].lower()
    with pytest.raises(Unsupported, match="release builds.*CUPTI"):
        profile_fields(FakePrepared(False), "gpu", "forward", 3)


def test_profile_on_a_cpu_is_the_framework_profiler_alone():
    prepared = FakePrepared(True)
    assert profile_fields(prepared, "cpu", "gradient", 3) == {
        "profile": {"tool": "fake profiler", "measure": "gradient", "iterations": 3,
                    "total_ms": 1.0, "by_layer_type": {"conv": 1.0},
                    "top_kernels": ({"name": "aten::conv", "ms": 1.0, "calls": 1.0},),
                    "kernel_level": False, "wall_ms": None, "conv_families": {},
                    "forward_conv_families": {}, "timeline": None}}
    assert prepared.runs == 0


@pytest.fixture
def fake_cupti(monkeypatch):
    fake = FakeCupti()
    # A kernel another CUPTI client (Kineto, run earlier) left in CUPTI's buffers, with
    # its kinds still enabled: the window must discard it and switch the kinds off.
    fake.leave_profiler_state([FakeActivity(FakeCupti.ActivityKind.CONCURRENT_KERNEL,
                                            "stale_kernel_of_another_client", 1000, 3000, 999)])
    fake.duplicate_shift_ns = 0          # each kernel record delivered twice, as it was
    return install(monkeypatch, fake)


class TracedPrepared(FakePrepared):
    """A step that 'launches' one convolution kernel (0.4 ms) per run, then leaves the
    device idle for 0.1 ms (the host's launch gap)."""

    def __init__(self, cupti: FakeCupti, framework_supported: bool):
        super().__init__(framework_supported)
        self.cupti = cupti

    def step(self, measure):
        name = ("void fft2d_r2c_32x32<float>" if measure == "forward"
                else "sm90_xmma_wgrad_implicit_gemm_f32f32_kernel__5x_cudnn")

        def run():
            self.runs += 1
            self.cupti.launch(name, 400_000)
            self.cupti.idle(100_000)
        return run


def test_gpu_profile_comes_from_the_tracer_beside_the_framework_profiler(fake_cupti):
    prepared = TracedPrepared(fake_cupti, framework_supported=True)
    fields = profile_fields(prepared, "gpu", "gradient", 3)
    profile = fields["profile"]
    assert profile["tool"].startswith("CUPTI")
    assert profile["iterations"] == 3 and profile["kernel_level"]
    # Three traced gradient runs of one 0.4 ms kernel (the forward trace's kernels, the
    # memcpy record, the stale kernel and the duplicate are not in it).
    assert math.isclose(profile["total_ms"], 0.4, rel_tol=REL)
    assert profile["top_kernels"][0]["name"].startswith("sm90_xmma_wgrad")
    assert profile["conv_families"] == pytest.approx({"implicit GEMM": 0.4})
    assert profile["forward_conv_families"].keys() == {"fft"}
    assert fields["framework_profile"]["tool"] == "fake profiler"
    # warm-up (2) + traced (3), for gradient and then for forward
    assert prepared.runs == 2 * (2 + 3)
    assert fake_cupti.calls.count("register") == 2 and fake_cupti.enabled == set()
    # The row states its kernel total against the traced wall time; nothing was timed.
    check = profile["kernel_check"]
    assert check["kernel_busy_ms"] == pytest.approx(0.4)
    assert check["busy_share_of_traced_wall"] == pytest.approx(0.8)
    assert check["timed_reference"] == "" and "not timed" in check["note"]
    assert check["window"]["duplicates"] == 3 and check["window"]["drained"] >= 1


def test_an_engine_without_kernel_events_gets_the_tracers_profile(fake_cupti):
    fields = profile_fields(TracedPrepared(fake_cupti, framework_supported=False), "gpu",
                            "forward", 2)
    assert fields["profile"]["tool"].startswith("CUPTI")
    assert fields["profile"]["forward_conv_families"].keys() == {"fft"}
    assert fields["framework_profile"] == {
        "unsupported": "release builds record no CUDA kernel events"}


FAKE_NCU = """#!{python}
import shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version 2025.3.1.0 (build 0)")
    sys.exit(0)
with open({record!r}, "w") as handle:
    handle.write(" ".join(args))
if {refuse!r}:
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
          "GPU Performance Counters on the target device 0.")
    sys.exit(1)
shutil.copy({csv!r}, args[args.index("--log-file") + 1])
"""


def fake_ncu(tmp_path, refuse: bool) -> tuple[Path, Path]:
    import sys

    record = tmp_path / "ncu-args.txt"
    script = tmp_path / "ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable, record=str(record), refuse=refuse,
                                      csv=str(DATA / "ncu_torch_li_conv1_gradient.csv")))
    script.chmod(0o755)
    return script, record


class GpuPlan:
    framework, device, threads, interop_threads, seed = "torch", "gpu", 4, 1, 0


JOB = {"model": "li_conv1", "batch": 128, "precision": "fp32", "variant": "eager",
       "profile_iterations": 3}


@pytest.fixture
def with_nvtx(monkeypatch):
    real = counters.importlib.util.find_spec
    monkeypatch.setattr(counters.importlib.util, "find_spec",
                        lambda name: object() if name == "nvtx" else real(name))


def test_counters_row_from_an_ncu_run(tmp_path, monkeypatch, with_nvtx):
    script, record = fake_ncu(tmp_path, refuse=False)
    monkeypatch.setenv(counters.NCU_ENV, str(script))
    row = counters.counters_fields(GpuPlan(), JOB, "gradient")["counters"]
    args = record.read_text()
    assert "--nvtx-include dlbench@measured" in args and "-m suites.instruments.counted" in args
    assert row["ncu_version"] == "Version 2025.3.1.0 (build 0)"
    assert row["measure"] == "gradient" and row["iterations"] == 3 and row["launches"] == 4
    expected = reduce_counters(parse_ncu_csv(
        (DATA / "ncu_torch_li_conv1_gradient.csv").read_text()), 3)["metrics"]
    assert row["metrics"] == expected


def test_counters_without_permission_are_unsupported(tmp_path, monkeypatch, with_nvtx):
    script, _ = fake_ncu(tmp_path, refuse=True)
    monkeypatch.setenv(counters.NCU_ENV, str(script))
    with pytest.raises(Unsupported, match="ERR_NVGPUCTRPERM"):
        counters.counters_fields(GpuPlan(), JOB, "gradient")


def test_the_profiler_api_filter_is_the_alternative(tmp_path, monkeypatch):
    monkeypatch.setenv(counters.RANGE_ENV, "profiler-api")
    command = counters.ncu_command("/opt/ncu", tmp_path / "c.csv", tmp_path / "job.json")
    assert "--nvtx" not in command
    assert command[command.index("--profile-from-start") + 1] == "off"
    monkeypatch.setenv(counters.RANGE_ENV, "both")
    with pytest.raises(Unsupported, match="DLBENCH_NCU_RANGE"):
        counters.range_filter()


def test_a_failing_framework_profiler_keeps_the_tracers_profile(fake_cupti):
    prepared = TracedPrepared(fake_cupti, framework_supported=True)
    prepared.profile = lambda measure, iterations: (_ for _ in ()).throw(
        RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"))
    fields = profile_fields(prepared, "gpu", "gradient", 2)
    assert fields["profile"]["tool"].startswith("CUPTI")
    assert fields["framework_profile"] == {
        "failed": "RuntimeError: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}
    with pytest.raises(RuntimeError):     # without the tracer the failure is the row's
        profile_fields(prepared, "cpu", "gradient", 2)
