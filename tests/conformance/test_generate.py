"""Each framework's greedy generator with a key/value cache (adapters.base.Generator)
against the float64 reference: GPT-2's tiny variant, an 8-token prompt and 8 new tokens,
every step's logits within the precision's bound and every token float64's argmax (or
within the bound of it), through the harness's own check (suites/serving/generate.py). A
decode step that ignored or misplaced the cache would give other logits from the second
token on, far beyond the fp32 bound."""

from __future__ import annotations

import pytest

from adapters.base import CaseConfig, Unsupported
from models import zoo
from models.inputs import Batch, make_batch
from models.weights import canonical_weights
from suites.serving.generate import GenerateConfig, check, prompts, with_steps

PROMPT, NEW = 8, 8


def prepared_for(adapter, name: str, precision: str = "fp32", variant: str = "default"):
    model = zoo.get_model(name)
    weights = canonical_weights(model, 0)
    sized = with_steps(model, PROMPT + NEW)
    first = make_batch(sized, 1, 0)
    return model, sized, weights, adapter.prepare(sized, weights, Batch(first.x, None, first.lengths),
                                                 CaseConfig(precision, variant))


def generates_as_float64(adapter, precision: str, variant: str = "default") -> None:
    """Two prompts' generations, each step checked against float64 (the second prompt's
    prefill reuses the cache the first one filled)."""
    model, sized, weights, prepared = prepared_for(adapter, "gpt2_tiny", precision, variant)
    try:
        generator = prepared.generator(PROMPT + NEW)
        queries = prompts(model, GenerateConfig(prompt=PROMPT, new_tokens=NEW, prompts=2))
        for prompt in queries:
            found = check(sized, weights, generator, prompt, NEW, precision)
            assert found["passed"], found.get("problem")
            assert found["steps"] == NEW and len(found["errors"]) == NEW
            assert max(found["errors"]) <= found["bound"]
            if precision == "fp32":
                assert found["greedy_matches"] == NEW, found["mismatches"]
        # 15 positions filled of the 16: one more fits, the next is refused.
        generator.decode(1)
        with pytest.raises(ValueError, match="beyond the cache's 16"):
            generator.decode(1)
    finally:
        prepared.close()


# fp32 only: each precision costs a framework that compiles two more compilations (JAX's
# jit took 6 s per precision on 2 busy cores); bf16 is checked where it is cheap
# (tests/adapters/test_torch.py).
def test_generation_with_the_cache_matches_float64_step_by_step(adapter, entry):
    if "generate" not in entry.measures:
        pytest.skip(f"{entry.name} does not generate")
    generates_as_float64(adapter, "fp32")


def test_a_model_that_is_not_a_decoder_has_no_generator(adapter, entry):
    if "generate" not in entry.measures:
        pytest.skip(f"{entry.name} does not generate")
    _, _, _, prepared = prepared_for(adapter, "bert_tiny")
    try:
        with pytest.raises(Unsupported, match="not a decoder-only model"):
            prepared.generator(PROMPT + NEW)
    finally:
        prepared.close()
