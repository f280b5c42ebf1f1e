"""TensorFlow adapter: settings really reach TensorFlow (threads, strict fp32, mixed
precision, variants, tracing in the first call), the graphs run TensorFlow's fast path
(NHWC, fused batch norm, one grouped convolution, backward kernels alone), the IR mapping
holds where the conformance kit does not look (pooling and padding edge cases, LRN
arguments, the tied decoder), epochs trace once and profiles name TensorFlow's ops,
unsupported cases say why, OOM errors are recognised, and more threads really run on
more cores.

Runs inside the ``tests(tf)`` nox session (``--framework=tf``). The GPU tests at the end
are skipped where TensorFlow sees no GPU."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from adapters.base import CaseConfig, DeviceUnavailable, RunConfig, Unsupported  # noqa: E402
from adapters.tf import TFAdapter  # noqa: E402
from adapters.tf.adapter import (  # noqa: E402
    DEFAULT_LAYOUT,
    LSTM_KERNELS,
    ConvBackward,
    apply_precision,
    cudnn_lstm,
    epoch_signature,
    layout_for,
    place_batch,
)
from adapters.tf.network import (  # noqa: E402
    AS_IS,
    NCHW,
    NHWC,
    BatchNorm,
    Context,
    Layout,
    ParamLayout,
    build,
)
from adapters.tf.profile import kernel_intervals, profiled_times, self_times  # noqa: E402
from adapters.tf.settings import (  # noqa: E402
    describe_settings,
    onednn_enabled,
    read_bool_env,
    settings_in_force,
    xla_gpu_autotune_level,
)
from models import ir  # noqa: E402
from models import reference as reference_numpy  # noqa: E402
from models.inputs import Batch, make_batch, make_epoch  # noqa: E402
from models.weights import canonical_weights  # noqa: E402
from models.zoo import get_model  # noqa: E402
from suites.instruments.profiling import device_timeline  # noqa: E402
from tests.adapters.thread_probe import thread_shares  # noqa: E402
from tests.tolerance import assert_fp32_close, forward_rtol  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FP32 = Context(False, tf.float32)


@pytest.fixture(scope="module")
def adapter():
    # The same counts as the conformance kit's adapter: one process, one thread setting.
    return TFAdapter(RunConfig("cpu", threads=2, interop_threads=1))


def prepare(adapter, name, precision="fp32", variant="default", batch=4):
    model = get_model(name)
    return adapter.prepare(model, canonical_weights(model), make_batch(model, batch),
                           CaseConfig(precision, variant))


def graph_ops(function) -> list[str]:
    """Op types of a tf.function's graph, as traced (before Grappler)."""
    return [op.type for op in function.get_concrete_function().graph.get_operations()]


# --- settings reach TensorFlow ---------------------------------------------------------

def test_threads_are_set_and_recorded(adapter):
    prepared = prepare(adapter, "lenet_tiny")
    try:
        prepared.sync(prepared.step("forward")())
        assert tf.config.threading.get_intra_op_parallelism_threads() == 2
        assert tf.config.threading.get_inter_op_parallelism_threads() == 1
        settings = prepared.extra.pop("tf_settings")
        assert prepared.extra == {"intra_op_threads": 2, "inter_op_threads": 1,
                                  "layout": "NHWC"}
        assert settings["tf32_execution"] is False and "cudnn_autotune" not in settings
    finally:
        prepared.close()


def test_settings_are_read_as_tensorflow_reads_the_environment():
    # ReadBoolFromEnvVar: unset -> default; 0/1/false/true in any case; else the default.
    for value, expected in (("0", False), ("FALSE", False), ("1", True), ("True", True),
                            ("no", True), ("", True)):
        assert read_bool_env("TF_CUDNN_USE_AUTOTUNE", True, {"TF_CUDNN_USE_AUTOTUNE": value}) \
            is expected, value
    assert read_bool_env("TF_CUDNN_USE_AUTOTUNE", True, {}) is True
    assert xla_gpu_autotune_level({}) == 4
    assert xla_gpu_autotune_level({"XLA_FLAGS": "--xla_gpu_autotune_level=0 --foo=1 "
                                                "--xla_gpu_autotune_level=2"}) == 2
    gpu = settings_in_force(True, {"TF_CUDNN_USE_AUTOTUNE": "false",
                                   "TF_CUDNN_DETERMINISTIC": "1",
                                   "TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32": "1"})
    assert gpu["cudnn_autotune"] is False and gpu["cudnn_deterministic"] is True
    assert gpu["cublas_tensor_op_math_fp32_env"] == "1"
    defaults = settings_in_force(True, {})
    assert defaults["cudnn_autotune"] and not defaults["cudnn_deterministic"]
    assert defaults["xla_gpu_autotune_level"] == 4 and defaults["grappler_options_set"] == {}
    assert describe_settings({**defaults, "tf32_execution": False}) == (
        "TF32 off, cuDNN autotune on, XLA GPU autotune level 4")
    assert settings_in_force(False, {"TF_ENABLE_ONEDNN_OPTS": "0"})["onednn_opts"] == "0"


def test_rows_describe_the_settings_in_force():
    gpu = TFAdapter.__new__(TFAdapter)   # describe() needs only the config, not a GPU
    gpu.config = RunConfig("gpu", 1, 1)
    text = gpu.describe(CaseConfig())
    assert text.startswith(TFAdapter.variants["graph"]) and "TF32 off" in text
    assert "cuDNN autotune" in text and "XLA GPU autotune level" in text
    assert "TF32 on" in gpu.describe(CaseConfig("tf32"))
    cpu = TFAdapter.__new__(TFAdapter)
    cpu.config = RunConfig("cpu", 1, 1)
    text = cpu.describe(CaseConfig())
    assert "cuDNN autotune" not in text
    assert text.endswith("GPU); TF32 off, oneDNN on" if onednn_enabled()
                         else "GPU); TF32 off, oneDNN off (Eigen kernels)"), text


@pytest.mark.parametrize("asked, expected", [("0", False), ("1", True)])
def test_rows_record_whether_onednn_ran(asked, expected):
    """TensorFlow decides at its first op whether its CPU kernels are oneDNN's (by default
    on AVX-512 CPUs with VNNI or BF16 only); the row records its decision, not the
    environment variable alone. TF_ENABLE_ONEDNN_OPTS=1 forces oneDNN on in any x86 build."""
    code = ("from adapters.tf.settings import settings_in_force; "
            "print(settings_in_force(False)['onednn'])")
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": asked, "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert out.split()[-1] == str(expected), out


def test_other_thread_counts_cannot_be_set_once_running(adapter):
    prepare(adapter, "lenet_tiny").close()   # TensorFlow has started
    with pytest.raises(RuntimeError, match="needs a new process"):
        TFAdapter(RunConfig("cpu", threads=1, interop_threads=1))
    TFAdapter(RunConfig("cpu", threads=2, interop_threads=1))  # the counts in force: fine


def test_fp32_is_strict(adapter):
    try:
        apply_precision("tf32", on_gpu=True)
        assert tf.config.experimental.tensor_float_32_execution_enabled()
        prepare(adapter, "lenet_tiny").close()
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        apply_precision("fp32", on_gpu=False)


def test_bf16_is_mixed_precision(adapter):
    fp32 = prepare(adapter, "lenet_tiny")
    bf16 = prepare(adapter, "lenet_tiny", precision="bf16")
    try:
        assert bf16.run_forward().dtype == tf.bfloat16           # computed in bfloat16
        assert all(v.dtype == tf.float32 for v in bf16.variables)  # variables float32
        loss, grads = bf16.run_gradient()
        assert loss.dtype == tf.float32 and all(g.dtype == tf.float32 for g in grads)
        a, b = fp32.forward_output(), bf16.forward_output()
        assert not np.array_equal(a, b)                           # really another precision
        np.testing.assert_allclose(b, a, rtol=0.1, atol=0.05 * np.abs(a).max())
    finally:
        fp32.close()
        bf16.close()


