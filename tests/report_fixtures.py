"""Synthetic result rows for tests/reports/test_reports.py: realistic shapes (the layout of
``suites.rows.results.Row.to_json``), two hosts (a CPU box and an H100 box), three frameworks,
failures of every kind, unstable rows, reruns, tf32 beside fp32, a hostile model name."""

from __future__ import annotations

import json
from pathlib import Path

HOSTILE = "<script>alert(1)</script>"
CPU_HOST = {"host": "cpubox", "os": "Linux-6.1", "python": "3.12.3",
            "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "physical_cores": 56,
            "logical_cores": 112, "gpu_model": None, "gpu_driver": None, "cuda": None,
            "cudnn": None, "dlbench_commit": "abc1234"}
GPU_HOST = {**CPU_HOST, "host": "gpubox", "cpu_model": "AMD EPYC 9454",
            "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_driver": "580.65", "cuda": "13.0",
            "cudnn": "9.19"}
VERSIONS = {"torch": "2.11.0", "jax": "0.11.2", "tf": "2.21.0"}
VARIANT = {"torch": "eager", "jax": "jit", "tf": "graph"}
INFO = {   # params, forward FLOPs per example, input shape
    "resnet50": (25557032, 8.18e9, [3, 224, 224]), "resnet18": (11689512, 3.64e9, [3, 224, 224]),
    "vgg16": (138357544, 30.9e9, [3, 224, 224]), "lenet": (431080, 4.6e6, [1, 28, 28]),
    "lstm": (1203202, 2.1e8, [100]), "conv_l1": (34944, 4.1e9, [3, 128, 128]),
    "conv_l2": (663680, 8.2e9, [64, 64, 64]), "conv_l3": (1327232, 3.9e9, [128, 32, 32]),
    "conv_l4": (802944, 0.8e9, [128, 16, 16]), "conv_l5": (1327488, 2.6e9, [384, 13, 13]),
    "sae_ae1": (314384, 6.3e5, [784]), "sae_ae2": (394784, 7.9e5, [784]),
    "sae_ae3": (414984, 8.3e5, [784]), "sae_se": (415994, 8.3e5, [784]),
    HOSTILE: (10, 1e3, [4]),
}


def fingerprint(measure: str, scale: float = 1.0, seed: int = 1) -> dict:
    head = [(seed * 0.37 + i * 0.11) % 1.3 - 0.6 for i in range(8)]
    fp = {"output_head": [h * scale for h in head], "output_mean": 0.0123 * scale,
          "output_std": 0.87 * scale, "loss": None, "grad_norms": None}
    if measure == "gradient":
        fp["loss"] = 6.91 * scale
        fp["grad_norms"] = {"conv1.weight": 1.25 * scale, "fc.weight": 0.5 * scale}
    return fp


def make_row(model: str, batch: int, measure: str, framework: str, device: str,
             median: float | None, *, precision: str = "fp32", variant: str | None = None,
             threads: int = 8, status: str = "ok", reason: str = "", unstable: bool = False,
             fp_scale: float = 1.0, started: str = "2026-01-10T10:00:00",
             peak_bytes: int | None = None, suite: str = "test", env: dict | None = None,
             first_call: float | None = None, compile_cache: str = "",
             profile: dict | None = None, timing_extra: dict | None = None,
             framework_profile: dict | None = None, counters: dict | None = None) -> dict:
    variant = variant or VARIANT.get(framework, "default")
    env = dict(env or (GPU_HOST if device == "gpu" else CPU_HOST))
    env["framework_version"] = VERSIONS.get(framework, "1.0")
    params, flops, shape = INFO.get(model, (1000, 1e6, [3, 32, 32]))
    timing = memory = fp = None
    # the runner's profile and counters rows: no timing, no memory
    if status == "ok" and profile is None and counters is None:
        samples = [median * (1 + d) for d in (-0.01, -0.005, 0, 0, 0.003, 0.006, 0.01)]
        timing = {"first_call_ms": first_call or median * 40, "median_ms": median,
                  "iqr_ms": median * 0.01, "ci_low_ms": median * 0.99,
                  "ci_high_ms": median * 1.01, "mean_ms": median, "min_ms": samples[0],
                  "samples": len(samples), "samples_ms": samples, "inner_loops": 1,
                  "unstable": unstable,
                  "unstable_reason": "IQR 14.0% of median" if unstable else "",
                  **(timing_extra or {})}
        memory = {"peak_bytes": peak_bytes or int(batch * 50e6),
                  "kind": "allocator" if device == "gpu" else "rss"}
        fp = fingerprint(measure, fp_scale)
    case_id = f"{suite}/{framework}/{device}/{model}/b{batch}/{measure}/{precision}/{variant}/t{threads}"
    case_id += f"/cache-{compile_cache}" if compile_cache else ""
    return {"schema": 1, "case_id": case_id, "suite": suite, "model": model, "batch": batch,
            "measure": measure,
            "settings": {"framework": framework, "device": device, "precision": precision,
                         "variant": variant, "threads": threads, "interop_threads": 1,
                         "execution": f"{framework} {variant}", "compile_cache": compile_cache},
            "status": status, "reason": reason, "timing": timing, "memory": memory,
            "model_info": {"family": model.rstrip("0123456789"), "params": params,
                           "flops_per_example": flops, "input_shape": shape},
            "fingerprint": fp, "profile": profile, "framework_profile": framework_profile,
            "counters": counters, "env": env, "started_at": started, "wall_s": 3.0,
            "time_limit_s": None, "elapsed_s": 3.0,
            "device_times": None}


