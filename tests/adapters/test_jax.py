"""JAX-specific checks: precision and layout really reach the traced program, variants
compute the same function, single-layer measures time only their backward kernel, the
memory and environment settings hold, unsupported cases say why, OOM errors are
recognised, a Ctrl-C is not lost, and more CPUs really run on more cores.

Runs inside the ``tests(jax)`` nox session (``--framework=jax``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from adapters.base import CaseConfig, DeviceUnavailable, RunConfig, Unsupported  # noqa: E402
from adapters.jax import JaxAdapter  # noqa: E402
from models import ir  # noqa: E402
from models.inputs import make_batch  # noqa: E402
from models.weights import canonical_weights  # noqa: E402
from models.zoo import get_model  # noqa: E402
from tests import reference_numpy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def adapter():
    return JaxAdapter(RunConfig("cpu", threads=2, interop_threads=1))


def prepare(adapter, name, precision="fp32", variant="default", batch=4):
    model = get_model(name)
    return adapter.prepare(model, canonical_weights(model), make_batch(model, batch),
                           CaseConfig(precision, variant))


def run_python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def matmul_lines(hlo: str) -> list[str]:
    return [line for line in hlo.splitlines()
            if "stablehlo.convolution" in line or "stablehlo.dot_general" in line]


# --- precision ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["resnet_tiny", "lstm_tiny", "sae_tiny_ae2"])
@pytest.mark.parametrize("measure", ["forward", "gradient"])
def test_fp32_is_strict_in_every_conv_and_dot(adapter, name, measure):
    prepared = prepare(adapter, name)
    try:
        lines = matmul_lines(prepared.hlo_text(measure))
    finally:
        prepared.close()
    assert lines, "no convolution or dot traced"
    # HIGHEST on both operands keeps XLA off TF32 on GPUs, forward and backward alike.
    for line in lines:
        assert re.search(r"precision(_config)? = \[.*HIGHEST.*HIGHEST", line), line
        assert "f32>" in line and "bf16" not in line, line
    assert jax.config.jax_default_matmul_precision == "highest"


def test_bf16_computes_in_bfloat16_with_float32_parameters_and_loss(adapter):
    fp32 = prepare(adapter, "resnet_tiny")
    bf16 = prepare(adapter, "resnet_tiny", "bf16")
    try:
        lines = matmul_lines(bf16.hlo_text("gradient"))
        assert lines and all("bf16" in line and "DEFAULT" in line for line in lines)
        loss, grads = bf16.gradient_fn(bf16.trainable, bf16.fixed, bf16.x, bf16.labels,
                                       bf16.lengths)
        assert loss.dtype == jnp.float32
        assert all(g.dtype == jnp.float32 for g in grads.values())
        assert all(p.dtype == jnp.float32 for p in bf16.trainable.values())
        a, b = fp32.forward_output(), bf16.forward_output()
        assert not np.array_equal(a, b)                 # it really is another precision
        np.testing.assert_allclose(b, a, rtol=0.1, atol=0.1 * np.abs(a).max())
    finally:
        fp32.close()
        bf16.close()


def test_tf32_is_a_gpu_mode(adapter):
    with pytest.raises(Unsupported, match="GPU tensor-core mode"):
        prepare(adapter, "lenet_tiny", "tf32")


# --- layout, variants, measures -----------------------------------------------------------

def test_images_are_nhwc_on_the_device_and_outputs_canonical(adapter):
    prepared = prepare(adapter, "conv_tiny", batch=2)
    try:
        assert prepared.x.shape == (2, 9, 9, 3)             # converted once, in prepare
        assert prepared.trainable["conv.weight"].shape == (3, 3, 3, 4)   # HWIO
        assert prepared.forward_output().shape == (2, 4, 5, 5)           # NCHW again
        _, grads = prepared.loss_and_gradients()
        assert grads["conv.weight"].shape == (4, 3, 3, 3)                # OIHW again
    finally:
        prepared.close()


def pooling_model(kind: str, kernel: int, stride: int, padding: int, ceil: bool) -> ir.Model:
    # 7x7 maps: ceil mode adds a last, partial window for these kernels and strides.
    node = ir.Pool2d("pool", kind, (kernel, kernel), (stride, stride), (padding, padding), ceil)
    return ir.Model(f"pool_{kind}", "test", ir.InputSpec("image", (3, 7, 7)), (node,),
                    ir.Loss("sum"))


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("kind, kernel, stride, padding, ceil", [
    ("max", 3, 2, 0, True), ("max", 3, 2, 1, True), ("max", 2, 2, 0, True),
    ("avg", 3, 2, 0, True), ("avg", 2, 2, 0, True), ("avg", 3, 3, 0, False),
])
def test_pooling_edges_match_the_reference_in_both_layouts(adapter, monkeypatch, layout, kind,
                                                           kernel, stride, padding, ceil):
    """The zoo's tiny models have no average pooling; ceil-mode windows that run past the
    edge average their valid elements only. NCHW is kept working for layout studies."""
    from adapters.jax import adapter as module

    monkeypatch.setitem(module.LAYOUT, "cpu", layout)
    model = pooling_model(kind, kernel, stride, padding, ceil)
    batch = make_batch(model, 2)
    prepared = adapter.prepare(model, {}, batch, CaseConfig())
    try:
        np.testing.assert_allclose(prepared.forward_output(),
                                   reference_numpy.forward(model, {}, batch), rtol=1e-5,
                                   atol=1e-6)
    finally:
        prepared.close()


@pytest.mark.parametrize("name", ["alexnet_bvlc_tiny", "googlenet_tiny", "resnet_tiny"])
def test_nchw_layout_computes_the_same_function(adapter, monkeypatch, name):
    from adapters.jax import adapter as module

    nhwc = prepare(adapter, name)
    monkeypatch.setitem(module.LAYOUT, "cpu", "NCHW")
    nchw = prepare(adapter, name)
    try:
        assert nchw.x.shape[1] == 3
        np.testing.assert_allclose(nchw.forward_output(), nhwc.forward_output(), rtol=1e-5,
                                   atol=1e-6)
        loss_a, grads_a = nhwc.loss_and_gradients()
        loss_b, grads_b = nchw.loss_and_gradients()
        assert np.isclose(loss_a, loss_b, rtol=1e-5)
        for key, value in grads_a.items():   # both reported in canonical layouts
            np.testing.assert_allclose(grads_b[key], value, rtol=1e-4, atol=1e-6)
    finally:
        nhwc.close()
        nchw.close()


@pytest.mark.parametrize("name", ["googlenet_tiny", "lstm_tiny", "sae_tiny_ae2"])
def test_eager_computes_what_jit_computes(adapter, name):
    jit, eager = prepare(adapter, name), prepare(adapter, name, variant="eager")
    try:
        assert jit.jit and not eager.jit
        np.testing.assert_allclose(eager.forward_output(), jit.forward_output(),
                                   rtol=1e-5, atol=1e-6)
        (loss_j, grads_j), (loss_e, grads_e) = jit.loss_and_gradients(), \
            eager.loss_and_gradients()
        assert np.isclose(loss_j, loss_e, rtol=1e-5)
        for key, value in grads_j.items():
            np.testing.assert_allclose(grads_e[key], value, rtol=1e-4, atol=1e-6)
    finally:
        jit.close()
        eager.close()


def test_variants_are_described():
    assert list(JaxAdapter.variants) == ["jit", "eager"]
    assert "jax.jit" in JaxAdapter.variants["jit"]


def test_batch_norm_statistics_do_not_drift_during_gradient_passes(adapter):
    prepared = prepare(adapter, "resnet_tiny")
    try:
        before = prepared.forward_output()
        step = prepared.step("gradient")
        for _ in range(3):
            prepared.sync(step())
        np.testing.assert_array_equal(prepared.forward_output(), before)
    finally:
        prepared.close()


@pytest.mark.parametrize("measure, convolutions", [("grad_input", 1), ("grad_weight", 1)])
def test_single_layer_steps_run_only_their_backward_kernel(adapter, measure, convolutions):
    prepared = prepare(adapter, "conv_tiny", batch=2)
    try:
        step = prepared.step(measure)
        grads = step()
        prepared.sync(grads)
        fn, args = prepared.measured
        hlo = fn.lower(*args).as_text()
        # The forward convolution ran once in step(), untimed; the timed program holds
        # only the input-gradient (or weight-gradient) convolution.
        assert hlo.count("stablehlo.convolution") == convolutions, hlo
        if measure == "grad_input":
            (grad_x,) = grads
            assert grad_x.shape == prepared.x.shape
        else:
            (grad_params,) = grads
            assert set(grad_params) == {"conv.weight", "conv.bias"}
            # The bias gradient of a sum loss is the output's element count per channel.
            np.testing.assert_allclose(grad_params["conv.bias"], 2 * 5 * 5)
    finally:
        prepared.close()


@pytest.mark.parametrize("name, measure, reason", [
    ("lenet_tiny", "grad_input", "single-layer"),
    ("sae_tiny_ae2", "grad_weight", "single-layer"),   # a frozen prefix
    ("lenet_tiny", "transfer", "same on cpu"),
    ("lenet_tiny", "no_such_measure", "unknown measure"),
])
def test_unsupported_measures_say_why(adapter, name, measure, reason):
    prepared = prepare(adapter, name)
    try:
        with pytest.raises(Unsupported, match=reason):
            prepared.step(measure)
    finally:
        prepared.close()


def test_the_last_handle_ready_means_every_step_is_done(adapter):
    # sync() waits on the last handle only; that is enough because one device runs a
    # process's computations in dispatch order.
    prepared = prepare(adapter, "resnet_tiny", batch=8)
    try:
        step = prepared.step("gradient")
        prepared.sync(step())
        handles = [step() for _ in range(20)]
        prepared.sync(handles[-1])
        assert all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(handles))
    finally:
        prepared.close()


# --- memory, environment, errors ------------------------------------------------------------

class FakeGpu:
    """Device.memory_stats() as the GPU client reports it, scripted."""

    def __init__(self, *stats):
        self.stats = list(stats)

    def memory_stats(self):
        return self.stats.pop(0)


def test_gpu_peak_is_the_allocator_peak_when_it_rose_else_xla_plan(adapter):
    prepared = prepare(adapter, "resnet_tiny")
    try:
        prepared.on_gpu = True
        step = prepared.step("gradient")
        prepared.sync(step())
        prepared.device = FakeGpu({"peak_bytes_in_use": 1000, "bytes_in_use": 100},
                                  {"peak_bytes_in_use": 5000, "bytes_in_use": 100})
        prepared.reset_peak_memory()
        assert prepared.peak_memory().__dict__ == {"peak_bytes": 5000, "kind": "allocator"}
        # An earlier case set a higher peak: JAX cannot reset it, so the step's own
        # need comes from XLA's buffer assignment on top of the live buffers.
        prepared.device = FakeGpu({"peak_bytes_in_use": 9000, "bytes_in_use": 100},
                                  {"peak_bytes_in_use": 9000, "bytes_in_use": 100})
        prepared.reset_peak_memory()
        memory = prepared.peak_memory()
        fn, args = prepared.measured
        plan = fn.lower(*args).compile().memory_analysis()
        assert memory.kind == "xla_plan"
        assert memory.peak_bytes == 100 + plan.temp_size_in_bytes + plan.output_size_in_bytes \
            - plan.alias_size_in_bytes
        assert prepared.extra["peak_bytes_since_start"] == 9000
        assert "earlier case" in prepared.extra["memory_source"]
    finally:
        prepared.on_gpu = False
        prepared.close()


def test_preallocation_is_off_before_jax_is_imported():
    # The GPU client reads XLA_PYTHON_CLIENT_PREALLOCATE when it starts; the package sets
    # it before its first `import jax` (the worker imports the adapter before any jax).
    result = run_python("""
        import builtins, os
        os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
        real, seen = builtins.__import__, {}
        def spy(name, *args, **kwargs):
            if name == "jax" and "value" not in seen:
                seen["value"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
            return real(name, *args, **kwargs)
        builtins.__import__ = spy
        import adapters.jax
        print(seen["value"])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["false"]


def test_environment_records_versions_and_settings(adapter):
    env = adapter.environment()
    assert env["framework_version"] == jax.__version__
    assert env["jaxlib_version"]
    assert env["gpu_model"] is None and env["cuda"] is None
    assert env["xla_cpu_pool_threads"] == len(os.sched_getaffinity(0))


def test_gpu_without_a_gpu_is_device_unavailable():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("a GPU is visible")
    with pytest.raises(DeviceUnavailable, match="sees no GPU"):
        JaxAdapter(RunConfig("gpu", 1, 1))


def test_out_of_memory_errors_are_recognised(adapter):
    # A real allocation failure: 2**42 float32 is 16 TiB.
    with pytest.raises(Exception) as caught:
        jax.jit(lambda: jnp.ones((1 << 42,), jnp.float32))().block_until_ready()
    assert adapter.is_out_of_memory(caught.value), caught.value
    assert adapter.is_out_of_memory(MemoryError())
    assert not adapter.is_out_of_memory(RuntimeError("INVALID_ARGUMENT: shape mismatch"))
    assert not adapter.is_out_of_memory(ValueError("out of memory"))


# --- threads --------------------------------------------------------------------------------

PROBE = """
import json, os, sys, time
from suites.environment import limit_cpus
threads = int(sys.argv[1])
if sys.argv[2] == "worker":
    limit_cpus(threads)          # the worker's path: pinned before the adapter is imported
from adapters.base import CaseConfig, RunConfig
from adapters.jax import JaxAdapter
from adapters.jax.adapter import xla_pool_threads
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model

def cpu_ticks_per_thread():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks

adapter = JaxAdapter(RunConfig("cpu", threads, 1))
model = get_model("conv_l5")
prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, 8), CaseConfig())
step = prepared.step("gradient")
prepared.sync(step())
before, wall, cpu = cpu_ticks_per_thread(), time.perf_counter(), time.process_time()
for _ in range(10):
    prepared.sync(step())
after = cpu_ticks_per_thread()
deltas = [after[t] - before.get(t, 0) for t in after]
busy = [d for d in deltas if d > 0.2 * max(deltas)]
print(json.dumps({"cpus": len(os.sched_getaffinity(0)), "pool": xla_pool_threads(),
                  "busy_threads": len(busy),
                  "cpu_per_wall": (time.process_time() - cpu) / (time.perf_counter() - wall)}))
"""


def probe_threads(threads: int, path: str) -> dict:
    result = run_python(PROBE, str(threads), path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("path", ["worker", "adapter"])
def test_cpu_count_really_changes_cpu_use(path):
    """XLA has no thread-count flag; the affinity mask (set by the worker, or by the
    adapter itself outside the worker) sizes its pools. Structural, not a speed bound:
    pool size and the OS threads that did real work in the timed steps."""
    one, two = probe_threads(1, path), probe_threads(2, path)
    assert (one["cpus"], one["pool"], one["busy_threads"]) == (1, 1, 1), one
    assert one["cpu_per_wall"] < 1.1, one        # one CPU cannot give more than 1 s/s
    assert (two["cpus"], two["pool"]) == (2, 2), two
    assert two["busy_threads"] >= 2, two


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_worker_rows_record_the_cpus_xla_used(tmp_path):
    from suites.worker import Plan

    for threads in (1, 2):
        results = tmp_path / f"t{threads}.jsonl"
        job = {"model": "conv_tiny", "batch": 2, "device": "cpu", "threads": threads,
               "interop_threads": 1, "precision": "fp32", "variant": "jit",
               "measures": ["forward"], "pending": ["forward"]}
        plan = Plan("threads", "jax", "cpu", threads, 1, str(results), 0,
                    {"warmup": 1, "min_samples": 3, "budget_s": 0.2}, [job])
        plan.to_file(tmp_path / "plan.json")
        subprocess.run([sys.executable, "-m", "suites.worker", str(tmp_path / "plan.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
        (row,) = [json.loads(line) for line in results.read_text().splitlines()
                  if json.loads(line)["measure"] == "forward"]
        assert row["status"] == "ok", row
        assert len(row["env"]["cpu_affinity"]) == threads
        assert row["env"]["xla_cpu_pool_threads"] == threads