def test_bf16_lstm_and_lrn_run(adapter):
    # LRN has no bfloat16 kernel and cuDNN's LSTM none either: both have fallbacks.
    for name in ("lstm_tiny", "alexnet_bvlc_tiny"):
        prepared = prepare(adapter, name, precision="bf16")
        try:
            assert np.isfinite(prepared.forward_output()).all()
        finally:
            prepared.close()


@pytest.mark.parametrize("variant", ["graph", "xla"])
def test_train_step_traces_once_with_adamw(adapter, variant):
    """Later calls reuse the first call's trace (one XLA compile with ``xla``): AdamW's
    slots are built before tracing, so no call creates variables or retraces (JAX's train
    step compiled twice from a half-uncommitted first state: tests/adapters/test_jax.py)."""
    prepared = prepare(adapter, "gpt2_tiny", variant=variant, batch=2)
    try:
        run = prepared.step("train_step")
        for _ in range(4):
            prepared.sync(run())
        assert prepared.run_train.experimental_get_tracing_count() == 1
    finally:
        prepared.close()


@pytest.mark.parametrize("variant", ["graph", "eager", "xla"])
def test_variants_compute_the_same_function(adapter, variant):
    reference = prepare(adapter, "resnet_tiny")
    expected_out = reference.forward_output()
    expected_loss, expected_grads = reference.loss_and_gradients()
    reference.close()
    prepared = prepare(adapter, "resnet_tiny", variant=variant)
    try:
        np.testing.assert_allclose(prepared.forward_output(), expected_out, rtol=1e-4,
                                   atol=1e-5)
        loss, grads = prepared.loss_and_gradients()
        assert np.isclose(loss, expected_loss, rtol=1e-5)
        for name, grad in grads.items():
            np.testing.assert_allclose(grad, expected_grads[name], rtol=1e-3, atol=1e-5)
    finally:
        prepared.close()


def test_variants_run_as_named(adapter):
    graph = prepare(adapter, "lenet_tiny", variant="graph")
    eager = prepare(adapter, "lenet_tiny", variant="eager")
    xla = prepare(adapter, "lenet_tiny", variant="xla")
    try:
        assert isinstance(graph.run_forward, tf.types.experimental.PolymorphicFunction)
        assert not isinstance(eager.run_forward, tf.types.experimental.PolymorphicFunction)
        assert "HloModule" in xla.run_forward.experimental_get_compiler_ir()(stage="hlo")
        with pytest.raises(ValueError, match="jit_compile"):
            graph.run_forward.experimental_get_compiler_ir()
    finally:
        for prepared in (graph, eager, xla):
            prepared.close()
    assert "tf.function" in TFAdapter.variants["graph"]
    assert "jit_compile=True" in TFAdapter.variants["xla"]


@pytest.mark.parametrize("variant", ["graph", "xla"])
def test_tracing_happens_in_the_first_call_not_in_prepare(adapter, variant):
    prepared = prepare(adapter, "lenet_tiny", variant=variant)
    try:
        for measure in ("forward", "gradient"):
            step = prepared.step(measure)
            assert step.experimental_get_tracing_count() == 0
            step()
            step()
            assert step.experimental_get_tracing_count() == 1
    finally:
        prepared.close()


@pytest.mark.parametrize("variant", ["graph", "eager", "xla"])
def test_serve_traces_once_in_the_variant_and_refuses_other_shapes(adapter, variant):
    """``serve`` (suites/serving/) runs the variant's own execution: graph and XLA a
    tf.function (jit_compile under XLA) of the batch, with the prepared batch's shapes as
    its signature, traced at the first serve and never for a later batch; eager the
    Python function itself. Each batch is answered as float64 computes it (the sequence
    lengths travel with it), and a batch of other shapes is refused."""
    model = get_model("lstm_tiny")
    weights = canonical_weights(model)
    samples = make_batch(model, 12)
    batches = [Batch(samples.x[i:i + 4], None, samples.lengths[i:i + 4]) for i in (0, 4, 8)]
    prepared = adapter.prepare(model, weights, batches[0], CaseConfig(variant=variant))
    try:
        assert prepared.run_serve is None                 # nothing traced before serving
        served = [prepared.serve(batch) for batch in batches]
        compiled = isinstance(prepared.run_serve, tf.types.experimental.PolymorphicFunction)
        assert compiled == (variant != "eager")
        if compiled:
            assert prepared.run_serve.experimental_get_tracing_count() == 1
        if variant == "xla":
            inputs = place_batch(model, batches[0], prepared.device, prepared.layout)
            assert "HloModule" in prepared.run_serve.experimental_get_compiler_ir(inputs)(
                stage="hlo")
        with pytest.raises(ValueError, match="not the batch prepared"):
            prepared.serve(Batch(samples.x[:3], None, samples.lengths[:3]))
    finally:
        prepared.close()
    for batch, out in zip(batches, served):
        assert_fp32_close(out, reference_numpy.forward(model, weights, batch, train=False),
                          forward_rtol("lstm_tiny"))


# --- train_step: a copy of the network, one traced step with Keras's SGD -------------------

def test_param_layouts_invert_exactly():
    """Weights, trained weights and gradients pass through the same pair of maps."""
    rng = np.random.default_rng(0)
    oihw = rng.standard_normal((4, 3, 2, 5), dtype=np.float32)
    conv = ParamLayout(conv=True)
    assert conv.to_variable(oihw).shape == (2, 5, 3, 4)          # HWIO
    np.testing.assert_array_equal(conv.to_canonical(conv.to_variable(oihw)), oihw)
    rows = rng.standard_normal((3 * 2 * 4, 7), dtype=np.float32)   # (C, H, W) rows
    flat = ParamLayout(flattened=(3, 2, 4))
    hwc = flat.to_variable(rows)
    # Row (h, w, c) of the NHWC flatten is canonical row (c, h, w).
    np.testing.assert_array_equal(hwc[(1 * 4 + 3) * 3 + 2], rows[(2 * 2 + 1) * 4 + 3])
    np.testing.assert_array_equal(flat.to_canonical(hwc), rows)
    np.testing.assert_array_equal(AS_IS.to_canonical(AS_IS.to_variable(rows)), rows)


@pytest.mark.parametrize("name, variant, precision", [
    ("lenet_tiny", "graph", "fp32"), ("lenet_tiny", "eager", "fp32"),
    ("lenet_tiny", "xla", "fp32"), ("resnet_tiny", "graph", "bf16"),
    ("sae_tiny_ae2", "xla", "bf16"), ("lstm_tiny", "eager", "bf16"),
    # Grouped convolutions: split per group where this CPU's kernels lack groups.
    ("alexnet_bvlc_tiny", "graph", "fp32")])
def test_train_step_updates_a_copy_in_one_traced_step(adapter, name, variant, precision):
    """The first step is w - lr*g with g the canonical network's own gradient, in the
    case's precision, float32 master weights and momentum buffers; the optimizer's
    variables exist before the first call, which traces the step once (XLA-compiled under
    the xla variant); the canonical network and the running statistics stay as they were."""
    from models.measures import TRAIN_STEP
    from models.optimizers import SGD

    model = get_model(name)
    weights = canonical_weights(model)
    prepared = prepare(adapter, name, precision, variant)
    try:
        before = prepared.forward_output()
        _, grads = prepared.loss_and_gradients()
        grads = {n: prepared.canonical_gradient(n, g) for n, g in grads.items()}
        initial = prepared.trained_weights()
        step = prepared.step(TRAIN_STEP)
        assert prepared.step(TRAIN_STEP) is step
        optimizer = prepared.training.optimizer
        slots = [v.path for v in optimizer.variables]
        prepared.sync(step())
        trained = prepared.trained_weights()
        prepared.sync(step())
        prepared.sync(step())
        assert [v.path for v in optimizer.variables] == slots and int(optimizer.iterations) == 3
        assert all(v.dtype == tf.float32 for v in prepared.training.variables)
        assert all(m.dtype == "float32" for m in optimizer.momentums)
        if variant == "eager":
            assert not isinstance(step, tf.types.experimental.PolymorphicFunction)
        else:
            assert step.experimental_get_tracing_count() == 1
            if variant == "xla":
                assert "HloModule" in step.experimental_get_compiler_ir()(stage="hlo")
        statistics = {n: v.numpy() for n, v in prepared.network.variables.items()
                      if n.endswith(("running_mean", "running_var"))}
        copied = prepared.training.network.variables
        for n, value in statistics.items():
            np.testing.assert_array_equal(copied[n].numpy(), value)
        np.testing.assert_array_equal(prepared.forward_output(), before)
    finally:
        prepared.close()
    assert set(trained) == set(initial) == set(grads)
    u = 2.0 ** -24
    for n in trained:
        np.testing.assert_array_equal(initial[n], weights[n])
        update = SGD.learning_rate * grads[n]
        error = np.linalg.norm(trained[n] - (weights[n] - update))
        assert error <= 1e-5 * np.linalg.norm(update) + 2 * u * np.linalg.norm(weights[n]), n


