"""The report's float64 verdict (reports/pipeline/truth.py) on planted errors: a TF32-sized error
(5e-4 relative, measured on an H100 for TF32 convolutions) in one framework's fp32
fingerprint is ✗ for that framework only; the same error in a tf32 row is ✓."""

from __future__ import annotations

import copy

from models.error_bounds import bounds
from models.zoo import get_model
from reports.pipeline import equivalence, truth
from reports.pipeline.load import load
from reports.pipeline.tidy import tidy
from tests import report_fixtures as fx

TF32_SIZED = 5e-4
MODELS = ("resnet50", "resnet152", "vgg16", "conv_l5", "lstm")


def clean_errors(model: str, batch: int) -> dict:
    """fp32 errors as measured on an H100 (a few 1e-6 of the largest value), per
    parameter in model order."""
    return {"norm": "max-abs relative to the largest float64 value", "output": 2e-6,
            "loss": 1e-6, "grad": 4e-6, "grad_norms": 1e-6,
            "per_param": {"conv1.weight": 4e-6, "fc.weight": 1e-6}}


def fingerprint_row(model, batch, framework, precision="fp32", errors=None, device="gpu"):
    row = fx.make_row(model, batch, "fingerprint", framework, device, 1.0, threads=4,
                      precision=precision)
    row["fingerprint"] = {**fx.fingerprint("gradient"),
                          "vs_f64": copy.deepcopy(errors or clean_errors(model, batch))}
    return row


