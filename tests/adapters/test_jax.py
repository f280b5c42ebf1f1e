"""JAX-specific checks: precision and layout really reach the traced program, variants
compute the same function, train_step updates a donated copy in place, single-layer
measures time only their backward kernel, an epoch compiles each padded length once,
profiles split XLA's operations by layer and the trace reduction handles XLA:CPU's
asynchronous thunks and CUDA kernels, the memory and environment settings hold,
unsupported cases say why, OOM errors are recognised, a Ctrl-C is not lost, and more CPUs
really run on more cores.

Runs inside the ``tests(jax)`` nox session (``--framework=jax``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from adapters.base import CaseConfig, DeviceUnavailable, RunConfig, Unsupported  # noqa: E402
from adapters.jax import JaxAdapter  # noqa: E402
from adapters.jax import adapter as jax_adapter  # noqa: E402
from adapters.jax.profile import (  # noqa: E402
    HloOp,
    cpu_operation_times,
    gpu_times,
    hlo_ops,
    operation_label,
)
from models import ir  # noqa: E402
from models import reference as reference_numpy  # noqa: E402
from models.inputs import make_batch, make_epoch  # noqa: E402
from models.weights import canonical_weights  # noqa: E402
from models.zoo import get_model  # noqa: E402
from suites.instruments.profiling import layer_type, summarise  # noqa: E402
from tests.tolerance import assert_fp32_close, forward_rtol, gradient_rtol  # noqa: E402

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


@pytest.mark.parametrize("name, device, precision, reason", [
    ("lenet_tiny", "gpu", "bf16", "has no self-attention"),
    ("gpt2_tiny", "cpu", "bf16", "NVIDIA GPU only"),
    ("gpt2_tiny", "gpu", "fp32", "bf16 or fp16 operands, not fp32"),
    ("bert_tiny", "gpu", "tf32", "bf16 or fp16 operands, not tf32"),
])
def test_cudnn_attention_says_where_it_cannot_run(name, device, precision, reason):
    with pytest.raises(Unsupported, match=reason):
        jax_adapter.attention("cudnn_attention", CaseConfig(precision, "cudnn_attention"),
                              get_model(name), device)


def test_cudnn_attention_asks_jax_for_cudnn_and_the_default_for_xla():
    bf16 = CaseConfig("bf16", "cudnn_attention")
    assert jax_adapter.attention("cudnn_attention", bf16, get_model("bert_tiny"), "gpu") == "cudnn"
    assert jax_adapter.attention("jit", CaseConfig("bf16", "jit"), get_model("bert_tiny"),
                                 "gpu") is None
    with pytest.raises(Unsupported, match="NVIDIA GPU only"):
        prepare(JaxAdapter(RunConfig("cpu", threads=2, interop_threads=1)), "gpt2_tiny", "bf16",
                "cudnn_attention")


@pytest.mark.parametrize("steps, causal, lengths", [(9, False, None), (9, True, None),
                                                   (9, False, [9, 4]), (8, True, [8, 3])])
def test_cudnn_attention_pads_an_odd_length_and_keeps_the_function(steps, causal, lengths):
    """cuDNN's backward takes no odd sequence length (ViT-B/16's 197 tokens), so an odd
    length is padded by a zero step with the true lengths given to the kernel. Checked
    here with the XLA implementation (no cuDNN on a CPU): outputs and the gradients of
    q, k and v equal the unpadded attention's, up to the reassociation of the sums over
    the keys, now one (masked, exactly zero) term longer."""
    from adapters.jax.network import cudnn_attention
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, steps, 2, 8)), jnp.float32) for _ in range(3))
    key_lengths = None if lengths is None else jnp.asarray(lengths, jnp.float32)
    mask = None if lengths is None else \
        (jnp.arange(steps)[None, :] < jnp.asarray(lengths)[:, None])[:, None, None, :]

    def ours(q, k, v):
        return cudnn_attention(q, k, v, causal, key_lengths, implementation="xla")

    def plain(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal, mask=mask,
                                            implementation="xla")

    cotangent = jnp.asarray(rng.standard_normal((2, steps, 2, 8)), jnp.float32)
    with jax.default_matmul_precision("highest"):
        out, pull = jax.vjp(ours, q, k, v)
        expected, pull_expected = jax.vjp(plain, q, k, v)
        grads, grads_expected = pull(cotangent), pull_expected(cotangent)
    assert out.shape == expected.shape == (2, steps, 2, 8)
    # Each output is a convex combination of at most ``steps`` values, each gradient a sum
    # of ``steps + 1`` products of O(1) terms: fp32 reassociation moves it by at most about
    # (steps + 1) unit roundoffs of those magnitudes.
    tolerance = (steps + 1) * 2.0 ** -24 * 64
    np.testing.assert_allclose(out, expected, rtol=0, atol=tolerance)
    for ours_grad, expected_grad in zip(grads, grads_expected, strict=True):
        scale = float(jnp.abs(expected_grad).max()) + 1.0
        np.testing.assert_allclose(ours_grad, expected_grad, rtol=0, atol=tolerance * scale)


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


# GoogLeNet (the concatenations along the channel axis, which moves with the layout) is
# checked on its forward only: the gradient is JAX's differentiation of that same forward,
# and XLA's compile of googlenet_tiny's gradient takes most of a minute on two cores.
FORWARD_ONLY = ("googlenet_tiny",)


@pytest.mark.parametrize("name", ["alexnet_bvlc_tiny", "googlenet_tiny", "resnet_tiny"])
def test_nchw_layout_computes_the_same_function(adapter, monkeypatch, name):
    from adapters.jax import adapter as module

    nhwc = prepare(adapter, name)
    monkeypatch.setitem(module.LAYOUT, "cpu", "NCHW")
    nchw = prepare(adapter, name)
    try:
        assert nchw.x.shape[1] == 3
        # Two layouts, two summation orders: fp32 bounds from tests/tolerance.py.
        forward, gradient = forward_rtol(name), gradient_rtol(name, batch=4)
        output = nhwc.forward_output()
        assert_fp32_close(nchw.forward_output(), output, forward)
        if name in FORWARD_ONLY:
            return
        loss_a, grads_a = nhwc.loss_and_gradients()
        loss_b, grads_b = nchw.loss_and_gradients()
        assert abs(loss_a - loss_b) <= forward * float(np.max(np.abs(output))) + \
            forward * abs(loss_a)
        for key, value in grads_a.items():   # both reported in canonical layouts
            assert_fp32_close(grads_b[key], value, gradient)
    finally:
        nhwc.close()
        nchw.close()


@pytest.mark.parametrize("name", ["googlenet_tiny", "alexnet_bvlc_tiny", "lstm_tiny",
                                  "sae_tiny_ae2"])
def test_eager_computes_what_jit_computes(adapter, name):
    jit, eager = prepare(adapter, name), prepare(adapter, name, variant="eager")
    try:
        assert jit.jit and not eager.jit
        # jit fuses and reorders the sums that eager runs op by op: fp32 bounds from the
        # model's reduction lengths (tests/tolerance.py has the derivation).
        forward, gradient = forward_rtol(name), gradient_rtol(name, batch=4)
        output = jit.forward_output()
        assert_fp32_close(eager.forward_output(), output, forward)
        if name in FORWARD_ONLY:
            # Op by op, googlenet_tiny's gradient took 49 s on two cores (its jit twice
            # that of alexnet_bvlc_tiny, which checks the same op kinds' gradients eagerly
            # but the concatenation).
            return
        (loss_j, grads_j), (loss_e, grads_e) = jit.loss_and_gradients(), \
            eager.loss_and_gradients()
        # The mean loss moves by at most the largest change of an output (|∂loss/∂y| ≤ 1).
        assert abs(loss_j - loss_e) <= forward * float(np.max(np.abs(output))) + \
            forward * abs(loss_j)
        for key, value in grads_j.items():
            assert_fp32_close(grads_e[key], value, gradient)
    finally:
        jit.close()
        eager.close()


def test_variants_are_described():
    assert list(JaxAdapter.variants) == ["jit", "eager", "cudnn_attention"]
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


# --- train_step -------------------------------------------------------------------------------

def test_train_step_donates_its_copy_and_leaves_the_canonical_network(adapter):
    """The jitted step aliases every parameter and momentum buffer to its update, so XLA
    writes them in place and a call deletes the state it was given; the canonical arrays
    stay alive and unchanged; the handle (the loss) is ready only when the state is."""
    prepared = prepare(adapter, "resnet_tiny", batch=8)
    try:
        before = prepared.forward_output()
        step = prepared.step("train_step")
        fn, args = prepared.measured
        leaves = len(jax.tree_util.tree_leaves(prepared.train_state))
        assert leaves == 2 * len(prepared.trainable)      # a momentum buffer per parameter
        assert fn.lower(*args).as_text().count("tf.aliasing_output") == leaves
        prepared.sync(step())
        given = prepared.train_state
        handles = [step() for _ in range(10)]
        prepared.sync(handles[-1])
        assert all(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(given))
        assert all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(prepared.train_state))
        assert not any(a.is_deleted() for a in prepared.trainable.values())
        np.testing.assert_array_equal(prepared.forward_output(), before)
    finally:
        prepared.close()


# Batch norm (the basic-block ResNet: the bottleneck one's batch norms again, at half
# the compile) and the LSTM.
@pytest.mark.parametrize("name", ["resnet_basic_tiny", "lstm_tiny"])
def test_eager_train_step_computes_what_jit_computes(adapter, name):
    weights = canonical_weights(get_model(name))
    updates = {}
    for variant in ("jit", "eager"):
        prepared = prepare(adapter, name, variant=variant)
        try:
            step = prepared.step("train_step")
            for _ in range(2):
                prepared.sync(step())
            updates[variant] = {n: w.astype(np.float64) - weights[n]
                                for n, w in prepared.trained_weights().items()}
        finally:
            prepared.close()
    # Two updates are sums of gradients (fp32 bound: tests/tolerance.py); each step also
    # rounds the stored weight to fp32 (u·|w|).
    rtol = gradient_rtol(name, batch=4)
    for n, expected in updates["jit"].items():
        np.testing.assert_allclose(updates["eager"][n], expected, rtol=0,
                                   atol=rtol * np.abs(expected).max()
                                   + 4 * 2.0 ** -24 * np.abs(weights[n]).max(), err_msg=n)


def test_bf16_train_step_computes_in_bfloat16_and_updates_float32(adapter):
    """Mixed precision as the gradient path has it: bf16 convolutions and products, float32
    parameters, gradients, momentum buffers and loss."""
    prepared = prepare(adapter, "resnet_tiny", "bf16")
    try:
        lines = matmul_lines(prepared.hlo_text("train_step"))
        assert lines and all("bf16" in line and "DEFAULT" in line for line in lines)
        loss = prepared.step("train_step")()
        assert loss.dtype == jnp.float32
        assert all(leaf.dtype == jnp.float32
                   for leaf in jax.tree_util.tree_leaves(prepared.train_state))
    finally:
        prepared.close()


# --- epochs -----------------------------------------------------------------------------------

class CompileCounter:
    """XLA compilations (and jaxpr traces) while it is open, as jax.monitoring reports them."""

    EVENT = "/jax/core/compile/backend_compile_duration"
    TRACE = "/jax/core/compile/jaxpr_trace_duration"

    def __init__(self):
        self.count = 0
        self.traces = 0

    def _listen(self, event, duration, **kwargs):
        self.count += event == self.EVENT
        self.traces += event == self.TRACE

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)


@pytest.mark.parametrize("name, variant, measure", [
    ("lstm_tiny", "jit", "forward"), ("lstm_tiny", "jit", "gradient"),
    ("lstm_tiny", "eager", "forward"), ("conv_tiny", "eager", "gradient"),
    # Not ("lstm_tiny", "eager", "gradient"): outside jit, JAX differentiates lax.scan anew
    # at every call and compiles the new forward and transposed loops (two per batch).
])
def test_a_second_epoch_compiles_nothing(adapter, name, variant, measure):
    """Each padded length compiles once, in the first epoch (with jit, one executable per
    length); the second finds everything in JAX's caches (Bahrampour et al. 4.4 time the
    epoch after that first pass)."""
    model = get_model(name)
    batches = make_epoch(model, 4, 5)
    prepared = adapter.prepare(model, canonical_weights(model), batches[0],
                               CaseConfig("fp32", variant))
    try:
        run = prepared.epoch_step(measure, batches)
        with CompileCounter() as first:
            prepared.sync(run())
        with CompileCounter() as second:
            prepared.sync(run())
    finally:
        prepared.close()
    lengths = {batch.x.shape[1] for batch in batches}
    if variant == "jit":
        assert first.count == len(lengths), (first.count, lengths)
    assert first.count > 0 and second.count == 0, (first.count, second.count)


def test_a_device_output_summary_compiles_one_program_per_shape(adapter, monkeypatch):
    """The fingerprint's device summary (head, sums, squares) is one program: one
    compilation for an output shape, none when the same output is summarised again."""

    monkeypatch.setattr(jax_adapter, "DEVICE_SUMMARY_VALUES", 0)
    model = get_model("conv_tiny")
    prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, 3),
                               CaseConfig("fp32", "jit"))
    try:
        prepared.forward_output()          # the forward compiled, as timing leaves it
        with CompileCounter() as first:
            prepared.output_summary(2)
        with CompileCounter() as again:
            prepared.output_summary(2)
    finally:
        prepared.close()
    assert (first.count, again.count) == (1, 0), (first.count, again.count)


@pytest.mark.parametrize("name", ["lenet_tiny", "lstm_tiny"])
def test_serve_compiles_the_forward_once_and_never_again(adapter, name):
    """``serve`` (suites/serving/) runs the jitted forward step: its first call traces and
    compiles it for the batch's shapes, the forward step then finds that executable (the
    same answer, bit for bit), and later batches of those shapes trace and compile nothing,
    each answered as float64 computes it. A batch of other shapes is refused rather than
    compiled inside a timed query."""
    from models.inputs import Batch

    model = get_model(name)
    weights = canonical_weights(model)
    samples = make_batch(model, 12)
    batches = [Batch(samples.x[i:i + 4], None,
                     None if samples.lengths is None else samples.lengths[i:i + 4])
               for i in (0, 4, 8)]
    prepared = adapter.prepare(model, weights, batches[0], CaseConfig("fp32", "jit"))
    try:
        with CompileCounter() as first:
            served = [prepared.serve(batches[0])]
        with CompileCounter() as later:
            np.testing.assert_array_equal(prepared.forward_output(), served[0])
            served += [prepared.serve(batch) for batch in batches[1:]]
        with pytest.raises(ValueError, match="not the batch prepared"):
            prepared.serve(Batch(samples.x[:3], None,
                                 None if samples.lengths is None else samples.lengths[:3]))
    finally:
        prepared.close()
    assert (first.count, later.count, later.traces) == (1, 0, 0), (first.count, later.count,
                                                                   later.traces)
    for batch, out in zip(batches, served):
        assert_fp32_close(out, reference_numpy.forward(model, weights, batch, train=False),
                          forward_rtol(name))


@pytest.mark.parametrize("name", ["lstm_tiny", "conv_tiny"])
def test_an_epoch_computes_what_the_step_computes_on_each_batch(adapter, name):
    """The epoch's last result is the single-batch step's on the last batch: the same
    functions, the same layout conversion of each batch, nothing carried over."""
    model = get_model(name)
    weights = canonical_weights(model)
    batches = make_epoch(model, 4, 3)
    epoch = adapter.prepare(model, weights, batches[0], CaseConfig())
    single = adapter.prepare(model, weights, batches[-1], CaseConfig())
    try:
        forward = epoch.epoch_step("forward", batches)()
        np.testing.assert_allclose(forward, single.step("forward")(), rtol=1e-6, atol=1e-7)
        loss, grads = epoch.epoch_step("gradient", batches)()
        expected_loss, expected_grads = single.step("gradient")()
        assert np.isclose(loss, expected_loss, rtol=1e-6)
        for key, value in expected_grads.items():
            np.testing.assert_allclose(grads[key], value, rtol=1e-5, atol=1e-7)
    finally:
        epoch.close()
        single.close()


def test_epochs_of_other_measures_are_unsupported(adapter):
    prepared = prepare(adapter, "lenet_tiny")
    try:
        with pytest.raises(Unsupported, match="no epoch of grad_input"):
            prepared.epoch_step("grad_input", [make_batch(get_model("lenet_tiny"), 4)])
    finally:
        prepared.close()


# --- profiles --------------------------------------------------------------------------------

def test_a_convnet_profile_splits_time_by_layer_and_names_xla_operations(adapter):
    prepared = prepare(adapter, "alexnet_tiny")
    try:
        profile = prepared.profile("gradient", iterations=2)
        fn, args = prepared.measured
        instructions = hlo_ops(fn.lower(*args).compile().as_text())
    finally:
        prepared.close()
    assert profile.tool == "jax.profiler (XLA:CPU thunks)" and not profile.kernel_level
    shares = profile.by_layer_type
    assert all(shares[kind] > 0 for kind in ("conv", "pool", "relu", "fc")), shares
    assert sum(shares.values()) == pytest.approx(profile.total_ms)
    # No claim that convolution outweighs "other" (fusions of the loss, the bias and
    # element-wise gradients, copies): on one 2-core machine it took the most time,
    # with two test workers sharing the cores. What holds on any machine is the ranking the
    # TensorFlow test argues: each convolution runs more operations (forward, input and
    # filter gradients) with more arithmetic than the pooling or ReLU after it.
    assert shares["conv"] > max(shares["pool"], shares["relu"]), shares
    # Every operation is an instruction of the step's optimised HLO, labelled with the
    # JAX operation and layer it came from where XLA recorded one.
    assert all(op.name.split(" (")[0] in instructions for op in profile.top_kernels)
    assert any("jvp(conv)/conv_general_dilated" in op.name for op in profile.top_kernels)


def test_an_eager_profile_names_each_primitive(adapter):
    prepared = prepare(adapter, "alexnet_tiny", variant="eager")
    try:
        profile = prepared.profile("forward", iterations=1)
    finally:
        prepared.close()
    # Without one optimised module, the trace's module names say which primitive ran.
    assert any("(jit_conv_general_dilated)" in op.name for op in profile.top_kernels)
    assert profile.by_layer_type["conv"] > 0


HLO = """
%fused_computation.6 (param_0.6: f32[4,16], param_1.6: f32[16,32]) -> f32[4,32] {
  %param_0.6 = f32[4,16]{1,0} parameter(0)
  %param_1.6 = f32[16,32]{1,0} parameter(1)
  ROOT %dot_general.5 = f32[4,32]{1,0} dot(%param_0.6, %param_1.6), lhs_contracting_dims={1}, \
rhs_contracting_dims={0}, metadata={op_name="jit(_loss)/jvp(dense)/dot_general"}
}