# --- TensorFlow's fast path ----------------------------------------------------------------

def test_activations_are_nhwc_with_no_transposes_in_the_graph(adapter):
    for name in ("resnet_tiny", "vgg_tiny"):   # vgg: Flatten -> Dense, weights permuted
        prepared = prepare(adapter, name)
        try:
            model = get_model(name)
            channels, height, width = model.input.shape
            assert tuple(prepared.x.shape) == (4, height, width, channels)
            ops = graph_ops(prepared.run_forward) + graph_ops(prepared.run_gradient)
            assert "Conv2D" in ops and "Transpose" not in ops
        finally:
            prepared.close()


def test_batch_norm_is_fused_and_keeps_its_statistics(adapter):
    prepared = prepare(adapter, "resnet_tiny")
    try:
        assert "FusedBatchNormV3" in graph_ops(prepared.run_forward)
        assert "FusedBatchNormGradV3" in graph_ops(prepared.run_gradient)
        bn = prepared.body.layers[1]
        assert isinstance(bn, BatchNorm)
        before = prepared.forward_output(), bn.mean.numpy(), bn.var.numpy()
        for _ in range(3):
            prepared.run_gradient()
        after = prepared.forward_output(), bn.mean.numpy(), bn.var.numpy()
        for a, b in zip(before, after):
            np.testing.assert_array_equal(a, b)
    finally:
        prepared.close()


def test_grouped_convolution_is_one_op_where_the_kernels_have_groups(adapter):
    """One Conv2D per convolution where this TensorFlow's kernels run grouped
    convolutions (oneDNN, cuDNN); one per group, over split inputs, where they do not
    (Eigen's CPU kernels: TF_ENABLE_ONEDNN_OPTS=0). The conformance kit checks that both
    compute the reference's outputs and gradients."""
    from adapters.tf.network import grouped_conv_runs

    model = get_model("alexnet_bvlc_tiny")
    convs = [n for n in ir.all_nodes(model) if isinstance(n, ir.Conv2d)]
    assert any(n.groups > 1 for n in convs)
    prepared = prepare(adapter, "alexnet_bvlc_tiny")
    try:
        ops = graph_ops(prepared.run_forward)
        if grouped_conv_runs(prepared.device):
            assert ops.count("Conv2D") == len(convs) and "Split" not in ops
        else:
            assert ops.count("Conv2D") == sum(n.groups for n in convs) and "Split" in ops
            assert prepared.extra["grouped_conv_split"]
    finally:
        prepared.close()


@pytest.mark.parametrize("name", ["conv_tiny", "conv:c=3,i=8,f=4,k=3,s=2,p=1"])
def test_grad_input_and_grad_weight_are_the_backward_kernels_alone(adapter, name):
    """Each step runs only its backprop kernel (no forward Conv2D) and returns the
    gradient a tape gives for the sum of the outputs. The second layer's padding is
    placed by tf.pad (SAME would pad the other side)."""
    prepared = prepare(adapter, name)
    try:
        x_nhwc = tf.Variable(prepared.x)
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(prepared.body(x_nhwc, FP32))
        layer = prepared.body.layers[0]
        expected = tape.gradient(out, [x_nhwc, layer.weight, layer.bias])
        grad_input, grad_weight = prepared.step("grad_input"), prepared.step("grad_weight")
        input_ops, weight_ops = graph_ops(grad_input), graph_ops(grad_weight)
        assert "Conv2DBackpropInput" in input_ops and "Conv2DBackpropFilter" not in input_ops
        assert "Conv2DBackpropFilter" in weight_ops and "BiasAddGrad" in weight_ops
        assert "Conv2D" not in input_ops + weight_ops
        np.testing.assert_allclose(grad_input().numpy(), expected[0].numpy(), rtol=1e-5,
                                   atol=1e-5)
        dw, db = grad_weight()
        np.testing.assert_allclose(dw.numpy(), expected[1].numpy(), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(db.numpy(), expected[2].numpy(), rtol=1e-6)
    finally:
        prepared.close()


def test_single_dense_layer_backward_kernels(adapter):
    model = ir.Model("dense", "test", ir.InputSpec("vector", (5,)),
                     (ir.Dense("fc", 5, 3),), ir.Loss("sum"))
    weights = canonical_weights(model)
    prepared = adapter.prepare(model, weights, make_batch(model, 4), CaseConfig())
    try:
        x = tf.Variable(prepared.x)
        layer = prepared.body.layers[0]
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(prepared.body(x, FP32))
        expected = tape.gradient(out, [x, layer.weight, layer.bias])
        np.testing.assert_allclose(prepared.step("grad_input")().numpy(), expected[0].numpy(),
                                   rtol=1e-6)
        dw, db = prepared.step("grad_weight")()
        np.testing.assert_allclose(dw.numpy(), expected[1].numpy(), rtol=1e-6)
        np.testing.assert_allclose(db.numpy(), expected[2].numpy(), rtol=1e-6)
    finally:
        prepared.close()


def test_lstm_is_keras_with_cudnn_only_where_it_can_run(adapter):
    assert cudnn_lstm(True, "graph", "fp32") and cudnn_lstm(True, "eager", "tf32")
    assert not cudnn_lstm(True, "xla", "fp32")      # XLA cannot compile CudnnRNNV3
    assert not cudnn_lstm(False, "graph", "fp32")   # no cuDNN on the CPU
    # Never in bfloat16: the build's bf16 CudnnRNNV3 gets the gradients wrong on GPUs.
    assert not cudnn_lstm(True, "graph", "bf16")
    prepared = prepare(adapter, "lstm_tiny")
    try:
        layer = prepared.body.layers[1].layer
        assert layer.use_cudnn is False and layer.return_sequences
        assert prepared.extra["lstm_kernel"] == LSTM_KERNELS[False]
        assert "while" in " ".join(graph_ops(prepared.run_forward)).lower()
    finally:
        prepared.close()


def test_tied_decoder_reads_the_encoder_variable(adapter):
    prepared = prepare(adapter, "sae_tiny_ae2")
    try:
        decoder = prepared.body.layers[2]
        assert decoder.weight is prepared.params["enc2.weight"]
        assert "dec2.weight" not in prepared.params
        assert not any(v.trainable for layer in prepared.frozen.layers
                       for v in vars(layer).values() if isinstance(v, tf.Variable))
    finally:
        prepared.close()


def test_tied_language_model_head_reads_the_embedding_table(adapter):
    prepared = prepare(adapter, "gpt2_tiny")
    try:
        head = prepared.body.layers[-1]
        assert head.weight is prepared.params["wte.table"] and head.bias is None
        assert not any(name.startswith("lm_head") for name in prepared.params)
    finally:
        prepared.close()


@pytest.mark.parametrize("name", ["gpt2_tiny", "bert_tiny", "vit_tiny"])
@pytest.mark.parametrize("variant", ["eager", "xla"])
def test_transformers_match_the_reference_eagerly_and_under_xla(adapter, name, variant):
    """Attention, GELU, the embeddings and token_xent in op-by-op execution and
    XLA-compiled (the conformance kit runs the graph variant): the forward output and
    the loss against the float64 reference."""
    model = get_model(name)
    weights = canonical_weights(model)
    batch = make_batch(model, 4)
    prepared = adapter.prepare(model, weights, batch, CaseConfig(variant=variant))
    try:
        expected = reference_numpy.forward(model, weights, batch, train=False)
        np.testing.assert_allclose(prepared.forward_output(), expected, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(expected).max()))
        loss, grads = prepared.loss_and_gradients()
        expected_loss = reference_numpy.loss(model, weights, batch, train=True)
        assert np.isclose(loss, expected_loss, rtol=1e-4, atol=1e-6), (loss, expected_loss)
        assert all(np.isfinite(g).all() for g in grads.values())
    finally:
        prepared.close()


