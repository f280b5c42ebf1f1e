"""The plan a scaling run prints before its first launch (parallel/plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parallel.plan import estimate, plan_line
from parallel.spec import ScalingCase, load


def _row(case: ScalingCase, wall_s: float, gpu: str | None, when: str,
         framework: str = "torch") -> dict:
    return {"case_id": case.case_id("scaling-short", framework, "gpu"),
            "measure": "data_parallel", "model": case.model, "wall_s": wall_s,
            "started_at": when,
            "settings": {"framework": framework, "device": "gpu", "precision": case.precision},
            "env": {"gpu_model": gpu} if gpu else {},
            "scaling": {"mode": case.mode, "devices": case.devices,
                        "per_device_batch": case.per_device_batch,
                        "global_batch": case.global_batch}}


def _write(folder: Path, suite: str, rows: list[dict]) -> None:
    path = folder / suite / "host" / "torch_gpu.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)


ONE = ScalingCase("resnet50", "weak", 1, 64, 64)
TWO = ScalingCase("resnet50", "weak", 2, 64, 64)
FOUR = ScalingCase("resnet50", "strong", 4, 16, 64)


def test_each_case_costs_its_newest_launch_on_this_gpu_model(tmp_path):
    _write(tmp_path, "scaling-short", [
        _row(ONE, 30.0, "NVIDIA H200", "2026-11-01T00:00:00+00:00"),
        _row(ONE, 20.0, "NVIDIA H200", "2026-11-02T00:00:00+00:00"),   # newer: this one
        _row(TWO, 25.0, "NVIDIA H100 80GB HBM3", "2026-11-02T00:00:00+00:00")])
    # Another scaling suite's rows of the same computation count too.
    _write(tmp_path, "scaling", [_row(TWO, 24.0, "NVIDIA H200", "2026-11-01T00:00:00+00:00")])
    guess = estimate([ONE, TWO, FOUR], "torch", "gpu", "NVIDIA H200", [tmp_path])
    assert guess.seconds == pytest.approx(44.0)
    assert (guess.cases, guess.unknown, guess.from_other_device) == (3, 1, 0)
    on_h100 = estimate([ONE, TWO], "torch", "gpu", "NVIDIA H100 80GB HBM3", [tmp_path])
    assert on_h100.seconds == pytest.approx(45.0) and on_h100.from_other_device == 1
    # Another framework's rows never stand in.
    assert estimate([ONE], "jax", "gpu", "NVIDIA H200", [tmp_path]).unknown == 1


def test_only_scaling_suites_folders_are_read(tmp_path):
    _write(tmp_path, "default-gpu", [_row(ONE, 99.0, "NVIDIA H200", "2026-11-01")])
    assert estimate([ONE], "torch", "gpu", "NVIDIA H200", [tmp_path]).unknown == 1


def test_the_plan_line(tmp_path):
    _write(tmp_path, "scaling-short", [_row(ONE, 100.0, "NVIDIA H200", "2026-11-01")])
    line = plan_line([ONE, TWO], 3, "torch", "gpu", "NVIDIA H200", [tmp_path])
    assert line == "plan: 2 cases (1 of 3 done) on NVIDIA H200, about 1.7 min (1 without " \
        "estimate)"
    assert plan_line([TWO], 1, "torch", "gpu", "NVIDIA H200", [tmp_path]).endswith(
        "no estimate (no earlier row of these cases)")
    assert plan_line([], 3, "torch", "gpu", None, [tmp_path]) == \
        "plan: nothing to run (3 cases done)"


def test_plan_only_prints_the_plan_and_launches_nothing(tmp_path, monkeypatch):
    from parallel import runner
    from parallel.runner import ScalingRequest, ScalingRunner

    def no_launch(*args, **kwargs):
        raise AssertionError("--plan launched a case")

    monkeypatch.setattr(runner, "launch", no_launch)
    lines: list[str] = []
    request = ScalingRequest(load("scaling-quick"), "torch", "cpu", tmp_path / "out",
                             plan_only=True, history=(tmp_path,))
    assert ScalingRunner(request).run(echo=lines.append) == 0
    assert lines and lines[-1].startswith("plan: 5 cases on ")
    assert not list((tmp_path / "out").rglob("*.jsonl"))
