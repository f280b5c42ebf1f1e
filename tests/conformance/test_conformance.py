"""The adapter conformance kit: every adapter, in its own session, realises every tiny
model of the zoo so that the canonical weights and the seeded batch give

* the forward output of the independent numpy reference (models/reference.py),
  within fp32 tolerance (rtol 1e-4);
* the loss and per-parameter gradient norms of tests/goldens/gradients.json, which at
  least two frameworks agree on (a golden agreed by one framework only is provisional).
"""

from __future__ import annotations

import numpy as np
import pytest

from adapters.base import CaseConfig, Unsupported
from models import reference as reference_numpy
from models.analysis import analyse
from models.inputs import make_batch, make_epoch
from models.weights import canonical_weights
from models.zoo import TINY, get_model
from suites.instruments.profiling import LAYER_TYPES
from tests.conformance import goldens

TINY_MODELS = list(TINY)


@pytest.fixture(scope="module")
def gradient_goldens():
    return goldens.load()["models"]


def prepare(adapter, name: str, case: CaseConfig | None = None):
    model = get_model(name)
    weights = canonical_weights(model)
    batch = make_batch(model, goldens.BATCH)
    return model, weights, batch, adapter.prepare(model, weights, batch, case or CaseConfig())


@pytest.mark.parametrize("name", TINY_MODELS)
def test_forward_matches_numpy_reference(adapter, name):
    model, weights, batch, prepared = prepare(adapter, name)
    try:
        output = prepared.forward_output()
    finally:
        prepared.close()
    expected = reference_numpy.forward(model, weights, batch, train=False)
    assert output.shape == expected.shape
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4 * scale,
                               err_msg=f"{name}: forward differs from the numpy reference")


def test_a_padded_batch_shorter_than_the_context_matches_the_reference(adapter):
    # Batch 16 of bert_tiny is padded to its longest sequence, 15 steps of a 16-position
    # context: the position table must be cut to the batch's length, not the model's.
    model = get_model("bert_tiny")
    weights = canonical_weights(model)
    batch = make_batch(model, 16)
    assert batch.x.shape[1] < model.input.shape[0]
    prepared = adapter.prepare(model, weights, batch, CaseConfig())
    try:
        output = prepared.forward_output()
    finally:
        prepared.close()
    expected = reference_numpy.forward(model, weights, batch, train=False)
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("name", TINY_MODELS)
def test_gradients_match_goldens(adapter, entry, gradient_goldens, name):
    if "gradient" not in entry.measures:
        pytest.skip(f"{entry.name} computes no gradients")
    model, weights, batch, prepared = prepare(adapter, name)
    try:
        loss, grads = prepared.loss_and_gradients()
    finally:
        prepared.close()
    # The loss itself is checked against the numpy reference, independently of goldens.
    expected_loss = reference_numpy.loss(model, weights, batch, train=True)
    assert np.isclose(loss, expected_loss, rtol=1e-4, atol=1e-6), (loss, expected_loss)
    # Exactly the body's trainable parameters: no frozen encoder, no BN statistics.
    assert set(grads) == analyse(model).trainable_names
    norms = {n: float(np.linalg.norm(np.asarray(g, dtype=np.float64))) for n, g in grads.items()}
    assert all(np.isfinite(v) and v > 0 for v in norms.values()), norms
    golden = gradient_goldens.get(name)
    if golden is None:
        pytest.fail(f"no gradient golden for {name}: run python -m tests.conformance.goldens")
    difference = goldens.agree(golden, loss, norms)
    assert difference is None, f"{name}: {difference} (golden agreed by {golden['agreed_by']})"