def cpu_rows() -> list[dict]:
    rows = []
    # resnet50, batch 16 (cnn-benchmarks' batch): torch and jax on 8 threads.
    for fw, fwd, grad in (("torch", 400.0, 1200.0), ("jax", 500.0, 1400.0)):
        rows.append(make_row("resnet50", 16, "forward", fw, "cpu", fwd,
                             unstable=(fw == "torch")))
        rows.append(make_row("resnet50", 16, "gradient", fw, "cpu", grad))
    # thread scaling, resnet18 forward
    for threads in (1, 2, 4, 8):
        rows.append(make_row("resnet18", 16, "forward", "torch", "cpu", 800.0 / threads,
                             threads=threads))
        rows.append(make_row("resnet18", 16, "forward", "jax", "cpu", 900.0 / threads,
                             threads=threads))
    # Bahrampour Table 3: lenet batch 64 at 1 and 6 threads
    for threads, fwd, grad in ((1, 18.0, 46.0), (6, 5.5, 18.0)):
        rows.append(make_row("lenet", 64, "forward", "torch", "cpu", fwd, threads=threads))
        rows.append(make_row("lenet", 64, "gradient", "torch", "cpu", grad, threads=threads))
    # stacked autoencoders (Table 5), torch cpu 6 threads
    for phase, grad in (("ae1", 5.0), ("ae2", 3.0), ("ae3", 2.0)):
        rows.append(make_row(f"sae_{phase}", 64, "gradient", "torch", "cpu", grad, threads=6))
    rows.append(make_row("sae_se", 64, "gradient", "torch", "cpu", 3.3, threads=6))
    rows.append(make_row("sae_se", 64, "forward", "torch", "cpu", 1.9, threads=6))
    # failures
    rows.append(make_row("vgg16", 16, "gradient", "torch", "cpu", None, status="failed",
                         reason="RuntimeError: boom in conv3_1"))
    rows.append(make_row("lstm", 16, "gradient", "tf", "cpu", None, status="unsupported",
                         reason="masked LSTM not implemented"))
    # hostile names
    rows.append(make_row(HOSTILE, 4, "forward", "torch", "cpu", 1.0,
                         env={**CPU_HOST, "host": "<img src=x onerror=alert(2)>"}))
    return rows


