"""What the float64 truth computes (models/truth.py): the inference output of the first
examples only, gradients only where they are judged, single convolutions in closed form
(models/closed_form.py), a cache key that follows all of it, the worker-side comparison
on the same examples (suites/truth/check.py) and the parallel cache fill
(suites/truth/pool.py). numpy only: runs in the core session."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from adapters.base import Prepared
from adapters.summary import OutputSummary
from models import closed_form, inputs, ir, reference, reference_grad, truth
from models.analysis import analyse
from models.error_bounds import grad_judged
from models.weights import canonical_weights
from models.zoo import TINY, get_model
from suites.truth import check as truth_check
from suites.truth import pool as truth_pool

BATCH = 6   # more than truth.OUTPUT_EXAMPLES, so the first examples are a strict part


def _f64(weights):
    return {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}


# --------------------------------------------------------------------------------------
# The first k examples.


@pytest.mark.parametrize("name", list(TINY))
def test_the_inference_output_of_the_first_examples_is_theirs_inside_the_whole_batch(name):
    # Per-example independence in inference: batch norm on running statistics, dropout
    # as identity, the LSTM under each sequence's mask (a token batch keeps the padded
    # length of the whole batch).
    model = get_model(name)
    weights = canonical_weights(model)
    data = inputs.make_batch(model, BATCH)
    whole = reference.forward(model, weights, data, train=False)
    k = truth.OUTPUT_EXAMPLES
    head = reference.forward(model, weights, inputs.head(data, k), train=False)
    np.testing.assert_allclose(head, whole[:k], rtol=1e-12, atol=1e-14 * np.abs(whole).max())
    found = truth.compute(model, BATCH, 0)
    assert found.output.shape == (k, *whole.shape[1:]) and found.batch == BATCH
    np.testing.assert_allclose(found.output, whole[:k], rtol=1e-12,
                               atol=1e-14 * np.abs(whole).max())


def test_without_batch_norm_the_training_forward_is_the_inference_forward():
    # Why the truth takes the k examples from the training forward of such models.
    for name in TINY:
        model = get_model(name)
        if truth.plan(model, BATCH).separate_inference:
            continue
        weights = canonical_weights(model)
        data = inputs.make_batch(model, BATCH)
        np.testing.assert_array_equal(reference.forward(model, weights, data, train=True),
                                      reference.forward(model, weights, data, train=False))


def test_output_examples_is_at_most_the_batch():
    model = get_model("lenet_tiny")
    assert truth.plan(model, 1).output_examples == 1
    assert truth.plan(model, 4).output_examples == 4 == truth.OUTPUT_EXAMPLES
    assert truth.plan(model, 128).output_examples == 4


def test_the_loss_is_over_the_whole_batch():
    for name in ("resnet_tiny", "lenet_tiny", "sae_tiny_se"):   # batch norm, kinks, smooth
        model = get_model(name)
        weights = canonical_weights(model)
        expected = reference.loss(model, weights, inputs.make_batch(model, BATCH), train=True)
        assert math.isclose(truth.compute(model, BATCH, 0).loss, expected, rel_tol=1e-13), name


# --------------------------------------------------------------------------------------
# The worker's comparison on the same examples.


def test_errors_compare_the_first_examples_of_the_framework_output():
    model = get_model("resnet_tiny")
    found = truth.compute(model, BATCH, 0)
    whole = reference.forward(model, canonical_weights(model), inputs.make_batch(model, BATCH))
    errors = truth_check.errors(OutputSummary.of(whole), found.loss, None, found,
                                canonical=True)
    assert errors["output"] < 1e-15 and errors["output_examples"] == truth.OUTPUT_EXAMPLES
    later = whole.copy()
    later[truth.OUTPUT_EXAMPLES:] += 1.0     # beyond the examples the truth holds
    assert truth_check.errors(OutputSummary.of(later), found.loss, None, found,
                              True)["output"] < 1e-15
    first = whole.copy()
    first[truth.OUTPUT_EXAMPLES - 1, 0] *= 1 + 1e-3
    assert truth_check.errors(OutputSummary.of(first), found.loss, None, found,
                              True)["output"] > 1e-5
    wrong_batch = truth_check.errors(OutputSummary.of(whole[:-1]), found.loss, None, found,
                                     True)
    assert wrong_batch["output"] == math.inf and "shape" in wrong_batch["problem"]


class _Prepared:
    """The two calls of an adapter's ``Prepared`` the fingerprint path makes, returning the
    float64 reference's own full-batch arrays."""

    def __init__(self, model, batch):
        self.weights = _f64(canonical_weights(model))
        self.model = model
        self.data = inputs.make_batch(model, batch)

    def forward_output(self):
        return reference.forward(self.model, self.weights, self.data, train=False)

    def loss_and_gradients(self):
        return reference_grad.loss_and_gradients(self.model, self.weights, self.data)

    def canonical_gradient(self, name, gradient):
        return gradient

    # adapters.base.Prepared's defaults, from the two calls above.
    output_summary = Prepared.output_summary
    gradient_summary = Prepared.gradient_summary


