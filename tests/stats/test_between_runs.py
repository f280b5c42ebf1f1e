"""Intervals widened by a case's spread over earlier runs of the machine model
(suites/stats/between_runs.py). Coverage is checked on simulated runs whose run-to-run shifts are
known, so the figures asserted are properties of the method, not of one machine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from suites.__main__ import main
from suites.harness.rounds import merge_rows
from suites.matrix.estimate import Machine
from suites.stats.between_runs import (
    NO_EARLIER_RUNS,
    EarlierRuns,
    between_runs_priors,
    load_earlier,
    widen,
)

H100 = "NVIDIA H100 80GB HBM3"


def timed(case_id: str, median: float, low: float | None = None, high: float | None = None,
          **extra) -> dict:
    return {"case_id": case_id, "measure": "forward", "status": "ok",
            "timing": {"median_ms": median, "ci_low_ms": low if low is not None else median,
                       "ci_high_ms": high if high is not None else median,
                       "interval": "95% prediction interval of a re-run's median",
                       "unstable": False, "unstable_reason": ""}, **extra}


def world(rng: np.random.Generator, cases: int, earlier_runs: int) -> float:
    """Share of cases whose re-run centre falls inside this run's widened interval, in a
    world where each case's centre moves between runs by a shift common to the run's cases
    and one of its own (launch-bound cases move more); the run's own interval is narrow."""
    sigma = np.exp(rng.normal(np.log(0.04), 0.5, size=cases))
    truth = np.exp(rng.uniform(-1, 3, size=cases))

    def run() -> np.ndarray:
        return truth * np.exp(rng.normal(0.0, 0.02) + rng.normal(0.0, sigma))

    history = [run() for _ in range(earlier_runs)]
    this, rerun = run(), run()
    earlier = EarlierRuns("cpu", {f"c{c}": tuple(h[c] for h in history) for c in range(cases)},
                          {f"c{c}": frozenset({"host"}) for c in range(cases)})
    rows = [timed(f"c{c}", this[c], this[c] * 0.99, this[c] * 1.01) for c in range(cases)]
    prior = between_runs_priors(rows, earlier)
    inside = 0
    for c, row in enumerate(rows):
        timing = widen(row, earlier, prior)["timing"]
        inside += timing["ci_low_ms"] <= rerun[c] <= timing["ci_high_ms"]
    return inside / cases


@pytest.mark.parametrize("earlier_runs", [1, 2, 4])
def test_a_rerun_falls_inside_the_widened_interval_about_95_percent_of_the_time(earlier_runs):
    """Over many simulated runs of 25 cases (a suite's size), the re-run's centre falls
    inside at least 90% of the time (the project's target) and at most 99.5% (an interval
    so wide it says nothing)."""
    rng = np.random.default_rng(20261127 + earlier_runs)
    coverage = float(np.mean([world(rng, 25, earlier_runs) for _ in range(400)]))
    assert 0.90 <= coverage <= 0.995


def test_without_earlier_runs_of_the_case_the_row_is_unchanged():
    row = timed("s/torch/cpu/m/b1/forward/fp32/eager/t2", 2.0, 1.9, 2.1)
    assert widen(row, NO_EARLIER_RUNS, between_runs_priors([row], NO_EARLIER_RUNS)) is row
    failed = {"case_id": row["case_id"], "measure": "forward", "status": "oom", "timing": None}
    earlier = EarlierRuns("cpu", {row["case_id"]: (2.5,)}, {row["case_id"]: frozenset({"h"})})
    assert widen(failed, earlier, between_runs_priors([failed], earlier)) is failed


def test_the_widened_interval_holds_the_own_one_and_says_where_it_comes_from():
    case = "s/torch/cpu/m/b1/forward/fp32/eager/t2"
    rows = [timed(f"{case}{k}", m, m * 0.98, m * 1.02) for k, m in enumerate((1.0, 2.0, 3.0))]
    earlier = EarlierRuns("cpu", {f"{case}{k}": (m * 1.2, m * 0.9)
                                  for k, m in enumerate((1.0, 2.0, 3.0))},
                          {f"{case}{k}": frozenset({"a", "b"}) for k in range(3)})
    prior = between_runs_priors(rows, earlier)
    widened = widen(rows[0], earlier, prior)
    timing = widened["timing"]
    assert timing["ci_low_ms"] < 0.98 and timing["ci_high_ms"] > 1.2     # covers the earlier runs
    assert timing["median_ms"] == 1.0 and timing["unstable"] is False     # the timer's verdict
    record = timing["between_runs"]
    assert record["earlier_runs"] == 2 and record["hosts"] == 2 and record["widened"]
    assert record["own_interval_ms"] == [0.98, 1.02] and record["prior_cases"] == 3
    assert "widened by the case's spread over 2 earlier runs" in timing["interval"]
    assert rows[0]["timing"]["ci_low_ms"] == 0.98                         # not changed in place


