"""The execution-mode table (reports/pipeline/modes.py) against the registry's variants."""

from __future__ import annotations

from adapters.registry import REGISTRY_FILE, load_registry
from reports.pipeline import modes


def test_every_registry_variant_has_a_mode():
    registry = load_registry(REGISTRY_FILE)
    for name, entry in registry.items():
        assert set(modes.MODES[name]) == set(entry.variants), name


def test_compiled_against_uncompiled_is_flagged_and_like_against_like_is_not():
    assert modes.mixes_compiled([("jax", "jit"), ("torch", "eager")])
    assert modes.mixes_compiled([("tf", "xla"), ("ort", "ort_all")])
    assert not modes.mixes_compiled([("jax", "jit"), ("torch", "compile"), ("tf", "xla")])
    # a TensorFlow graph and an ONNX Runtime session are not compiled modes
    assert not modes.mixes_compiled([("tf", "graph"), ("ort", "ort_all"), ("torch", "eager")])
    assert modes.marked("torch", "compile") == "compile (compiled)"
    assert modes.marked("tf", "graph") == "graph"
    assert modes.mode("fake", "default") == ""