def test_xla_generation_matches_float64_from_one_program_per_pass(tmp_path):
    """Greedy generation under XLA: every step checked against float64 (the conformance
    kit generates in the graph variant), from two compiled programs, the prefill's and the
    decode step's, whatever the position. A decode step whose program depended on its
    position (the position table sliced from it: a slice's bounds are compile-time
    constants to XLA) was compiled again at every new token: 300 ms a token here, and on
    an H200 GPT-2's XLA generation gave no row in 7 minutes.
    XLA writes every program it compiles to --xla_dump_to, here in a fresh process."""
    code = ("from adapters.base import RunConfig; from adapters.tf import TFAdapter; "
            "from tests.conformance.test_generate import generates_as_float64; "
            "generates_as_float64(TFAdapter(RunConfig('cpu', 2, 1)), 'fp32', 'xla')")
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path}", "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, timeout=600)
    programs = [p.name for p in tmp_path.iterdir()
                if p.name.endswith(".before_optimizations.txt") and "inference__step_" in p.name]
    assert len(programs) == 2, programs


def test_patch_embedding_is_the_same_in_both_layouts():
    """ViT's image input in NCHW (GPU only: TensorFlow's CPU convolutions are NHWC) reads
    its patches in the same row-major order as in NHWC."""
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("NCHW convolutions run on a GPU only")
    model = get_model("vit_tiny")
    weights = canonical_weights(model)
    x = make_batch(model, 2).x
    outputs = []
    for layout in (NHWC, NCHW):
        with tf.device("/GPU:0"):
            _, body, _ = build(model, weights, layout=layout)
            outputs.append(body.layers[0](tf.constant(layout.from_nchw(x)), FP32).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)


# --- the IR mapping's edge cases -------------------------------------------------------------

POOLS = [(size, k, s, p, kind, ceil)
         for size, k, s, p, kind, ceil in itertools.product(
             range(3, 10), (1, 2, 3), (1, 2, 3), (0, 1), ("max", "avg"), (False, True))
         if 2 * p <= k and not (kind == "avg" and p)]


def run_body(model: ir.Model, weights, x_nchw: np.ndarray) -> np.ndarray:
    _, body, _ = build(model, weights)
    y = body(tf.constant(x_nchw.transpose(0, 2, 3, 1)), FP32).numpy()
    return y.transpose(0, 3, 1, 2)


def test_pooling_matches_the_reference_in_ceil_mode_edge_cases():
    """TensorFlow has only VALID and SAME; the builder pads explicitly (-inf for max, and
    divides averages by the valid count) to place windows as PyTorch and Caffe do."""
    rng = np.random.default_rng(0)
    differ = []
    for size, k, s, p, kind, ceil in POOLS:
        node = ir.Pool2d("pool", kind, (k, k), (s, s), (p, p), ceil)
        model = ir.Model("pool", "test", ir.InputSpec("image", (2, size, size)), (node,),
                         ir.Loss("sum"))
        x = rng.standard_normal((1, 2, size, size), dtype=np.float32)
        y = run_body(model, {}, x)
        expected = reference_numpy.pool2d(x.astype(np.float64), kind, (k, k), (s, s),
                                          (p, p), ceil)
        if y.shape != expected.shape or not np.allclose(y, expected, atol=1e-6):
            differ.append((size, k, s, p, kind, ceil))
    assert not differ


def test_convolution_padding_matches_the_reference():
    rng = np.random.default_rng(1)
    differ = []
    for size, k, s, p in itertools.product(range(5, 10), (1, 2, 3, 5), (1, 2, 3), (0, 1, 2)):
        if 2 * p > k or size + 2 * p < k:
            continue
        model = get_model(f"conv:c=2,i={size},f=3,k={k},s={s},p={p}")
        weights = canonical_weights(model)
        x = rng.standard_normal((1, 2, size, size), dtype=np.float32)
        y = run_body(model, weights, x)
        expected = reference_numpy.conv2d(x.astype(np.float64), weights["conv.weight"],
                                          weights["conv.bias"], (s, s), (p, p))
        if y.shape != expected.shape or not np.allclose(y, expected, atol=1e-5):
            differ.append((size, k, s, p))
    assert not differ


@pytest.mark.parametrize("size, alpha, beta, k", [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.5, 2.0)])
def test_lrn_arguments_map_caffe_to_tensorflow(size, alpha, beta, k):
    """tf.nn.local_response_normalization: depth_radius = (size-1)/2, alpha not divided
    by the window size, so alpha/size; a large alpha makes a wrong mapping visible."""
    node = ir.LRN("norm", size, alpha, beta, k)
    model = ir.Model("lrn", "test", ir.InputSpec("image", (7, 3, 3)), (node,), ir.Loss("sum"))
    x = np.random.default_rng(2).standard_normal((2, 7, 3, 3), dtype=np.float32) * 3
    expected = reference_numpy.lrn(x.astype(np.float64), size, alpha, beta, k)
    np.testing.assert_allclose(run_body(model, {}, x), expected, rtol=1e-5, atol=1e-6)


# --- epochs and the profiler -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["lstm_tiny", "bert_tiny"])
@pytest.mark.parametrize("variant", ["graph", "xla"])
def test_an_epoch_traces_once_and_the_next_epoch_reuses_it(adapter, variant, name):
    """Token batches of different padded lengths share one trace (the signature leaves
    the length open: the LSTM's mask, and the position rows and the attention mask taken
    at the batch's length), so neither a new length nor a second epoch traces again; the
    last batch's loss is the one a single-batch gradient step computes for it."""
    model = get_model(name)
    batches = make_epoch(model, 4, 5)
    assert len({b.x.shape[1] for b in batches}) > 1
    prepared = prepare(adapter, name, variant=variant)
    last = adapter.prepare(model, canonical_weights(model), batches[-1], CaseConfig(variant=variant))
    try:
        run = prepared.epoch_step("gradient", batches)
        traced = prepared.epoch_runs["gradient"]
        assert traced.experimental_get_tracing_count() == 0   # nothing traced before the call
        run()
        assert traced.experimental_get_tracing_count() == 1
        loss, _ = run()
        assert traced.experimental_get_tracing_count() == 1
        assert np.isclose(float(loss), last.loss_and_gradients()[0], rtol=1e-5)
    finally:
        prepared.close()
        last.close()


def test_epoch_signature_opens_only_the_dimensions_that_vary():
    lstm, lenet = get_model("lstm_tiny"), get_model("lenet_tiny")
    tokens = epoch_signature([place_batch(lstm, b, "/CPU:0") for b in make_epoch(lstm, 4, 5)])
    assert tokens["x"].shape.as_list() == [4, None]
    assert tokens["lengths"].mask.shape.as_list() == [4, None]
    assert tokens["lengths"].count.shape.as_list() == [4, 1]
    images = epoch_signature([place_batch(lenet, b, "/CPU:0") for b in make_epoch(lenet, 4, 3)])
    assert images["x"].shape.is_fully_defined() and images["labels"].shape.as_list() == [4]


