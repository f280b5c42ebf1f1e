"""Each measure is declared once (models/measures.py) and everything else derives from it:
the adapters' step hooks, the registry's lists, the report's FLOP factors and sections."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from adapters.base import Prepared, Unsupported
from adapters.registry import REGISTRY_FILE, RegistryError, load_registry
from models.measures import BY_NAME, DECLARED, FLOP_FACTORS, MEASURE_TIMING_FIELDS, MEASURES
from tests.fake_framework import FakePrepared

SECTIONS = Path(__file__).resolve().parents[2] / "reports" / "sections"


def test_every_hook_a_declaration_names_is_a_method_of_the_contract():
    for measure in DECLARED:
        if measure.driver == "harness":
            continue
        assert callable(getattr(Prepared, measure.hook, None)), measure.name


def test_a_hook_an_adapter_does_not_override_refuses_with_a_reason():
    prepared = FakePrepared(2, "cpu")
    for name in ("train_step", "grad_input", "grad_weight", "transfer", "transfer_pinned"):
        with pytest.raises(Unsupported, match=f"no {name}"):
            prepared.step(name)


def test_step_dispatches_to_the_declared_hook_and_refuses_what_no_step_runs():
    prepared = FakePrepared(2, "cpu")
    assert prepared.step("forward")().shape == (8, 8)
    for name in ("profile", "counters", "epoch_forward", "no_such_measure"):
        with pytest.raises(Unsupported, match="unknown measure"):
            prepared.step(name)


def test_every_declared_section_is_a_report_section_module():
    for measure in DECLARED:
        assert (SECTIONS / f"{measure.section}.py").is_file(), measure
        importlib.import_module(f"reports.sections.{measure.section}")


def test_flop_factors_are_the_conventions_the_report_states():
    # reports/pipeline/peaks.py's docstring: gradient and train_step 3 x forward, each
    # single backward product 1 x, transfers and the rest none.
    assert FLOP_FACTORS == {"forward": 1.0, "gradient": 3.0, "train_step": 3.0,
                            "grad_input": 1.0, "grad_weight": 1.0}
    assert all(BY_NAME[name].flop_reason for name in MEASURES)


def test_an_epoch_measure_repeats_a_step_measure_and_declares_its_fields():
    for measure in DECLARED:
        if measure.driver == "epoch":
            assert BY_NAME[measure.over].driver == "step"
            assert measure.timing_fields and set(measure.timing_fields) <= set(MEASURE_TIMING_FIELDS)


def test_the_registry_lists_only_declared_measures():
    for entry in load_registry(REGISTRY_FILE).values():
        assert set(entry.measures) <= set(MEASURES), entry.name


def test_an_unknown_measure_in_the_registry_is_a_one_line_error(tmp_path):
    text = REGISTRY_FILE.read_text().replace('"forward", "gradient", "train_step"',
                                             '"forward", "gradeint", "train_step"', 1)
    path = tmp_path / "registry.toml"
    path.write_text(text)
    with pytest.raises(RegistryError) as raised:
        load_registry(path)
    message = str(raised.value)
    assert "\n" not in message and "[torch]" in message and "'gradeint'" in message
