"""Every comparisons/ script runs end to end on the CPU at tiny settings (one model,
batch 2, a couple of samples) in its framework's environment, so none can rot unseen.
Their GPU use (batch 16+, several models) is as their docstrings say; nothing here reads
the timings. The Flax and Hugging Face comparisons need those packages (nox's tests
session installs them: noxfile.COMPARISON_REQUIREMENTS); the torchvision one runs where
torchvision loads beside torch (not in the CPU test session: the noxfile says why).
The Keras comparison's other models get their identity check in the TensorFlow session; the
kernel traces that measure a gap's cause are checked in tests/comparisons/test_kernel_gap.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from comparisons import keras_vs_dlbench as keras_comparison

ROOT = Path(__file__).resolve().parents[2]
# framework -> (module, the package it compares with, tiny CPU arguments)
SMOKE = {
    "torch": ("comparisons.torchvision_vs_dlbench", "torchvision",
              ["--device", "cpu", "--batch", "2", "--models", "alexnet", "--budget", "0.01",
               "--min-samples", "1"]),
    "tf": ("comparisons.keras_vs_dlbench", "tf_keras",
           ["--device", "cpu", "--threads", "2", "--batch", "2", "--models", "resnet50",
            "--references", "tf_keras", "--budget", "0", "--warmup", "0", "--min-samples", "1",
            "--max-samples", "1"]),
    # The tiny bottleneck ResNet (the same Flax code as ResNet-50's, two stages), and not
    # the gradient's timing (its function still runs in the identity check).
    "jax": ("comparisons.flax_vs_dlbench", "flax",
            ["--device", "cpu", "--model", "resnet_tiny", "--batches", "2", "--tolerance", "1",
             "--rounds", "1",
             "--measures", "forward,train_step",
             "--suite", str(ROOT / "tests" / "data" / "comparison-smoke.toml")]),
    "ort": ("comparisons.ort_iobinding_vs_dlbench", "onnxruntime",
            ["--device", "cpu", "--model", "lenet", "--batch", "2", "--rounds", "1",
             "--iterations", "2"]),
}


# More scripts per framework: the Hugging Face transformers twin (PyTorch), on tiny GPT-2,
# eager fp32, its command line end to end (tests/adapters/test_torch.py checks the three
# tiny twins' weights and identity in process, cheaper than a run each here). The
# package named is the module the script needs to load (transformers imports lazily, so
# ``import transformers`` alone proves nothing).
MORE_SMOKE = {
    "torch": [("comparisons.hf_transformers_vs_dlbench", "transformers.models.gpt2.modeling_gpt2",
               ["--device", "cpu", "--batch", "2", "--models", "gpt2_tiny",
                "--variants", "eager", "--precisions", "fp32", "--budget", "0", "--warmup", "0",
                "--min-samples", "1"])],
}


def _smoke_cases():
    for framework, case in SMOKE.items():
        yield pytest.param(framework, case, id=case[0].rsplit(".", 1)[-1])
    for framework, cases in MORE_SMOKE.items():
        for case in cases:
            yield pytest.param(framework, case, id=case[0].rsplit(".", 1)[-1])


@pytest.mark.parametrize(("owner", "case"), list(_smoke_cases()))
def test_the_comparison_script_runs_on_cpu(framework, owner, case, tmp_path):
    if owner != framework:
        pytest.skip(f"a {owner} comparison")
    module, package, args = case
    if importlib.util.find_spec(package.split(".")[0]) is None:
        pytest.skip(f"{package} is not installed here (noxfile.COMPARISON_REQUIREMENTS)")
    # A package that installs but cannot load (a CUDA torchvision wheel beside a CPU-only
    # torch from a local wheel mirror) is this environment's limit, not the script's.
    probe = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"{package} is installed but does not load here: {reason}")
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr
    assert "ratio" in result.stdout, result.stdout


def test_the_keras_comparison_checks_googlenet_and_alexnet(framework, tmp_path):
    """The identity check (outputs, loss, gradient norm) of the GoogLeNet and AlexNet
    twins, at batch 1 against one reference; ``--trace`` on a CPU says why it is
    skipped and changes nothing else."""
    if framework != "tf":
        pytest.skip("the Keras comparison runs in the TensorFlow session")
    out = tmp_path / "keras.json"
    result = subprocess.run(
        [sys.executable, "-m", "comparisons.keras_vs_dlbench", "--device", "cpu",
         "--threads", "2", "--batch", "1", "--models", "googlenet,alexnet",
         "--references", "tf_keras", "--budget", "0", "--warmup", "0", "--min-samples", "1",
         "--max-samples", "1", "--trace", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "--trace needs --device gpu" in result.stdout
    rows = json.loads(out.read_text())["results"]
    assert {(r["model"], r["measure"]) for r in rows} == {
        (m, s) for m in ("googlenet", "alexnet") for s in ("forward", "gradient")}
    for row in rows:
        assert row["identical"], row["differences"]
        assert row["trace"] == {"unavailable": "kernel trace skipped: --trace needs --device "
                                               "gpu (CUPTI traces CUDA kernels)"}


def test_the_keras_comparison_runs_bf16_xla_and_train_step(framework, tmp_path):
    """The practice suite's Keras settings (bf16 under mixed_bfloat16, XLA on both sides,
    train_step beside forward and gradient) on the cheapest model, against Keras 3: XLA
    compiles every step on the CPU, the twins are identical at bf16 with bfloat16 logits
    on both sides, and every row says its precision, XLA and measure."""
    if framework != "tf":
        pytest.skip("the Keras comparison runs in the TensorFlow session")
    out = tmp_path / "keras-bf16-xla.json"
    result = subprocess.run(
        [sys.executable, "-m", "comparisons.keras_vs_dlbench", "--device", "cpu",
         "--threads", "2", "--batch", "1", "--models", "alexnet", "--references", "keras",
         "--precision", "bf16", "--xla", "--measures", "forward,gradient,train_step",
         "--budget", "0", "--warmup", "0", "--min-samples", "1", "--max-samples", "1",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert (report["precision"], report["xla"]) == ("bf16", True)
    assert "XLA-compiled" in report["execution"]
    rows = report["results"]
    assert [r["measure"] for r in rows] == ["forward", "gradient", "train_step"]
    for row in rows:
        assert (row["model"], row["reference"], row["precision"], row["xla"],
                row["variant"]) == ("alexnet", "keras", "bf16", True, "xla")
        assert row["identical"], row["differences"]
        assert row["output_dtypes"] == {"dlbench": "bfloat16", "reference": "bfloat16"}
        assert row["tolerances"] == keras_comparison.TOLERANCES["bf16"]
        assert row["dlbench_ms"] > 0 and row["reference_ms"] > 0
    table = result.stdout[result.stdout.index("precision  xla  measure"):]
    assert "bf16       yes  train_step  keras" in table


def test_keras_comparison_bf16_bounds_are_the_derived_ones():
    """3·sqrt(L)·u for outputs and the loss, 3·sqrt(2L)·u for the gradient norm, with u =
    2^-8 and L = 54 (ResNet-50, the deepest); fp32's bounds unchanged."""
    bf16 = keras_comparison.TOLERANCES["bf16"]
    assert bf16["output"] == bf16["loss"] == pytest.approx(3 * 54 ** 0.5 / 256)
    assert bf16["output"] == pytest.approx(8.61e-2, rel=1e-3)
    assert bf16["grad_norm"] == pytest.approx(3 * 108 ** 0.5 / 256)
    assert bf16["grad_norm"] == pytest.approx(0.1218, rel=1e-3)
    assert keras_comparison.TOLERANCES["fp32"] == {"output": 1e-3, "loss": 1e-3,
                                                   "grad_norm": 1e-2}
    assert set(keras_comparison.PRECISIONS) == set(keras_comparison.OUTPUT_DTYPE)