@pytest.mark.parametrize("variant", ["graph", "eager", "xla"])
def test_a_convnet_profile_is_mostly_convolution_and_names_tensorflow_ops(adapter, variant):
    """Shares, not times (the machine is shared). Graph and eager ops are reported by
    type: every name in the top list is a registered TensorFlow op (oneDNN's rewrites
    such as _MklNativeFusedConv2D included), never an instance like "gradient_tape/...";
    XLA reports its HLO instructions (convolution, reduce-window ...)."""
    from tensorflow.python.framework import op_def_registry

    prepared = prepare(adapter, "lenet_tiny", variant=variant)
    try:
        profile = prepared.profile("gradient", iterations=3)
    finally:
        prepared.close()
    shares = {kind: ms / profile.total_ms for kind, ms in profile.by_layer_type.items()}
    # No absolute share: on a loaded machine, or eagerly where each op's dispatch costs
    # more than its arithmetic, "other" (the tape, the loss, copies) can take most of the
    # time. What holds anyway is a ranking: each of LeNet's convolutions runs at least as
    # many ops in a gradient step (forward, backprop-input, backprop-filter, bias gradient)
    # as the pooling or ReLU after it, each with more arithmetic, so whether fixed per-op
    # cost or arithmetic dominates, convolution outweighs pooling and ReLU.
    assert shares["conv"] > max(shares["pool"], shares["relu"]), shares
    assert not profile.kernel_level
    names = [kernel.name for kernel in profile.top_kernels]
    if variant == "xla":
        assert "convolution" in names
    else:
        assert all(op_def_registry.get(name) is not None for name in names), names
        assert any("Conv2DBackpropFilter" in name for name in names)


def test_nested_host_events_count_once():
    """Self time: an event less the events nested in it on the same thread."""
    ms = 1_000_000_000  # picoseconds
    spans = [(0, 10 * ms, "outer"), (2 * ms, 5 * ms, "inner"), (3 * ms, 4 * ms, "innermost"),
             (6 * ms, 8 * ms, "second")]
    assert dict(self_times(spans)) == {"outer": 5.0, "inner": 2.0, "innermost": 1.0,
                                       "second": 2.0}


def _xspace_plane(xplane_pb2, space, name: str, lines: dict[str, list[tuple]]):
    """A plane of ``lines``: line name -> [(event name, start ps, duration ps, stats)]."""
    plane = space.planes.add(name=name)
    metadata_ids: dict[str, int] = {}

    def metadata_id(table, key: str) -> int:
        if key not in metadata_ids:
            metadata_ids[key] = len(metadata_ids) + 1
            table[metadata_ids[key]].id = metadata_ids[key]
            table[metadata_ids[key]].name = key
        return metadata_ids[key]

    for line_id, (line_name, events) in enumerate(lines.items()):
        line = plane.lines.add(id=line_id, name=line_name)
        for event_name, start, duration, stats in events:
            event = line.events.add(metadata_id=metadata_id(plane.event_metadata, event_name),
                                    offset_ps=start, duration_ps=duration)
            for stat_name, value in stats.items():
                event.stats.add(metadata_id=metadata_id(plane.stat_metadata, stat_name),
                                ref_value=metadata_id(plane.stat_metadata, value))
    return plane


def test_gpu_profiles_take_op_and_kernel_times_from_the_device_streams():
    """The GPU branch on a hand-made trace (the shape cupti_collector.cc writes): kernels
    count by the type of the op that launched them, kernels and copies by name, and
    lines other than the streams (xprof's derived "TensorFlow Ops") are not counted."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    conv = {"tf_op": "conv1/Conv2D:Conv2D"}
    grad = {"tf_op": "gradient_tape/conv1/Conv2DBackpropFilter:Conv2DBackpropFilter"}
    plane = _xspace_plane(xplane_pb2, space, "/device:GPU:0", {
        "Stream #7(Kernel,MemcpyH2D)": [
            ("sm90_xmma_fprop_implicit_gemm", 0, 3_000_000_000, conv),
            ("nchwToNhwcKernel", 3_000_000_000, 1_000_000_000, conv),
            ("sm90_xmma_wgrad_implicit_gemm", 4_000_000_000, 4_000_000_000, grad),
            ("MemcpyH2D", 10_000_000_000, 1_000_000_000, {})],
        "TensorFlow Ops": [("conv1/Conv2D", 0, 4_000_000_000, {})],
    })
    host = _xspace_plane(xplane_pb2, space, "/host:CPU", {
        "tf_Compute": [("conv1/Conv2D:Conv2D", 0, 5_000_000_000, {})]})
    host.event_metadata[1].display_name = "Conv2D"   # launch time only: not counted on a GPU
    ops, kernels = profiled_times([plane, host], on_gpu=True)
    totals: dict[str, float] = {}
    for name, ms, _ in ops:
        totals[name] = totals.get(name, 0.0) + ms
    assert totals == {"Conv2D": 4.0, "Conv2DBackpropFilter": 4.0, "MemcpyH2D": 1.0}
    assert sorted(name for name, _, _ in kernels) == [
        "MemcpyH2D", "nchwToNhwcKernel", "sm90_xmma_fprop_implicit_gemm",
        "sm90_xmma_wgrad_implicit_gemm"]
    # The timeline: 11 ms from the first kernel to the last, 2 ms of them idle (before the
    # copy), the 1 ms layout conversion counted as a transpose; the host's launch events
    # and the derived "TensorFlow Ops" line stay off it.
    timeline = device_timeline(kernel_intervals([plane, host]), iterations=1)
    assert timeline == {"span_ms": 11.0, "busy_ms": 9.0, "idle_ms": 2.0, "kernel_ms": 9.0,
                        "transpose_ms": 1.0, "kernels": 4.0}


# --- unsupported cases say why --------------------------------------------------------------

@pytest.mark.parametrize("name, precision, measure, reason", [
    ("lenet_tiny", "tf32", None, "CPUs have no TF32"),
    ("lenet_tiny", "fp32", "transfer", "same on cpu"),
    ("lenet_tiny", "fp32", "grad_input", "single-layer"),
    ("sae_tiny_ae2", "fp32", "grad_weight", "single-layer"),
    ("lenet_tiny", "fp32", "no_such_measure", "unknown measure"),
])
def test_unsupported_cases_give_reasons(adapter, name, precision, measure, reason):
    with pytest.raises(Unsupported, match=reason):
        prepared = prepare(adapter, name, precision)
        try:
            prepared.step(measure)
        finally:
            prepared.close()


def test_gpu_without_a_visible_gpu_is_unavailable():
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU; the GPU tests below cover it")
    with pytest.raises(DeviceUnavailable, match="sees no GPU"):
        TFAdapter(RunConfig("gpu", 2, 1))


# --- memory, OOM and threads -------------------------------------------------------------

def test_a_real_out_of_memory_error_is_recognised(adapter):
    """A tensor twice the machine's memory: TensorFlow's CPU allocator (its limit is the
    physical memory) refuses it with ResourceExhaustedError. Not through a network: a
    oneDNN convolution whose allocation fails crashes the process instead of raising
    (TF 2.21, seen here), which the runner records as a failed row."""
    import psutil

    elements = 2 * psutil.virtual_memory().total // 4
    with pytest.raises(tf.errors.ResourceExhaustedError) as caught:
        tf.zeros([elements], tf.float32)
    assert adapter.is_out_of_memory(caught.value), caught.value


def test_other_errors_are_not_out_of_memory(adapter):
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))
    assert not adapter.is_out_of_memory(caught.value)
    assert not adapter.is_out_of_memory(ValueError("out of range"))


def test_two_threads_really_share_the_work():
    """Structural, not wall-clock (the machine is shared): with one intra-op thread one
    OS thread does the work; with two, a second thread does a real share of it. A gradient
    step, so oneDNN's forward and backward kernels both count."""
    shares = {}
    for threads in (1, 2):
        shares[threads], extra = thread_shares("tf", threads, "gradient")
        assert extra["intra_op_threads"] == threads
    # With one: one thread computes; the next does the Python side (about 6% here).
    assert shares[1][1] < 0.15, shares
    # With two: two threads compute, in about equal shares (46% and 46% here).
    assert shares[2][1] > 0.3, shares


# --- GPU (skipped where TensorFlow sees no GPU: run them on the GPU host) -----------------

@pytest.fixture(scope="module")
def gpu_adapter():
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip(f"tensorflow {tf.__version__} sees no GPU")
    if not tf.config.get_visible_devices("GPU"):
        pytest.skip("a CPU adapter in this process hid the GPUs: run the GPU tests in "
                    "their own process (pytest tests/adapters/test_tf.py -k gpu)")
    return TFAdapter(RunConfig("gpu", threads=2, interop_threads=1))