def test_fingerprint_of_a_kinked_network_has_no_gradient_errors_and_says_why(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model = get_model("resnet_tiny")
    fields = truth_check.fingerprint_fields(_Prepared(model, BATCH), model, BATCH, 0,
                                            NotImplementedError)
    vs = fields["vs_f64"]
    assert vs["output"] < 1e-14 and vs["loss"] < 1e-14
    assert vs["output_examples"] == truth.OUTPUT_EXAMPLES
    assert vs["grad"] is None and vs["grad_norms"] is None and "per_param" not in vs
    assert vs["grad_skipped"].startswith("not computed") and "DLBENCH_TRUTH_GRADIENTS=all" \
        in vs["grad_skipped"]
    assert fields["grad_norms"]    # the fingerprint keeps the framework's own norms


def test_fingerprint_of_a_smooth_network_judges_every_gradient(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model = get_model("lstm_tiny")
    vs = truth_check.fingerprint_fields(_Prepared(model, BATCH), model, BATCH, 0,
                                        NotImplementedError)["vs_f64"]
    assert vs["grad"] < 1e-14 and vs["grad_norms"] < 1e-14 and "grad_skipped" not in vs
    assert set(vs["per_param"]) == analyse(model).trainable_names


def test_a_job_timing_the_training_step_is_fingerprinted_by_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    # The gradients of the program timed: a backward pass's, else the training step's;
    # none for a job that times forward passes and copies alone.
    assert truth_check.gradients_of(("forward", "train_step")) == "train_step"
    assert truth_check.gradients_of(("gradient", "train_step")) == "gradient"
    assert truth_check.gradients_of(("epoch_gradient",)) == "gradient"
    assert truth_check.gradients_of(("forward", "transfer", "epoch_forward")) == ""
    model = get_model("lstm_tiny")
    only_output = truth_check.fingerprint_fields(_Prepared(model, BATCH), model, BATCH, 0,
                                                 NotImplementedError, "")
    assert only_output["loss"] is None and only_output["grad_norms"] is None
    assert "gradients_of" not in only_output and only_output["vs_f64"]["output"] < 1e-14
    prepared, asked = _Prepared(model, BATCH), []

    def from_the_step(keep_arrays):
        asked.append(keep_arrays)
        return prepared.gradient_summary(keep_arrays)
    prepared.train_step_gradient_summary = from_the_step
    fields = truth_check.fingerprint_fields(prepared, model, BATCH, 0, NotImplementedError,
                                            "train_step")
    assert asked == [True] and fields["gradients_of"] == "train_step"
    assert fields["vs_f64"]["grad"] < 1e-14
    assert truth_check.fingerprint_fields(_Prepared(model, BATCH), model, BATCH, 0,
                                          NotImplementedError)["gradients_of"] == "gradient"


# --------------------------------------------------------------------------------------
# Gradients only where they are judged.


@pytest.mark.parametrize("name", list(TINY))
def test_gradients_are_computed_exactly_where_they_are_judged(name, monkeypatch):
    model = get_model(name)
    found = truth.compute(model, 3, 0)
    assert (found.grads is not None) == grad_judged(model), name
    assert found.grad_skipped == ("" if grad_judged(model) else truth.GRAD_SKIPPED)
    monkeypatch.setenv(truth.GRADIENTS_ENV, "all")
    every = truth.compute(model, 3, 0)
    _, expected = reference_grad.loss_and_gradients(model, canonical_weights(model),
                                                    inputs.make_batch(model, 3))
    assert every.grads is not None and not every.grad_skipped and set(every.grads) == set(expected)
    for param, gradient in expected.items():
        scale = max(float(np.abs(gradient).max()), 1e-300)
        assert float(np.abs(every.grads[param] - gradient).max()) <= 1e-12 * scale, param


def test_an_unknown_gradient_mode_is_refused(monkeypatch):
    monkeypatch.setenv(truth.GRADIENTS_ENV, "some")
    with pytest.raises(ValueError, match="DLBENCH_TRUTH_GRADIENTS"):
        truth.plan(get_model("lenet_tiny"), 4)


# --------------------------------------------------------------------------------------
# Single convolutions in closed form.

CONV_SHAPES = [   # (channels, size, filters, kernel, stride, padding, groups, bias)
    (3, 9, 4, 3, 1, 0, 1, True),
    (3, 9, 4, 3, 2, 1, 1, True),
    (2, 11, 3, 5, 3, 2, 1, False),
    (4, 8, 6, 1, 1, 0, 1, True),
    (5, 10, 2, 4, 2, 0, 1, True),    # stride that leaves the last rows unused
    (4, 9, 6, 3, 1, 1, 2, True),     # grouped
    (6, 7, 6, 2, 2, 1, 3, False),
]


def _conv_model(channels, size, filters, kernel, stride, padding, groups, bias):
    node = ir.Conv2d("conv", channels, filters, ir.pair(kernel), ir.pair(stride),
                     ir.pair(padding), groups, bias)
    return ir.Model("conv_test", "conv_layer", ir.InputSpec("image", (channels, size, size)),
                    (node,), ir.Loss("sum"))


@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_closed_form_equals_the_full_reference(shape):
    model = _conv_model(*shape)
    assert closed_form.applies(model)
    weights = _f64(canonical_weights(model, 1))
    data = inputs.make_batch(model, 5, 1)
    expected_loss, expected = reference_grad.loss_and_gradients(model, weights, data)
    node = model.body[0]
    loss, grads = closed_form.loss_and_gradients(
        node, weights["conv.weight"], weights.get("conv.bias"), np.asarray(data.x, np.float64))
    assert set(grads) == set(expected)
    for param, gradient in expected.items():
        scale = float(np.abs(gradient).max())
        assert float(np.abs(grads[param] - gradient).max()) <= 1e-12 * scale, (shape, param)
    # The sum cancels: relative to the sum of magnitudes, as the truth judges it.
    magnitude = float(np.abs(reference.forward(model, weights, data, train=True)).sum())
    assert abs(loss - expected_loss) <= 1e-12 * magnitude, shape


def test_closed_form_is_used_only_for_one_convolution_under_the_sum_loss():
    conv = _conv_model(*CONV_SHAPES[0])
    assert truth.plan(conv, 8).closed_form and truth.plan(get_model("conv_l5"), 128).closed_form
    assert not closed_form.applies(replace(conv, loss=ir.Loss("softmax_xent", 4)))
    assert not closed_form.applies(replace(conv, body=conv.body * 2))
    assert not closed_form.applies(replace(conv, frozen=(ir.Activation("act", "tanh"),)))
    assert not truth.plan(get_model("lenet_tiny"), 8).closed_form


def test_closed_form_truth_matches_the_full_reference_at_a_batch_above_k():
    model = get_model("conv_tiny")
    found = truth.compute(model, BATCH, 0)
    weights = canonical_weights(model)
    data = inputs.make_batch(model, BATCH)
    whole = reference.forward(model, weights, data)
    np.testing.assert_allclose(found.output, whole[:truth.OUTPUT_EXAMPLES], rtol=1e-12)
    loss, grads = reference_grad.loss_and_gradients(model, weights, data)
    assert abs(found.loss - loss) <= 1e-12 * float(np.abs(whole).sum())
    for param, gradient in grads.items():
        np.testing.assert_allclose(found.grads[param], gradient, rtol=1e-12,
                                   atol=1e-12 * np.abs(gradient).max())
    # The scale of the "sum" loss: estimated from the k examples, the full sum at k = batch.
    assert found.loss_scale == pytest.approx(float(np.abs(whole).sum()), rel=0.2)
    small = truth.compute(model, 3, 0)
    exact = float(np.abs(reference.forward(model, weights, inputs.make_batch(model, 3))).sum())
    assert small.loss_scale == pytest.approx(exact, rel=1e-13)


# --------------------------------------------------------------------------------------
# The cache key and the cost.


def test_the_key_changes_with_what_is_computed(monkeypatch):
    kinked, smooth = get_model("lenet_tiny"), get_model("sae_tiny_se")
    judged_only = truth.key(kinked, 8, 0)
    assert truth.key(smooth, 8, 0) == truth.key(smooth, 8, 0)
    monkeypatch.setenv(truth.GRADIENTS_ENV, "all")
    assert truth.key(kinked, 8, 0) != judged_only        # gradients now computed
    smooth_all = truth.key(smooth, 8, 0)
    monkeypatch.delenv(truth.GRADIENTS_ENV)
    assert truth.key(smooth, 8, 0) == smooth_all          # computed either way: one entry
    monkeypatch.setattr(truth, "OUTPUT_EXAMPLES", 2)
    assert truth.key(kinked, 8, 0) != judged_only        # fewer examples
    monkeypatch.undo()
    conv = get_model("conv_tiny")
    with_shortcut = truth.key(conv, 8, 0)
    monkeypatch.setattr(closed_form, "applies", lambda model: False)
    assert truth.key(conv, 8, 0) != with_shortcut


def test_an_entry_under_another_plan_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model = get_model("lenet_tiny")
    assert truth.load_or_compute(model, 4, 0).grads is None
    monkeypatch.setenv(truth.GRADIENTS_ENV, "all")
    assert not truth.is_cached(model, 4, 0)
    assert truth.load_or_compute(model, 4, 0).grads is not None
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_cost_counts_the_passes_the_plan_runs(monkeypatch):
    def per_example(name):
        return analyse(get_model(name)).flops / 1e9

    k = truth.OUTPUT_EXAMPLES
    assert truth.cost_gflop(get_model("vgg16"), 16) == pytest.approx(16 * per_example("vgg16"))
    assert truth.cost_gflop(get_model("resnet50"), 16) == pytest.approx(
        (16 + k) * per_example("resnet50"))                  # training forward + inference
    assert truth.cost_gflop(get_model("lstm"), 16) == pytest.approx(3 * 16 * per_example("lstm"))
    conv = truth.cost_gflop(get_model("conv_l1"), 128)
    assert k * per_example("conv_l1") < conv < 1.01 * k * per_example("conv_l1")
    monkeypatch.setenv(truth.GRADIENTS_ENV, "all")
    assert truth.cost_gflop(get_model("vgg16"), 16) == pytest.approx(3 * 16 * per_example("vgg16"))


def test_pairs_that_fit_under_the_limit_now_are_computed(monkeypatch):
    # Beyond 3 TFLOP at four passes, within it at what is computed now.
    for name, batch in (("vgg_a", 64), ("alexnet_bvlc_plain", 512)):
        assert truth.too_expensive(get_model(name), batch) is None, name
        assert truth.plan(get_model(name), batch).whole_batch, name
    # Beyond the cap for the whole batch: the output alone; beyond it for that too: none.
    model = get_model("vgg_a")
    head = truth.OUTPUT_EXAMPLES * analyse(model).flops / 1e9
    monkeypatch.setenv("DLBENCH_TRUTH_MAX_GFLOP", str(2 * head))
    assert truth.too_expensive(model, 64) is None
    assert not truth.plan(model, 64).whole_batch
    assert truth.cost_gflop(model, 64) == pytest.approx(head)
    assert "output judged on the first 4 examples" in truth.whole_batch_skipped(model, 64)
    monkeypatch.setenv("DLBENCH_TRUTH_MAX_GFLOP", str(head / 2))
    assert "pairwise agreement only" in truth.too_expensive(model, 64)


@pytest.mark.parametrize("name", ["lstm_tiny", "resnet_tiny", "lenet_tiny"])
def test_above_the_cap_the_truth_is_the_output_of_the_first_examples(name, tmp_path,
                                                                     monkeypatch):
    # The same k outputs as the whole-batch truth, no loss, no gradients, the reason kept
    # through the cache; the worker's errors judge the output and say what was not judged.
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    model = get_model(name)
    whole = truth.compute(model, BATCH, 0)
    head = truth.OUTPUT_EXAMPLES * analyse(model).flops / 1e9
    monkeypatch.setenv("DLBENCH_TRUTH_MAX_GFLOP", str(head * 1.2))   # whole batch: >= 1.5x
    assert truth.cost_gflop(model, BATCH) == pytest.approx(head)
    for found in (truth.load_or_compute(model, BATCH, 0), truth.load_or_compute(model, BATCH, 0)):
        np.testing.assert_allclose(found.output, whole.output, rtol=1e-12,
                                   atol=1e-14 * np.abs(whole.output).max())
        assert found.loss is None and found.loss_scale is None and found.grads is None
        assert found.loss_skipped == found.grad_skipped == truth.whole_batch_skipped(model,
                                                                                      BATCH)
    assert found.cached
    vs = truth_check.fingerprint_fields(_Prepared(model, BATCH), model, BATCH, 0,
                                        NotImplementedError)["vs_f64"]
    assert vs["output"] < 1e-14 and "loss" not in vs and vs["grad"] is None
    assert vs["whole_batch_skipped"] == found.loss_skipped


# --------------------------------------------------------------------------------------
# The parallel fill.


def test_fill_cache_computes_every_pair_in_processes_and_reports_a_failure(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    said = []
    pairs = [("lenet_tiny", 4), ("conv_tiny", 6), ("no_such_model", 4), ("lstm_tiny", 3)]
    seconds = truth_check.fill_cache(pairs, 0, said.append, cpus=2)
    assert set(seconds) == {("lenet_tiny", 4), ("conv_tiny", 6), ("lstm_tiny", 3)}
    assert all(value > 0 for value in seconds.values())
    assert any("no_such_model" in line and "failed" in line for line in said)
    assert any("2 processes" in line for line in said)
    for name, batch in seconds:
        assert truth.is_cached(get_model(name), batch, 0)
    again = truth_check.fill_cache(pairs[:2], 0, said.append, cpus=2)
    assert again == {("lenet_tiny", 4): 0.0, ("conv_tiny", 6): 0.0}


def test_fill_cache_does_nothing_when_the_truth_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    monkeypatch.setenv("DLBENCH_TRUTH", "off")
    assert truth_check.fill_cache([("lenet_tiny", 4)], 0, print) == {}
    assert not list(tmp_path.iterdir())


def fail_or_record(model: str, batch: int, seed: int) -> None:
    """A pool job for the tests below: ``model`` is a path to write the BLAS thread
    setting to; batch 1 raises, batch 2 kills its process."""
    if batch == 1:
        raise RuntimeError("planted failure")
    if batch == 2:
        os._exit(3)
    with open(model, "w") as out:
        out.write(os.environ.get("OPENBLAS_NUM_THREADS", "unset"))


def test_a_failed_or_killed_job_is_reported_and_the_others_finish(tmp_path):
    record = str(tmp_path / "threads")
    jobs = [truth_pool.Job("raises", 1, 0, 5.0), truth_pool.Job("dies", 2, 0, 4.0),
            truth_pool.Job(record, 3, 0, 1.0)]
    started, done = [], []
    outcomes = truth_pool.run(jobs, truth_pool.PoolShape(2, 1), started.append, done.append,
                              work=fail_or_record)
    assert [job.model for job in started] == ["raises", "dies", record]   # largest first
    by_model = {outcome.job.model: outcome for outcome in outcomes}
    assert by_model["raises"].seconds is None and "planted failure" in by_model["raises"].error
    assert by_model["dies"].seconds is None and "code 3" in by_model["dies"].error
    assert by_model[record].seconds is not None and not by_model[record].error
    # The BLAS threads of the child, set before it imported numpy.
    assert Path(record).read_text() == "1"
    assert len(done) == 3


def test_the_pool_has_processes_times_threads_equal_to_the_cpus():
    def jobs(*gflops):
        return [truth_pool.Job(f"m{i}", 1, 0, g) for i, g in enumerate(gflops)]

    assert truth_pool.shape_for(jobs(1, 1, 1, 1), 2) == truth_pool.PoolShape(2, 1)
    assert truth_pool.shape_for(jobs(1, 1, 1, 1), 16) == truth_pool.PoolShape(4, 4)
    # One job dominates: fewer processes, each with more threads.
    assert truth_pool.shape_for(jobs(100, 10, 10, 10, 10, 10), 16) == truth_pool.PoolShape(2, 8)
    assert truth_pool.shape_for(jobs(5), 16) == truth_pool.PoolShape(1, 16)
    assert truth_pool.shape_for(jobs(*[1] * 9), 16) == truth_pool.PoolShape(9, 2)
    assert truth_pool.shape_for(jobs(*[1] * 20), 2) == truth_pool.PoolShape(2, 1)
    assert truth_pool.shape_for([], 16) == truth_pool.PoolShape(0, 0)


def test_the_pool_runs_no_more_processes_than_the_largest_jobs_memory_allows():
    def jobs(*gflops):
        return [truth_pool.Job(f"m{i}", 1, 0, g) for i, g in enumerate(gflops)]

    gb = 1e9
    per_1000 = 1000 * truth_pool.BYTES_PER_GFLOP      # 5 GB for a 1000-GFLOP job
    eight = jobs(*[1000] * 8)
    assert truth_pool.shape_for(eight, 16) == truth_pool.PoolShape(8, 2)
    assert truth_pool.shape_for(eight, 16, 1000 * gb) == truth_pool.PoolShape(8, 2)
    # 80% of 16 GB holds two 5 GB jobs, not three.
    assert per_1000 * 2 <= 0.8 * 16 * gb < per_1000 * 3
    assert truth_pool.shape_for(eight, 16, 16 * gb) == truth_pool.PoolShape(2, 8)
    # The largest jobs count first: two 1000-GFLOP jobs do not fit in 80% of 8 GB together.
    assert truth_pool.shape_for(jobs(1000, 1000, 10, 10), 4) == truth_pool.PoolShape(3, 1)
    assert truth_pool.shape_for(jobs(1000, 1000, 10, 10), 4, 8 * gb) == truth_pool.PoolShape(1, 4)
    # Too little memory for even the largest alone: one process, which may still finish.
    assert truth_pool.shape_for(eight, 16, 1 * gb) == truth_pool.PoolShape(1, 16)


def test_thread_limit_restores_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with truth_pool.thread_limit(2):
        assert os.environ["OMP_NUM_THREADS"] == os.environ["OPENBLAS_NUM_THREADS"] == "2"
    assert os.environ["OMP_NUM_THREADS"] == "7" and "OPENBLAS_NUM_THREADS" not in os.environ


def test_a_bad_gradient_setting_skips_the_truth_and_keeps_the_row(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path))
    monkeypatch.setenv(truth.GRADIENTS_ENV, "some")
    model = get_model("lenet_tiny")
    fields = truth_check.fingerprint_fields(_Prepared(model, 4), model, 4, 0,
                                            NotImplementedError)
    assert fields["vs_f64"]["skipped"].startswith("float64 reference failed")
    assert "DLBENCH_TRUTH_GRADIENTS" in fields["vs_f64"]["skipped"]


def _fingerprint_row(case_id, model, batch, vs_f64, status="ok"):
    return {"case_id": case_id, "model": model, "batch": batch, "measure": "fingerprint",
            "status": status, "fingerprint": {"output_head": [0.0], "vs_f64": vs_f64}}


def test_resume_takes_again_a_fingerprint_the_truth_now_judges(tmp_path, monkeypatch):
    # Written when the truth was above the cap and skipped: resuming redoes the
    # fingerprint (only it) once the truth judges the pair; still above the cap, with the
    # truth off, or failed: recorded as before.
    from suites.truth.check import finished_case_ids

    capped = {"skipped": "float64 reference skipped: 3960 GFLOP > 3000 "
                         "(DLBENCH_TRUTH_MAX_GFLOP); pairwise agreement only"}
    rows = [_fingerprint_row("a/fingerprint", "vgg16", 128, capped),
            _fingerprint_row("b/fingerprint", "vgg16", 128, {"skipped": "DLBENCH_TRUTH=off"}),
            _fingerprint_row("c/fingerprint", "vgg16", 128, capped, status="failed"),
            _fingerprint_row("d/fingerprint", "no_such_model", 128, capped),
            {**_fingerprint_row("e/forward", "vgg16", 128, capped), "measure": "forward"},
            _fingerprint_row("f/fingerprint", "lenet", 64, {"output": 1e-7})]
    path = tmp_path / "torch_gpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    everything = {r["case_id"] for r in rows}
    assert finished_case_ids(path) == everything - {"a/fingerprint"}
    monkeypatch.setenv("DLBENCH_TRUTH_MAX_GFLOP", "1")     # even 4 examples above it
    assert finished_case_ids(path) == everything
    monkeypatch.delenv("DLBENCH_TRUTH_MAX_GFLOP")
    monkeypatch.setenv("DLBENCH_TRUTH", "off")
    assert finished_case_ids(path) == everything