def test_keras_comparison_identity_needs_the_bounds_and_the_precisions_dtype():
    within = keras_comparison.within_tolerances
    bf16_logits = {"dlbench": "bfloat16", "reference": "bfloat16"}
    small = {"output": 6.5e-3, "loss": 6.0e-3, "grad_norm": 1.2e-2}
    assert within(small, bf16_logits, "bf16")
    # The same differences fail fp32's bounds, and fp32 logits fail bf16's dtype check.
    assert not within(small, {"dlbench": "float32", "reference": "float32"}, "fp32")
    assert not within(small, {"dlbench": "bfloat16", "reference": "float32"}, "bf16")
    assert not within({**small, "grad_norm": 0.2}, bf16_logits, "bf16")
    assert within({"output": 0.0, "loss": 0.0, "grad_norm": 0.0},
                  {"dlbench": "float32", "reference": "float32"}, "fp32")


def test_keras_comparison_variant_follows_xla_and_rejects_contradictions():
    variant = keras_comparison.adapter_variant
    assert variant(True, "default") == variant(True, "xla") == "xla"
    assert variant(False, "default") == "default"
    assert variant(False, "nchw") == "nchw"
    with pytest.raises(ValueError, match="contradicts"):
        variant(True, "graph")
    with pytest.raises(ValueError, match="use --xla"):
        variant(False, "xla")