@pytest.mark.parametrize("name", TINY_MODELS)
def test_fingerprint_is_within_the_fp32_bound_of_the_float64_truth(adapter, entry, name,
                                                                    tmp_path, monkeypatch):
    """The worker's fingerprint path: errors against the float64 reference (outputs, loss,
    and every gradient element where the adapter reports canonical layouts, else gradient
    norms) within the fp32 bound that models/error_bounds.py derives for the model."""
    from models.error_bounds import bounds
    from suites.truth.check import fingerprint_fields

    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    # Every gradient element, also of the networks whose gradients the report does not
    # judge (by default the truth skips those: models/truth.py): cheap at this size, and
    # it keeps the adapters' canonical gradient layouts checked.
    monkeypatch.setenv("DLBENCH_TRUTH_GRADIENTS", "all")
    model, _, _, prepared = prepare(adapter, name)
    try:
        errors = fingerprint_fields(prepared, model, goldens.BATCH, 0, Unsupported)["vs_f64"]
    finally:
        prepared.close()
    limits = bounds(model, goldens.BATCH, "fp32")
    assert errors["output"] <= limits.output, errors
    if "gradient" not in entry.measures:
        assert "grad_norms" not in errors
        return
    assert errors["loss"] <= limits.loss, errors
    if entry.name in ("torch", "jax"):   # their adapters report canonical layouts
        assert errors["grad"] is not None, errors
    if not limits.grad_judged:   # ReLU / max-pooling crossings (models/error_bounds.py)
        return
    assert errors["grad_norms"] <= limits.grad, errors
    if errors["grad"] is not None:
        assert errors["grad"] <= limits.grad, errors


@pytest.mark.parametrize("name", TINY_MODELS)
def test_summaries_say_what_the_whole_arrays_say(adapter, entry, name, monkeypatch):
    """The fingerprint's summaries (adapters/summary.py), which an adapter may compute on
    its device, against the same numbers taken from the whole host arrays: the shape and
    head exactly, the mean and standard deviation and each gradient norm to within
    float32 accumulation (relative 1e-5 of the standard deviation or norm; a float32
    sum of n terms is off by at most about n·2⁻²⁴ of their magnitudes)."""
    import sys

    from adapters.summary import GradientSummary, OutputSummary

    model, _, _, prepared = prepare(adapter, name)
    # Take every output through the device path, also those below its size threshold.
    monkeypatch.setattr(sys.modules[type(prepared).__module__], "DEVICE_SUMMARY_VALUES", 0,
                        raising=False)
    try:
        summary = prepared.output_summary(2)
        whole = OutputSummary.of(prepared.forward_output(), 2)
        if "gradient" in entry.measures:
            gradients = prepared.gradient_summary(keep_arrays=False)
            kept = prepared.gradient_summary(keep_arrays=True)
            loss, grads = prepared.loss_and_gradients()
    finally:
        prepared.close()
    assert summary.shape == whole.shape
    np.testing.assert_array_equal(summary.head, whole.head)
    assert summary.mean == pytest.approx(whole.mean, abs=1e-5 * whole.std)
    assert summary.std == pytest.approx(whole.std, rel=1e-5)
    if "gradient" not in entry.measures:
        return
    reference = GradientSummary.of(loss, grads, keep_arrays=False)
    assert gradients.grads is None and set(kept.grads) == set(grads)
    assert gradients.loss == pytest.approx(reference.loss, rel=1e-6)
    for param, norm in reference.norms.items():
        assert gradients.norms[param] == pytest.approx(norm, rel=1e-5), param


def test_gradient_goldens_cover_every_tiny_model(gradient_goldens):
    assert set(gradient_goldens) == set(TINY_MODELS)


def test_frozen_prefix_gets_no_gradient(adapter, entry):
    if "gradient" not in entry.measures:
        pytest.skip(f"{entry.name} computes no gradients")
    _, _, _, prepared = prepare(adapter, "sae_tiny_ae2")
    try:
        _, grads = prepared.loss_and_gradients()
    finally:
        prepared.close()
    # AE2 trains enc2 and its tied decoder's bias; enc1 is frozen (Bahrampour 4.3).
    assert set(grads) == {"enc2.weight", "enc2.bias", "dec2.bias"}


def test_variants_match_registry(adapter, entry):
    assert tuple(adapter.variants) == entry.variants


def test_unknown_variant_is_unsupported(adapter):
    with pytest.raises(Unsupported, match="no variant"):
        prepare(adapter, "lenet_tiny", CaseConfig("fp32", "no_such_variant"))


