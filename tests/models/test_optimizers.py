"""models/optimizers.py: the float64 updates the conformance kit takes as the reference for
each framework's optimizer, checked against steps computed by hand, and the declaration of
an optimizer for every network of the zoo."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.ir import Model
from models.optimizers import ADAMW, SGD, AdamW, NoOptimizer, SGDMomentum, optimizer_for
from models.zoo import get_model, names


def test_adamw_two_steps_match_a_hand_computed_update():
    opt = AdamW(learning_rate=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
    w0 = {"w": np.array([1.0, -2.0, 0.5])}
    g0 = {"w": np.array([0.5, -0.25, 0.0])}
    w1, state = opt.update(w0, g0, None, step=1)
    # Step 1: m = 0.1*g, v = 0.001*g^2, so m_hat = g and v_hat = g^2: the update is
    # g/(|g| + eps), about sign(g); a zero gradient leaves only the decay w*(1 - lr*wd).
    decay = 1 - 0.1 * 0.01
    expected1 = [1.0 * decay - 0.1 * 0.5 / (0.5 + 1e-8),
                 -2.0 * decay + 0.1 * 0.25 / (0.25 + 1e-8),
                 0.5 * decay]
    np.testing.assert_allclose(w1["w"], expected1, rtol=1e-15)
    np.testing.assert_allclose(state["w"][0], [0.05, -0.025, 0.0], rtol=1e-15)
    np.testing.assert_allclose(state["w"][1], [0.00025, 0.0000625, 0.0], rtol=1e-15)
    # Step 2 with g1 = 1 for the first weight: m = 0.9*0.05 + 0.1*1 = 0.145,
    # v = 0.999*0.00025 + 0.001*1 = 0.00124975; m_hat = 0.145/0.19, v_hat = 0.00124975/0.001999.
    w2, _ = opt.update(w1, {"w": np.array([1.0, -0.25, 0.0])}, state, step=2)
    m_hat, v_hat = 0.145 / 0.19, 0.00124975 / 0.001999
    assert w2["w"][0] == pytest.approx(expected1[0] * decay - 0.1 * m_hat / (math.sqrt(v_hat) + 1e-8),
                                       rel=1e-14)
    assert w2["w"][2] == pytest.approx(0.5 * decay * decay, rel=1e-15)


def test_adamw_epsilon_hat_is_keras_order():
    """Keras adds eps to sqrt(v) before the bias correction: alpha = lr*sqrt(1-b2)/(1-b1)
    at step 1, w <- w - alpha*m/(sqrt(v) + eps)."""
    opt = AdamW(learning_rate=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
    g = 1e-8
    w1, _ = opt.update({"w": np.array([0.0])}, {"w": np.array([g])}, None, step=1,
                       epsilon_hat=True)
    m, v = 0.1 * g, 0.001 * g * g
    alpha = 0.1 * math.sqrt(0.001) / 0.1
    assert w1["w"][0] == pytest.approx(-alpha * m / (math.sqrt(v) + 1e-8), rel=1e-14)
    paper, _ = opt.update({"w": np.array([0.0])}, {"w": np.array([g])}, None, step=1)
    assert paper["w"][0] == pytest.approx(-0.1 * 0.5, rel=1e-14)   # g/(g + eps) = 1/2


def test_sgd_momentum_two_steps_match_a_hand_computed_update():
    opt = SGDMomentum(learning_rate=0.1, momentum=0.9)
    w1, state = opt.update({"w": np.array([1.0])}, {"w": np.array([2.0])}, None, step=1)
    assert w1["w"][0] == pytest.approx(1.0 - 0.1 * 2.0)
    w2, _ = opt.update(w1, {"w": np.array([3.0])}, state, step=2)
    assert w2["w"][0] == pytest.approx(0.8 - 0.1 * (0.9 * 2.0 + 3.0))


def test_every_network_of_the_zoo_declares_its_optimizer():
    declared = {name: optimizer_for(get_model(name)) for name in names(include_tiny=True)}
    for name, optimizer in declared.items():
        family = get_model(name).family
        # Issue #60: the transformers train with AdamW; the rest keep the SGD with momentum
        # their published train_step rows were measured with.
        assert optimizer == (ADAMW if family == "transformer" else SGD), name
    assert {"gpt2_tiny", "bert_tiny", "vit_tiny", "gpt2", "bert_base", "vit_b16"} <= {
        name for name, optimizer in declared.items() if optimizer is ADAMW}
    # The parametric networks of the zoo too.
    assert optimizer_for(get_model("conv:c=3,i=8,f=4,k=3")) is SGD
    assert optimizer_for(get_model("gpt2_tiny")) is ADAMW


def test_an_undeclared_family_is_a_one_line_error():
    model = get_model("lenet_tiny")
    stray = Model("stray", "no_such_family", model.input, model.body, model.loss)
    with pytest.raises(NoOptimizer, match="^model 'stray': family 'no_such_family' declares"):
        optimizer_for(stray)
