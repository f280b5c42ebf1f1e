"""``models/`` must stay framework-neutral: numpy and the standard library only
(docs: DESIGN.md, "Layout"). Every adapter and the report import it, so one stray
``import torch`` would make the TF session install torch, or the report need a GPU stack.

Two checks: a static one over the source (catches imports in branches that never run),
and a live one that imports every module in a fresh interpreter and inspects
``sys.modules`` (catches imports the parser cannot see, e.g. through a dependency).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"

FRAMEWORKS = {"torch", "tensorflow", "jax", "jaxlib", "flax", "onnx", "onnxruntime", "keras"}
ALLOWED = set(sys.stdlib_module_names) | {"numpy", "models", "__future__"}


def imported_roots(source: str) -> set[str]:
    """Top-level names of every module ``source`` imports, statically: import
    statements anywhere (including inside functions and ``try``), and calls such as
    ``importlib.import_module("x")`` or ``__import__("x")`` with a literal name."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                roots.add(first.value.split(".")[0])
    return roots


def model_sources() -> list[Path]:
    files = sorted(MODELS.rglob("*.py"))
    assert files, f"no sources under {MODELS}"
    return files


def test_checker_sees_every_import_form():
    # The check must be able to fail: each of these hides a framework import.
    hidden = [
        "import torch",
        "import tensorflow.compat.v1 as tf",
        "from jax import numpy as jnp",
        "def f():\n    import onnxruntime\n",
        "try:\n    import keras\nexcept ImportError:\n    pass\n",
        "import importlib\nimportlib.import_module('flax.linen')",
        "mod = __import__('jaxlib')",
    ]
    for source in hidden:
        assert imported_roots(source) & FRAMEWORKS, source
    assert imported_roots("from . import ir\nfrom models.ir import Model") == {"models"}


@pytest.mark.parametrize("path", model_sources(), ids=lambda p: p.name)
def test_models_source_imports_only_numpy_and_stdlib(path):
    roots = imported_roots(path.read_text())
    assert not roots & FRAMEWORKS, f"{path.name} imports {sorted(roots & FRAMEWORKS)}"
    assert roots <= ALLOWED, f"{path.name} imports non-stdlib {sorted(roots - ALLOWED)}"


def test_importing_every_models_module_loads_no_framework():
    modules = ["models"] + [f"models.{m.name}"
                            for m in pkgutil.walk_packages([str(MODELS)])]
    assert "models.zoo" in modules and "models.__main__" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FRAMEWORKS)!r})\n"
        "print(json.dumps(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