def test_environment_names_the_framework_version(adapter):
    env = adapter.environment()
    assert env["framework_version"]
    assert env["gpu_model"] is None  # the kit runs on the CPU


@pytest.mark.parametrize("measure", ["forward", "gradient"])
def test_steps_run_and_sync(adapter, entry, measure):
    if measure not in entry.measures:
        pytest.skip(f"{entry.name} does not time {measure}")
    _, _, _, prepared = prepare(adapter, "resnet_tiny")
    try:
        step = prepared.step(measure)
        prepared.sync(step())
        prepared.sync(None)
    finally:
        prepared.close()


def test_transfers_and_device_clock_are_gpu_only(adapter):
    _, _, _, prepared = prepare(adapter, "lenet_tiny")
    try:
        for measure in ("transfer", "transfer_pinned"):
            with pytest.raises(Unsupported) as raised:
                prepared.step(measure)
            # Every suite asks for both: each adapter names its own reason.
            assert "unknown measure" not in str(raised.value)
        assert prepared.device_clock() is None
    finally:
        prepared.close()


def test_cpu_peak_memory_is_the_process_rss(adapter):
    _, _, _, prepared = prepare(adapter, "lenet_tiny")
    try:
        prepared.reset_peak_memory()
        prepared.sync(prepared.step("forward")())
        memory = prepared.peak_memory()
        assert memory.kind == "rss" and memory.peak_bytes and memory.peak_bytes > 0
    finally:
        prepared.close()


def test_a_job_kept_built_computes_the_same_after_other_jobs(adapter):
    """A job kept from the wall phase for the device phase (suites/harness/kept_jobs.py) runs
    again after other jobs were prepared and closed in its process (JAX's close clears
    its compiled programs; another precision changes the process's settings), once the
    worker has set its settings again."""
    _, _, _, kept = prepare(adapter, "lenet_tiny")
    try:
        before = kept.forward_output()
        for precision in ("bf16", "fp32"):
            try:
                _, _, _, other = prepare(adapter, "resnet_tiny", CaseConfig(precision))
            except Unsupported:
                continue
            other.sync(other.step("forward")())
            other.close()
        adapter.reapply(CaseConfig())
        np.testing.assert_array_equal(kept.forward_output(), before)
        assert adapter.bytes_in_use() is None     # a CPU run keeps no job
    finally:
        kept.close()


def test_single_layer_measures_refuse_networks(adapter, entry):
    if "grad_input" not in entry.measures:
        pytest.skip(f"{entry.name} does not time grad_input")
    _, _, _, prepared = prepare(adapter, "lenet_tiny")
    try:
        with pytest.raises(Unsupported):
            prepared.step("grad_input")
    finally:
        prepared.close()


@pytest.mark.parametrize("measure", ["forward", "gradient"])
def test_epoch_runs_over_batches_of_different_lengths(adapter, entry, measure):
    if f"epoch_{measure}" not in entry.measures:
        pytest.skip(f"{entry.name} does not time epoch_{measure}")
    model = get_model("lstm_tiny")
    batches = make_epoch(model, goldens.BATCH, 4)
    assert len({b.x.shape[1] for b in batches}) > 1, "the epoch must vary the padded length"
    _, _, _, prepared = prepare(adapter, "lstm_tiny")
    try:
        run = prepared.epoch_step(measure, batches)
        for _ in range(2):  # a second epoch reuses whatever the first one built
            prepared.sync(run())
    finally:
        prepared.close()


def test_profile_splits_time_by_layer_type(adapter, entry):
    if "profile" not in entry.measures:
        pytest.skip(f"{entry.name} does not profile")
    measure = "gradient" if "gradient" in entry.measures else "forward"
    _, _, _, prepared = prepare(adapter, "alexnet_tiny")
    try:
        profile = prepared.profile(measure, iterations=2)
    finally:
        prepared.close()
    assert profile.tool and profile.measure == measure and profile.iterations == 2
    assert tuple(profile.by_layer_type) == LAYER_TYPES
    # alexnet_tiny has convolutions, pooling, ReLUs and dense layers: a profile that
    # cannot find its convolutions or dense layers has misread the profiler's names.
    assert profile.by_layer_type["conv"] > 0 and profile.by_layer_type["fc"] > 0
    assert profile.total_ms == pytest.approx(sum(profile.by_layer_type.values()))
    assert profile.top_kernels and all(k.ms >= 0 and k.calls > 0 for k in profile.top_kernels)
    assert [k.ms for k in profile.top_kernels] == sorted((k.ms for k in profile.top_kernels),
                                                         reverse=True)