def test_keras_comparison_measures_are_timed_with_train_step_last():
    parse = keras_comparison.parse_measures
    assert parse("forward,gradient") == keras_comparison.DEFAULT_MEASURES
    assert parse("train_step,forward,gradient") == ("forward", "gradient", "train_step")
    assert parse("train_step") == ("train_step",)
    with pytest.raises(ValueError, match="grad_input"):
        parse("forward,grad_input")
    with pytest.raises(ValueError, match="no measure"):
        parse(",")


@pytest.mark.parametrize("argv", [["--xla", "--variant", "nchw"], ["--variant", "xla"],
                                  ["--measures", "forward,profile"]])
def test_keras_comparison_command_line_errors_are_parser_errors(argv, capsys):
    """Contradictory flags stop the script before TensorFlow starts, with argparse's
    usage line and exit status 2."""
    with pytest.raises(SystemExit) as stop:
        keras_comparison.main(argv)
    assert stop.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("package", ["keras", "tf_keras"])
def test_keras_policy_is_set_for_the_build_only(package):
    """mixed_bfloat16 while the model is built, float32 again afterwards, also when the
    build fails, so no later reference or model inherits it."""
    keras = pytest.importorskip(package)
    policy = keras.mixed_precision.global_policy
    assert policy().name == "float32"
    with keras_comparison.keras_policy(keras, "bf16"):
        assert policy().name == "mixed_bfloat16"
        layer = keras.layers.Dense(2)
    assert policy().name == "float32"
    assert (layer.compute_dtype, layer.variable_dtype) == ("bfloat16", "float32")
    with pytest.raises(RuntimeError), keras_comparison.keras_policy(keras, "bf16"):
        raise RuntimeError("a failed build")
    assert policy().name == "float32"
    with keras_comparison.keras_policy(keras, "fp32"):
        assert policy().name == "float32"


def test_a_twin_results_file_names_its_commit_host_and_arguments(tmp_path):
    # Every result carries its settings: a twin's first line says which dlbench made it.
    from comparisons.transformer_twins import ResultsLog
    log = ResultsLog(tmp_path, "twin.jsonl", {"framework_version": "x"}, ["--device", "cpu"])
    log.write({"model": "gpt2_tiny", "ratio": 1.0})
    log.close()
    first, row = [json.loads(line) for line in (tmp_path / "twin.jsonl").read_text().splitlines()]
    env = first["environment"]
    assert env["framework_version"] == "x" and first["argv"] == ["--device", "cpu"]
    assert env["dlbench_commit"] and env["host"] and env["started_at"]
    assert row == {"model": "gpt2_tiny", "ratio": 1.0}