@pytest.mark.parametrize("name", ["lenet_tiny", "alexnet_bvlc_tiny", "googlenet_tiny",
                                  "resnet_tiny", "sae_tiny_ae2", "lstm_tiny", "conv_tiny"])
def test_gpu_forward_and_gradients_match(gpu_adapter, name):
    model = get_model(name)
    weights, batch = canonical_weights(model), make_batch(model, 4)
    prepared = gpu_adapter.prepare(model, weights, batch, CaseConfig())
    try:
        assert "GPU" in prepared.x.device
        output = prepared.forward_output()
        loss, _ = prepared.loss_and_gradients()
    finally:
        prepared.close()
    expected = reference_numpy.forward(model, weights, batch)
    # The conformance kit's fp32 tolerance: TF32 (10-bit mantissa) would miss it.
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4 * scale)
    assert np.isclose(loss, reference_numpy.loss(model, weights, batch), rtol=1e-4)


def test_gpu_lstm_runs_cudnn(gpu_adapter):
    prepared = prepare(gpu_adapter, "lstm_tiny")
    try:
        assert "CudnnRNNV3" in graph_ops(prepared.run_gradient)
    finally:
        prepared.close()


def test_gpu_bf16_lstm_runs_and_stays_close(gpu_adapter):
    """cuDNN's LSTM in bfloat16 where the build registers it (reported, not required)."""
    fp32 = prepare(gpu_adapter, "lstm_tiny")
    bf16 = prepare(gpu_adapter, "lstm_tiny", precision="bf16")
    try:
        a, b = fp32.forward_output(), bf16.forward_output()
        np.testing.assert_allclose(b, a, rtol=0.1, atol=0.05 * np.abs(a).max())
        loss, _ = bf16.loss_and_gradients()
        assert np.isfinite(loss)
        uses_cudnn = "CudnnRNNV3" in graph_ops(bf16.run_gradient)
        assert uses_cudnn == cudnn_lstm(True, "graph", "bf16")
        print(f"bf16 LSTM on cuDNN: {uses_cudnn}")
    finally:
        fp32.close()
        bf16.close()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gpu_train_step_runs_the_lstm_as_the_gradient_does(gpu_adapter, precision):
    """train_step on the GPU: cuDNN's LSTM in the training graph wherever the gradient
    pass runs it (in bf16 only where the build has the kernel), the copy and its momentum
    buffers on the GPU, and a first step of w - lr*g (cuDNN's weight gradients may sum in
    another order from one call to the next)."""
    from models.measures import TRAIN_STEP
    from models.optimizers import SGD

    weights = canonical_weights(get_model("lstm_tiny"))
    prepared = prepare(gpu_adapter, "lstm_tiny", precision=precision)
    try:
        _, grads = prepared.loss_and_gradients()
        step = prepared.step(TRAIN_STEP)
        uses_cudnn = "CudnnRNNV3" in graph_ops(step)
        assert uses_cudnn == ("CudnnRNNV3" in graph_ops(prepared.run_gradient))
        assert uses_cudnn == cudnn_lstm(True, "graph", precision)
        prepared.sync(step())
        trained = prepared.trained_weights()
        assert all("GPU" in v.device for v in prepared.training.variables)
        assert all("GPU" in m.value.device for m in prepared.training.optimizer.momentums)
        print(f"{precision} train_step LSTM on cuDNN: {uses_cudnn}")
    finally:
        prepared.close()
    for name, grad in grads.items():
        update = SGD.learning_rate * grad
        error = np.linalg.norm(trained[name] - (weights[name] - update))
        assert error <= {"fp32": 1e-4, "bf16": 1e-2}[precision] * np.linalg.norm(update), name


def test_gpu_transfer_memory_and_environment(gpu_adapter):
    prepared = prepare(gpu_adapter, "resnet_tiny", batch=8)
    try:
        assert "CPU" in prepared.host_x.device
        moved = prepared.step("transfer")()
        prepared.sync(moved)
        assert "GPU" in moved.device
        prepared.reset_peak_memory()
        prepared.sync(prepared.step("gradient")())
        memory = prepared.peak_memory()
        assert memory.kind == "allocator" and memory.peak_bytes > 0
    finally:
        prepared.close()
    env = gpu_adapter.environment()
    assert env["gpu_model"] and env["cuda"] and env["cudnn"]
    assert all(tf.config.experimental.get_memory_growth(g)
               for g in tf.config.list_physical_devices("GPU"))


def test_gpu_out_of_memory_is_recognised(gpu_adapter):
    """A forward pass whose output (16 MiB per example) is larger than any GPU's memory."""
    model = get_model("conv:c=1,i=64,f=1024,k=3,p=1")
    x = np.zeros((16384, 1, 64, 64), np.float32)   # 256 GiB of output
    prepared = gpu_adapter.prepare(model, canonical_weights(model), Batch(x), CaseConfig())
    try:
        with pytest.raises(Exception) as caught:
            prepared.sync(prepared.step("forward")())
    finally:
        prepared.close()
    assert gpu_adapter.is_out_of_memory(caught.value), caught.value


def test_gpu_profile_is_kernel_level(gpu_adapter):
    prepared = prepare(gpu_adapter, "alexnet_tiny")
    try:
        profile = prepared.profile("gradient", iterations=3)
    finally:
        prepared.close()
    assert profile.kernel_level
    shares = {kind: ms / profile.total_ms for kind, ms in profile.by_layer_type.items()}
    assert shares["conv"] + shares["fc"] > 0.5, shares
    print("top kernels:", [(k.name, round(k.ms, 3)) for k in profile.top_kernels])


def test_gpu_tf32_variant_is_accepted(gpu_adapter):
    prepared = prepare(gpu_adapter, "conv_tiny", precision="tf32")
    try:
        assert tf.config.experimental.tensor_float_32_execution_enabled()
        prepared.sync(prepared.step("forward")())
    finally:
        prepared.close()
        apply_precision("fp32", on_gpu=True)


# --- the NCHW layout (a GPU layout: checked here under XLA, which compiles NCHW on the CPU) --

def test_layout_places_windows_paddings_and_arrays():
    assert NHWC.window((2, 3)) == [1, 2, 3, 1] and NCHW.window((2, 3)) == [1, 1, 2, 3]
    assert NHWC.paddings([1, 2], [3, 4]) == [[0, 0], [1, 2], [3, 4], [0, 0]]
    assert NCHW.paddings([1, 2], [3, 4]) == [[0, 0], [0, 0], [1, 2], [3, 4]]
    assert (NHWC.channel_axis, NCHW.channel_axis) == (-1, 1)
    assert (NHWC.spatial_axes, NCHW.spatial_axes) == ([1, 2], [2, 3])
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    assert NHWC.from_nchw(x).shape == (2, 4, 5, 3) and NCHW.from_nchw(x) is x
    np.testing.assert_array_equal(NHWC.to_nchw(NHWC.from_nchw(x)), x)
    with pytest.raises(ValueError, match="NHWC or NCHW"):
        Layout("CHWN")


def test_layouts_by_device_and_variant():
    assert layout_for("cpu", "graph") is NHWC and layout_for("cpu", "nhwc") is NHWC
    assert layout_for("gpu", "nchw") is NCHW and layout_for("gpu", "nhwc") is NHWC
    assert layout_for("gpu", "graph") is DEFAULT_LAYOUT["gpu"]
    with pytest.raises(Unsupported, match="NHWC only"):
        layout_for("cpu", "nchw")


def test_the_nchw_variant_is_unsupported_on_the_cpu(adapter):
    with pytest.raises(Unsupported, match="NHWC only"):
        prepare(adapter, "lenet_tiny", variant="nchw")
    nhwc = prepare(adapter, "lenet_tiny", variant="nhwc")
    try:
        assert nhwc.extra["layout"] == "NHWC"
        assert isinstance(nhwc.run_forward, tf.types.experimental.PolymorphicFunction)
    finally:
        nhwc.close()


def nchw_network(name: str, batch: int = 2):
    model = get_model(name)
    weights, data = canonical_weights(model), make_batch(model, batch)
    frozen, body, params = build(model, weights, cudnn_lstm=False, layout=NCHW)
    assert not frozen.layers
    return model, weights, data, body, params


