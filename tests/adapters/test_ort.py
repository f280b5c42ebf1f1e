"""ONNX Runtime adapter: settings really reach the session, variants change the optimised
graph, the ONNX mapping holds where the conformance kit does not look (ceil-mode pooling
edge cases, the tied decoder and language-model head, LSTM gate order, attention's padding
mask, GELU's fused kernels), an epoch runs one static-shape session per
input shape, the profile reads ORT's trace by op type, unsupported cases say why, OOM errors
are recognised, and more threads really run on more cores.

Runs inside the ``tests(ort)`` nox session (``--framework=ort``)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from adapters.base import CaseConfig, DeviceUnavailable, RunConfig, Unsupported  # noqa: E402
from adapters.ort import OrtAdapter  # noqa: E402
from adapters.ort.adapter import (  # noqa: E402
    ALLOW_SPINNING,
    VARIANT_SETTINGS,
    cuda_provider_options,
    graph_inputs,
    nodes_on_cpu,
    session_options,
)
from adapters.ort.network import (  # noqa: E402
    FUSED_KINDS,
    IR_VERSION,
    OPSET,
    Builder,
    Value,
    build,
    expected_fusions,
    lstm_weights,
    optimise_transformer,
)
from adapters.ort.profile import profile_from_trace  # noqa: E402
from adapters.registry import load_registry  # noqa: E402
from models import ir  # noqa: E402
from models import reference as reference_numpy  # noqa: E402
from models.inputs import make_batch, make_epoch  # noqa: E402
from models.weights import canonical_weights  # noqa: E402
from models.zoo import get_model  # noqa: E402
from tests.adapters.thread_probe import thread_shares  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ort.GraphOptimizationLevel


@pytest.fixture(scope="module")
def cpu_adapter():
    return OrtAdapter(RunConfig("cpu", threads=2, interop_threads=1))


def prepare(adapter, name: str, case: CaseConfig | None = None, batch: int = 2):
    model = get_model(name)
    return adapter.prepare(model, canonical_weights(model), make_batch(model, batch),
                           case or CaseConfig())


def optimised_ops(proto_bytes: bytes, options, tmp_path: Path) -> dict[str, int]:
    """Op counts of the graph ONNX Runtime actually runs (optimized_model_filepath)."""
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    ort.InferenceSession(proto_bytes, options, providers=["CPUExecutionProvider"])
    counts: dict[str, int] = {}
    for node in onnx.load(options.optimized_model_filepath).graph.node:
        key = f"{node.domain}:{node.op_type}" if node.domain else node.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


# --- settings reach the session ----------------------------------------------------------

def test_session_gets_threads_mode_and_level(cpu_adapter):
    prepared = prepare(cpu_adapter, "resnet_tiny")
    try:
        options = prepared.session.get_session_options()
        assert options.intra_op_num_threads == 2
        assert options.inter_op_num_threads == 1
        assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
        assert options.graph_optimization_level == LEVELS.ORT_ENABLE_ALL
        assert prepared.session.get_providers() == ["CPUExecutionProvider"]
        assert prepared.extra["graph_optimization"] == "ORT_ENABLE_ALL"
    finally:
        prepared.close()
    text = cpu_adapter.describe(CaseConfig())
    assert "ORT_SEQUENTIAL" in text and "ORT_ENABLE_ALL" in text
    assert "CPUExecutionProvider" in text


def test_gpu_rows_describe_the_cuda_options():
    gpu = OrtAdapter.__new__(OrtAdapter)   # describe() needs only the config, not a GPU
    gpu.config = RunConfig("gpu", 1, 1)
    assert gpu.describe(CaseConfig()).endswith(
        "CUDAExecutionProvider, cudnn_conv_algo_search=EXHAUSTIVE, use_tf32=0")
    assert "use_tf32=1" in gpu.describe(CaseConfig("tf32"))
    assert "search=HEURISTIC" in gpu.describe(CaseConfig("fp32", "cudnn_heuristic"))
    assert gpu.describe(CaseConfig("fp16", "ort_cuda_graph")).endswith(
        "use_tf32=0, enable_cuda_graph=1")


def test_node_placement_is_readable(cpu_adapter):
    prepared = prepare(cpu_adapter, "resnet_tiny")
    try:
        placed = nodes_on_cpu(prepared.session)
    finally:
        prepared.close()
    if placed is None:
        pytest.skip(f"onnxruntime {ort.__version__} cannot report node placement")
    assert "Conv" in placed or "FusedConv" in placed, placed


@pytest.mark.parametrize("variant, level", [
    ("ort_all", LEVELS.ORT_ENABLE_ALL), ("ort_extended", LEVELS.ORT_ENABLE_EXTENDED),
    ("ort_basic", LEVELS.ORT_ENABLE_BASIC), ("ort_disabled", LEVELS.ORT_DISABLE_ALL)])
def test_variant_sets_its_optimisation_level(cpu_adapter, variant, level):
    prepared = prepare(cpu_adapter, "lenet_tiny", CaseConfig("fp32", variant))
    try:
        assert prepared.session.get_session_options().graph_optimization_level == level
    finally:
        prepared.close()


def test_optimisation_levels_change_the_graph_run(tmp_path):
    """Each level really rewrites the graph: none keeps batch norm, basic folds it into
    the convolutions, extended fuses Conv+ReLU, all adds the NCHWc layout (ORT docs,
    graph optimizations)."""
    model = get_model("resnet_tiny")
    proto = build(model, canonical_weights(model), (2, *model.input.shape), False)
    config = RunConfig("cpu", 1, 1)
    ops = {v: optimised_ops(proto.SerializeToString(), session_options(config, v), tmp_path)
           for v in ("ort_disabled", "ort_basic", "ort_extended", "ort_all")}
    assert ops["ort_disabled"].get("BatchNormalization", 0) > 0
    assert "BatchNormalization" not in ops["ort_basic"]
    assert "com.microsoft:FusedConv" not in ops["ort_basic"]
    assert ops["ort_extended"].get("com.microsoft:FusedConv", 0) > 0
    assert any(op.startswith("com.microsoft.nchwc:") for op in ops["ort_all"])
    assert not any(op.startswith("com.microsoft.nchwc:") for op in ops["ort_extended"])


def test_cuda_options_make_fp32_strict_and_set_the_algorithm_search():
    assert cuda_provider_options("ort_all", "fp32")["use_tf32"] == "0"
    assert cuda_provider_options("ort_all", "tf32")["use_tf32"] == "1"
    assert cuda_provider_options("ort_all", "fp32")["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    assert cuda_provider_options("cudnn_heuristic", "fp32")["cudnn_conv_algo_search"] == "HEURISTIC"
    assert cuda_provider_options("cudnn_default_algo", "fp32")["cudnn_conv_algo_search"] == "DEFAULT"
    assert cuda_provider_options("ort_cuda_graph", "fp16")["enable_cuda_graph"] == "1"
    assert "enable_cuda_graph" not in cuda_provider_options("ort_all", "fp32")
    assert set(VARIANT_SETTINGS) == set(OrtAdapter.variants)


# --- epochs: one static-shape session per input shape ------------------------------------

def test_epoch_builds_one_session_per_shape_and_matches_forward(cpu_adapter):
    model = get_model("lstm_tiny")
    batches = make_epoch(model, 3, 6)
    shapes = [b.x.shape for b in batches]
    assert len(set(shapes)) > 1, "the epoch must vary the padded length"
    prepared = prepare(cpu_adapter, "lstm_tiny", batch=3)
    try:
        prepared.sync(prepared.epoch_step("forward", batches)())
        bound = prepared.epoch
        # One session per distinct shape, each built for that shape, none spinning (the
        # pools of sessions that run in turn must not take each other's cores). Bindings
        # and device inputs are per batch.
        sessions = {id(b.session) for b in bound}
        assert len(sessions) == len(set(shapes))
        for batch, b in zip(batches, bound):
            assert b.session.get_inputs()[0].shape == list(batch.x.shape)
            assert b.session is not prepared.session
            assert b.session.get_session_options().get_session_config_entry(
                ALLOW_SPINNING) == "0"
        assert len({id(b.binding) for b in bound}) == len(batches)
        epoch_outputs = [np.asarray(b.binding.copy_outputs_to_cpu()[0]) for b in bound]
    finally:
        prepared.close()
    # Batches of two different shapes give what a forward pass prepared on them gives.
    picked = [0, shapes.index(next(s for s in shapes if s != shapes[0]))]
    for index in picked:
        single = cpu_adapter.prepare(model, canonical_weights(model), batches[index],
                                     CaseConfig())
        try:
            expected = single.forward_output()
        finally:
            single.close()
        np.testing.assert_allclose(epoch_outputs[index], expected, rtol=1e-6, atol=1e-7)


def test_epoch_of_one_shape_runs_in_the_forward_session(cpu_adapter):
    """Image batches all have the prepared batch's shape: no second session."""
    model = get_model("lenet_tiny")
    prepared = prepare(cpu_adapter, "lenet_tiny", CaseConfig("fp32", "ort_basic"))
    try:
        run = prepared.epoch_step("forward", make_epoch(model, 2, 3))
        prepared.sync(run())
        assert all(b.session is prepared.session for b in prepared.epoch)
        assert prepared.session.get_session_options().graph_optimization_level == \
            LEVELS.ORT_ENABLE_BASIC
    finally:
        prepared.close()