def gpu_rows() -> list[dict]:
    rows = []
    for fw, fwd, grad in (("torch", 10.0, 30.0), ("jax", 20.0, 75.0)):
        rows.append(make_row("resnet50", 16, "forward", fw, "gpu", fwd, threads=4))
        rows.append(make_row("resnet50", 16, "gradient", fw, "gpu", grad, threads=4))
    # the same case at tf32: must stay a separate row (and its fingerprint differs by 5e-3)
    rows.append(make_row("resnet50", 16, "forward", "torch", "gpu", 4.0, threads=4,
                         precision="tf32", fp_scale=1.005))
    # batch sweep (Bahrampour Fig. 1-2 style)
    for batch in (32, 64):
        for fw, k in (("torch", 1.0), ("jax", 2.2)):
            rows.append(make_row("resnet50", batch, "forward", fw, "gpu", 10.0 * k * batch / 16,
                                 threads=4))
            rows.append(make_row("resnet50", batch, "gradient", fw, "gpu",
                                 30.0 * k * batch / 16, threads=4))
    # vgg16: jax OOM on gradient; jax forward disagrees numerically (2e-2)
    rows.append(make_row("vgg16", 16, "forward", "torch", "gpu", 40.0, threads=4))
    rows.append(make_row("vgg16", 16, "gradient", "torch", "gpu", 120.0, threads=4))
    rows.append(make_row("vgg16", 16, "forward", "jax", "gpu", 100.0, threads=4, fp_scale=1.02))
    rows.append(make_row("vgg16", 16, "gradient", "jax", "gpu", None, threads=4, status="oom",
                         reason="RESOURCE_EXHAUSTED: out of memory"))
    # convnet-benchmarks layers L1-L5, batch 128
    base = {"conv_l1": 9.0, "conv_l2": 21.0, "conv_l3": 8.0, "conv_l4": 1.0, "conv_l5": 2.0}
    for fw, k in (("torch", 1.0), ("jax", 1.5)):
        for layer, t in base.items():
            t = t * k if layer != "conv_l4" else t / k     # jax wins L4: best-per-layer mixes
            rows.append(make_row(layer, 128, "forward", fw, "gpu", t, threads=4))
            rows.append(make_row(layer, 128, "gradient", fw, "gpu", 3 * t, threads=4))
            rows.append(make_row(layer, 128, "grad_input", fw, "gpu", t, threads=4))
            rows.append(make_row(layer, 128, "grad_weight", fw, "gpu", 1.2 * t, threads=4))
    # lenet and autoencoders on the GPU
    rows.append(make_row("lenet", 64, "forward", "torch", "gpu", 0.5, threads=4))
    rows.append(make_row("lenet", 64, "gradient", "torch", "gpu", 1.7, threads=4))
    for fw in ("torch", "jax"):
        for phase, grad in (("ae1", 0.6), ("ae2", 0.5), ("ae3", 0.5)):
            rows.append(make_row(f"sae_{phase}", 64, "gradient", fw, "gpu", grad, threads=4))
        rows.append(make_row("sae_se", 64, "gradient", fw, "gpu", 0.7, threads=4))
        rows.append(make_row("sae_se", 64, "forward", fw, "gpu", 0.3, threads=4))
    # Li et al. sweep over input size i, with memory
    for fw, k in (("torch", 1.0), ("jax", 1.3)):
        for size in (32, 64, 128):
            model = f"conv:c=3,i={size},f=64,k=11,s=1"
            rows.append(make_row(model, 64, "gradient", fw, "gpu", k * size / 8, threads=4,
                                 peak_bytes=size * size * 100_000))
    # transfer
    rows.append(make_row("resnet50", 16, "transfer", "torch", "gpu", 1.2, threads=4))
    return rows


def compile_cache_rows() -> list[dict]:
    """Bahrampour Table 8: cold and warm runs of torch compile (CPU and GPU), an ORT variant
    that only has a forward pass, one that keeps no cache, and an unmanaged run."""
    rows = []
    for device, threads, k in (("cpu", 6, 1.0), ("gpu", 4, 2.0)):
        for cache, fwd, grad in (("cold", 2000.0, 5000.0), ("warm", 300.0, 700.0)):
            rows.append(make_row("lenet", 64, "forward", "torch", device, 1.0, variant="compile",
                                 threads=threads, compile_cache=cache, first_call=fwd * k))
            rows.append(make_row("lenet", 64, "gradient", "torch", device, 3.0,
                                 variant="compile", threads=threads, compile_cache=cache,
                                 first_call=grad * k))
    rows.append(make_row("lenet", 64, "forward", "torch", "cpu", 1.0, variant="compile",
                         threads=6, first_call=9999.0))          # cache not managed
    for cache, fwd in (("cold", 1500.0), ("warm", 400.0)):
        rows.append(make_row("lenet", 64, "forward", "ort", "cpu", 0.8, variant="ort_basic",
                             threads=6, compile_cache=cache, first_call=fwd))
        rows.append(make_row("lenet", 64, "forward", "ort", "cpu", None, variant="ort_all",
                             threads=6, compile_cache=cache, status="unsupported",
                             reason="ort variant 'ort_all' keeps no persistent compilation "
                                    "cache"))
    return rows


