"""The generation harness (suites/serving/generate.py) with a stand-in generator: greedy
tokens of the float64 reference rounded to float32, through the real LoadGen with token
latencies; one ``generate`` row, its float64 check, and bad input as rows. GPT-2's tiny
variant, 8-token prompts and 8 new tokens."""

from __future__ import annotations

import re
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np
import pytest

from adapters.base import Adapter, CaseConfig, Memory, Prepared, RunConfig, Unsupported
from models import zoo
from models.families.transformer import not_a_decoder
from models.inputs import Batch
from models.weights import canonical_weights
from suites.serving import loadgen_log
from suites.serving.__main__ import SuiteError, load
from suites.serving.generate import GenerateConfig, check, generate_case, prompts
from tests.fake_framework import ReferenceGenerator

QUICK = GenerateConfig(prompt=8, new_tokens=8, prompts=4, warmup=1)


class StandInPrepared(Prepared):
    def __init__(self, model, weights, **options):
        super().__init__()
        self.model, self.weights, self.options = model, weights, options

    def generator(self, max_length: int) -> ReferenceGenerator:
        if not_a_decoder(self.model):
            raise Unsupported(not_a_decoder(self.model))
        assert max_length == QUICK.length and self.model.input.shape == (max_length,)
        return ReferenceGenerator(self.model, self.weights, **self.options)

    def step_forward(self): raise NotImplementedError
    def sync(self, handle) -> None: pass
    def reset_peak_memory(self) -> None: pass
    def peak_memory(self) -> Memory: return Memory(None, "rss")
    def forward_output(self) -> np.ndarray: raise NotImplementedError
    def loss_and_gradients(self): raise NotImplementedError


class StandInAdapter(Adapter):
    name = "numpy"
    variants = {"float32": "the float64 reference rounded to float32"}
    precisions = ("fp32",)

    def __init__(self, shift: float = 0.0, runner_up: bool = False, fail_after: int | None = None):
        super().__init__(RunConfig("cpu", 1, 1))
        self.options = dict(shift=shift, runner_up=runner_up, fail_after=fail_after)
        self.prepared = 0

    def environment(self) -> dict: return {}
    def is_out_of_memory(self, error) -> bool: return False

    def prepare(self, model, weights, batch: Batch, case: CaseConfig) -> StandInPrepared:
        self.prepared += 1
        return StandInPrepared(model, weights, **self.options)


def run(tmp_path, adapter, model="gpt2_tiny", config=QUICK):
    return generate_case(lg, adapter, model, config, "serving-test", tmp_path, {})


def test_generation_through_loadgen_is_one_checked_row_with_ttft_and_tpot(tmp_path):
    row = run(tmp_path, StandInAdapter())
    assert row.status == "ok", row.reason
    data = row.to_json()
    assert data["measure"] == "generate" and data["batch"] == 1
    assert data["case_id"] == "serving-test/numpy/cpu/gpt2_tiny/b1/generate/fp32/float32/t1"
    serving = data["serving"]
    assert serving["settings"]["prompt_tokens"] == 8 and serving["settings"]["new_tokens"] == 8
    assert serving["settings"]["cache_capacity"] == 16 and serving["settings"]["runs"] == 64
    result = serving["result"]
    assert result["valid"] and result["query_count"] == 64
    figures = serving["generation"]
    assert 0 < figures["ttft_ms"]["50.00"] <= figures["ttft_ms"]["99.00"]
    assert 0 < figures["tpot_ms"]["50.00"] <= figures["tpot_ms"]["99.00"]
    assert figures["tokens_per_second"] > 0
    found = serving["check"]
    assert found["passed"] and found["steps"] == 8 and found["greedy_matches"] == 8
    # float32 rounding of the reference's logits: within a unit of fp32 roundoff.
    assert found["error"] <= 2.0 ** -24 < found["bound"]
    assert (Path(serving["logs"]) / loadgen_log.SUMMARY).is_file()
    assert set(serving["gc"]["collections"]) == {"0", "1", "2"}   # collector.GcPauses


def test_logits_off_by_more_than_the_bound_fail_the_row(tmp_path):
    row = run(tmp_path, StandInAdapter(shift=1e-3))
    assert row.status == "failed"
    assert re.fullmatch(r"generated logits are 0\.001 from float64 \(step \d\), above the fp32 "
                        r"bound \S+", row.reason)
    assert row.serving["check"]["error"] == pytest.approx(1e-3, rel=0.01)


def test_a_token_other_than_float64_s_argmax_fails_unless_within_the_bound():
    model = zoo.get_model("gpt2_tiny")
    weights = canonical_weights(model, 0)
    prompt = prompts(model, QUICK)[0]
    generator = ReferenceGenerator(model, weights, 0.0, runner_up=True, fail_after=None)
    found = check(model, weights, generator, prompt, 8, "fp32")
    (mismatch,) = found["mismatches"]
    assert mismatch["step"] == 0 and found["greedy_matches"] == 7
    # The tiny model's top-2 margin at that step is far above the fp32 bound: not rounding.
    assert mismatch["float64_margin"] > 2 * found["bound"]
    assert not found["passed"] and "differ from float64's argmax at steps [0]" in found["problem"]


def test_a_generation_beyond_the_context_is_a_failed_row_and_nothing_is_prepared(tmp_path):
    adapter = StandInAdapter()
    row = run(tmp_path, adapter, config=GenerateConfig(prompt=10, new_tokens=8))
    assert row.status == "failed"
    assert row.reason == ("prompt 10 + 8 new tokens = 18 positions, beyond gpt2_tiny's "
                          "context of 16")
    assert adapter.prepared == 0


@pytest.mark.parametrize("model, reason", [
    ("bert_tiny", "bert_tiny is not a decoder-only model"),
    ("lenet_tiny", "lenet_tiny is not a language model over tokens")])
def test_a_model_that_is_not_a_decoder_is_an_unsupported_row(tmp_path, model, reason):
    row = run(tmp_path, StandInAdapter(), model=model)
    assert row.status == "unsupported" and row.reason.startswith(reason)


def test_a_generator_that_raises_mid_run_is_a_failed_row_and_loadgen_ends(tmp_path):
    row = run(tmp_path, StandInAdapter(fail_after=3))
    assert row.status == "failed"
    assert row.reason == "generation raised mid-run: RuntimeError: the generator fell over"


def test_settings_are_checked_and_a_suite_s_generate_table_is_read(tmp_path):
    with pytest.raises(ValueError, match="at least 64 queries"):
        GenerateConfig(runs=10)
    with pytest.raises(ValueError, match="generate setting watchdog_margin_s = 0"):
        GenerateConfig(watchdog_margin_s=0)
    with pytest.raises(ValueError, match="unknown generate settings"):
        GenerateConfig.of({"prompt": 8, "tokens": 8})
    suite = tmp_path / "gen.toml"
    suite.write_text('name = "gen"\n[[cases]]\nmodels = ["gpt2_tiny"]\n'
                     '[cases.generate]\nprompt = 8\nnew_tokens = 8\n')
    (group,) = load(str(suite))["groups"]
    assert group.models == ("gpt2_tiny",) and group.scenarios == ()
    assert group.config == GenerateConfig(8, 8)
    (case,) = group.cases("fake")
    assert case.kind == "generate" and case.scenario == ""
    # A generation table takes no scenarios.
    suite.write_text(suite.read_text().replace('models = ["gpt2_tiny"]\n',
                                               'models = ["gpt2_tiny"]\nscenarios = ["Offline"]\n'))
    with pytest.raises(SuiteError, match="takes no scenarios"):
        load(str(suite))
