"""Repetitions in separate processes: ``--rounds N`` (``python -m suites run`` and
``python -m suites matrix``).

Repetitions inside one worker share what a process fixes once: cuDNN's autotuned
algorithms, the allocator's layout, where a buffer sits, and on a GPU how fast the host
launches work, which changes between processes by up to about 2× for launch-bound cases
(README, "Reproducibility"). pyperf spawns a fresh process per run for that reason. With
``--rounds N`` the runner measures the suite's pending cases N times, round after round
(so a slow minute of the host lands on many cases, not on every repetition of one), each
round in fresh worker processes writing its own file beside the results file
(``<framework>_<device>.round<K>.ndjson``: not ``.jsonl``, so reports never read it), with
the case's budget and repetitions shared out over the rounds. Round 1 also takes the
fingerprint and, on a GPU, the device phase (device time, profiles, counters); later
rounds repeat the timed measures only. Once every round has a case, its rows are merged
into one row of the results file:

* the centre is the median of the round medians (each round's median of its repetition
  medians: one slow round moves it little), and the interval a 95% prediction interval for
  the centre a re-run in N other processes would report: t · s · sqrt(2 c / N) on log
  times (c = 1 for two rounds, pi/2 from three: ``median_factor``), with s² the case's
  variance between rounds moderated over the run's cases (suites/stats/spread.py), because a
  variance from N - 1 degrees of freedom alone is too unsure to be useful;
* a case that is not ``ok`` in some round keeps that round's row (failures are data);
* round 1's first call and peak memory are kept (they are the cold ones); ``elapsed_s``
  and ``wall_s`` are the sums over the rounds, so estimates and cost logs see the real cost.

With ``--earlier DIR ...`` each merged row's interval also covers the case's spread between
runs of this machine model (``suites/stats/between_runs.py``); one round then goes through its
round file too, so that its rows are written with that interval.

Every round file is resumable: the same command run again (``--resume``, or the matrix)
continues the round where it stopped and merges what is complete. The default is one
round: the interval then describes one process only, and the process-to-process part of
the spread shows when the suite is run again (``python -m suites compare``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from suites.harness.pool import WorkerPool
from suites.harness.reuse import timer_of
from suites.harness.runner import Budget, Runner, RunRequest, console
from suites.instruments.host_state import merge_host_fields
from suites.rows.records import Timing
from suites.rows.results import ResultsFile, is_timed, read_rows
from suites.stats import intervals
from suites.stats.between_runs import NO_EARLIER_RUNS, EarlierRuns, between_runs_priors, widen
from suites.stats.launch_bound import overhead_fields
from suites.stats.spread import NO_PRIOR, Prior, fit_prior, moderated, t_975
from suites.stats.timer import TimerSettings
from suites.truth.check import finished_case_ids


def round_timer(timer: TimerSettings, rounds: int) -> TimerSettings:
    """One round's share of a case's repetitions and budget (at least one repetition)."""
    return replace(timer, budget_s=timer.budget_s / rounds,
                   repetitions=max(1, math.ceil(timer.repetitions / rounds)),
                   max_repetitions=max(1, math.ceil(timer.max_repetitions / rounds)))


def round_path(results: Path, index: int | str) -> Path:
    """Round ``index``'s file beside the results file (``"*"``: a glob of every round's)."""
    return results.with_name(f"{results.stem}.round{index}.ndjson")


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def median_factor(count: int) -> float:
    """Var(median of ``count``) / (sigma² / count) for normal values: 1 for one or two (the
    median is then the mean), about 1.35 for three, pi/2 in the limit; pi/2 is used from
    three on (conservative for few)."""
    return 1.0 if count <= 2 else math.pi / 2


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _round_logs(rows: list[dict[str, Any]]) -> np.ndarray | None:
    """Log round medians of one case, or None where a round is not ok or untimed."""
    medians = [(row.get("timing") or {}).get("median_ms") for row in rows]
    if any(row.get("status") != "ok" for row in rows) or any(not m or m <= 0 for m in medians):
        return None
    return np.log(np.asarray(medians, dtype=np.float64))


def between_prior(cases: list[list[dict[str, Any]]]) -> Prior:
    """The prior of the between-round variance, fitted over every case timed in all rounds."""
    logs = [x for x in (_round_logs(rows) for rows in cases) if x is not None and len(x) > 1]
    if not logs:
        return NO_PRIOR
    rounds = min(len(x) for x in logs)
    return fit_prior([float(x[:rounds].var(ddof=1)) for x in logs], rounds - 1)


def merge_rows(rows: list[dict[str, Any]], unstable_share: float,
               prior: Prior = NO_PRIOR) -> dict[str, Any]:
    """One case's rows from every round as one row (see the module's docstring)."""
    for row in rows:
        if row["status"] != "ok":
            return row
    if len(rows) == 1:
        return rows[0]      # one round: its own interval (a run with --earlier only)
    timings = [row.get("timing") for row in rows]
    logs = _round_logs(rows)
    if logs is None or any(not t.get("repetition_medians_ms") for t in timings):
        return rows[0]      # fingerprint, device-time and profile rows: round 1's
    count = len(rows)
    own = float(logs.var(ddof=1)) if count > 1 else 0.0
    variance, df = moderated(own, count - 1, prior) if count > 1 else (0.0, 0.0)
    centre = math.exp(float(np.median(logs)))
    half = t_975(df) * math.sqrt(variance * 2.0 * median_factor(count) / count) \
        if df > 0 else 0.0
    low, high = centre * math.exp(-half), centre * math.exp(half)
    spread = (high - low) / 2 / centre
    records = [Timing.from_dict(t) for t in timings]
    medians = [m for t in records for m in t.repetition_medians_ms]
    samples = np.asarray([s for t in records for s in t.samples_ms], dtype=np.float64)
    q1, q3 = np.percentile(samples, [25, 75])
    first = records[0]
    borrowed = (f"; between-process spread moderated over {prior.cases} cases "
                f"(prior df {prior.df:.3g})" if prior.cases else "")
    device_median_ms = _median([t.device_median_ms for t in records])
    timing = replace(
        first,
        median_ms=centre, ci_low_ms=low, ci_high_ms=high,
        iqr_ms=float(q3 - q1), mean_ms=float(samples.mean()),
        min_ms=float(samples.min()), samples=int(samples.size),
        samples_ms=tuple(samples.tolist()),
        repetitions=len(medians), rounds=count,
        round_medians_ms=tuple(t.median_ms for t in records),
        # Degrees of freedom are infinite where the cases differ by sampling alone (JSON
        # has no infinity: null).
        between_process={"sd_log": math.sqrt(own), "moderated_sd_log": math.sqrt(variance),
                         "df": _finite(df), "prior_sd_log": math.sqrt(prior.variance),
                         "prior_df": _finite(prior.df), "prior_cases": prior.cases},
        interval=intervals.processes(count, len(medians), borrowed),
        repetition_medians_ms=tuple(medians),
        repetition_inner_loops=tuple(n for t in records for n in t.repetition_inner_loops),
        within_run_ci_ms=tuple(ci for t in records for ci in t.within_run_ci_ms),
        unstable=spread > unstable_share,
        unstable_reason=(intervals.spread(spread, f"{count} processes")
                         if spread > unstable_share else ""),
        device_median_ms=device_median_ms,
        device_span_median_ms=_median([t.device_span_median_ms for t in records]),
        # Recomputed from the merged medians, as combined_timing computes them for one round.
        **overhead_fields(centre, device_median_ms))

    def pick(name):
        return [getattr(t, name) for t in records if getattr(t, name) is not None]
    if first.gpu_readings is not None:
        timing = replace(
            timing,
            gpu_sm_clock_mhz_min=min(pick("gpu_sm_clock_mhz_min"), default=None),
            gpu_sm_clock_mhz_median=_median(pick("gpu_sm_clock_mhz_median")),
            gpu_sm_clock_mhz_max=max(pick("gpu_sm_clock_mhz_max"), default=None),
            gpu_mem_clock_mhz_median=_median(pick("gpu_mem_clock_mhz_median")),
            gpu_power_w_median=_median(pick("gpu_power_w_median")),
            gpu_temperature_c_max=max(pick("gpu_temperature_c_max"), default=None),
            gpu_readings=sum(pick("gpu_readings")))
    powers = pick("gpu_energy_power_w")
    if powers:
        power = statistics.median(powers)
        timing = replace(timing, gpu_energy_power_w=power,
                         energy_per_iteration_j=power * centre / 1e3,
                         energy_window_s=sum(t.energy_window_s or 0.0 for t in records) or None)
    if any(t.host_readings is not None for t in records):
        timing = replace(timing, **merge_host_fields(timings))

    def total(name: str) -> float | None:
        values = [row.get(name) for row in rows if row.get(name) is not None]
        return round(sum(float(v) for v in values), 3) if values else None
    return {**rows[0], "timing": timing.to_dict(), "wall_s": total("wall_s") or 0.0,
            "elapsed_s": total("elapsed_s")}


class RoundsRunner:
    """A Runner whose pending cases are measured in ``rounds`` rounds of fresh processes
    and merged (the module's docstring). Offers what the matrix uses of a Runner:
    ``total``, ``run()``, ``worker_start_s``, ``stopped_by_budget``."""

    def __init__(self, request: RunRequest, rounds: int, budget: Budget | None = None,
                 pool: WorkerPool | None = None, earlier: EarlierRuns = NO_EARLIER_RUNS):
        self.final = Runner(request, budget)
        self.request = request
        self.rounds = rounds
        # Earlier runs of this machine model (--earlier): each merged row's interval also
        # covers the case's spread between runs (suites/stats/between_runs.py).
        self.earlier = earlier
        self.budget = budget
        # Workers are pooled by round (WorkerKey.round): a matrix's suites share round k's
        # worker as one suite's cases do, and a case's rounds stay in separate processes.
        self.pool = pool
        self.worker_start_s: list[float] = []
        self.stopped_by_budget = False
        self.paths = [round_path(self.final.path, index) for index in range(1, rounds + 1)]
        if not request.resume:
            for path in self.final.path.parent.glob(round_path(self.final.path, "*").name):
                path.unlink()

    @property
    def total(self) -> int:
        return self.final.total

    def round_runner(self, index: int) -> Runner:
        runner = Runner(replace(self.request, resume=True), self.budget, self.paths[index - 1],
                        self.pool, pool_round=index)
        done = finished_case_ids(runner.results.path)
        pending = []
        for job, names in self.final.pending:
            chosen = [n for n in names if (index == 1 or is_timed(n))
                      and self.final.key(job, n).id() not in done]
            if chosen:
                pending.append((replace(job, timer=round_timer(timer_of(job), self.rounds)),
                                chosen))
        runner.pending = pending
        return runner

    def run(self) -> int:
        for index in range(1, self.rounds + 1):
            runner = self.round_runner(index)
            if runner.total:
                console.print(f"round {index} of {self.rounds}")
                code = runner.run()
                self.worker_start_s.extend(runner.worker_start_s)
                if code:
                    self.stopped_by_budget = runner.stopped_by_budget
                    return code
        merged = self.merge()
        console.print(f"merged {merged} rows from {self.rounds} rounds → {self.final.path}")
        return 0

    def merge(self) -> int:
        """Append the merged row of every pending case that every round has."""
        per_round = [read_rows(path) for path in self.paths]
        timed_everywhere = [[rows[case_id] for rows in per_round]
                            for case_id in per_round[0]
                            if is_timed(per_round[0][case_id]["measure"])
                            and all(case_id in rows for rows in per_round)]
        prior = between_prior(timed_everywhere)
        results = ResultsFile(self.final.path)
        # Without --resume the rows already in the results file are an earlier run's: this
        # run's merged rows are appended after them, as a plain run appends its own.
        done = finished_case_ids(results.path) if self.request.resume else set()
        rows_out = []
        for job, names in self.final.pending:
            for name in names:
                case_id = self.final.key(job, name).id()
                if case_id in done:
                    continue
                if not is_timed(name):
                    if case_id in per_round[0]:
                        rows_out.append(per_round[0][case_id])
                    continue
                rows = [rows[case_id] for rows in per_round if case_id in rows]
                if len(rows) == self.rounds:
                    rows_out.append(merge_rows(rows, timer_of(job).unstable_iqr, prior))
        runs_priors = between_runs_priors(rows_out, self.earlier)
        for row in rows_out:
            results.append_json(widen(row, self.earlier, runs_priors))
        return len(rows_out)


def run_rounds(request: RunRequest, rounds: int,
               earlier: EarlierRuns = NO_EARLIER_RUNS) -> int:
    """A suite in ``rounds`` rounds; one round through the round file too where earlier
    runs are given, so that its rows are written with their widened intervals."""
    with WorkerPool() as pool:      # as suites/__main__.py's run, for the same reason
        if rounds > 1 or earlier.centres:
            return RoundsRunner(request, rounds, pool=pool, earlier=earlier).run()
        return Runner(request, pool=pool).run()