def epoch_rows() -> list[dict]:
    """Bahrampour Table 6: LSTM at batch 16 over an epoch of 124 batches, beside the
    single-batch rows, plus a framework whose epoch is unsupported."""
    epoch = {"epoch_batches": 124, "mean_padded_length": 231.5}
    rows = [make_row("lstm", 16, "forward", "torch", "cpu", 5.0, threads=6),
            make_row("lstm", 16, "gradient", "torch", "cpu", 15.0, threads=6)]
    for measure, per_batch in (("epoch_forward", 8.0), ("epoch_gradient", 20.0)):
        rows.append(make_row("lstm", 16, measure, "torch", "cpu", per_batch * 124, threads=6,
                             timing_extra={**epoch, "per_batch_median_ms": per_batch}))
        rows.append(make_row("lstm", 16, measure, "jax", "cpu", None, threads=6,
                             status="unsupported", reason="no epoch of masked batches"))
    # an epoch-only model measured at two thread counts and two batches: no plot may treat
    # these whole-epoch times as single-batch times
    for threads in (1, 2):
        for batch in (16, 32):
            rows.append(make_row("lenet", batch, "epoch_gradient", "torch", "cpu", 50.0 * batch,
                                 threads=threads,
                                 timing_extra={"epoch_batches": 10,
                                               "per_batch_median_ms": 5.0 * batch}))
    return rows


def profile(conv: float, pool: float, relu: float, fc: float, concat: float, norm: float,
            other: float, kernels: list[tuple[str, float, float]], kernel_level: bool,
            tool: str = "torch.profiler (CUDA kernels)") -> dict:
    layers = {"conv": conv, "pool": pool, "relu": relu, "fc": fc, "concat": concat,
              "norm": norm, "other": other}
    return {"tool": tool, "measure": "gradient", "iterations": 5,
            "total_ms": sum(layers.values()), "by_layer_type": layers,
            "top_kernels": [{"name": n, "ms": ms, "calls": c} for n, ms, c in kernels],
            "kernel_level": kernel_level}


LONG_KERNEL = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32" * 2


def profile_rows() -> list[dict]:
    """Li et al. Figs. 2 and 4: GPU kernel profiles of AlexNet and GoogLeNet, a CPU profile
    of framework operations, and a framework without a profiler."""
    alexnet = profile(60.0, 10.0, 5.0, 20.0, 0.0, 0.0, 5.0, [
        (LONG_KERNEL, 30.0, 5.0), ("sgemm_128x64_nn", 15.0, 3.0), ("dgrad_kernel", 12.0, 5.0),
        ("maxpool_fwd", 6.0, 3.0), ("relu_kernel", 5.0, 7.0), ("softmax_kernel", 2.0, 1.0),
        ("copy_kernel", 1.0, 2.0)], kernel_level=True)
    googlenet = profile(40.0, 15.0, 10.0, 2.0, 8.0, 0.0, 5.0, [
        ("implicit_convolve_sgemm", 20.0, 57.0), ("concat_kernel", 8.0, 9.0)],
        kernel_level=True)
    cpu = profile(300.0, 40.0, 1.0, 50.0, 0.0, 0.0, 9.0, [
        ("aten::convolution_backward", 180.0, 5.0), ("aten::mkldnn_convolution", 120.0, 5.0)],
        kernel_level=False, tool="torch.profiler (CPU)")
    return [make_row("alexnet", 128, "profile", "torch", "gpu", None, threads=4, profile=alexnet),
            make_row("googlenet", 128, "profile", "torch", "gpu", None, threads=4,
                     profile=googlenet),
            make_row("alexnet", 128, "profile", "torch", "cpu", None, threads=6, profile=cpu),
            make_row("alexnet", 128, "profile", "tf", "gpu", None, threads=4,
                     status="unsupported", reason="tf variant 'graph' has no profiler hook")]


