"""Every comparisons/ script runs end to end on the CPU at tiny settings (one model,
batch 2, a couple of samples) in its framework's environment, so none can rot unseen.
Their GPU use (batch 16+, several models) is as their docstrings say; nothing here reads
the timings. The torchvision and Flax comparisons need those packages (nox's tests
session installs them: noxfile.COMPARISON_REQUIREMENTS)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# framework -> (module, the package it compares with, tiny CPU arguments)
SMOKE = {
    "torch": ("comparisons.torchvision_vs_dlbench", "torchvision",
              ["--device", "cpu", "--batch", "2", "--models", "alexnet", "--budget", "0.01",
               "--min-samples", "1"]),
    "tf": ("comparisons.keras_vs_dlbench", "tf_keras",
           ["--device", "cpu", "--threads", "2", "--batch", "2", "--models", "resnet50",
            "--budget", "0.01", "--min-samples", "1"]),
    # Not the gradient's timing (its function still runs in the identity check): each
    # measure times ResNet-50 on two CPU cores.
    "jax": ("comparisons.flax_vs_dlbench", "flax",
            ["--device", "cpu", "--batches", "2", "--tolerance", "1", "--rounds", "1",
             "--measures", "forward,train_step"]),
    "ort": ("comparisons.ort_iobinding_vs_dlbench", "onnxruntime",
            ["--device", "cpu", "--model", "lenet", "--batch", "2", "--rounds", "1",
             "--iterations", "2"]),
}


def test_the_comparison_script_runs_on_cpu(framework, tmp_path):
    module, package, args = SMOKE[framework]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed here (nox's tests session installs it)")
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
