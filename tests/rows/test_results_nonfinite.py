"""A row holding NaN or infinity (a framework's NaN output in a fingerprint, say) is
written, not lost: the results file stays strict JSON, the values become null, and the
row fails with a reason that names them."""

from __future__ import annotations

import json
import math

from suites.rows.results import CaseKey, ResultsFile, Row, Settings, finite_only


def key(measure: str) -> CaseKey:
    return CaseKey("s", "lstm", 128, measure, Settings("tf", "gpu", "bf16", "graph", 16, 1))


def test_a_nan_in_a_fingerprint_fails_the_row_and_names_the_field(tmp_path):
    results = ResultsFile(tmp_path / "tf_gpu.jsonl")
    results.append(Row(key("fingerprint"), "ok", fingerprint={
        "vs_f64": {"output": math.nan, "loss": 2e-3}, "head": [0.5, math.inf]}))
    results.append(Row(key("forward"), "ok", timing={"median_ms": 4.1}))
    first, second = (json.loads(line) for line in
                     (tmp_path / "tf_gpu.jsonl").read_text().splitlines())
    assert first["status"] == "failed"
    assert "fingerprint.vs_f64.output" in first["reason"]
    assert "fingerprint.head[1]" in first["reason"]
    assert first["fingerprint"]["vs_f64"] == {"output": None, "loss": 2e-3}
    assert first["fingerprint"]["head"] == [0.5, None]
    assert second["status"] == "ok" and second["reason"] == ""


def test_a_merged_row_in_its_json_form_is_cleaned_the_same_way(tmp_path):
    """Rows that never were a Row (a merge of rounds, a reused copy) go through the same
    check on their way to the file."""
    results = ResultsFile(tmp_path / "m.jsonl")
    results.append_json({**Row(key("forward"), "ok").to_json(),
                         "timing": {"median_ms": math.inf}})
    row = json.loads((tmp_path / "m.jsonl").read_text())
    assert row["status"] == "failed" and row["timing"]["median_ms"] is None
    assert "timing.median_ms" in row["reason"]


def test_finite_only_replaces_non_finite_floats_and_leaves_the_rest():
    clean, found = finite_only({"a": [1.0, -math.inf], "b": "nan", "c": 3})
    assert clean == {"a": [1.0, None], "b": "nan", "c": 3} and found == ["a[1]"]


def test_a_failed_row_with_a_nan_keeps_its_own_reason_after_the_note(tmp_path):
    results = ResultsFile(tmp_path / "x.jsonl")
    results.append(Row(key("forward"), "oom", reason="out of memory",
                       timing={"median_ms": math.nan}))
    row = json.loads((tmp_path / "x.jsonl").read_text())
    assert row["status"] == "oom"
    assert row["reason"].endswith("; out of memory") and "timing.median_ms" in row["reason"]
