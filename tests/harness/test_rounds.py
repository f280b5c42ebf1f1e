"""Rounds of separate processes (suites/harness/rounds.py) and the moderated between-process
spread behind their intervals (suites/stats/spread.py), on simulated process medians whose
true spread is known. Coverage is checked on thousands of simulated cases, so the
figures asserted are properties of the method, not of one machine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from suites.harness.rounds import between_prior, merge_rows, round_path, round_timer
from suites.stats.spread import NO_PRIOR, fit_prior, moderated, t_975
from suites.stats.timer import TimerSettings

# What every timed row's timing has beside the figures a test sets (suites/rows/records.py).
ONE_RUN = {"first_call_ms": 50.0, "iqr_ms": 0.0, "ci_low_ms": 0.0, "ci_high_ms": 0.0,
           "mean_ms": 0.0, "min_ms": 0.0, "samples": 0, "samples_ms": [], "inner_loops": 1,
           "unstable": False, "unstable_reason": ""}


def row(medians: list[float], status: str = "ok", sm: int = 1980, case: str = "c") -> dict:
    timing = {**ONE_RUN, "median_ms": float(np.median(medians)), "repetition_medians_ms": medians,
              "samples_ms": medians, "repetition_inner_loops": [1] * len(medians),
              "within_run_ci_ms": [[m, m] for m in medians], "first_call_ms": 50.0,
              "device_median_ms": 0.8, "gpu_readings": 3, "gpu_sm_clock_mhz_min": sm,
              "gpu_sm_clock_mhz_median": sm, "gpu_sm_clock_mhz_max": sm}
    return {"case_id": case, "measure": "forward", "status": status,
            "timing": timing if status == "ok" else None, "wall_s": 1.0, "elapsed_s": 2.0}


def test_rounds_share_the_repetitions_and_merge_into_one_row():
    timer = round_timer(TimerSettings(repetitions=3, max_repetitions=8, budget_s=2.0), 2)
    assert (timer.repetitions, timer.max_repetitions, timer.budget_s) == (2, 4, 1.0)
    merged = merge_rows([row([1.0, 1.02]), row([1.2, 1.22], sm=1755)], 0.10)
    timing = merged["timing"]
    assert timing["repetitions"] == 4 and timing["rounds"] == 2
    assert timing["round_medians_ms"] == pytest.approx([1.01, 1.21])
    assert timing["median_ms"] == pytest.approx(math.sqrt(1.01 * 1.21))   # geometric mean
    assert timing["ci_low_ms"] < 1.01 and timing["ci_high_ms"] > 1.21     # spans both processes
    assert timing["unstable"] and "2 processes" in timing["unstable_reason"]
    assert timing["gpu_sm_clock_mhz_min"] == 1755 and timing["gpu_readings"] == 6
    assert timing["first_call_ms"] == 50.0
    assert merged["wall_s"] == 2.0 and merged["elapsed_s"] == 4.0     # the rounds' sum
    failed = row([1.0], status="oom")
    assert merge_rows([row([1.0, 1.0]), failed], 0.10) is failed


def test_round_files_are_not_results_files(tmp_path):
    """Reports and compare read ``*.jsonl``; a round's rows must never be read as results."""
    path = round_path(tmp_path / "torch_cpu.jsonl", 2)
    assert path.name == "torch_cpu.round2.ndjson" and path.suffix != ".jsonl"


def test_equal_spreads_give_the_prior_every_degree_of_freedom():
    rng = np.random.default_rng(1)
    sigma, df = 0.05, 2
    variances = sigma ** 2 * rng.chisquare(df, size=400) / df
    prior = fit_prior(variances.tolist(), df)
    assert prior.variance == pytest.approx(sigma ** 2, rel=0.15)
    assert prior.df > 20          # the cases differ by sampling alone
    # A case borrows: its own variance of 0 does not make a zero-width interval.
    variance, total = moderated(0.0, df, prior)
    assert variance > 0.5 * sigma ** 2 and total > 20