# Networks with each kind of trainable parameter: convolution + dense (LeNet), batch norm
# (ResNet), LSTM and embedding (the LSTM), tied weights with a frozen prefix (stacked AE).
TRAIN_STEP_MODELS = ["lenet_tiny", "resnet_tiny", "lstm_tiny", "sae_tiny_ae2"]


@pytest.mark.parametrize("name", TRAIN_STEP_MODELS)
def test_train_step_is_two_sgd_momentum_updates(adapter, entry, name):
    """Two ``train_step`` iterations from the canonical weights leave the weights that SGD
    with momentum gives from the float64 reference's gradients: w1 = w0 - lr*g0,
    w2 = w1 - lr*(m*g0 + g1), with g1 taken at w1 (so a missing or Nesterov momentum, a
    wrong rate, or an update of the canonical network itself all fail), and the canonical
    network the fingerprint reads is left as it was."""
    from models import reference_grad
    from models.measures import TRAIN_STEP
    from models.optimizers import SGD, optimizer_for

    lr, m = SGD.learning_rate, SGD.momentum
    assert optimizer_for(get_model(name)) is SGD
    if TRAIN_STEP not in entry.measures:
        pytest.skip(f"{entry.name} has no training step")
    model, weights, batch, prepared = prepare(adapter, name)
    try:
        before = prepared.forward_output()
        initial = prepared.trained_weights()
        step = prepared.step(TRAIN_STEP)
        prepared.sync(step())
        prepared.sync(step())
        trained = prepared.trained_weights()
        after = prepared.forward_output()
    finally:
        prepared.close()
    np.testing.assert_array_equal(before, after, err_msg="train_step changed the canonical network")
    trainable = analyse(model).trainable_names
    assert set(trained) == set(initial) == trainable
    w0 = {n: np.asarray(weights[n], np.float64) for n in trainable}
    _, g0 = reference_grad.loss_and_gradients(model, weights, batch)
    w1 = {**weights, **{n: w0[n] - lr * g0[n] for n in trainable}}
    _, g1 = reference_grad.loss_and_gradients(model, w1, batch)
    u = 2.0 ** -24
    for n in sorted(trainable):
        np.testing.assert_allclose(initial[n], weights[n], rtol=0, atol=0,
                                   err_msg=f"{name}: {n} does not start canonical")
        expected = -lr * ((1 + m) * g0[n] + g1[n])            # w2 - w0
        got = np.asarray(trained[n], np.float64) - w0[n]
        # fp32 gradients of these tiny networks are within about 1e-5 of float64 (short
        # reductions; 1e-3 leaves room for the LSTM's recurrences); each stored weight
        # is rounded to fp32 twice (u·|w| each), which the update cannot be more precise
        # than.
        allowed = 1e-3 * np.linalg.norm(expected) + 4 * u * np.linalg.norm(w0[n])
        assert np.linalg.norm(got - expected) <= allowed, (
            f"{name}: {n} after two steps differs from SGD with momentum by "
            f"{np.linalg.norm(got - expected):.3e} (allowed {allowed:.3e}; "
            f"update norm {np.linalg.norm(expected):.3e})")


# The optimizer is the same code for every transformer; GPT-2's tied head (one table,
# gradients from both uses) and its embeddings, LayerNorms and attention give AdamW every
# kind of transformer parameter. One network: under JAX each costs 17 s of compiling.
ADAMW_MODELS = ["gpt2_tiny"]