# --- profiles: ORT's trace by op type ------------------------------------------------------

def test_profile_of_a_convnet_names_real_op_types(cpu_adapter, tmp_path, monkeypatch):
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(profile_dir))
    prepared = prepare(cpu_adapter, "lenet_tiny")
    try:
        profile = prepared.profile("forward", iterations=3)
    finally:
        prepared.close()
    assert not any(profile_dir.iterdir()), "the trace file must be deleted"
    assert profile.iterations == 3 and not profile.kernel_level
    assert profile.by_layer_type["conv"] > 0 and profile.by_layer_type["fc"] > 0
    # The operations are the op types of the graph ORT runs, not its node names, and each
    # is counted once per profiled iteration: the warm-up runs are left out.
    model = get_model("lenet_tiny")
    proto = build(model, canonical_weights(model), (2, *model.input.shape), False)
    ran = optimised_ops(proto.SerializeToString(),
                        session_options(RunConfig("cpu", 2, 1), "ort_all"), tmp_path)
    op_types = {key.rsplit(":", 1)[-1]: 0 for key in ran}
    for key, count in ran.items():
        op_types[key.rsplit(":", 1)[-1]] += count
    names = {op.name for op in profile.top_kernels}
    assert "Conv" in names and names & {"Gemm", "FusedGemm", "MatMul"}
    for op in profile.top_kernels:
        assert op.name in op_types, op.name
        assert op.calls == op_types[op.name], op


def event(cat: str, name: str, ts: int, dur: int, op_name: str | None = None) -> dict:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X",
            "args": {} if op_name is None else {"op_name": op_name}}


# One warm-up run, then one profiled run, as a CUDA build with kernel tracing writes them:
# node events time the launch, kernel events the device; fence events are bookkeeping.
TRACE = [
    event("Node", "conv1_kernel_time", 1, 900, "FusedConv"),
    event("Kernel", "sm90_xmma_fprop_implicit_gemm_tf32", 2, 500, "FusedConv"),
    event("Session", "model_run", 0, 1000),
    event("Node", "conv1_fence_before", 11, 7, "FusedConv"),
    event("Node", "conv1_kernel_time", 11, 3, "FusedConv"),
    event("Kernel", "sm90_xmma_fprop_implicit_gemm_tf32", 12, 400, "FusedConv"),
    event("Node", "fc1_kernel_time", 13, 2, "Gemm"),
    event("Kernel", "sm90_xmma_gemm_f32f32_tf32f32", 14, 200, "Gemm"),
    event("Kernel", "MemcpyDeviceToDevice", 15, 10, ""),
    event("Session", "model_run", 10, 700),
]


