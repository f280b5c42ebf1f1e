"""The derived float64 bounds on recorded GPU data: the practice suite's fingerprints of
ResNet-50, GoogLeNet and the LSTM in bf16, TF32 and fp32 strict, as PyTorch and JAX wrote
them on an NVIDIA H100 80GB HBM3 (tests/data/practice_h100_fingerprints.jsonl). Each
passes its own precision's bound; relabelled, each precision's error betrays it: bf16 or
TF32 under an fp32 label exceeds the fp32 bound, fp32 under a bf16 label falls below the
bf16 floor (reports/pipeline/truth.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.pipeline.load import load
from reports.pipeline.tidy import tidy
from reports.pipeline.truth import row_truths

RECORDED = Path(__file__).resolve().parents[1] / "data" / "practice_h100_fingerprints.jsonl"


def recorded_rows() -> list[dict]:
    return [json.loads(line) for line in RECORDED.read_text().splitlines()]


def truths(tmp_path: Path, rows: list[dict]):
    path = tmp_path / "practice-gpu" / "h100" / "recorded_gpu.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return row_truths(tidy(load([tmp_path])).frame)


def relabelled(row: dict, precision: str) -> dict:
    """The row as if its settings had said ``precision`` (its errors unchanged)."""
    old = row["settings"]["precision"]
    return {**row, "settings": {**row["settings"], "precision": precision},
            "case_id": row["case_id"].replace(f"/{old}/", f"/{precision}/")}


def test_every_recorded_row_is_within_its_precisions_bound(tmp_path):
    found = truths(tmp_path, recorded_rows())
    assert len(found) == 18
    assert {t.precision for t in found} == {"bf16", "tf32", "fp32"}
    assert {t.model for t in found} == {"resnet50", "googlenet", "lstm"}
    for t in found:
        assert t.ok, (t.who, t.model, t.batch, t.precision, t.failures)
    # bf16 lands between the fp32 bound (its floor) and its own bound, far from both.
    for t in (t for t in found if t.precision == "bf16"):
        assert 3e-3 < t.errors["output"] < 1e-2 < t.bounds.output


@pytest.mark.parametrize("recorded,label,failure", [
    ("bf16", "fp32", "> "),            # bf16 arithmetic in a row that claims fp32 strict
    ("tf32", "fp32", "> "),            # a TF32 leak into fp32 strict
    ("fp32", "bf16", "fp32's accuracy, not bf16's"),   # bf16 asked, not applied
])
def test_a_precision_under_another_label_fails(tmp_path, recorded, label, failure):
    rows = [relabelled(r, label) for r in recorded_rows()
            if r["settings"]["precision"] == recorded and r["model"] == "resnet50"]
    assert rows
    found = truths(tmp_path, rows)
    assert len(found) == len(rows)
    for t in found:
        assert not t.ok and any(failure in f for f in t.failures), (t.who, t.failures)