def _adamw_enclosure(opt, w, g0, d0, g1, d1, step, epsilon_hat):
    """Where the weights after AdamW's step ``step`` (1 or 2) from ``w`` lie, element by
    element, for any gradients within ``g0 ± d0`` (step 1's) and ``g1 ± d1`` (step 2's),
    in exact arithmetic: [lo, hi]. The update u = m_hat/(sqrt(v_hat) + eps) is
    g/(|g| + eps) at step 1 (increasing in g: its range is at the interval's ends), and at
    step 2 m_hat = (b1*g0 + g1)/(1 + b1), v_hat = (b2*g0^2 + g1^2)/(1 + b2), enclosed by
    interval arithmetic (the denominator is positive)."""
    lr, b1, b2 = opt.learning_rate, opt.beta1, opt.beta2
    eps = opt.eps / np.sqrt(1 - b2 ** step) if epsilon_hat else opt.eps
    if step == 1:
        u_lo = (g0 - d0) / (np.abs(g0 - d0) + eps)
        u_hi = (g0 + d0) / (np.abs(g0 + d0) + eps)
    else:
        def square(lo, hi):
            low = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo * lo, hi * hi))
            return low, np.maximum(lo * lo, hi * hi)
        n_lo = (b1 * (g0 - d0) + g1 - d1) / (1 + b1)
        n_hi = (b1 * (g0 + d0) + g1 + d1) / (1 + b1)
        s0, s1 = square(g0 - d0, g0 + d0), square(g1 - d1, g1 + d1)
        den_lo = np.sqrt((b2 * s0[0] + s1[0]) / (1 + b2)) + eps
        den_hi = np.sqrt((b2 * s0[1] + s1[1]) / (1 + b2)) + eps
        u_lo = np.where(n_lo < 0, n_lo / den_lo, n_lo / den_hi)
        u_hi = np.where(n_hi < 0, n_hi / den_hi, n_hi / den_lo)
    decayed = w * (1 - lr * opt.weight_decay)
    return decayed - lr * u_hi, decayed - lr * u_lo


