"""Repetitions in separate processes: ``python -m suites run ... --rounds N``.

Repetitions inside one worker share what a process fixes once: cuDNN's autotuned
algorithms, the allocator's layout, where a buffer sits. pyperf spawns a fresh process per
run for that reason. With ``--rounds N`` the runner runs the suite's pending jobs N times,
each round in fresh worker processes writing to its own file
(``<framework>_<device>.roundK.jsonl`` beside the results file), with the case's budget
and repetitions shared out over the rounds; then each case's rows are merged into one row
of the results file whose median and re-run interval (suites/repetitions.py) span the
repetitions of every round. A case that is not ``ok`` in some round keeps that round's row
(failures are data). Round 1's first call and peak memory are kept: they are the cold
ones. The default is one round: the process-to-process part of the spread then shows only
when the suite is run again (``python -m suites compare``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

import numpy as np

from suites.host_state import merge_host_fields
from suites.launch_bound import overhead_fields
from suites.repetitions import rerun_interval
from suites.results import ResultsFile, read_rows
from suites.reuse import timer_of
from suites.runner import Runner, RunRequest
from suites.timer import TimerSettings


def round_timer(timer: TimerSettings, rounds: int) -> TimerSettings:
    """One round's share of a case's repetitions and budget (at least one repetition)."""
    return replace(timer, budget_s=timer.budget_s / rounds,
                   repetitions=max(1, math.ceil(timer.repetitions / rounds)),
                   max_repetitions=max(1, math.ceil(timer.max_repetitions / rounds)))


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def merge_rows(rows: list[dict[str, Any]], unstable_share: float) -> dict[str, Any]:
    """One case's rows from every round as one row (see the module's docstring)."""
    for row in rows:
        if row["status"] != "ok":
            return row
    timings = [row.get("timing") for row in rows]
    if any(not t or not t.get("repetition_medians_ms") for t in timings):
        return rows[0]      # fingerprint and profile rows: the first round's
    medians = [m for t in timings for m in t["repetition_medians_ms"]]
    samples = np.asarray([s for t in timings for s in t["samples_ms"]], dtype=np.float64)
    centre, low, high = rerun_interval(medians)
    spread = (high - low) / 2 / centre if centre > 0 else math.inf
    q1, q3 = np.percentile(samples, [25, 75])
    first = timings[0]
    timing = {
        **first,
        "median_ms": centre, "ci_low_ms": low, "ci_high_ms": high,
        "iqr_ms": float(q3 - q1), "mean_ms": float(samples.mean()),
        "min_ms": float(samples.min()), "samples": int(samples.size),
        "samples_ms": samples.tolist(),
        "repetitions": len(medians), "rounds": len(rows),
        "interval": (f"95% prediction interval of a re-run's median over {len(medians)} "
                     f"repetitions in {len(rows)} processes"),
        "repetition_medians_ms": medians,
        "repetition_inner_loops": [n for t in timings for n in t["repetition_inner_loops"]],
        "within_run_ci_ms": [ci for t in timings for ci in t["within_run_ci_ms"]],
        "unstable": spread > unstable_share,
        "unstable_reason": (f"a re-run's median may differ by ±{spread:.1%} ({len(medians)} "
                            f"repetitions in {len(rows)} processes)"
                            if spread > unstable_share else ""),
        "device_median_ms": _median([t.get("device_median_ms") for t in timings]),
        "device_span_median_ms": _median([t.get("device_span_median_ms") for t in timings]),
    }
    # Recomputed from the merged medians, as combined_fields computes them for one round.
    timing.update(overhead_fields(timing["median_ms"], timing["device_median_ms"]))
    if first.get("gpu_readings") is not None:
        def pick(name):
            return [t[name] for t in timings if t.get(name) is not None]
        timing.update({
            "gpu_sm_clock_mhz_min": min(pick("gpu_sm_clock_mhz_min"), default=None),
            "gpu_sm_clock_mhz_median": _median(pick("gpu_sm_clock_mhz_median")),
            "gpu_sm_clock_mhz_max": max(pick("gpu_sm_clock_mhz_max"), default=None),
            "gpu_mem_clock_mhz_median": _median(pick("gpu_mem_clock_mhz_median")),
            "gpu_power_w_median": _median(pick("gpu_power_w_median")),
            "gpu_temperature_c_max": max(pick("gpu_temperature_c_max"), default=None),
            "gpu_readings": sum(pick("gpu_readings")),
        })
    if any(t.get("host_readings") is not None for t in timings):
        timing.update(merge_host_fields(timings))
    return {**rows[0], "timing": timing,
            "wall_s": round(sum(float(row.get("wall_s") or 0.0) for row in rows), 3)}


def run_rounds(request: RunRequest, rounds: int) -> int:
    final = Runner(request)
    if rounds <= 1:
        return final.run()
    unstable = {final.key(job, name).id(): timer_of(job).unstable_iqr
                for job, names in final.pending for name in names}
    paths = []
    for index in range(1, rounds + 1):
        runner = Runner(replace(request, resume=False))
        runner.pending = [(replace(job, timer=round_timer(timer_of(job), rounds)), names)
                          for job, names in final.pending]
        runner.path = final.path.with_name(f"{final.path.stem}.round{index}.jsonl")
        runner.path.unlink(missing_ok=True)
        runner.results = ResultsFile(runner.path)
        code = runner.run()
        if code:
            return code
        paths.append(runner.path)
    per_round = [read_rows(path) for path in paths]
    for case_id, share in unstable.items():
        rows = [rows[case_id] for rows in per_round if case_id in rows]
        if rows:
            final.results.append_json(merge_rows(rows, share))
    return 0