def write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_earlier_rows_count_once_per_run_of_this_machine_model(tmp_path):
    def gpu_row(median, host="h1", stamp="2026-11-01T00:00:00", model=H100, threads=16,
                measure="forward", status="ok"):
        return {**timed(f"s/torch/gpu/m/b1/{measure}/fp32/eager/t{threads}", median),
                "measure": measure, "status": status, "started_at": stamp,
                "settings": {"device": "gpu"}, "env": {"host": host, "gpu_model": model}}
    row = gpu_row(2.0, stamp="2026-11-02T00:00:00")
    write(tmp_path / "a" / "torch_gpu.jsonl",
          [row, gpu_row(1.0, host="h2", threads=64),                      # another host's count
           gpu_row(9.0, model="NVIDIA H200"),                             # another model
           gpu_row(9.0, measure="device_time"), gpu_row(9.0, status="failed")])
    write(tmp_path / "b" / "torch_gpu.jsonl", [row])                      # the same row, copied
    write(tmp_path / "b" / "torch_gpu.round1.ndjson", [gpu_row(9.0, host="h3")])
    earlier = load_earlier([tmp_path / "a", tmp_path / "b"], Machine("gpu", H100, 16))
    assert earlier.of("s/torch/gpu/m/b1/forward/fp32/eager/t32") == (1.0, 2.0)   # oldest first
    assert earlier.hosts_of("s/torch/gpu/m/b1/forward/fp32/eager/t16") == {"h1", "h2"}
    cpu = load_earlier([tmp_path / "a"], Machine("cpu", "AMD EPYC", 2))
    assert not cpu.centres


def test_one_round_keeps_its_own_interval():
    row = timed("s/torch/cpu/m/b1/forward/fp32/eager/t2", 2.0, 1.9, 2.1)
    assert merge_rows([row], 0.10) is row


def test_an_earlier_folder_that_does_not_exist_is_refused_before_anything_runs(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    for command in (["run", "default-cpu", "--framework", "torch"], ["matrix", "--plan"]):
        assert main([*command, "--out", str(tmp_path / "out"), "--earlier", str(missing)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: --earlier: no such folder or file: {missing}"]
    assert not (tmp_path / "out").exists()


def test_rounds_merge_widens_with_earlier_runs(tmp_path, monkeypatch):
    from pathlib import Path

    from suites.harness import rounds
    from suites.rows.results import ResultsFile, read_rows
    from suites.stats.timer import TimerSettings

    case_id = "s/torch/cpu/m/b1/forward/fp32/eager/t1"

    class Final:
        path = tmp_path / "torch_cpu.jsonl"
        pending = [("job", ["forward"])]

        def key(self, job, name):
            return type("Key", (), {"id": lambda self: case_id})()

    runner = rounds.RoundsRunner.__new__(rounds.RoundsRunner)
    runner.final, runner.rounds = Final(), 1
    runner.earlier = EarlierRuns("cpu", {case_id: (3.0, 2.5)}, {case_id: frozenset({"h"})})
    runner.paths = [rounds.round_path(Final.path, 1)]
    runner.request = type("Request", (), {"resume": True})()
    ResultsFile(Path(runner.paths[0])).append_json(timed(case_id, 2.0, 1.95, 2.05))
    monkeypatch.setattr(rounds, "timer_of", lambda job: TimerSettings())
    assert runner.merge() == 1
    timing = read_rows(Final.path)[case_id]["timing"]
    assert timing["between_runs"]["earlier_runs"] == 2
    assert timing["ci_low_ms"] < 1.95 and timing["ci_high_ms"] > 3.0
    assert timing["interval"].endswith("(1 host), its own (too few cases to moderate)")


def test_compare_says_what_the_earlier_runs_did_to_the_first_runs_intervals(tmp_path):
    from suites.stats.compare import earlier_runs_line, load_run, pair_up

    case = "s/torch/cpu/m/b1/{}/fp32/eager/t2"
    first = [timed(case.format("forward"), 1.0, 0.8, 1.25),
             timed(case.format("gradient"), 2.0, 1.9, 2.1)]
    first[0]["timing"]["between_runs"] = {"own_interval_ms": [0.98, 1.02]}
    later = [timed(case.format("forward"), 1.1), timed(case.format("gradient"), 2.05)]
    write(tmp_path / "a" / "torch_cpu.jsonl", first)
    write(tmp_path / "b" / "torch_cpu.jsonl", later)
    pairs = pair_up(load_run(tmp_path / "a"), load_run(tmp_path / "b"))
    line = earlier_runs_line(pairs, 1)
    assert line.startswith("run 1's intervals from earlier runs (--earlier) for 1 of 2 cases")
    assert "inside 100.0% of them, inside the run's own 0.0%" in line
    assert "±22.5% against ±2.0%" in line
    plain = pair_up(load_run(tmp_path / "b"), load_run(tmp_path / "a"))
    assert earlier_runs_line(plain, 1) is None


def test_the_run_says_what_its_earlier_runs_hold():
    earlier = EarlierRuns("cpu", {"a": (1.0, 1.1), "b": (2.0,), "c": (3.0, 3.1, 3.2)},
                          {k: frozenset({"h"}) for k in "abc"})
    line = earlier.describe("AMD EPYC", ["runs/x"])
    assert line.startswith("--earlier: 3 cases of AMD EPYC under runs/x, 2 earlier runs in")
    assert "no timed rows of AMD EPYC under runs/x" in NO_EARLIER_RUNS.describe("AMD EPYC",
                                                                                ["runs/x"])