def counters(occupancy: float, ipc: float, warp: float, gld: float | None, gst: float,
             shared: float, registers: float, smem_kb: float, measure: str) -> dict:
    """A counters row's reduced Nsight Compute metrics (suites/instruments/ncu_metrics.py layout)."""
    values = {"achieved_occupancy": occupancy, "ipc": ipc, "warp_execution_efficiency": warp,
              "gld_efficiency": gld, "gst_efficiency": gst, "shared_efficiency": shared,
              "registers_per_thread": registers, "shared_memory_per_block_kb": smem_kb}
    return {"tool": "Nsight Compute (ncu)", "ncu_version": "Version 2025.3.1",
            "measure": measure, "iterations": 3, "launches": 9, "top_share": 1.0,
            "top_kernels": [{"name": "sm90_xmma_fprop_implicit_gemm", "share": 0.6,
                             "ms_under_ncu": 3.0}],
            "metrics": {k: {"value": v, "unit": "%", "label": k, "ncu": [],
                            "weight_covered": 1.0 if v is not None else 0.0}
                        for k, v in values.items()}}


def tracer_profile(conv: float, other: float, wall: float, families: dict,
                   forward_families: dict, measure: str) -> dict:
    """A kernel-tracer profile (suites/instruments/kernel_trace.py)."""
    row = profile(conv, 0.0, 0.0, 0.0, 0.0, 0.0, other, [("fft2d_r2c_32x32", conv, 2.0)],
                  kernel_level=True, tool="CUPTI activity API (cupti-python)")
    return {**row, "measure": measure, "wall_ms": wall, "conv_families": families,
            "forward_conv_families": forward_families}


def kernel_rows() -> list[dict]:
    """Li et al. Fig. 6 / Table II counters of two Table I layers for torch and ORT (one
    not permitted), and tracer profiles of convnet-benchmarks' L2 beside its timed rows."""
    rows = [make_row("li_conv1", 128, "counters", "torch", "gpu", None, threads=4,
                     counters=counters(30.0, 2.0, 95.0, 40.0, 80.0, 90.0, 200.0, 90.0,
                                       "gradient")),
            make_row("li_conv2", 128, "counters", "torch", "gpu", None, threads=4,
                     counters=counters(20.0, 1.0, 90.0, None, 70.0, 60.0, 100.0, 30.0,
                                       "gradient")),
            make_row("li_conv1", 128, "counters", "ort", "gpu", None, threads=4,
                     variant="ort_all", counters=counters(50.0, 1.5, 99.0, 60.0, 100.0,
                                                          50.0, 64.0, 16.0, "forward")),
            make_row("li_conv2", 128, "counters", "ort", "gpu", None, threads=4,
                     variant="ort_all", status="unsupported",
                     reason="the driver does not let this user read GPU performance "
                            "counters (ERR_NVGPUCTRPERM)"),
            make_row("li_conv1", 128, "gradient", "torch", "gpu", 6.0, threads=4),
            make_row("li_conv2", 128, "gradient", "torch", "gpu", 9.0, threads=4),
            make_row("li_conv1", 128, "forward", "ort", "gpu", 2.0, threads=4,
                     variant="ort_all")]
    for layer in ("conv_l1", "conv_l2"):
        rows += [make_row(layer, 128, "forward", "tf", "gpu", 2.13, threads=4),
                 make_row(layer, 128, "gradient", "tf", "gpu", 4.2, threads=4),
                 make_row(layer, 128, "forward", "torch", "gpu", 14.7, threads=4),
                 make_row(layer, 128, "gradient", "torch", "gpu", 16.8, threads=4)]
    rows += [make_row("conv_l2", 128, "profile", "tf", "gpu", None, threads=4,
                      profile=tracer_profile(4.0, 0.1, 4.3, {"fft": 3.0, "direct": 1.0},
                                             {"fft": 1.9}, "gradient")),
             make_row("conv_l2", 128, "profile", "torch", "gpu", None, threads=4,
                      profile=tracer_profile(12.0, 0.1, 16.9,
                                             {"implicit GEMM": 11.0, "direct": 1.0},
                                             {"implicit GEMM": 14.5}, "gradient"))]
    return rows


