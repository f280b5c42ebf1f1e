"""A scaling run beside a published reference (reports/sections/compare_scaling.py): cases pair by
the computation they run, across suites, never by the nearest settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.compare import section_parts
from reports.pipeline.load import Loaded, RawRow
from reports.sections.compare_scaling import SAME_POINTS, pair_scaling


def _row(suite: str, devices: int, median: float, baseline: float, batch: int = 64,
         gpu: str = "NVIDIA H200", host: str = "h", interop: int = 0) -> dict:
    return {"schema": 1, "suite": suite, "model": "resnet50", "batch": batch * devices,
            "case_id": f"{suite}/jax/gpu/resnet50/weak-b{batch}/n{devices}/data_parallel/fp32",
            "measure": "data_parallel", "status": "ok", "started_at": "2026-11-26T10:00:00",
            "settings": {"framework": "jax", "device": "gpu", "precision": "fp32",
                         "variant": f"data_parallel-n{devices}-weak", "threads": 64,
                         "interop_threads": interop},
            "timing": {"median_ms": median, "ci_low_ms": median, "ci_high_ms": median},
            "env": {"host": host, "gpu_model": gpu, "framework_version": "0.11.2",
                    "interconnect": {"links": {"GPU1-GPU0": "NV18"}}},
            "scaling": {"model": "resnet50", "mode": "weak", "devices": devices,
                        "per_device_batch": batch, "base_batch": batch,
                        "global_batch": batch * devices, "precision": "fp32",
                        "baseline_ms": baseline, "efficiency": baseline / median}}


def _loaded(yours: list[dict], reference: list[dict], root: Path) -> Loaded:
    rows = [RawRow(str(root / "mine" / "r.jsonl"), i + 1, i, row)
            for i, row in enumerate(yours)]
    rows += [RawRow(str(root / "published" / "ref" / "r.jsonl"), i + 1, len(rows) + i, row)
             for i, row in enumerate(reference)]
    return Loaded(tuple(rows), (), ())


def test_cases_pair_by_computation_across_suites(tmp_path):
    # Yours from `scaling`, the reference from `scaling-short`: the same computation.
    yours = [_row("scaling", 1, 72.0, 72.0), _row("scaling", 2, 75.0, 72.0),
             _row("scaling", 4, 80.0, 72.0, interop=4),
             _row("scaling", 2, 45.0, 41.0, batch=32)]          # no reference run of b32
    reference = [_row("scaling-short", 1, 70.0, 70.0, gpu="NVIDIA H100 80GB HBM3", host="r"),
                 _row("scaling-short", 2, 73.0, 70.0, gpu="NVIDIA H100 80GB HBM3", host="r"),
                 _row("scaling-short", 4, 74.0, 70.0, gpu="NVIDIA H100 80GB HBM3", host="r")]
    pairs, unmatched = pair_scaling(_loaded(yours, reference, tmp_path),
                                    (tmp_path / "published" / "ref",))
    assert unmatched == 1
    assert [p.yours["scaling"]["devices"] for p in pairs] == [1, 2, 4]
    one, two, four = pairs
    assert one.points is None                        # N = 1: efficiency 100% by definition
    assert two.points == pytest.approx(100 * (72 / 75 - 70 / 73))
    assert four.points == pytest.approx(100 * (72 / 80 - 70 / 74))
    assert abs(four.points) > SAME_POINTS
    assert two.step_ratio == pytest.approx(75 / 73)
    assert two.differs() == ("GPU NVIDIA H200 vs NVIDIA H100 80GB HBM3",)
    assert four.differs() == ("GPU NVIDIA H200 vs NVIDIA H100 80GB HBM3",
                              "threads 64/4 vs 64/0")


def test_the_row_comparison_leaves_scaling_rows_to_their_own_table(tmp_path):
    yours = [_row("scaling", 1, 72.0, 72.0), _row("scaling", 2, 75.0, 72.0)]
    reference = [_row("scaling-short", 1, 70.0, 70.0, host="r"),
                 _row("scaling-short", 2, 73.0, 70.0, host="r")]
    root = tmp_path / "published" / "ref"
    text, tables = section_parts(_loaded(yours, reference, tmp_path), (root,))
    # No row-by-row table (a two-GPU step is never set beside a one-GPU one): only scaling.
    assert [t.key for t in tables] == ["compare-scaling"]
    assert text[0] == f"Reference: {root}."
    assert text[1].startswith("2 of your data-parallel cases have a reference run of the same "
                              "computation; of their 1 efficiencies at N > 1, 1 are within")
    cells = dict(zip(tables[0].columns, (c.text for c in tables[0].rows[1])))
    assert cells["N"] == "2" and cells["Batch"] == "64/GPU" and cells["Points"] == "+0.1"
    assert cells["Settings that differ"] == "—"


def test_the_efficiency_figure_takes_two_hosts_runs_of_one_case():
    from reports.sections.scaling import efficiency_plot

    # Two hosts' weak-scaling runs: their one-device rows also start the strong-scaling
    # lines, which no strong case continues; two such starts once made a line of a case
    # that never ran (and, with one legend per figure, a case with no colour).
    rows = [_row("scaling", 1, 72.0, 72.0), _row("scaling", 2, 75.0, 72.0),
            _row("scaling-short", 1, 70.0, 70.0, host="r"),
            _row("scaling-short", 2, 73.0, 70.0, host="r")]
    plot = efficiency_plot(rows)
    assert plot is not None and plot.png.startswith(b"\x89PNG")