def test_trace_on_cpu_counts_node_times_after_the_warm_up():
    profile = profile_from_trace(TRACE, "forward", warmup=1, iterations=1, on_gpu=False)
    assert not profile.kernel_level
    # The profiled run's node times only: no fence (7 µs), no warm-up (900 µs).
    assert profile.by_layer_type["conv"] == pytest.approx(0.003)
    assert profile.by_layer_type["fc"] == pytest.approx(0.002)
    assert {op.name for op in profile.top_kernels} == {"FusedConv", "Gemm"}


def test_trace_on_gpu_splits_device_time_by_the_launching_op():
    profile = profile_from_trace(TRACE, "forward", warmup=1, iterations=1, on_gpu=True)
    assert profile.kernel_level
    assert profile.by_layer_type["conv"] == pytest.approx(0.4)
    assert profile.by_layer_type["fc"] == pytest.approx(0.2)
    assert profile.by_layer_type["other"] == pytest.approx(0.01)   # the copy, by its name
    assert [k.name for k in profile.top_kernels] == [
        "sm90_xmma_fprop_implicit_gemm_tf32", "sm90_xmma_gemm_f32f32_tf32f32",
        "MemcpyDeviceToDevice"]
    assert profile.total_ms == pytest.approx(0.61)


def test_trace_without_kernel_events_on_gpu_is_unsupported():
    """Release builds have no CUDA kernel tracing: launch times are no GPU profile."""
    launches_only = [e for e in TRACE if e["cat"] != "Kernel"]
    with pytest.raises(Unsupported, match="no CUDA kernel events"):
        profile_from_trace(launches_only, "forward", warmup=1, iterations=1, on_gpu=True)


def test_trace_with_other_runs_than_asked_is_refused():
    with pytest.raises(RuntimeError, match="2 runs"):
        profile_from_trace(TRACE, "forward", warmup=2, iterations=1, on_gpu=False)


# --- unsupported cases say why ---------------------------------------------------------

@pytest.mark.parametrize("case, reason", [
    (CaseConfig("tf32"), "CPUs have no TF32"),
    (CaseConfig("bf16"), "no automatic mixed precision"),
    (CaseConfig("fp32", "cudnn_heuristic"), "GPU only"),
    (CaseConfig("fp32", "cudnn_default_algo"), "GPU only"),
    (CaseConfig("fp32", "ort_fused"), "no self-attention"),
    (CaseConfig("fp16", "ort_fused"), "CUDA execution provider only"),
    (CaseConfig("fp16", "ort_all"), "fp16 is ort_fused's and ort_cuda_graph's"),
    (CaseConfig("fp32", "ort_cuda_graph"), "the CPU provider has no graphs"),
    (CaseConfig("fp16", "ort_cuda_graph"), "CUDA execution provider only"),
])
def test_unsupported_cases_give_reasons(cpu_adapter, case, reason):
    with pytest.raises(Unsupported, match=reason):
        prepare(cpu_adapter, "lenet_tiny", case)


def test_gradients_are_unsupported_and_not_listed(cpu_adapter):
    assert load_registry()["ort"].measures == ("forward", "transfer", "epoch_forward", "profile",
                                               "serve", "generate")
    prepared = prepare(cpu_adapter, "conv_tiny")
    try:
        for measure in ("gradient", "grad_input", "grad_weight"):
            with pytest.raises(Unsupported, match="inference engine"):
                prepared.step(measure)
        with pytest.raises(Unsupported, match="inference engine"):
            prepared.epoch_step("gradient", [make_batch(get_model("conv_tiny"), 2)])
        with pytest.raises(Unsupported, match="inference engine"):
            prepared.profile("gradient", 1)
        with pytest.raises(Unsupported, match="inference engine"):
            prepared.loss_and_gradients()
        with pytest.raises(Unsupported, match="same on cpu"):
            prepared.step("transfer")
        fingerprint = prepared.fingerprint()   # the forward half still works
        assert fingerprint.loss is None and fingerprint.grad_norms is None
    finally:
        prepared.close()


def test_gpu_without_cuda_is_unavailable():
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA; the GPU path is checked on the GPU host")
    with pytest.raises(DeviceUnavailable, match="CUDAExecutionProvider"):
        OrtAdapter(RunConfig("gpu", 1, 1))


def test_an_ir_node_without_mapping_names_the_node():
    @dataclasses.dataclass(frozen=True)
    class Mystery:
        name: str

    with pytest.raises(Unsupported, match="'oracle'.*Mystery"):
        Builder({}, {}, None, 0).node(Mystery("oracle"), Value("input", 4))


# --- the ONNX mapping ------------------------------------------------------------------

def test_graph_has_pinned_versions_and_passes_the_checker():
    model = get_model("lstm_tiny")
    batch = make_batch(model, 3)
    proto = build(model, canonical_weights(model), batch.x.shape, True)
    assert proto.ir_version == IR_VERSION
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", OPSET)]
    onnx.checker.check_model(proto, full_check=True)
    lstm = next(n for n in proto.graph.node if n.op_type == "LSTM")
    assert lstm.input[4] == "lengths"   # sequence_lens is wired


def test_tied_decoder_reads_the_encoder_initializer():
    model = get_model("sae_tiny_ae2")
    proto = build(model, canonical_weights(model), (4, *model.input.shape), False)
    gemms = {n.name: n for n in proto.graph.node if n.op_type == "Gemm"}
    enc, dec = gemms["enc2"], gemms["dec2"]
    assert dec.input[1] == enc.input[1] == "enc2.weight"
    assert {a.name: a.i for a in dec.attribute}.get("transB") == 1
    names = [t.name for t in proto.graph.initializer]
    assert names.count("enc2.weight") == 1 and "dec2.weight" not in names


def test_tied_lm_head_reads_the_embedding_table():
    """GPT-2's logits x @ wte.table.T read the one initializer that the embedding's Gather
    reads: the tie holds by construction."""
    model = get_model("gpt2_tiny")
    proto = build(model, canonical_weights(model), make_batch(model, 2).x.shape, False)
    nodes = {n.name: n for n in proto.graph.node}
    assert nodes["wte"].op_type == "Gather" and nodes["wte"].input[0] == "wte.table"
    transpose = nodes[nodes["lm_head"].input[1]]
    assert transpose.op_type == "Transpose" and transpose.input[0] == "wte.table"
    names = [t.name for t in proto.graph.initializer]
    assert names.count("wte.table") == 1 and not any(n.startswith("lm_head.") for n in names)