@pytest.mark.parametrize("name", ADAMW_MODELS)
def test_train_step_is_two_adamw_updates(adapter, entry, name):
    """The transformers train with AdamW (models/optimizers.py, issue #60). Two
    ``train_step`` iterations from the canonical weights, each checked element by element
    against the float64 AdamW update (``AdamW.update``, in the epsilon order the framework
    computes: ``Adapter.adamw_epsilon_hat``) from the float64 reference's gradients: step 1
    from w0 with g0; step 2 from the framework's own w1 with g1 taken there (so step 1's
    rounding does not travel into step 2's check) and the moments of g0.

    The tolerance follows from the arithmetic. AdamW's update m_hat/(sqrt(v_hat) + eps) is
    about sign(g) where |g| >> eps (exactly g/(|g| + eps) at step 1): it does not scale
    with the gradient, so a gradient's fp32 error moves it little where |g| is well above
    that error, and up to ±lr where |g| is within it (the sign is then undecided). Each
    tensor's fp32 gradient error is bounded as models/error_bounds.py bounds it, in 2-norm
    relative to the gradient's norm (4 standard deviations of the accumulated rounding of
    the network's reductions), and no element's error exceeds the tensor's error norm:
    d = bound * ||g||. The weights after each step must lie in the range the update takes
    for gradients within g ± d (``_adamw_enclosure``), widened by the rounding of the
    fp32 update itself: the decay's product and the scalar 1 - lr*wd, and the final
    subtraction, 3u|w| (u = 2^-24); and a relative error of the step lr*|u_t|: 16u for its
    few fp32 operations (moments, square root, division), and the bias corrections'. A
    framework that takes beta^t in fp32 (Keras's ``ops.power(cast(beta_2))``, optax's
    ``decay**count``) rounds beta to fp32 (0.999 -> 0.99900001) and the cancellation in
    1 - beta^t magnifies that: t*beta^t/(1 - beta^t) units u (999u for beta2 at t = 1),
    halved by v_hat's square root. The test checks its own power: most
    elements' ranges are far narrower than lr, and narrow enough that a missing decay
    (lr*wd*|w| per step) or a wrong rate fails."""
    from models import error_bounds, reference_grad
    from models.measures import TRAIN_STEP
    from models.optimizers import AdamW, optimizer_for

    if TRAIN_STEP not in entry.measures:
        pytest.skip(f"{entry.name} has no training step")
    opt = optimizer_for(get_model(name))
    assert isinstance(opt, AdamW)
    eps_hat = type(adapter).adamw_epsilon_hat
    model, weights, batch, prepared = prepare(adapter, name)
    try:
        before = prepared.forward_output()
        initial = prepared.trained_weights()
        step = prepared.step(TRAIN_STEP)
        prepared.sync(step())
        # Copied now: PyTorch's CPU arrays share the training copy's memory, which the
        # next step updates in place.
        after_one = {n: np.array(a, copy=True) for n, a in prepared.trained_weights().items()}
        prepared.sync(step())
        after_two = prepared.trained_weights()
        after = prepared.forward_output()
        described = prepared.extra.get("optimizer", "")
    finally:
        prepared.close()
    np.testing.assert_array_equal(before, after, err_msg="train_step changed the canonical network")
    assert described.startswith(opt.describe()) and "adamw" in described.split(":", 1)[1].lower()
    trainable = analyse(model).trainable_names
    assert set(after_two) == set(after_one) == set(initial) == trainable
    bound = error_bounds.bounds(model, batch.x.shape[0], "fp32").grad
    w0 = {n: np.asarray(weights[n], np.float64) for n in trainable}
    w1 = {n: np.asarray(after_one[n], np.float64) for n in trainable}
    w2 = {n: np.asarray(after_two[n], np.float64) for n in trainable}
    _, g0 = reference_grad.loss_and_gradients(model, weights, batch)
    _, g1 = reference_grad.loss_and_gradients(model, {**weights, **w1}, batch)
    e1, state = opt.update(w0, {n: g0[n] for n in trainable}, None, 1, epsilon_hat=eps_hat)
    e2, _ = opt.update(w1, {n: g1[n] for n in trainable}, state, 2, epsilon_hat=eps_hat)
    u, lr = 2.0 ** -24, opt.learning_rate
    narrow = decay_seen = total = 0
    for n in sorted(trainable):
        np.testing.assert_array_equal(initial[n], weights[n], err_msg=f"{name}: {n} does not start canonical")
        d0, d1 = bound * np.linalg.norm(g0[n]), bound * np.linalg.norm(g1[n])
        for k, (w, got, expected, (lo, hi)) in enumerate((
                (w0[n], w1[n], e1[n], _adamw_enclosure(opt, w0[n], g0[n], d0, 0, 0, 1, eps_hat)),
                (w1[n], w2[n], e2[n], _adamw_enclosure(opt, w1[n], g0[n], d0, g1[n], d1, 2, eps_hat))),
                start=1):
            b1t, b2t = opt.beta1 ** k, opt.beta2 ** k
            relative = 16 + k * b1t / (1 - b1t) + k * b2t / (2 * (1 - b2t))
            rounding = 3 * u * np.abs(w) + relative * u * np.maximum(np.abs(lo - w), np.abs(hi - w))
            assert np.all((lo - 1e-15 <= expected) & (expected <= hi + 1e-15)), n
            outside = (got < lo - rounding) | (got > hi + rounding)
            if outside.any():
                i = np.flatnonzero(outside)[0]
                pytest.fail(f"{name}: {n}[{i}] after step {k} is {got.flat[i]!r}, AdamW gives "
                            f"{expected.flat[i]!r}, within [{lo.flat[i]!r}, {hi.flat[i]!r}] "
                            f"± {rounding.flat[i]:.2e} for gradients {g0[n].flat[i]:.3e} ± "
                            f"{d0:.2e} (step 1), {g1[n].flat[i]:.3e} ± {d1:.2e} (step 2); "
                            f"{int(outside.sum())} of {got.size} elements outside")
            width = hi - lo + 2 * rounding
            narrow += int((width < 0.1 * lr).sum())
            decay_seen += int((width < lr * opt.weight_decay * np.abs(w)).sum())
            total += w.size
    # The check's power: a wrong rate or moment moves nearly every element by a good part
    # of lr, and a missing decay moves an element by lr*wd*|w|.
    assert narrow >= 0.8 * total, f"{name}: only {narrow} of {total} element ranges below lr/10"
    assert decay_seen >= 0.25 * total, (f"{name}: only {decay_seen} of {total} element ranges "
                                        f"could tell a missing weight decay")