@pytest.mark.parametrize("name", ["resnet_tiny", "vgg_tiny", "googlenet_tiny",
                                  "alexnet_bvlc_tiny"])
def test_an_nchw_network_computes_the_reference_function(name):
    """Forward: NCHW in, NCHW out, equal to the float64 reference at the conformance
    kit's rtol 1e-4. Gradients: the same as the NHWC network's (filters are HWIO in both
    layouts; the first dense layer after a Flatten keeps canonical row order in NCHW, so
    its gradient is the NHWC one with rows permuted: compared by norm)."""
    model, weights, data, body, params = nchw_network(name)
    x, labels = tf.constant(data.x), tf.constant(data.labels)
    forward = tf.function(lambda: body(x, FP32), jit_compile=True)
    expected = reference_numpy.forward(model, weights, data)
    output = forward().numpy()
    np.testing.assert_allclose(output, expected, rtol=1e-4,
                               atol=1e-4 * float(np.abs(expected).max()))
    # No transposes in the traced graph (only around LRN, whose op is NHWC only).
    ops = graph_ops(tf.function(lambda: body(x, FP32)))
    has_lrn = any(isinstance(node, ir.LRN) for node in ir.all_nodes(model))
    assert ("Transpose" in ops) == has_lrn, ops
    assert "Conv2D" in ops
    if name == "googlenet_tiny":
        # Its concatenations along the channel axis, which moves with the layout, are
        # checked by the forward above; the gradient is TensorFlow's differentiation of
        # that forward, whose XLA compile took most of a minute on two cores.
        return

    def loss_and_grads(network, variables, inputs):
        with tf.GradientTape() as tape:
            out = network(inputs, Context(True, tf.float32))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=out))
        return loss, tape.gradient(loss, variables)

    names = list(params)
    loss, grads = tf.function(lambda: loss_and_grads(body, [params[n] for n in names], x),
                              jit_compile=True)()
    _, nhwc_body, nhwc_params = build(model, weights, cudnn_lstm=False)
    nhwc_x = tf.constant(NHWC.from_nchw(data.x))
    nhwc_loss, nhwc_grads = tf.function(lambda: loss_and_grads(
        nhwc_body, [nhwc_params[n] for n in names], nhwc_x), jit_compile=True)()
    assert np.isclose(float(loss), float(nhwc_loss), rtol=1e-5)
    for param, grad, nhwc_grad in zip(names, grads, nhwc_grads):
        # fp32 sums of up to a few thousand terms in another order: relative 1e-4 of the
        # norm is ~30x the sqrt(K)·2^-24 rounding expected for K ~ 1e3.
        assert np.linalg.norm(grad) == pytest.approx(np.linalg.norm(nhwc_grad), rel=1e-4,
                                                     abs=1e-7), param


@pytest.mark.parametrize("size, k, s, p, kind, ceil", [
    (7, 3, 2, 1, "max", True), (8, 3, 2, 0, "avg", True), (9, 2, 2, 0, "avg", False),
    (6, 3, 1, 1, "max", False)])
def test_nchw_pooling_places_windows_as_the_reference(size, k, s, p, kind, ceil):
    node = ir.Pool2d("pool", kind, (k, k), (s, s), (p, p), ceil)
    model = ir.Model("pool", "test", ir.InputSpec("image", (2, size, size)), (node,),
                     ir.Loss("sum"))
    _, body, _ = build(model, {}, layout=NCHW)
    x = np.random.default_rng(3).standard_normal((1, 2, size, size), dtype=np.float32)
    y = tf.function(lambda: body(tf.constant(x), FP32), jit_compile=True)().numpy()
    expected = reference_numpy.pool2d(x.astype(np.float64), kind, (k, k), (s, s), (p, p), ceil)
    np.testing.assert_allclose(y, expected, atol=1e-6)


def test_nchw_backward_kernels_match_the_tape():
    """grad_input and grad_weight in NCHW, explicit padding cropped on the right axes."""
    model = get_model("conv:c=3,i=8,f=4,k=3,s=2,p=1")
    weights = canonical_weights(model)
    _, body, _ = build(model, weights, layout=NCHW)
    layer = body.layers[0]
    assert layer.explicit is not None
    x = tf.Variable(make_batch(model, 2).x)

    def taped():
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(body(x, FP32))
        return tape.gradient(out, [x, layer.weight, layer.bias])
    expected = tf.function(taped, jit_compile=True)()
    kernels = ConvBackward(layer, x, tf.float32, "/CPU:0")
    dx = tf.function(kernels.grad_input, jit_compile=True)()
    dw, db = tf.function(kernels.grad_weight, jit_compile=True)()
    np.testing.assert_allclose(dx.numpy(), expected[0].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), expected[1].numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(db.numpy(), expected[2].numpy(), rtol=1e-6)


# --- GPU: settings in force, arithmetic, placement, layouts, timeline ---------------------