%fused_computation.47 (param_0: f32[4,16,16,8], param_1: f32[8]) -> f32[4,16,16,8] {
  %param_0 = f32[4,16,16,8]{3,2,1,0} parameter(0)
  %param_1 = f32[8]{0} parameter(1)
  %broadcast.1 = f32[4,16,16,8]{3,2,1,0} broadcast(%param_1), dimensions={3}
  %add.1 = f32[4,16,16,8]{3,2,1,0} add(%param_0, %broadcast.1)
  %constant.1 = f32[] constant(0)
  %broadcast.2 = f32[4,16,16,8]{3,2,1,0} broadcast(%constant.1), dimensions={}
  ROOT %max.1 = f32[4,16,16,8]{3,2,1,0} maximum(%add.1, %broadcast.2)
}

%fused_computation.9 (p: f32[8]) -> (f32[8], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %negate.1 = f32[8]{0} negate(%p)
  ROOT %tuple.1 = (f32[8]{0}, f32[8]{0}) tuple(%p, %negate.1)
}

ENTRY %main.99 (x.1: f32[4,16], w.1: f32[16,32], c.1: f32[4,16,16,8], b.1: f32[8]) -> f32[4,32] {
  %x.1 = f32[4,16]{1,0} parameter(0), metadata={op_name="x"}
  %ynn_fusion.6 = f32[4,32]{1,0} fusion(%x.1, %w.1), kind=kCustom, calls=%fused_computation.6, \
metadata={op_name="jit(_loss)/jvp(dense)/dot_general" stack_frame_id=18}
  %broadcast_maximum_fusion.3 = f32[4,16,16,8]{3,2,1,0} fusion(%c.1, %b.1), kind=kLoop, \
calls=%fused_computation.47, metadata={op_name="jit(_loss)/jvp(relu)/jit(relu)/max"}
  %multi = (f32[8]{0}, f32[8]{0}) fusion(%b.1), kind=kLoop, calls=%fused_computation.9
  %cudnn-conv.1 = (f32[4,16,16,8]{3,2,1,0}, u8[0]{0}) custom-call(%c.1, %c.1), \
custom_call_target="__cudnn$convForward", metadata={op_name="jit(_loss)/jvp(conv)/conv_general_dilated"}
  ROOT %convolution.4 = f32[4,32]{1,0} convolution(%x.1, %w.1), window={size=1}, dim_labels=bf_io->bf
}
""".replace("\\\n", "")


def test_hlo_instructions_tell_what_fusions_compute_and_where_they_came_from():
    ops = hlo_ops(HLO)
    assert ops["ynn_fusion.6"] == HloOp("dot", "jit(_loss)/jvp(dense)/dot_general")
    assert ops["broadcast_maximum_fusion.3"] == HloOp("maximum", "jit(_loss)/jvp(relu)/jit(relu)/max")
    assert ops["multi"] == HloOp("", "")           # a tuple root tells nothing
    assert ops["cudnn-conv.1"].kind == "__cudnn$convForward"
    assert ops["convolution.4"] == HloOp("convolution", "")
    assert operation_label("ynn_fusion.6", {}, ops) == \
        "ynn_fusion.6 (dot; jit(_loss)/jvp(dense)/dot_general)"
    assert operation_label("convolution.4", {}, ops) == "convolution.4"
    assert [layer_type(operation_label(name, {}, ops)) for name in
            ("ynn_fusion.6", "broadcast_maximum_fusion.3", "multi", "cudnn-conv.1")] == \
        ["fc", "relu", "other", "conv"]


def xspace(planes: dict[str, dict[str, list[tuple]]]) -> jax.profiler.ProfileData:
    """A trace from {plane: {line: [(event name, start µs, duration µs, stats)]}}."""
    names: dict[str, int] = {}
    stats: dict[str, int] = {}

    def stat(key, value):
        kind = "str_value" if isinstance(value, str) else "int64_value"
        shown = f'"{value}"' if isinstance(value, str) else value
        return f"stats {{ metadata_id: {stats.setdefault(key, len(stats) + 1)} {kind}: {shown} }}"

    text = []
    for plane_id, (plane, lines) in enumerate(planes.items(), 1):
        names.clear()
        stats.clear()
        body = []
        for line_id, (line, events) in enumerate(lines.items(), 1):
            rows = [f"events {{ metadata_id: {names.setdefault(name, len(names) + 1)} "
                    f"offset_ps: {int(start * 1e6)} duration_ps: {int(duration * 1e6)} "
                    + " ".join(stat(k, v) for k, v in event_stats.items()) + " }"
                    for name, start, duration, event_stats in events]
            body.append(f'lines {{ id: {line_id} name: "{line}" timestamp_ns: 0 {" ".join(rows)} }}')
        body += [f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in names.items()]
        body += [f'stat_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in stats.items()]
        text.append(f'planes {{ id: {plane_id} name: "{plane}" {" ".join(body)} }}')
    return jax.profiler.ProfileData.from_text_proto("\n".join(text))


START, STOP = "ThreadpoolListener::StartRegion", "ThreadpoolListener::StopRegion"


def test_cpu_thunks_run_until_they_finish_and_loops_keep_only_their_own_time():
    """Modelled on jax 0.10.2's XLA:CPU traces: a convolution handed to the thread pool
    ends its event at once and finishes in a pool task, whose callbacks run the next
    thunks (a "ThunkExecutor::Execute") before recording "end: <op>"."""
    space = xspace({"/host:CPU": {
        "tf_XLAEigen/1": [
            (START, 0, 0, {}),
            ("convolution.4", 10, 5, {"hlo_op": "convolution.4", "_p": 1}),
            ("copy.1", 16, 4, {"hlo_op": "copy.1", "_p": 2}),
            ("end: copy.1", 20, 0.1, {"_c": 2}),
            (STOP, 25, 0, {}),
        ],
        "tf_XLAEigen/2": [
            (START, 30, 0, {}),          # the convolution's shard: no events of its own
            ("ThunkExecutor::Execute", 100, 10, {}),
            ("maximum_fusion", 101, 3, {"hlo_op": "maximum_fusion", "_p": 3}),
            ("end: maximum_fusion", 104, 0.1, {"_c": 3}),
            ("end: convolution.4", 111, 0.1, {"_c": 1}),
            (STOP, 112, 0, {}),
        ],
        "tf_XLAPjRtCpuClient/1": [
            ("while.2", 200, 50, {"hlo_op": "while.2", "_p": 4}),
            ("dot.1", 205, 10, {"hlo_op": "dot.1", "_p": 5}),
            ("end: dot.1", 215, 0.1, {"_c": 5}),
            ("end: while.2", 250, 0.1, {"_c": 4}),
        ],
        "tf_XLAEigen/3": [("add.1", 220, 20, {"hlo_op": "add.1"})],   # the loop body, here too
    }})
    times = {name: (round(ms * 1e3, 3), calls) for name, ms, calls in cpu_operation_times(space, {})}
    assert times == {
        "convolution.4": (90.0, 1),   # from 10 µs to the continuation at 100 µs, not to 111 µs
        "copy.1": (4.0, 1), "maximum_fusion": (3.0, 1), "dot.1": (10.0, 1), "add.1": (20.0, 1),
        "while.2": (20.0, 1),         # 50 µs less the 30 µs its body's thunks ran
    }


def test_gpu_kernels_are_timed_per_operation_and_per_kernel():
    """Modelled on jax 0.11.2's CUDA traces on an H100: each kernel names its HLO operation
    and the execution (scope_range_id); inside a command buffer, XLA's own kernels are named
    after their fusion. Only stream lines hold device time."""
    conv = {"hlo_op": "cudnn-conv.1"}
    buffer = {"hlo_op": "command_buffer_3", "scope_range_id": 9}
    space = xspace({"/device:GPU:0": {
        "Stream #14(Compute)": [
            ("nchwToNhwcKernel", 0, 1, {**conv, "scope_range_id": 1}),
            ("sm90_xmma_fprop_implicit_gemm", 1, 4, {**conv, "scope_range_id": 1}),
            ("nchwToNhwcKernel", 10, 1, {**conv, "scope_range_id": 2}),
            ("sm90_xmma_fprop_implicit_gemm", 11, 4, {**conv, "scope_range_id": 2}),
            ("loop_add_fusion_2", 20, 2, buffer),
            ("loop_add_fusion_2", 23, 2, buffer),
            ("sm90_xmma_gemm_f32f32", 26, 3, buffer),
        ],
        "XLA Ops": [("cudnn-conv.1", 0, 15, conv)],   # a derived line: not counted again
    }, "/host:CPU": {"python": [("PjitFunction(_loss)", 0, 30, {})]}})
    hlo = {"cudnn-conv.1": HloOp("__cudnn$convForward", "jit(_loss)/jvp(conv)/conv_general_dilated"),
           "loop_add_fusion.2": HloOp("add", "jit(_loss)/jvp(conv)/add")}
    operations, kernels = gpu_times(space, hlo)
    assert {name: (round(ms * 1e3, 3), calls) for name, ms, calls in operations} == {
        "cudnn-conv.1 (__cudnn$convForward; jit(_loss)/jvp(conv)/conv_general_dilated)": (10.0, 2),
        "loop_add_fusion.2 (jit(_loss)/jvp(conv)/add)": (4.0, 2),   # "add" is in its name
        "sm90_xmma_gemm_f32f32": (3.0, 1),
    }
    assert {name: (round(ms * 1e3, 3), calls) for name, ms, calls in kernels} == {
        "nchwToNhwcKernel": (2.0, 2), "sm90_xmma_fprop_implicit_gemm": (8.0, 2),
        "loop_add_fusion_2": (4.0, 2), "sm90_xmma_gemm_f32f32": (3.0, 1)}
    profile = summarise("jax.profiler (CUDA kernels)", "gradient", 2, operations, kernels)
    assert profile.kernel_level and profile.top_kernels[0].name == "sm90_xmma_fprop_implicit_gemm"
    assert profile.by_layer_type["conv"] == pytest.approx(0.007)
    assert profile.by_layer_type["fc"] == pytest.approx(0.0015)


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
    # it before its first `import jax` (the worker imports the adapter package, then loads
    # its class, which is what imports jax).
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
        adapters.jax.JaxAdapter
        print(seen["value"])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["false"]


def test_environment_records_versions_and_settings(adapter):
    env = adapter.environment()
    assert env["framework_version"] == jax.__version__
    assert env["jaxlib_version"] and env["optax_version"]
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
from suites.instruments.environment import limit_cpus
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
    from suites.harness.spec import Job
    from suites.harness.worker import Plan
    from suites.stats.timer import TimerSettings

    for threads in (1, 2):
        results = tmp_path / f"t{threads}.jsonl"
        job = Job("conv_tiny", 2, "cpu", threads, 1, "fp32", "jit", ("forward",),
                  timer=TimerSettings(warmup=1, min_samples=3, budget_s=0.2))
        plan = Plan("threads", "jax", "cpu", threads, 1, str(results), 0,
                    [{**asdict(job), "pending": ["forward"]}])
        plan.to_file(tmp_path / "plan.json")
        subprocess.run([sys.executable, "-m", "suites.harness.worker", str(tmp_path / "plan.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
        (row,) = [json.loads(line) for line in results.read_text().splitlines()
                  if json.loads(line)["measure"] == "forward"]
        assert row["status"] == "ok", row
        assert len(row["env"]["cpu_affinity"]) == threads
        assert row["env"]["xla_cpu_pool_threads"] == threads


# --- the compile-event log (first calls) ------------------------------------------------------

@pytest.mark.parametrize("name", ["conv_tiny", "gpt2_tiny"])
def test_rows_record_one_compile_per_step_and_none_when_compiled_already(adapter, name):
    """A jit row's compile_events count the backend compilations of its step's timed calls:
    one each for forward, gradient and train_step, none for a forward timed again (jit's
    cache), and the memory plan's re-lowering after the timed calls (train_step's from its
    state's shapes: the state itself was donated) is not counted. The second call compiles
    nothing: with AdamW (gpt2_tiny's optimizer; conv_tiny's is SGD) a fresh state whose
    step count was left uncommitted compiled the step again at the second call."""
    prepared = prepare(adapter, name, variant="jit")
    events = {}
    try:
        for label, measure in (("forward", "forward"), ("gradient", "gradient"),
                               ("train_step", "train_step"), ("again", "forward")):
            run = prepared.step(measure)
            prepared.sync(run())
            prepared.sync(run())
            prepared.peak_memory()
            events[label] = dict(prepared.extra["compile_events"])
            prepared._planned_bytes()     # lowers again: must not reach the row's events
            assert prepared.extra["compile_events"] == events[label]
    finally:
        prepared.close()
    assert events["forward"]["compiles"] == 1, events
    assert events["gradient"]["compiles"] == 1, events
    assert events["train_step"]["compiles"] == 1, events
    assert events["again"]["compiles"] == 0, events
    assert events["forward"]["compile_s"] > 0 and events["again"]["trace_s"] == 0
    assert events["forward"]["persistent_cache_hits"] == 0


def test_a_first_call_from_a_persistent_cache_says_so(tmp_path):
    """Two processes sharing JAX_COMPILATION_CACHE_DIR: the first compiles and fills the
    cache, the second's first call loads the executable (a hit, no compile), and its
    environment names the cache directory."""
    code = """
        import json
        from adapters.base import CaseConfig, RunConfig
        from adapters.jax import JaxAdapter
        from models.inputs import make_batch
        from models.weights import canonical_weights
        from models.zoo import get_model
        adapter = JaxAdapter(RunConfig("cpu", threads=1, interop_threads=1))
        model = get_model("conv_tiny")
        prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, 2),
                                   CaseConfig("fp32", "jit"))
        run = prepared.step("forward")
        prepared.sync(run())
        prepared.peak_memory()
        print(json.dumps([prepared.extra["compile_events"],
                          adapter.environment()["jax_compilation_cache_dir"]]))
    """
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    results = []
    for _ in range(2):
        done = run_python(code, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    (cold, directory), (warm, _) = results
    assert directory == str(tmp_path)
    assert (cold["compiles"], cold["persistent_cache_misses"], cold["persistent_cache_hits"]) \
        == (1, 1, 0), cold
    assert (warm["compiles"], warm["persistent_cache_hits"]) == (0, 1), warm
    assert warm["compile_s"] == 0 or warm["compile_s"] < cold["compile_s"]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_compile_probe_times_each_program_once(threads):
    """Every job's forward and gradient and each padded LSTM length is one program, each
    compiled and timed once, one after another or in threads (the README's compile cost)."""
    from adapters.jax.compile_probe import probe

    result = probe(["--device", "cpu", "--jobs", "lenet_tiny:2", "--lstm-model", "lstm_tiny",
                    "--lstm-lengths", "2", "--threads", str(threads)])
    labels = sorted(result["each_s"])
    assert labels[:2] == ["lenet_tiny b2 forward", "lenet_tiny b2 gradient"]
    lengths = {label.split(" length ")[1] for label in labels[2:]}
    assert len(labels) == result["programs"] == 4 and len(lengths) == 2
    assert all(seconds > 0 for seconds in result["each_s"].values())
    assert result["threads"] == threads and result["device"] == "cpu"
    if threads == 1:   # one after another: the wall time is the programs' own times added
        assert result["compile_wall_s"] >= 0.99 * result["sum_of_compiles_s"]


def test_the_compile_probe_refuses_an_unknown_model_in_one_line(capsys):
    from adapters.jax.compile_probe import main

    assert main(["--device", "cpu", "--jobs", "lenet_tny:2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lenet_tny" in err[0] and "lenet_tiny" in err[0]


def test_the_row_records_the_attention_implementation(adapter):
    prepared = prepare(adapter, "gpt2_tiny", batch=2)
    assert prepared.extra["attention"].startswith("jax.nn.dot_product_attention, "
                                                  "implementation=None")
    prepared.close()
    assert "attention" not in prepare(adapter, "lenet_tiny", batch=2).extra


def test_generation_compiles_the_prefill_and_the_decode_step_once_each(adapter):
    """jit's generation: two executables (the prefill's shape and the decode step's) over
    a prefill and three decode steps, then a second prompt's: the position is traced, so
    a new value compiles nothing, and the donated caches come back placed as they went in
    (an uncommitted first cache would compile the step again, as the training step once
    did: test_rows_record_one_compile_per_step_and_none_when_compiled_already)."""
    from tests.conformance.test_generate import NEW, PROMPT, prepared_for
    _, _, _, prepared = prepared_for(adapter, "gpt2_tiny", "fp32", "jit")
    try:
        generator = prepared.generator(PROMPT + NEW)
        for prompt in (np.arange(PROMPT) % 7, np.arange(PROMPT) % 5):
            token = generator.prefill(prompt)
            for _ in range(3):
                token = generator.decode(token)
        assert generator.step._cache_size() == 2
    finally:
        prepared.close()