@pytest.mark.parametrize("name", ["lstm_tiny", "sae_tiny_ae2", *ADAMW_MODELS])
def test_the_training_steps_own_gradients_are_within_the_fp32_bound(adapter, entry, name,
                                                                   tmp_path, monkeypatch):
    """The fingerprint of a job that times ``train_step`` reads the gradients of the timed
    step itself (``Prepared.train_step_gradient_summary``: one step from the canonical
    weights and zeroed optimizer buffers, read back from the optimizer's state or
    ``.grad``), after the timed steps have moved the training copy on. They must be the
    float64 truth's within the fp32 bound, as a gradient pass's are: a copy not set back
    to the canonical weights, a buffer not zeroed or a moment not divided by (1 - beta1)
    is off by far more. Networks without ReLU or max pooling, whose gradients are judged:
    the LSTM (SGD), the stacked autoencoder's tied weights and frozen prefix (SGD), GPT-2's
    tied head (AdamW)."""
    from models.error_bounds import bounds
    from models.measures import TRAIN_STEP
    from suites.truth.check import fingerprint_fields

    if TRAIN_STEP not in entry.measures:
        pytest.skip(f"{entry.name} has no training step")
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model, _, _, prepared = prepare(adapter, name)
    try:
        step = prepared.step(TRAIN_STEP)
        for _ in range(3):
            prepared.sync(step())
        fields = fingerprint_fields(prepared, model, goldens.BATCH, 0, Unsupported, TRAIN_STEP)
        after = prepared.trained_weights()
    finally:
        prepared.close()
    errors, limits = fields["vs_f64"], bounds(model, goldens.BATCH, "fp32")
    assert fields["gradients_of"] == TRAIN_STEP
    assert limits.grad_judged and set(fields["grad_norms"]) == analyse(model).trainable_names
    assert errors["loss"] <= limits.loss, errors
    assert errors["grad_norms"] <= limits.grad, errors
    if errors["grad"] is not None:
        assert errors["grad"] <= limits.grad, errors
    assert all(np.isfinite(w).all() for w in after.values())


def test_train_step_refused_with_a_reason_where_unlisted(adapter, entry):
    from models.measures import TRAIN_STEP

    if TRAIN_STEP in entry.measures:
        pytest.skip(f"{entry.name} lists {TRAIN_STEP}")
    _, _, _, prepared = prepare(adapter, "lenet_tiny")
    try:
        with pytest.raises(Unsupported, match="."):
            prepared.step(TRAIN_STEP)
    finally:
        prepared.close()


@pytest.mark.parametrize("name", ["lenet_tiny", "lstm_tiny"])
def test_serve_answers_other_samples_and_leaves_the_prepared_batch(adapter, entry, name):
    """``serve`` (suites/serving/) runs the forward on the batch it is handed, not on the
    prepared one: the prepared samples in reverse order (the shapes the serving harness
    hands it: one query set, one padded length) come back as float64 computes them, and
    the prepared batch's forward is unchanged after (ONNX Runtime's CPU binding once wrote
    the served batch into the caller's arrays)."""
    from models.inputs import Batch
    from models.measures import SERVE

    if SERVE not in entry.measures:
        pytest.skip(f"{entry.name} does not list {SERVE}")
    model, weights, batch, prepared = prepare(adapter, name)
    other = Batch(batch.x[::-1].copy(), None,
                  None if batch.lengths is None else batch.lengths[::-1].copy())
    sent = other.x.copy()
    try:
        before = prepared.forward_output()
        served = prepared.serve(other)
        after = prepared.forward_output()
    finally:
        prepared.close()
    np.testing.assert_array_equal(other.x, sent, err_msg="serve wrote into its input")
    np.testing.assert_array_equal(after, before)
    expected = reference_numpy.forward(model, weights, other, train=False)
    assert served.shape == expected.shape
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4 * scale)
    assert not np.allclose(served, before), "served the prepared batch, not the one handed"