def test_padding_mask_hides_the_keys_past_each_length():
    """BERT's graph reads the lengths; changing the tokens past an example's length leaves
    its valid steps' outputs as they are, which they would not be unmasked."""
    model = get_model("bert_tiny")
    weights, batch = canonical_weights(model), make_batch(model, 2)
    short = int(np.argmin(batch.lengths))
    length = int(batch.lengths[short])
    assert length < batch.x.shape[1]               # the batch really is padded
    inputs = graph_inputs(model, batch)
    assert "lengths" in inputs
    changed = dict(inputs, input=inputs["input"].copy())
    changed["input"][short, length:] = (changed["input"][short, length:] + 1) % 96

    def run(feeds: dict[str, np.ndarray], with_lengths: bool) -> np.ndarray:
        proto = build(model, weights, batch.x.shape, with_lengths)
        session = ort.InferenceSession(proto.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return session.run(None, {k: v for k, v in feeds.items()
                                  if with_lengths or k != "lengths"})[0]

    before, after = run(inputs, True), run(changed, True)
    np.testing.assert_allclose(after[short, :length], before[short, :length], rtol=1e-6,
                               atol=1e-6)
    unmasked = run(inputs, False) - run(changed, False)
    assert np.abs(unmasked[short, :length]).max() > 1e-3
    # A causal model alone needs no lengths.
    gpt2 = get_model("gpt2_tiny")
    assert "lengths" not in graph_inputs(gpt2, make_batch(gpt2, 2))


def test_gelu_forms_run_as_fused_kernels(tmp_path):
    """With optimisations off the formulas run as written; at the extended level the erf
    form is one Gelu node per GELU (ORT 1.31 fuses it already at the basic level) and the
    tanh form one FastGelu node: the graph is written in the pattern ORT's fusions match."""
    config = RunConfig("cpu", 1, 1)
    for name, fused, formula in (("bert_tiny", "Gelu", "Erf"),
                                 ("gpt2_tiny", "com.microsoft:FastGelu", "Tanh")):
        model = get_model(name)
        batch = make_batch(model, 2)
        proto = build(model, canonical_weights(model), batch.x.shape, name == "bert_tiny")
        written, extended = (optimised_ops(proto.SerializeToString(),
                                           session_options(config, v), tmp_path)
                             for v in ("ort_disabled", "ort_extended"))
        assert written.get(formula, 0) > 0 and fused not in written
        gelus = sum(isinstance(node, ir.Activation) and node.kind.startswith("gelu")
                    for node in ir.all_nodes(model))
        fused_count = sum(count for op, count in extended.items()
                          if op.split(":")[-1] == fused.split(":")[-1])
        assert fused_count == gelus and formula not in extended, extended


# --- ort_fused: ONNX Runtime's transformer optimizer ----------------------------------------

TRANSFORMERS = ("gpt2_tiny", "bert_tiny", "vit_tiny")


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_fused_variant_names_its_fusions_and_stays_within_the_fp32_bound(
        cpu_adapter, name, tmp_path, monkeypatch):
    """ort_fused runs com.microsoft Attention and the optimizer's SkipLayerNormalization and
    GELU fusions, says so in the row (fusions apart from what the builder wrote, nothing
    left unfused), and its fingerprint (the worker's path) is within the fp32 bound of
    float64, like the default graph's in the conformance kit."""
    from models.error_bounds import bounds
    from suites.truth.check import fingerprint_fields
    from tests.conformance import goldens

    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model = get_model(name)
    prepared = prepare(cpu_adapter, name, CaseConfig("fp32", "ort_fused"), goldens.BATCH)
    try:
        row = prepared.extra["transformer_optimizer"]
        errors = fingerprint_fields(prepared, model, goldens.BATCH, 0, Unsupported)["vs_f64"]
        graph = prepared.fused.proto.graph   # what the session was given
    finally:
        prepared.close()
    expected = expected_fusions(model)
    assert row["not_fused"] is None and row["float16"] is False, row
    assert row["written_by_builder"]["Attention"] == expected["attention"] > 0, row
    assert row["fusions"]["SkipLayerNormalization"] >= expected["skip_layer_norm"] > 0, row
    assert sum(row["fusions"].get(op, 0) for op in FUSED_KINDS["gelu"]) == expected["gelu"]
    assert row["model_type"] == {"gpt2_tiny": "gpt2", "bert_tiny": "bert",
                                 "vit_tiny": "vit"}[name]
    assert prepared.extra["attention"].startswith("com.microsoft Attention")
    # The session runs the optimized graph: no unfused attention or GELU formula left.
    ops = {node.op_type for node in graph.node}
    assert "Softmax" not in ops and "Erf" not in ops and "Tanh" not in ops, ops
    assert errors["output"] <= bounds(model, goldens.BATCH, "fp32").output, errors


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_fp16_conversion_keeps_float32_io_and_stays_within_the_fp16_bound(name):
    """The GPU's fp16 graph, checked here on the CPU provider (which runs its float16 ops
    behind casts): weights float16, inputs and output as before (IOBinding binds the
    same arrays), the output within the fp16 bound of float64."""
    from models.error_bounds import bounds

    model = get_model(name)
    weights, batch = canonical_weights(model), make_batch(model, 4)
    inputs = graph_inputs(model, batch)
    proto = build(model, weights, inputs["input"].shape, "lengths" in inputs,
                  fused_attention=True)
    io_types = [(value.name, value.type.tensor_type.elem_type)
                for value in (*proto.graph.input, *proto.graph.output)]
    fused = optimise_transformer(model, proto, float16=True)
    graph = fused.proto.graph
    assert fused.float16 and fused.not_fused == ()
    assert [(value.name, value.type.tensor_type.elem_type)
            for value in (*graph.input, *graph.output)] == io_types
    kinds = {init.data_type for init in graph.initializer}
    assert onnx.TensorProto.FLOAT16 in kinds and onnx.TensorProto.FLOAT not in kinds, kinds
    session = ort.InferenceSession(fused.proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    output = session.run(None, inputs)[0]
    expected = reference_numpy.forward(model, weights, batch, train=False)
    error = float(np.abs(output - expected).max() / np.abs(expected).max())
    assert bounds(model, 4, "fp32").output < error <= bounds(model, 4, "fp16").output, error


def test_a_fusion_that_did_not_happen_is_named():
    """The standard-op attention (ort_all's graph) is a pattern the optimizer does not
    fuse: the result says so rather than passing as fused."""
    model = get_model("gpt2_tiny")
    proto = build(model, canonical_weights(model), (2, 16), False)
    fused = optimise_transformer(model, proto, float16=False)
    assert fused.not_fused == ("attention: 0 of 2 in the graph",), fused.not_fused
    assert "Attention" not in fused.fusions and "Attention" not in fused.written


def test_only_ort_knows_fp16():
    """The worker asks the adapter before prepare: fp16 is an unsupported row elsewhere."""
    assert "fp16" in OrtAdapter.precisions
    OrtAdapter(RunConfig("cpu", 1, 1)).check_precision(CaseConfig("fp16", "ort_fused"))
    from adapters.base import Adapter

    assert "fp16" not in Adapter.precisions


def test_lstm_gates_are_reordered_to_onnx_iofc():
    rng = np.random.default_rng(0)
    hidden, inputs = 3, 2
    w_ih = rng.standard_normal((inputs, 4 * hidden)).astype(np.float32)
    w_hh = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32)
    bias = rng.standard_normal(4 * hidden).astype(np.float32)
    w, r, b = lstm_weights(w_ih, w_hh, bias)
    i, f, g, o = np.split(w_ih, 4, axis=1)
    np.testing.assert_array_equal(w[0], np.concatenate([i, o, f, g], axis=1).T)
    assert w.shape == (1, 4 * hidden, inputs) and r.shape == (1, 4 * hidden, hidden)
    np.testing.assert_array_equal(b[0, 4 * hidden:], 0)


POOLS = [(size, k, s, p, kind, ceil)
         for size, k, s, p, kind, ceil in itertools.product(
             range(3, 10), (1, 2, 3), (1, 2, 3), (0, 1), ("max", "avg"), (False, True))
         if 2 * p <= k and not (kind == "avg" and p)]


def test_pooling_matches_the_reference_in_ceil_mode_edge_cases():
    """ONNX's ceil mode keeps a last window that starts in the right padding; Caffe,
    PyTorch and the IR drop it. The builder pads explicitly where they differ."""
    rng = np.random.default_rng(0)
    differ = []
    for size, k, s, p, kind, ceil in POOLS:
        node = ir.Pool2d("pool", kind, (k, k), (s, s), (p, p), ceil)
        model = ir.Model("pool", "test", ir.InputSpec("image", (2, size, size)), (node,),
                         ir.Loss("sum"))
        x = rng.standard_normal((1, 2, size, size), dtype=np.float32)
        session = ort.InferenceSession(build(model, {}, x.shape, False).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        y = session.run(None, {"input": x})[0]
        expected = reference_numpy.pool2d(x.astype(np.float64), kind, (k, k), (s, s),
                                          (p, p), ceil)
        if y.shape != expected.shape or not np.allclose(y, expected, atol=1e-6):
            differ.append((size, k, s, p, kind, ceil))
    assert not differ


# --- memory, OOM and threads -----------------------------------------------------------

def run_python(code: str, timeout: float = 240) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_real_out_of_memory_error_is_recognised(cpu_adapter):
    """The address space is capped just above what the process holds, then a forward
    pass needs a 1 GiB output: ORT's arena fails and the adapter must call it OOM."""
    result = run_python("""
        import json, resource
        import psutil
        from adapters.base import CaseConfig, RunConfig
        from adapters.ort import OrtAdapter
        from models.inputs import make_batch
        from models.weights import canonical_weights
        from models.zoo import get_model
        adapter = OrtAdapter(RunConfig("cpu", 1, 1))
        model = get_model("conv:c=3,i=64,f=256,k=3,p=1")
        weights, batch = canonical_weights(model), make_batch(model, 256)
        cap = psutil.Process().memory_info().vms + (512 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            prepared = adapter.prepare(model, weights, batch, CaseConfig())
            prepared.sync(prepared.step("forward")())
            print(json.dumps({"error": None}))
        except Exception as error:
            print(json.dumps({"error": str(error)[:300], "oom": adapter.is_out_of_memory(error)}))
    """)
    assert result["error"], "a 1 GiB output under a 512 MiB cap must fail"
    assert result["oom"], result["error"]


def test_other_errors_are_not_out_of_memory(cpu_adapter):
    prepared = prepare(cpu_adapter, "lenet_tiny")
    try:
        with pytest.raises(Exception) as caught:   # a wrongly shaped input: a real ORT error
            prepared.session.run(None, {"input": np.zeros((1, 1), np.float32)})
    finally:
        prepared.close()
    assert not cpu_adapter.is_out_of_memory(caught.value)
    assert not cpu_adapter.is_out_of_memory(ValueError("shape mismatch"))


def test_two_threads_really_share_the_work():
    """Structural, not wall-clock (the machine is shared): with one intra-op thread one OS
    thread does all the work; with two, a second thread does a real share of it."""
    shares = {threads: thread_shares("ort", threads, "forward")[0] for threads in (1, 2)}
    assert shares[1][1] < 0.05, shares          # nobody but the caller worked
    assert shares[2][1] > 0.25, shares          # the pool's second thread took a share


# --- GPU (skipped where no CUDA GPU is visible: run them on the GPU host) ----------------

@pytest.fixture(scope="module")
def gpu_adapter():
    try:
        return OrtAdapter(RunConfig("gpu", threads=1, interop_threads=1))
    except DeviceUnavailable as error:
        pytest.skip(f"no GPU: {error}")


@pytest.mark.parametrize("name", ["lenet_tiny", "alexnet_bvlc_tiny", "googlenet_tiny",
                                  "resnet_tiny", "sae_tiny_ae2", "lstm_tiny", "gpt2_tiny",
                                  "bert_tiny", "vit_tiny"])
def test_gpu_forward_matches_numpy_reference(gpu_adapter, name):
    model = get_model(name)
    weights, batch = canonical_weights(model), make_batch(model, 4)
    prepared = gpu_adapter.prepare(model, weights, batch, CaseConfig())
    try:
        assert prepared.session.get_providers()[0] == "CUDAExecutionProvider"
        output = prepared.forward_output()
    finally:
        prepared.close()
    expected = reference_numpy.forward(model, weights, batch)
    # The conformance kit's fp32 tolerance: TF32 (10-bit mantissa) would miss it.
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("case, tf32, search", [
    (CaseConfig("fp32"), "0", "EXHAUSTIVE"), (CaseConfig("tf32"), "1", "EXHAUSTIVE"),
    (CaseConfig("fp32", "cudnn_heuristic"), "0", "HEURISTIC"),
    (CaseConfig("fp32", "cudnn_default_algo"), "0", "DEFAULT")])
def test_gpu_session_reports_the_cuda_options(gpu_adapter, case, tf32, search):
    prepared = prepare(gpu_adapter, "conv_tiny", case)
    try:
        applied = prepared.session.get_provider_options()["CUDAExecutionProvider"]
        assert (applied["use_tf32"], applied["cudnn_conv_algo_search"]) == (tf32, search)
        assert prepared.extra["cuda_provider_options"]["use_tf32"] == tf32
    finally:
        prepared.close()


def test_gpu_steps_transfer_and_memory(gpu_adapter):
    prepared = prepare(gpu_adapter, "resnet_tiny", batch=8)
    try:
        for measure in ("forward", "transfer"):
            prepared.sync(prepared.step(measure)())
        prepared.reset_peak_memory()
        assert prepared.peak_memory().peak_bytes is None
        assert "no statistics" in prepared.extra["peak_memory_note"]
        assert isinstance(prepared.extra["nodes_on_cpu"], (list, type(None)))
        assert gpu_adapter.environment()["framework_version"] == ort.__version__
    finally:
        prepared.close()


def test_gpu_out_of_memory_is_recognised(gpu_adapter):
    """A 3×3 convolution whose output needs 205 GiB: more than any one GPU has."""
    model = get_model("conv:c=3,i=224,f=512,k=3,p=1")
    prepared = gpu_adapter.prepare(model, canonical_weights(model), make_batch(model, 2048),
                                   CaseConfig())
    try:
        with pytest.raises(Exception) as caught:
            prepared.sync(prepared.step("forward")())
    finally:
        prepared.close()
    assert gpu_adapter.is_out_of_memory(caught.value), str(caught.value)[:500]


def test_gpu_epoch_and_profile(gpu_adapter):
    """The epoch matches forward on the GPU too; the profile is a GPU one (kernel events)
    or, in a build without CUDA kernel tracing, unsupported with its reason."""
    model = get_model("lstm_tiny")
    batches = make_epoch(model, 4, 4)
    prepared = prepare(gpu_adapter, "lstm_tiny", batch=4)
    try:
        prepared.sync(prepared.epoch_step("forward", batches)())
        first = np.asarray(prepared.epoch[0].binding.copy_outputs_to_cpu()[0])
        expected = reference_numpy.forward(model, canonical_weights(model), batches[0])
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-4 * scale)
    finally:
        prepared.close()
    prepared = prepare(gpu_adapter, "alexnet_tiny", batch=4)
    try:
        profile = prepared.profile("forward", iterations=2)
    except Unsupported as error:
        assert "no CUDA kernel events" in str(error)
        return
    finally:
        prepared.close()
    assert profile.kernel_level
    assert profile.by_layer_type["conv"] > 0 and profile.by_layer_type["fc"] > 0


def test_the_summary_graph_pools_examples_in_float64():
    """The output summary read where the output lives (adapters/ort/summary.py) against
    numpy's float64 mean and standard deviation of the whole array. Values 1000 + N(0, 1):
    a float32 sum of squares about zero would lose the spread (1000² ≫ 1 in 24 bits), so
    this checks that the squares are taken about each example's centre and pooled on the
    host: the standard deviation to 1e-5. The mean comes from float32 sums of n = 3·40·40
    values per example, each within n·2⁻²⁴ of its magnitude (sequential summation's
    bound), so the mean is held to n·2⁻²⁴ of 1000."""
    import onnxruntime as ort

    from adapters.ort.summary import summarise_bound_output

    values = (1000 + np.random.default_rng(3).standard_normal((5, 3, 40, 40))).astype(np.float32)
    summary = summarise_bound_output(ort.OrtValue.ortvalue_from_numpy(values), 2, False,
                                     RunConfig("cpu", 1, 1))
    assert summary.shape == values.shape
    np.testing.assert_array_equal(summary.head, values[:2])
    exact = values.astype(np.float64)
    per_example = values[0].size
    assert summary.mean == pytest.approx(exact.mean(), abs=per_example * 2.0**-24 * 1000)
    assert summary.std == pytest.approx(exact.std(), rel=1e-5)


def test_a_large_output_is_summarised_where_it_lives(cpu_adapter, monkeypatch):
    """From DEVICE_SUMMARY_VALUES values on, the fingerprint reads the output through the
    summary graph, not as a whole copy."""
    import adapters.ort.adapter as ort_adapter

    used = []
    real = ort_adapter.summarise_bound_output
    monkeypatch.setattr(ort_adapter, "summarise_bound_output",
                        lambda *args: used.append(args[0].shape()) or real(*args))
    model = get_model("conv_tiny")
    prepared = cpu_adapter.prepare(model, canonical_weights(model), make_batch(model, 3),
                                   CaseConfig("fp32", "ort_all"))
    try:
        small = prepared.output_summary(2)
        monkeypatch.setattr(ort_adapter, "DEVICE_SUMMARY_VALUES", 0)
        large = prepared.output_summary(2)
    finally:
        prepared.close()
    assert used == [list(large.shape)], used
    assert small.shape == large.shape
    np.testing.assert_array_equal(small.head, large.head)
    assert large.std == pytest.approx(small.std, rel=1e-5)


def test_the_row_records_the_attention_graph(cpu_adapter):
    prepared = prepare(cpu_adapter, "gpt2_tiny")
    assert prepared.extra["attention"].startswith("ONNX MatMul")
    assert prepared.extra["attention"].endswith(", ORT_ENABLE_ALL")
    assert "attention" not in prepare(cpu_adapter, "lenet_tiny").extra


# --- greedy generation with a key/value cache (generate.py) -------------------------------

PROMPT, NEW_TOKENS = 8, 8


def generate_and_reference(generator, model, weights):
    """``NEW_TOKENS`` greedy tokens after the seeded batch's first ``PROMPT`` tokens, each
    step's logits, and float64's logits at the same positions: ``models.reference`` over
    the prompt and the generated tokens (teacher forced, so an early wrong token cannot
    hide a later cache error)."""
    prompt = make_batch(model, 1).x[0, :PROMPT].astype(np.int32)
    tokens, logits = [generator.prefill(prompt)], [generator.last_logits()]
    while len(tokens) < NEW_TOKENS:
        tokens.append(generator.decode(tokens[-1]))
        logits.append(generator.last_logits())
    fed = np.concatenate([prompt, tokens[:-1]]).astype(np.int32)[None]
    from models.inputs import Batch
    want = reference_numpy.forward(model, weights, Batch(fed, None, None))[0, PROMPT - 1:]
    return tokens, logits, want


def assert_generation_within(tokens, logits, want, bound):
    errors = [float(np.abs(got - ref).max() / np.abs(ref).max())
              for got, ref in zip(logits, want)]
    assert len(errors) == NEW_TOKENS and max(errors) <= bound, (errors, bound)
    # The graph's ArgMax is the argmax of the logits it gave, and float64's token unless
    # float64's lead over it is within twice the bound (each logit may move by the bound).
    for token, got, ref in zip(tokens, logits, want):
        assert token == int(got.argmax())
        assert token == int(ref.argmax()) or ref.max() - ref[token] <= 2 * bound * np.abs(ref).max()


@pytest.mark.parametrize("variant", ["ort_all", "ort_fused"])
def test_generation_with_the_cache_matches_float64_at_every_step(cpu_adapter, variant):
    """Prefill then decode steps over the cache bound from run to run (IOBinding): every
    step's logits within the fp32 output bound of the model at the generation's length,
    standard-op attention with a Concat cache and com.microsoft Attention's past/present
    alike."""
    from models.error_bounds import bounds

    model = get_model("gpt2_tiny")          # context 16 = PROMPT + NEW_TOKENS
    weights = canonical_weights(model)
    prepared = cpu_adapter.prepare(model, weights, make_batch(model, 1), CaseConfig("fp32", variant))
    try:
        generator = prepared.generator(PROMPT + NEW_TOKENS)
        tokens, logits, want = generate_and_reference(generator, model, weights)
        # The last token fills the cache's last position; nothing fits after it.
        generator.decode(tokens[-1])
        with pytest.raises(ValueError, match="beyond the cache's 16"):
            generator.decode(tokens[-1])
        # A second generation starts afresh from its prompt.
        assert generate_and_reference(generator, model, weights)[0] == tokens
    finally:
        prepared.close()
    assert_generation_within(tokens, logits, want, bounds(model, 1, "fp32").output)
    assert ("com.microsoft Attention" in prepared.extra["generation"]) == (variant == "ort_fused")


def test_generation_graphs_fetch_one_token_and_keep_the_cache_apart():
    """The prefill gives the last position's logits only, and both graphs the ArgMax; the
    decode graph takes every layer's past keys and values, of any length."""
    from adapters.ort.network import LOGITS, NEXT, build_generation

    model = get_model("gpt2_tiny")
    weights = canonical_weights(model)
    prefill, decode = (build_generation(model, weights, decode) for decode in (False, True))
    outputs = [value.name for value in prefill.graph.output]
    assert outputs == [LOGITS, NEXT, "present.0.key", "present.0.value", "present.1.key",
                       "present.1.value"] == [value.name for value in decode.graph.output]
    assert [value.name for value in decode.graph.input] == [
        "input", "past.0.key", "past.0.value", "past.1.key", "past.1.value"]
    assert decode.graph.input[1].type.tensor_type.shape.dim[2].dim_param == "past"
    assert [dim.dim_value for dim in prefill.graph.output[0].type.tensor_type.shape.dim] == [1, 1, 96]
    with pytest.raises(Unsupported, match="not a decoder-only model"):
        build_generation(get_model("bert_tiny"), canonical_weights(get_model("bert_tiny")), False)


def test_fp16_generation_keeps_its_cache_in_float16_within_the_fp16_bound():
    """The GPU's fp16 generation graphs (ort_fused), run here on the CPU provider behind its
    casts: the cache passes between steps as float16, the logits float32, every step within
    the fp16 bound."""
    from adapters.ort.generate import GenerationGraphs, OrtGenerator
    from adapters.ort.network import LOGITS, build_generation
    from models.error_bounds import bounds

    model = get_model("gpt2_tiny")
    weights = canonical_weights(model)
    protos = [optimise_transformer(model, build_generation(model, weights, decode, True),
                                   float16=True, keep_io_types=[LOGITS]).proto
              for decode in (False, True)]
    types = {value.name: value.type.tensor_type.elem_type
             for value in (*protos[1].graph.input, *protos[1].graph.output)}
    assert types["past.0"] == types["present.1"] == onnx.TensorProto.FLOAT16, types
    assert types[LOGITS] == onnx.TensorProto.FLOAT, types
    sessions = [ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
                for proto in protos]
    generator = OrtGenerator(GenerationGraphs(*sessions, "cpu"), PROMPT + NEW_TOKENS)
    tokens, logits, want = generate_and_reference(generator, model, weights)
    assert_generation_within(tokens, logits, want, bounds(model, 1, "fp16").output)


# --- ort_cuda_graph: fixed bound buffers, served in place; fp16 by the float16 conversion --

@pytest.fixture
def fixed_buffers_on_cpu(monkeypatch):
    """ort_cuda_graph's whole path on the CPU provider, as far as it exists there: the GPU
    requirement lifted, so the session has no CUDA graph but every run goes through the
    same fixed bound buffers as on the GPU."""
    monkeypatch.setitem(VARIANT_SETTINGS, "ort_cuda_graph",
                        dataclasses.replace(VARIANT_SETTINGS["ort_cuda_graph"], gpu_only=False))


def test_cuda_graph_variant_serves_through_one_fixed_bound_set(cpu_adapter, fixed_buffers_on_cpu):
    """Every run reads and writes the same buffers (what a replayed CUDA graph needs):
    serve copies each batch into the bound inputs and answers from the bound output,
    the forward step runs the same binding, the caller's arrays are never written, and
    each answer is that batch's ort_all output."""
    model = get_model("resnet_tiny")
    weights = canonical_weights(model)
    first, second = make_batch(model, 2, seed=0), make_batch(model, 2, seed=1)
    keep = first.x.copy(), second.x.copy()
    graph = cpu_adapter.prepare(model, weights, first, CaseConfig("fp32", "ort_cuda_graph"))
    plain = cpu_adapter.prepare(model, weights, first, CaseConfig("fp32", "ort_all"))
    try:
        addresses = ({name: value.data_ptr() for name, value in graph.device_inputs.items()},
                     graph.binding.get_outputs()[0].data_ptr())
        served = [graph.serve(batch) for batch in (second, first, second)]
        expected = [plain.serve(batch) for batch in (second, first)]
        graph.step_forward()()
        after = ({name: value.data_ptr() for name, value in graph.device_inputs.items()},
                 graph.binding.get_outputs()[0].data_ptr())
        assert graph.serving is graph.bound
        forward = graph.forward_output()
    finally:
        graph.close()
        plain.close()
    assert after == addresses
    np.testing.assert_array_equal(served[0], expected[0])
    np.testing.assert_array_equal(served[1], expected[1])
    np.testing.assert_array_equal(served[2], expected[0])
    np.testing.assert_array_equal(forward, served[2])   # the bound inputs hold the last batch
    np.testing.assert_array_equal(first.x, keep[0])
    np.testing.assert_array_equal(second.x, keep[1])


def test_cuda_graph_variant_refuses_what_would_bind_other_buffers(cpu_adapter, fixed_buffers_on_cpu):
    model = get_model("gpt2_tiny")
    prepared = cpu_adapter.prepare(model, canonical_weights(model), make_batch(model, 1),
                                   CaseConfig("fp32", "ort_cuda_graph"))
    try:
        with pytest.raises(Unsupported, match="one bound set"):
            prepared.epoch_step("forward", [make_batch(model, 1)])
        with pytest.raises(Unsupported, match="cache grows"):
            prepared.generator(16)
    finally:
        prepared.close()


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_float16_conversion_of_the_plain_graph_stays_within_the_fp16_bound(name):
    """ort_cuda_graph's fp16 graph (the conversion without the transformer fusions), run
    on the CPU provider behind its casts: float16 weights, float32 input and output, the
    output within the fp16 bound and outside the fp32 one (the conversion happened)."""
    from adapters.ort.network import float16_graph
    from models.error_bounds import bounds

    model = get_model(name)
    weights, batch = canonical_weights(model), make_batch(model, 2)
    inputs = graph_inputs(model, batch)
    proto = float16_graph(build(model, weights, inputs["input"].shape, "lengths" in inputs))
    assert onnx.TensorProto.FLOAT16 in {init.data_type for init in proto.graph.initializer}
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    output = session.run(None, inputs)[0]
    expected = reference_numpy.forward(model, weights, batch, train=False)
    error = float(np.abs(output - expected).max() / np.abs(expected).max())
    assert bounds(model, 2, "fp32").output < error <= bounds(model, 2, "fp16").output, error


# --- on a GPU: generation and ort_cuda_graph through the CUDA EP (skipped without one) ---

@pytest.mark.parametrize("case", [CaseConfig("fp32", "ort_all"), CaseConfig("fp32", "ort_fused"),
                                  CaseConfig("fp16", "ort_fused")])
def test_gpu_generation_matches_float64_at_every_step(gpu_adapter, case):
    from models.error_bounds import bounds

    model = get_model("gpt2_tiny")
    weights = canonical_weights(model)
    prepared = gpu_adapter.prepare(model, weights, make_batch(model, 1), case)
    try:
        generator = prepared.generator(PROMPT + NEW_TOKENS)
        assert generator.device == "cuda"
        tokens, logits, want = generate_and_reference(generator, model, weights)
        assert generator.cache[0].device_name().lower() == "cuda"   # the cache stayed there
    finally:
        prepared.close()
    assert_generation_within(tokens, logits, want, bounds(model, 1, case.precision).output)


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_cuda_graph_serves_each_batch_within_the_bound(gpu_adapter, name, precision):
    """The captured graph replays over the bound buffers: batches served one after another
    each get their own answer (not the captured batch's), within the precision's bound."""
    from models.error_bounds import bounds

    model = get_model(name)
    weights = canonical_weights(model)
    batches = [make_batch(model, 2, seed=seed) for seed in range(3)]
    prepared = gpu_adapter.prepare(model, weights, batches[0], CaseConfig(precision, "ort_cuda_graph"))
    try:
        applied = prepared.session.get_provider_options()["CUDAExecutionProvider"]
        assert applied["enable_cuda_graph"] == "1"
        served = [prepared.serve(batch) for batch in (*batches, *batches)]
    finally:
        prepared.close()
    for batch, output in zip((*batches, *batches), served):
        expected = reference_numpy.forward(model, weights, batch)
        error = float(np.abs(output - expected).max() / np.abs(expected).max())
        assert error <= bounds(model, 2, precision).output, (error, precision)