def frame_of(rows, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    fx._write(tmp_path / "r.jsonl", rows)
    return tidy(load([tmp_path])).frame


def judged(rows, tmp_path):
    frame = frame_of(rows, tmp_path)
    return truth.prefer_truth(equivalence.check(frame), frame), frame


def planted(model, batch, field="output"):
    errors = clean_errors(model, batch)
    errors[field] = TF32_SIZED
    return errors


def test_tf32_sized_error_in_one_fp32_row_fails_that_framework_only(tmp_path):
    for model in MODELS:
        batch = 128 if model.startswith("conv_l") else 16
        rows = [fingerprint_row(model, batch, "torch"),
                fingerprint_row(model, batch, "jax", errors=planted(model, batch)),
                fingerprint_row(model, batch, "tf")]
        equiv, frame = judged(rows, tmp_path / model)
        verdict = equiv.verdicts[(model, batch, "fp32")]
        assert verdict.agree is False, model
        assert "jax" in verdict.worst_pair and "torch" not in verdict.worst_pair, verdict
        assert "tf " not in verdict.worst_pair, verdict
        by_framework = {r["framework"]: equiv.rows[r["source"]].agree
                        for r in frame.to_dict("records")}
        assert by_framework == {"torch": True, "jax": False, "tf": True}, model


def test_tf32_sized_error_in_a_tf32_row_passes(tmp_path):
    for model in MODELS:
        batch = 128 if model.startswith("conv_l") else 16
        rows = [fingerprint_row(model, batch, fw, "tf32", planted(model, batch))
                for fw in ("torch", "jax")]
        equiv, _ = judged(rows, tmp_path / model)
        assert equiv.verdicts[(model, batch, "tf32")].agree is True, model


def test_clean_fp32_rows_pass_and_pairwise_would_not_see_the_plant(tmp_path):
    rows = [fingerprint_row("resnet50", 16, "torch"),
            fingerprint_row("resnet50", 16, "jax", errors=planted("resnet50", 16))]
    frame = frame_of(rows, tmp_path)
    # Identical fingerprints: pairwise comparison sees nothing, float64 sees jax.
    assert equivalence.check(frame).verdicts[("resnet50", 16, "fp32")].agree is True
    assert truth.prefer_truth(equivalence.check(frame), frame).verdicts[
        ("resnet50", 16, "fp32")].agree is False


def test_gradient_drift_names_the_first_parameter_over_the_bound(tmp_path):
    # The LSTM has no ReLU or max pooling, so its gradients are judged.
    errors = clean_errors("lstm", 16)
    errors["grad"] = 0.05
    errors["per_param"] = {"embedding.table": 1e-7, "lstm.w_ih": 0.04, "classifier.weight": 0.03}
    rows = [fingerprint_row("lstm", 16, "torch", errors=errors)]
    equiv, _ = judged(rows, tmp_path)
    verdict = equiv.verdicts[("lstm", 16, "fp32")]
    assert verdict.agree is False and "lstm.w_ih" in verdict.worst_pair


def test_gradients_of_relu_networks_are_shown_not_judged(tmp_path):
    # PyTorch's fp32 ResNet-50 gradient measured 2.3e-2 from float64 on a CPU, from
    # ReLU and max-pooling crossings; outputs 4e-7. The verdict rests on the output.
    errors = {**clean_errors("resnet50", 16), "grad": 2.3e-2, "grad_norms": 4e-4}
    rows = [fingerprint_row("resnet50", 16, "torch", errors=errors)]
    equiv, frame = judged(rows, tmp_path)
    assert equiv.verdicts[("resnet50", 16, "fp32")].agree is True
    table = truth.truth_table(frame)
    row = dict(zip(table.columns, (c.text for c in table.rows[0])))
    assert row["gradient err"] == "2.3e-02" and row["bound out / grad"].endswith("not judged")


def test_rows_without_float64_errors_keep_the_pairwise_verdict(tmp_path):
    skipped = fingerprint_row("resnet50", 16, "jax")
    skipped["fingerprint"]["vs_f64"] = {"skipped": "float64 reference skipped: too big"}
    other = fingerprint_row("resnet50", 16, "torch")
    other["fingerprint"]["output_head"] = [v * 1.5 for v in other["fingerprint"]["output_head"]]
    equiv, frame = judged([skipped, other], tmp_path)
    pairwise = equivalence.check(frame).verdicts[("resnet50", 16, "fp32")]
    assert equiv.verdicts[("resnet50", 16, "fp32")] == pairwise
    assert pairwise.agree is False


def test_truth_table_shows_errors_beside_times(tmp_path):
    rows = [fingerprint_row("resnet50", 16, "torch"),
            fx.make_row("resnet50", 16, "forward", "torch", "gpu", 12.5, threads=4),
            fx.make_row("resnet50", 16, "gradient", "torch", "gpu", 40.0, threads=4)]
    table = truth.truth_table(frame_of(rows, tmp_path))
    row = dict(zip(table.columns, (c.text for c in table.rows[0])))
    assert row["output err"] == "2.0e-06" and row["forward"] == "12.5 ms"
    assert row["gradient"] == "40 ms" and row["verdict"] == "✓"
    limits = bounds(get_model("resnet50"), 16, "fp32")
    assert row["bound out / grad"] == f"{limits.output:.1e} / not judged"


def without_gradients(errors: dict) -> dict:
    """A row as written since the float64 reference skips the gradients of networks with
    ReLU or max pooling (models/truth.py), with its output over the first 4 examples."""
    found = {k: v for k, v in errors.items() if k != "per_param"}
    return {**found, "grad": None, "grad_norms": None, "output_examples": 4,
            "grad_skipped": "not computed: gradients are shown but never judged for networks "
                            "with ReLU/max-pool kinks; DLBENCH_TRUTH_GRADIENTS=all computes them"}


def test_rows_without_gradient_errors_are_judged_on_output_and_loss(tmp_path):
    for model in ("resnet50", "vgg16"):
        rows = [fingerprint_row(model, 16, "torch", errors=without_gradients(
                    clean_errors(model, 16))),
                fingerprint_row(model, 16, "jax", errors=without_gradients(
                    planted(model, 16, "loss"))),
                fingerprint_row(model, 16, "tf")]     # an older row, gradients included
        equiv, frame = judged(rows, tmp_path / model)
        verdict = equiv.verdicts[(model, 16, "fp32")]
        assert verdict.agree is False and "jax" in verdict.worst_pair, model
        assert "loss" in verdict.worst_pair and "torch" not in verdict.worst_pair, verdict
        by_framework = {r["framework"]: equiv.rows[r["source"]].agree
                        for r in frame.to_dict("records")}
        assert by_framework == {"torch": True, "jax": False, "tf": True}, model
        table = truth.truth_table(frame)
        cells = {row[3].text.split()[0]: dict(zip(table.columns, (c.text for c in row)))
                 for row in table.rows}
        assert cells["torch"]["gradient err"] == "not computed"
        assert cells["torch"]["verdict"] == "✓" and cells["jax"]["verdict"].startswith("✗")
        assert cells["tf"]["gradient err"] == "4.0e-06"


def test_a_judged_gradient_that_was_not_computed_is_not_passed(tmp_path):
    # The LSTM's gradients are judged; a row without them cannot be proven.
    rows = [fingerprint_row("lstm", 16, "torch", errors=without_gradients(
        clean_errors("lstm", 16)))]
    equiv, _ = judged(rows, tmp_path)
    verdict = equiv.verdicts[("lstm", 16, "fp32")]
    assert verdict.agree is False and "not computed" in verdict.worst_pair


def test_an_output_only_row_of_a_judged_gradient_network_is_judged_on_its_output(tmp_path):
    # The whole batch above the float64 cost cap: the output alone is judged, and the
    # missing loss and gradients (which the LSTM's bounds would judge) are not a failure.
    reason = ("loss and gradients not judged: the whole batch's float64 pass would be "
              "9000 GFLOP > 3000 (DLBENCH_TRUTH_MAX_GFLOP); output judged on the first 4 "
              "examples")
    output_only = {"norm": "max-abs", "output": 2e-6, "output_examples": 4,
                   "whole_batch_skipped": reason, "grad": None, "grad_norms": None,
                   "grad_skipped": reason}
    rows = [fingerprint_row("lstm", 16, "torch", errors=output_only),
            fingerprint_row("lstm", 16, "jax", errors={**output_only, "output": TF32_SIZED})]
    equiv, frame = judged(rows, tmp_path)
    by_framework = {r["framework"]: equiv.rows[r["source"]] for r in frame.to_dict("records")}
    assert by_framework["torch"].agree and by_framework["torch"].against == "float64"
    assert by_framework["jax"].agree is False
    table = truth.truth_table(frame)
    cells = {row[3].text.split()[0]: dict(zip(table.columns, (c.text for c in row)))
             for row in table.rows}
    assert cells["torch"]["gradient err"] == "not judged (output only)"
    assert cells["torch"]["loss err"] == "—" and cells["torch"]["verdict"] == "✓"
    assert any(reason in note for note in table.notes)


def test_one_frameworks_rows_from_two_hosts_and_a_cold_cache_are_told_apart(tmp_path):
    """A suite split over two hosts gives one framework two fingerprints of a model and
    batch, and a compile-cache job a third: each is named by what differs, beside its own
    host's time (identical labels read as a duplicated row)."""
    other_host = {**fx.GPU_HOST, "host": "vm-other"}
    first = fingerprint_row("resnet50", 16, "jax")
    second = fingerprint_row("resnet50", 16, "jax")
    second["env"] = {**other_host, "framework_version": first["env"]["framework_version"]}
    second["case_id"] += "/other"
    cold = fx.make_row("resnet50", 16, "fingerprint", "jax", "gpu", 1.0, threads=4,
                       compile_cache="cold")
    cold["fingerprint"] = {**fx.fingerprint("gradient"),
                           "vs_f64": clean_errors("resnet50", 16)}
    times = [fx.make_row("resnet50", 16, "forward", "jax", "gpu", 12.5, threads=4),
             {**fx.make_row("resnet50", 16, "forward", "jax", "gpu", 11.0, threads=4),
              "env": {**other_host, "framework_version": first["env"]["framework_version"]}}]
    times[1]["case_id"] += "/other"
    # Another model the first host alone ran: named plainly, whatever order cases come in.
    alone = fingerprint_row("resnet18", 16, "jax")
    table = truth.truth_table(frame_of([first, second, cold, *times, alone], tmp_path))
    cells = {row[3].text: dict(zip(table.columns, (c.text for c in row)))
             for row in table.rows if row[0].text == "resnet50"}
    assert [row[3].text for row in table.rows if row[0].text == "resnet18"] == ["jax jit/gpu"]
    host = fx.GPU_HOST["host"]
    assert set(cells) == {f"jax jit [host {host}]/gpu", "jax jit [host vm-other]/gpu",
                          "jax jit [cache cold]/gpu"}, cells
    assert cells[f"jax jit [host {host}]/gpu"]["forward"] == "12.5 ms"
    assert cells["jax jit [host vm-other]/gpu"]["forward"] == "11 ms"
