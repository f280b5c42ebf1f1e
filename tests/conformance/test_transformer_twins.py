"""The transformer twins of JAX and TensorFlow (comparisons/keras_hub_vs_dlbench.py) on the
tiny models, in process: keras-hub's GPT-2 and ViT get every canonical weight and compute
dlbench's function (fp32, within the derived bounds of each other and of float64), a
wrong weight is caught by the same check, the twin's AdamW step runs, and BERT's refusal
still holds for the keras-hub installed. The command line's own loop (run_case, timings)
is left to its users: each compile costs the CPU kit seconds. keras-hub comes from
noxfile.COMPARISON_REQUIREMENTS; its Keras backend is the session's framework
(KERAS_BACKEND=jax in the JAX session: noxfile.TEST_ENV)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model

BACKEND = {"jax": "jax", "tf": "tensorflow"}
# The cheapest compiled variant of each adapter (TensorFlow's XLA compiles on the CPU
# for seconds; graph mode runs the same Keras model code).
VARIANT = {"jax": "jit", "tf": "graph"}
MODEL = {"jax": "gpt2_tiny", "tf": "vit_tiny"}


@pytest.fixture(scope="module")
def keras_side(framework, adapter):
    if framework not in BACKEND:
        pytest.skip("keras-hub's twin runs in the JAX and TensorFlow sessions")
    if importlib.util.find_spec("keras_hub") is None:
        pytest.skip("keras-hub is not installed here (noxfile.COMPARISON_REQUIREMENTS)")
    from comparisons import keras_hub_vs_dlbench as twin_module
    keras, keras_hub = twin_module.import_keras(BACKEND[framework])
    return twin_module, adapter, keras, keras_hub, framework


def test_keras_hub_twin_computes_dlbenchs_function_and_catches_a_wrong_weight(keras_side):
    """fp32 logits and loss within the derived bounds of dlbench's and of float64; the
    twin's first AdamW step (Keras's optimizer, compiled as the timed one is) returns the
    canonical network's loss; then layer 0's query and key column blocks swapped in the
    twin (a wrong table row's effect, no recompilation) and the same check fails. GPT-2 in
    the JAX session, ViT in TensorFlow's: each weight table and each backend's steps once,
    within the kit's time."""
    twin_module, adapter, keras, keras_hub, framework = keras_side
    from adapters.base import CaseConfig
    name = MODEL[framework]
    model = get_model(name)
    shape = twin_module.shape_of(model)
    weights, batch = canonical_weights(model), make_batch(model, 2)
    built = twin_module.keras_model(keras, keras_hub, shape, "fp32")
    twin_module.load_canonical(built, shape, weights)
    prepared = adapter.prepare(model, weights, batch, CaseConfig("fp32", VARIANT[framework]))
    try:
        twin = twin_module.Twin(keras, BACKEND[framework], built, shape, batch, "fp32",
                                VARIANT[framework], adapter.device)
        check = twin_module.identity(keras, model, weights, batch, prepared, twin, "fp32",
                                     float64=True)
        assert check["same"], check
        assert check["float64_output"] is not None and check["dtype"] == "float32"
        canonical_loss = twin.loss()   # TensorFlow's twin trains its own variables
        first = float(twin.step("train_step")())
        assert first == pytest.approx(canonical_loss, rel=check["loss_bound"])
        key = "h0.attn.qkv.weight" if name.startswith("gpt2") else "layer0.attn.qkv.weight"
        w, d = weights[key], shape.width
        wrong = {**weights, key: np.concatenate([w[:, d:2 * d], w[:, :d], w[:, 2 * d:]], axis=1)}
        twin_module.load_canonical(built, shape, wrong)
        twin.refresh()
        assert not twin_module.identity(keras, model, weights, batch, prepared, twin, "fp32",
                                        float64=False)["same"]
    finally:
        prepared.close()
        keras.backend.clear_session()


def test_keras_hub_bert_is_refused_for_its_gelu_form(keras_side):
    """The reason NOT_EQUAL gives is true of the keras-hub installed (checked in JAX's
    session only: it reads keras-hub's code, whatever the backend): BertBackbone's encoder
    layers use GELU's tanh form; the twin refuses BERT with that reason."""
    twin_module, adapter, keras, keras_hub, framework = keras_side
    if framework != "jax":
        pytest.skip("checked once, in the JAX session")
    from keras_hub.src.utils.keras_utils import gelu_approximate
    backbone = keras_hub.models.BertBackbone(vocabulary_size=8, num_layers=1, num_heads=1,
                                             hidden_dim=4, intermediate_dim=8,
                                             max_sequence_length=4)
    layer = backbone.transformer_layers[0]
    assert layer._feedforward_intermediate_dense.activation is gelu_approximate
    shape = twin_module.shape_of(get_model("bert_tiny"))
    with pytest.raises(twin_module.NotEqual, match="tanh form"):
        twin_module.keras_model(keras, keras_hub, shape, "fp32")


def test_ort_twin_matches_dlbench_on_the_tiny_models(framework, tmp_path):
    """ONNX Runtime's twin (comparisons/ort_hf_vs_dlbench.py), its command line in process,
    in PyTorch's session, where torch and transformers export and onnxruntime runs
    (noxfile.COMPARISON_REQUIREMENTS): the three tiny Hugging Face models exported by the
    TorchScript tracer (torch.export costs seconds per tiny model: the script's docstring),
    optimized by ONNX Runtime's transformer optimizer, each fp32 twin equal to dlbench's
    ort_fused within twice the derived bound and to float64 within one before timing, the
    fusions of both sides recorded, and fp16 refused on the CPU with the adapter's reason."""
    if framework != "torch":
        pytest.skip("ONNX Runtime's twin exports with torch: it runs in PyTorch's session")
    for package in ("onnxruntime", "transformers"):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed here (noxfile.COMPARISON_REQUIREMENTS)")
    from comparisons import ort_hf_vs_dlbench as twin_module
    names = ("gpt2_tiny", "bert_tiny", "vit_tiny")
    code = twin_module.main(["--device", "cpu", "--models", ",".join(names), "--exporters",
                             "torchscript", "--budget", "0", "--warmup", "0", "--min-samples",
                             "1", "--out", str(tmp_path)])
    lines = (tmp_path / twin_module.RESULTS_FILE).read_text().splitlines()
    rows = [json.loads(line) for line in lines[1:]]
    assert code == 0, rows
    assert [(r["model"], r["precision"], r["status"]) for r in rows] == [
        (name, precision, "ok" if precision == "fp32" else "unsupported")
        for name in names for precision in ("fp32", "fp16")]
    for row in rows:
        if row["status"] != "ok":
            assert "CUDA execution provider only" in row["reason"]
            continue
        check = row["identity"]
        assert row["same_function"] and check["same"], check
        assert check["output"] <= check["output_bound"]
        assert check["float64_output"] is not None
        assert check["float64_output"] <= check["float64_bound"]
        assert row["export"]["inputs"][0] in ("input_ids", "pixel_values")
        assert row["dlbench_ms"] > 0 and row["twin_ms"] > 0
        # The optimizer ran on the export: its LayerNorm and GELU fusions happened.
        fused = row["fusions"]["twin"]["fusions"]
        assert fused.get("SkipLayerNormalization", 0) > 0, row["fusions"]
        assert any(op in fused for op in ("Gelu", "FastGelu", "BiasGelu")), row["fusions"]
        assert row["fusions"]["twin"]["model_type"] == row["fusions"]["dlbench"]["model_type"]
