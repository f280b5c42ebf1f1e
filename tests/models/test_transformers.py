"""The transformer family (models/families/transformer.py) and its ops
(models/ops/transformer/): parameter counts against Hugging Face's default configs,
FLOPs, masks, and the float64 backward of each new op against central differences.
numpy only: runs in the core session (tests/adapters/test_torch.py builds the Hugging
Face models themselves where transformers is installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import ir
from models.analysis import ModelError, analyse
from models.families import transformer
from models.inputs import make_batch
from models.ops.transformer import attention, patch_embedding
from models.zoo import get_model

# Hugging Face transformers, each model built from its default config (no download):
# sum(p.numel() for p in model.parameters()), tied weights counted once.
HF_PARAMETERS = {
    "gpt2": 124_439_808,        # GPT2LMHeadModel(GPT2Config())
    "bert_base": 109_514_298,   # BertForMaskedLM(BertConfig())
    "bert_base_qa": 108_893_186,  # BertForQuestionAnswering(BertConfig())
    "vit_b16": 86_567_656,      # ViTForImageClassification(ViTConfig(num_labels=1000))
}


@pytest.mark.parametrize("name", sorted(HF_PARAMETERS))
def test_parameter_counts_equal_hugging_face_default_configs(name):
    assert analyse(get_model(name)).params == HF_PARAMETERS[name]


def test_gpt2_forward_flops_follow_the_palm_count():
    # Chowdhery et al. 2022, appendix B: per token, 2 FLOPs per weight of every matrix
    # product (the tied head included, the embedding tables not) and 4·L·T·d for the
    # attention scores and their weighted sum.
    stats = analyse(transformer.gpt2())
    layers, width, steps, vocab = 12, 768, 1024, 50257
    matmul_weights = layers * 12 * width * width + width * vocab
    expected = steps * (2 * matmul_weights + 4 * layers * steps * width)
    assert stats.flops == expected


def test_a_sequence_longer_than_the_context_is_refused_with_one_line():
    with pytest.raises(ModelError) as error:
        analyse(transformer.gpt2(steps=2048))
    assert "2048 steps is longer than the model's context of 1024" in str(error.value)
    assert "\n" not in str(error.value)


def test_heads_must_divide_the_width():
    model = transformer.gpt2(vocab=10, context=8, width=30, heads=4, layers=1)
    with pytest.raises(ModelError, match="4 heads do not divide the width 30"):
        analyse(model)


def test_full_length_batches_and_mlm_labels():
    gpt2 = make_batch(get_model("gpt2_tiny"), 3)
    assert gpt2.x.shape == (3, 16) and (gpt2.lengths == 16).all()
    assert (gpt2.labels >= 0).all()           # every step of a language model is labelled
    bert = make_batch(get_model("bert_tiny"), 64)
    valid = np.arange(bert.x.shape[1])[None, :] < bert.lengths[:, None]
    assert (bert.labels[~valid] == -1).all()  # padding is never labelled
    share = (bert.labels[valid] >= 0).mean()
    assert 0.08 < share < 0.22                # 15% of the valid steps, binomial spread


class _Tape:
    """A minimal tape for one op: float64 parameters, gradients collected by name."""

    def __init__(self, weights, lengths=None):
        self.weights, self.lengths, self.grads = weights, lengths, {}

    def param(self, name):
        return self.weights[name]

    def adder(self, prefix):
        def add(suffix, value):
            self.grads[f"{prefix}.{suffix}"] = value
        return add

    def lengths_for(self, x):
        return self.lengths


def _check_input_gradient(op_backward, node, x, tape):
    y, back = op_backward(node, x, True, tape)
    rng = np.random.default_rng(1)
    dy = rng.standard_normal(y.shape)
    dx = back(dy)
    for index in [tuple(int(rng.integers(d)) for d in x.shape) for _ in range(6)]:
        step = np.zeros_like(x)
        step[index] = 1e-6
        plus = op_backward(node, x + step, True, tape)[0]
        minus = op_backward(node, x - step, True, tape)[0]
        numeric = float(((plus - minus) * dy).sum() / 2e-6)
        assert math.isclose(dx[index], numeric, rel_tol=1e-6, abs_tol=1e-9), index


@pytest.mark.parametrize("causal,padding", [(False, False), (True, False), (False, True),
                                            (True, True)])
def test_attention_input_gradient_matches_central_differences(causal, padding):
    rng = np.random.default_rng(0)
    node = ir.SelfAttention("a", 8, 2, causal=causal, padding=padding)
    weights = {"a.qkv.weight": rng.standard_normal((8, 24)) * 0.3,
               "a.qkv.bias": rng.standard_normal(24) * 0.1,
               "a.out.weight": rng.standard_normal((8, 8)) * 0.3,
               "a.out.bias": rng.standard_normal(8) * 0.1}
    lengths = np.array([5, 2, 3])
    _check_input_gradient(attention.backward, node, rng.standard_normal((3, 5, 8)),
                          _Tape(weights, lengths))


def test_masked_keys_do_not_reach_the_output():
    rng = np.random.default_rng(0)
    node = ir.SelfAttention("a", 8, 2, causal=True, padding=True)
    weights = {"a.qkv.weight": rng.standard_normal((8, 24)), "a.qkv.bias": np.zeros(24),
               "a.out.weight": rng.standard_normal((8, 8)), "a.out.bias": np.zeros(8)}
    x = rng.standard_normal((1, 6, 8))
    changed = x.copy()
    changed[0, 4:] += 10.0                      # past the length 4, and later steps
    run = lambda a: attention.attend(node, a, weights.__getitem__, np.array([4]), None)[0]
    # Under both masks, steps 0..3 see only steps 0..3: their outputs are unchanged.
    np.testing.assert_allclose(run(changed)[0, :4], run(x)[0, :4], rtol=1e-12, atol=1e-12)


def test_patch_embedding_input_gradient_matches_central_differences():
    rng = np.random.default_rng(0)
    node = ir.PatchEmbedding("p", 2, 5, 2)
    weights = {"p.weight": rng.standard_normal((5, 2, 2, 2)), "p.bias": rng.standard_normal(5),
               "p.class_token": rng.standard_normal(5)}
    _check_input_gradient(patch_embedding.backward, node, rng.standard_normal((2, 2, 4, 6)),
                          _Tape(weights))


def test_patches_are_row_major_and_flattened_as_a_convolution_sees_them():
    x = np.arange(2 * 4 * 4, dtype=np.float64).reshape(1, 2, 4, 4)
    flat = patch_embedding.patches(x, 2)
    # Patch 1 is the top row's second patch: rows 0-1, columns 2-3, channel-major.
    np.testing.assert_array_equal(flat[0, 1], x[0, :, 0:2, 2:4].reshape(-1))
    np.testing.assert_array_equal(patch_embedding.unpatch(flat, x.shape, 2), x)


def test_a_transformer_at_another_length_keeps_its_architecture():
    from models.zoo import UnknownModel
    short = get_model("gpt2:s=128")
    assert short.input.shape == (128,) and analyse(short).params == HF_PARAMETERS["gpt2"]
    # Past the default context the position table grows with the sequence (the sweep).
    long = get_model("gpt2:s=4096")
    assert analyse(long).params == HF_PARAMETERS["gpt2"] + (4096 - 1024) * 768
    assert analyse(get_model("bert_base:s=128")).params == HF_PARAMETERS["bert_base"]
    with pytest.raises(UnknownModel, match="expected gpt2:s=<steps>"):
        get_model("gpt2:s=0")