def transfer_rows() -> list[dict]:
    """Li et al. Fig. 7: transfers of Table I's layers, with and without a gradient row of
    the same setting."""
    return [make_row("li_conv1", 64, "transfer", "torch", "gpu", 2.0, threads=4),
            make_row("li_conv1", 64, "gradient", "torch", "gpu", 6.0, threads=4),
            make_row("li_conv1", 64, "gradient", "torch", "gpu", 3.0, threads=4, precision="tf32"),
            make_row("li_conv2", 64, "transfer", "torch", "gpu", 1.0, threads=4),
            make_row("li_conv3", 64, "transfer", "torch", "gpu", 1.0, threads=4),
            make_row("li_conv3", 64, "gradient", "torch", "gpu", None, threads=4, status="oom",
                     reason="CUDA out of memory")]


def reruns() -> list[dict]:
    """An older and a newer run of identical settings: the newer (11.0 ms) must win."""
    return [make_row("resnet50", 16, "forward", "torch", "gpu", 99.0, threads=4,
                     started="2026-01-09T09:00:00")]


def write_results(root: Path) -> Path:
    """results/<host>/<session>.jsonl, as the runner lays them out."""
    (root / "cpubox").mkdir(parents=True, exist_ok=True)
    (root / "gpubox").mkdir(parents=True, exist_ok=True)
    _write(root / "cpubox" / "torch_cpu.jsonl", cpu_rows())
    _write(root / "gpubox" / "session1.jsonl", gpu_rows())
    _write(root / "gpubox" / "old_session.jsonl", reruns())
    return root


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def device_timing(device: float | None, *, span: float | None = None, **fields) -> dict:
    """A GPU row's device-time fields (suites/harness/worker.py): the kernels' busy time per
    iteration and how it was taken, or null with the reason; ``fields`` adds the newer ones
    (``device_span_median_ms``, ``host_overhead_ms``, ``launch_bound``) as a row states them."""
    if device is None:
        return {"device_median_ms": None,
                "device_time_reason": "this framework offers no device clock and no kernel "
                                      "tracer is registered"}
    timing = {"device_median_ms": device,
              "device_time_kind": "CUDA events, launches queued behind a spin kernel"}
    if span is not None:
        timing["device_span_median_ms"] = span
    return {**timing, **fields}


def interval(median: float, low: float, high: float) -> dict:
    """Timing fields that put a row's 95% interval at ``low``–``high`` (fixture rows
    otherwise get ±1%)."""
    return {"median_ms": median, "ci_low_ms": low, "ci_high_ms": high}


def device_rows() -> list[dict]:
    """GPU rows with device time beside rows without (the issue's shapes): ResNet-50 with
    PyTorch's CUDA-event device time and JAX without one; the autoencoder gradient, a
    launch-bound case (kernels 8% of the wall time) that TensorFlow wins by wall time; a
    row that states host overhead and launch-bound itself (the newer fields win over what
    the medians give); LeNet, where two frameworks' intervals overlap."""
    rows = [make_row("resnet50", 16, "forward", "torch", "gpu", 7.58, threads=4,
                     timing_extra=device_timing(7.52, span=7.55)),
            make_row("resnet50", 16, "gradient", "torch", "gpu", 24.12, threads=4,
                     timing_extra=device_timing(22.68, span=23.9)),
            make_row("resnet50", 16, "forward", "jax", "gpu", 8.11, threads=4,
                     timing_extra=device_timing(None)),
            make_row("resnet50", 16, "gradient", "jax", "gpu", 26.70, threads=4,
                     timing_extra=device_timing(None)),
            make_row("sae_ae1", 64, "gradient", "torch", "gpu", 1.12, threads=4,
                     timing_extra=device_timing(0.0914)),
            make_row("sae_ae1", 64, "gradient", "tf", "gpu", 0.76, threads=4),
            make_row("sae_ae1", 64, "forward", "torch", "gpu", 0.14, threads=4,
                     timing_extra=device_timing(0.0354, host_overhead_ms=0.1,
                                                launch_bound=False)),
            make_row("sae_ae1", 64, "forward", "tf", "gpu", 0.57, threads=4)]
    for fw, median, low, high in (("torch", 1.67, 1.39, 2.00), ("tf", 1.50, 1.40, 1.60)):
        rows.append(make_row("lenet", 64, "gradient", fw, "gpu", median, threads=4,
                             timing_extra=interval(median, low, high)))
    return rows