def test_spreads_that_differ_between_cases_lend_few_degrees_of_freedom():
    rng = np.random.default_rng(2)
    df = 2
    true = np.exp(rng.normal(np.log(0.05), 1.0, size=400)) ** 2   # spreads differ ~e× per case
    variances = true * rng.chisquare(df, size=400) / df
    prior = fit_prior(variances.tolist(), df)
    assert 0.5 < prior.df < 10
    assert fit_prior([0.1, 0.2], df) is NO_PRIOR        # too few cases to fit anything


def test_t_quantile_matches_the_table_and_the_normal_limit():
    assert t_975(2) == pytest.approx(4.303, abs=1e-3)
    assert t_975(math.inf) == pytest.approx(1.960, abs=1e-3)


@pytest.mark.parametrize("rounds", [2, 3])
def test_a_rerun_in_other_processes_falls_inside_the_interval_95_percent_of_the_time(rounds):
    """Cases whose between-process spreads differ (launch-bound ones vary more), each
    measured in ``rounds`` processes twice; the second run's centre must fall inside the
    first run's interval about 95% of the time (here asserted at >= 90%, the project's
    target, and not so wide that it is meaningless: <= 99.5%)."""
    rng = np.random.default_rng(20261124 + rounds)
    cases = 2000
    sigma = np.exp(rng.normal(np.log(0.04), 0.7, size=cases))
    truth = np.exp(rng.uniform(-1, 3, size=cases))

    def run() -> list[list[dict]]:
        process = rng.normal(0.0, sigma[:, None], size=(cases, rounds))
        inner = rng.normal(0.0, 0.005, size=(cases, rounds, 2))     # within-process noise
        medians = truth[:, None, None] * np.exp(process[:, :, None] + inner)
        return [[row(list(medians[c, r]), case=str(c)) for r in range(rounds)]
                for c in range(cases)]

    first, second = run(), run()
    prior, prior_second = between_prior(first), between_prior(second)
    assert prior.cases == cases
    inside = 0
    for one, two in zip(first, second):
        interval = merge_rows(one, 0.10, prior)["timing"]
        centre = merge_rows(two, 0.10, prior_second)["timing"]["median_ms"]
        inside += interval["ci_low_ms"] <= centre <= interval["ci_high_ms"]
    assert 0.90 <= inside / cases <= 0.995


def test_a_run_without_resume_merges_its_rows_after_an_earlier_runs(tmp_path, monkeypatch):
    """--rounds without --resume measures everything again and appends the merged rows,
    even for cases an earlier run already wrote (a plain run does the same)."""
    from pathlib import Path

    from suites.harness import rounds
    from suites.rows.results import ResultsFile, read_rows

    class Final:
        path = tmp_path / "torch_cpu.jsonl"
        pending = [("job", ["forward"])]

        def key(self, job, name):
            class Key:
                def id(self):
                    return "s/torch/cpu/m/b1/forward/fp32/eager/t1"
            return Key()

    earlier = {**row([1.0]), "case_id": "s/torch/cpu/m/b1/forward/fp32/eager/t1"}
    ResultsFile(Final.path).append_json(earlier)
    runner = rounds.RoundsRunner.__new__(rounds.RoundsRunner)
    runner.final, runner.rounds, runner.earlier = Final(), 2, rounds.NO_EARLIER_RUNS
    runner.paths = [rounds.round_path(Final.path, k) for k in (1, 2)]
    for path, medians in zip(runner.paths, ([2.0, 2.1], [2.2, 2.1])):
        ResultsFile(Path(path)).append_json({**row(medians), "case_id": earlier["case_id"]})
    monkeypatch.setattr(rounds, "timer_of", lambda job: TimerSettings())
    for resume, merged in ((True, 0), (False, 1)):
        runner.request = type("Request", (), {"resume": resume})()
        assert runner.merge() == merged
    assert read_rows(Final.path)[earlier["case_id"]]["timing"]["rounds"] == 2