def fp32_tolerance(model: ir.Model) -> float:
    """Relative tolerance (of the output's largest magnitude) between two fp32 runs of
    ``model`` that sum in different orders or with different algorithms: a dot product
    of K terms carries a relative rounding error near sqrt(K)·u (u = 2^-24, random-sign
    errors), L such layers in sequence grow it about sqrt(L)-fold; cuDNN's Winograd and
    FFT algorithms add up to 10x, and 3x is margin. TF32 (u = 2^-11) exceeds it by ~1e3."""
    products = [(n.in_channels // n.groups) * n.kernel[0] * n.kernel[1]
                if isinstance(n, ir.Conv2d) else n.in_features
                for n in ir.all_nodes(model) if isinstance(n, (ir.Conv2d, ir.Dense))]
    return 30 * np.sqrt(len(products)) * np.sqrt(max(products)) * 2.0 ** -24


def test_gpu_rows_record_the_settings_in_force(gpu_adapter):
    prepared = prepare(gpu_adapter, "lenet_tiny")
    try:
        settings = prepared.extra["tf_settings"]
        assert settings["tf32_execution"] is False   # read back from TensorFlow
        assert settings["cudnn_autotune"] == read_bool_env("TF_CUDNN_USE_AUTOTUNE", True)
        assert settings["xla_gpu_autotune_level"] == xla_gpu_autotune_level()
        assert "TF32 off" in gpu_adapter.describe(CaseConfig())
        print("settings in force:", settings)
    finally:
        prepared.close()


def test_gpu_fp32_is_strict_in_the_arithmetic(gpu_adapter):
    """TF32 off is checked by its effect, not only its flag: a 1024-term fp32 matmul on
    the GPU stays near sqrt(K)·2^-24 ≈ 2e-6 of the float64 product, where TF32's 10-bit
    mantissa (2^-11) gives ~1e-3. With TF32 switched on, the same product is that coarse
    (Ampere and newer GPUs; older ones have no TF32 and are skipped for that half). The
    errors are printed."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 1024), dtype=np.float32),
            rng.standard_normal((1024, 256), dtype=np.float32))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error() -> float:
        with tf.device("/GPU:0"):
            product = tf.matmul(tf.constant(a), tf.constant(b)).numpy()
        return float(np.abs(product - exact).max() / np.abs(exact).max())

    prepare(gpu_adapter, "lenet_tiny").close()      # the adapter's fp32 setting
    strict = error()
    assert strict < 1e-5, strict
    try:
        apply_precision("tf32", on_gpu=True)
        coarse = error()
    finally:
        apply_precision("fp32", on_gpu=True)
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    if details.get("compute_capability", (0, 0)) >= (8, 0):
        # TF32 rounds each operand to 2^-11: ~4e-4 of the largest entry here, ~100x the
        # fp32 figure; 5x is enough to show that the switch changes the arithmetic.
        assert coarse > 5 * strict, (coarse, strict)
    print(f"max relative error: fp32 {strict:.1e}, tf32 {coarse:.1e}")


def test_gpu_places_variables_batch_and_outputs_on_the_gpu(gpu_adapter):
    prepared = prepare(gpu_adapter, "resnet_tiny")
    try:
        assert all("GPU" in v.device for v in prepared.variables)
        assert "GPU" in prepared.x.device and "GPU" in prepared.inputs["labels"].device
        assert "GPU" in prepared.run_forward().device
        loss, grads = prepared.run_gradient()
        assert all("GPU" in g.device for g in grads)
    finally:
        prepared.close()


@pytest.mark.parametrize("name, batch", [("resnet50", 2), ("vgg16", 2),
                                         ("alexnet_bvlc_tiny", 4), ("googlenet_tiny", 4)])
def test_gpu_outputs_equal_the_cpu_within_fp32_rounding(gpu_adapter, name, batch):
    """The same network on the CPU (NHWC, built under tf.device: a CPU adapter would hide
    the GPU from this process) and through the GPU adapter (a grouped convolution and LRN
    in alexnet_bvlc_tiny, concatenation in googlenet_tiny): equal up to fp32 rounding
    (fp32_tolerance), which TF32 on either side would exceed."""
    model = get_model(name)
    weights, data = canonical_weights(model), make_batch(model, batch)
    prepared = gpu_adapter.prepare(model, weights, data, CaseConfig())
    try:
        gpu_out = prepared.forward_output()
    finally:
        prepared.close()
    with tf.device("/CPU:0"):
        # Eagerly: in a graph Grappler's remapper fuses a grouped Conv2D + BiasAdd + Relu,
        # which TensorFlow 2.21's CPU kernels refuse where oneDNN is off.
        _, body, _ = build(model, weights, cudnn_lstm=False)
        cpu_out = body(tf.constant(NHWC.from_nchw(data.x)), FP32).numpy()
    tolerance = fp32_tolerance(model)
    difference = float(np.abs(gpu_out - cpu_out).max() / np.abs(cpu_out).max())
    assert difference < tolerance, (difference, tolerance)
    print(f"{name}: GPU vs CPU {difference:.1e} (tolerance {tolerance:.1e})")


@pytest.mark.parametrize("name", ["resnet_tiny", "vgg_tiny", "alexnet_bvlc_tiny"])
def test_gpu_nchw_variant_computes_the_same_function(gpu_adapter, name):
    """NCHW on cuDNN: the reference's outputs and the NHWC network's loss and gradient
    norms (Flatten -> Dense and LRN and grouped convolution included)."""
    model = get_model(name)
    weights, data = canonical_weights(model), make_batch(model, 4)
    runs = {}
    for variant in ("nhwc", "nchw"):
        prepared = gpu_adapter.prepare(model, weights, data, CaseConfig(variant=variant))
        try:
            assert prepared.extra["layout"] == variant.upper()
            assert tuple(prepared.x.shape[1:]) == (tuple(model.input.shape) if variant == "nchw"
                                                   else NHWC.from_nchw(data.x).shape[1:])
            runs[variant] = (prepared.forward_output(), *prepared.loss_and_gradients())
        finally:
            prepared.close()
    expected = reference_numpy.forward(model, weights, data)
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(runs["nchw"][0], expected, rtol=1e-4, atol=1e-4 * scale)
    assert np.isclose(runs["nchw"][1], runs["nhwc"][1], rtol=1e-5)
    for param, grad in runs["nchw"][2].items():
        assert np.linalg.norm(grad) == pytest.approx(np.linalg.norm(runs["nhwc"][2][param]),
                                                     rel=1e-4, abs=1e-7), param


def test_gpu_grouped_convolution_runs_as_one_cudnn_op(gpu_adapter):
    model = get_model("alexnet_bvlc_tiny")
    convs = [n for n in ir.all_nodes(model) if isinstance(n, ir.Conv2d)]
    prepared = prepare(gpu_adapter, "alexnet_bvlc_tiny")
    try:
        assert graph_ops(prepared.run_forward).count("Conv2D") == len(convs)
        loss, grads = prepared.loss_and_gradients()
        assert np.isfinite(loss) and all(np.isfinite(g).all() for g in grads.values())
        assert np.isclose(loss, reference_numpy.loss(model, canonical_weights(model),
                                                     make_batch(model, 4)), rtol=1e-4)
    finally:
        prepared.close()


def test_gpu_forward_profile_has_a_device_timeline(gpu_adapter):
    prepared = prepare(gpu_adapter, "resnet_tiny", batch=8)
    try:
        profile = prepared.profile("forward", iterations=5)
    finally:
        prepared.close()
    timeline = profile.timeline
    assert profile.kernel_level and timeline is not None
    assert 0 < timeline["busy_ms"] <= timeline["span_ms"] + 1e-9
    assert timeline["kernel_ms"] == pytest.approx(profile.total_ms, rel=1e-6)
    assert 0 <= timeline["transpose_ms"] <= timeline["kernel_ms"]
    print("forward timeline:", timeline)


def test_keras_comparison_cases_and_references():
    """The comparison's command line: MODEL:BATCH cases, one-line errors for bad ones;
    the ±5% target is against tf_keras, which every model has, in both data formats."""
    import argparse

    from comparisons import keras_vs_dlbench as comparison

    assert comparison.parse_cases(comparison.GPU_CASES) == [
        ("resnet50", 16), ("vgg16", 16), ("resnet50", 64), ("googlenet", 16), ("alexnet", 16)]
    for bad in ("resnet50", "resnet51:16", "vgg16:0", "vgg16:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="MODEL:BATCH"):
            comparison.parse_cases(bad)
    for references in comparison.REFERENCES.values():
        assert comparison.TARGET_REFERENCE in references
        formats = {data_format for _, _, data_format in references.values()}
        assert formats == {"channels_last", "channels_first"}
    assert comparison.relative_difference([1.0, -2.0], [1.0, -2.002]) == pytest.approx(1e-3 / 2.002 * 2)


def test_cuda_library_preload_finds_the_wheels_cusolver(tmp_path, monkeypatch):
    """The library TensorFlow's loader misses in its pip CUDA wheels is loaded from the
    nvidia-cusolver wheel's folder, with global symbols, before TensorFlow's import
    (adapters/tf/cuda_libraries.py); without that wheel nothing is loaded."""
    from adapters.tf import cuda_libraries

    empty, wheels = tmp_path / "empty", tmp_path / "site"
    empty.mkdir()
    library = wheels / "cusolver" / "lib" / "libcusolver.so.11"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    loaded = []
    monkeypatch.setattr(cuda_libraries.ctypes, "CDLL",
                        lambda path, mode: loaded.append((path, mode)))
    assert cuda_libraries.preload([str(empty)]) == []
    assert cuda_libraries.preload([str(empty), str(wheels)]) == [library]
    assert loaded == [(str(library), cuda_libraries.ctypes.RTLD_GLOBAL)]

    def refuse(path, mode):
        raise OSError(f"{path}: cannot open shared object file")
    monkeypatch.setattr(cuda_libraries.ctypes, "CDLL", refuse)
    assert cuda_libraries.preload([str(wheels)]) == []   # left to TensorFlow's own error


def test_the_row_records_the_attention_implementation(adapter):
    prepared = prepare(adapter, "gpt2_tiny", batch=2)
    assert prepared.extra["attention"].startswith("tf.einsum")
    assert prepared.extra["attention"].endswith(", graph")
    prepared.close()
    assert "attention" not in prepare(adapter, "lenet_tiny", batch=2).extra


def test_xla_generation_matches_float64_and_traces_each_shape_once(adapter):
    """XLA's generation (serving-gpu runs it): every step within fp32's bound of float64
    and every token float64's, over two prompts and 15 steps, from two traces (the
    prefill's shape and the decode step's): a position passed as a Python int would
    retrace, and XLA recompile, at every token."""
    from tests.conformance.test_generate import NEW, PROMPT, generates_as_float64, prepared_for
    generates_as_float64(adapter, "fp32", "xla")
    _, _, _, prepared = prepared_for(adapter, "gpt2_tiny", "fp32", "xla")
    try:
        generator = prepared.generator(PROMPT + NEW)
        token = generator.prefill(np.arange(PROMPT) % 7)
        for _ in range(3):
            token = generator.decode(token)
        assert generator.step.experimental_get_tracing_count() == 2
    finally:
        prepared.close()
