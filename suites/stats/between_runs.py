"""The between-run spread of a case, from earlier runs of the same machine model:
``--earlier DIR ...`` (``python -m suites run`` and ``python -m suites matrix``).

One run cannot see how far the host's speed moves between runs. Its repetitions, and with
``--rounds`` its processes, all fall within minutes; a re-run later, or on another host of
the same model, meets a host whose speed has shifted. Measured: four ``--rounds 3`` runs of
PyTorch's ``default-cpu`` back to back on a 2-core AMD EPYC put 89.8% of the later runs'
medians inside the earlier runs' intervals, the sub-millisecond cases moving by ×0.87 to
×1.25 from one run to the next; on H200 hosts, one-round rows of the seven GPU suites put
66.8% of another host's medians inside their intervals (README, "Reproducible timings").

So where earlier runs of the machine model exist, each case's centre (its median, or with
rounds the median of the round medians) is taken with the same case's centres in those runs:
their variance on log times, with as many degrees of freedom as there are earlier runs, is
moderated over the run's cases of its median band (``suites/stats/spread.py``: Smyth 2004, as
limma's ``squeezeVar``; ``BandPriors``) and gives the prediction interval of a re-run's
centre, t · sqrt(2 s²): the re-run's centre and this one are two draws from the case's
run-to-run distribution. The row's interval becomes the union of its own and this one, and
says so. Replayed on the 2-core machine's four runs (each ordered pair judged with the other
two runs and the first as its history) it covered 97.3% of 264 pairs, at ±35% in the median
case against ±32% before; on the H200 folders (one history run from another host,
transfers apart) 94.7% of 7,206, at ±8.6% against ±2.9%.

Which rows count: the same case (``suites.rows.keys.case_key``: on a GPU without the host's thread
count), timed and ``ok``, of the same machine model (``keys.Machine``: the GPU's model;
the CPU's model and core count), each row once (a row copied into ``published/`` is the same
row). The folders are the user's choice, and so is what they hold: earlier commits whose
code changed a case's speed widen its interval; leave them out where that is not wanted.
The ``unstable`` flag stays the timer's verdict on the run's own samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suites.rows.keys import Machine, case_key
from suites.rows.results import is_timed, json_lines, results_files
from suites.stats.compare import band
from suites.stats.spread import NO_PRIOR, Prior, fit_prior, moderated, t_975


@dataclass(frozen=True)
class EarlierRuns:
    """Each case's centres (ms) in earlier runs of one machine model, and their hosts."""

    device: str
    centres: dict[str, tuple[float, ...]] = field(default_factory=dict)   # case_key → ms
    hosts: dict[str, frozenset[str]] = field(default_factory=dict)

    def of(self, case_id: str) -> tuple[float, ...]:
        return self.centres.get(case_key(case_id, self.device), ())

    def hosts_of(self, case_id: str) -> frozenset[str]:
        return self.hosts.get(case_key(case_id, self.device), frozenset())

    def describe(self, machine_name: str, folders: Iterable[Path]) -> str:
        """One line for the start of a run: what the earlier runs hold for it."""
        where = ", ".join(map(str, folders))
        if not self.centres:
            return (f"--earlier: no timed rows of {machine_name} under {where}; the "
                    f"intervals are this run's own")
        counts = sorted(len(runs) for runs in self.centres.values())
        return (f"--earlier: {len(counts)} cases of {machine_name} under {where}, "
                f"{counts[len(counts) // 2]} earlier runs in the median case: their spread "
                f"widens each case's interval")


NO_EARLIER_RUNS = EarlierRuns(device="")


def _centre(row: dict[str, Any]) -> float | None:
    if not isinstance(row, dict) or row.get("status") != "ok" \
            or not is_timed(row.get("measure", "")):
        return None
    median = (row.get("timing") or {}).get("median_ms")
    return float(median) if isinstance(median, (int, float)) and median > 0 else None


def load_earlier(folders: Iterable[Path], machine: Machine) -> EarlierRuns:
    """The centres of every timed ``ok`` row of ``machine``'s model under ``folders``
    (``*.jsonl``, ``*.jsonl.gz``; round files are a run's parts, not runs), each row once,
    oldest first."""
    found: dict[tuple[str, str, str], float] = {}   # (case id, host, start) → centre
    for path in results_files(folders):
        for row in json_lines(path):
            centre = _centre(row)
            if centre is None:
                continue
            env = row.get("env") or {}
            if not machine.matches(env, (row.get("settings") or {}).get("device", "")):
                continue
            found[(row["case_id"], env.get("host", ""),
                   str(row.get("started_at", "")))] = centre
    centres: dict[str, list[tuple[str, float]]] = {}
    hosts: dict[str, set[str]] = {}
    for (case_id, host, started), centre in found.items():
        key = case_key(case_id, machine.device)
        centres.setdefault(key, []).append((started, centre))
        hosts.setdefault(key, set()).add(host)
    return EarlierRuns(machine.device,
                       {k: tuple(ms for _, ms in sorted(v)) for k, v in centres.items()},
                       {k: frozenset(v) for k, v in hosts.items()})


def _log_variance(centre_ms: float, earlier: tuple[float, ...]) -> float:
    return float(np.log(np.asarray((*earlier, centre_ms), dtype=np.float64)).var(ddof=1))


@dataclass(frozen=True)
class BandPriors:
    """The between-run prior of each median band (``suites.stats.compare.BANDS``), and of all the
    run's cases for a band with too few to fit one. Launch-bound cases move between runs far
    more than long ones: one prior over both lends the long cases the short ones' spread and
    the short ones too little. Replayed on the H200 folders, one prior covered 90.6% of the
    sub-millisecond medians and 98.3% of those from 5 ms (±8.0%); a prior per band 93.1%,
    95.0% and 95.6% (±4.5% from 5 ms; transfers apart)."""

    by_band: dict[str, Prior] = field(default_factory=dict)
    pooled: Prior = NO_PRIOR

    def of(self, centre_ms: float) -> Prior:
        found = self.by_band.get(band(centre_ms))
        return found if found is not None and found.cases else self.pooled


def between_runs_priors(rows: Iterable[dict[str, Any]], earlier: EarlierRuns) -> BandPriors:
    """The priors of the between-run variance over this run's rows that have earlier runs,
    each case's variance taken over its newest earlier runs and this one, as many for every
    case as the case with the fewest has (one degrees-of-freedom count for the fit)."""
    found = [(centre, earlier.of(row["case_id"])) for row in rows
             if (centre := _centre(row)) is not None]
    found = [(centre, runs) for centre, runs in found if runs]
    if not found:
        return BandPriors()
    runs = min(len(earlier_runs) for _, earlier_runs in found)
    variances = [(band(centre), _log_variance(centre, earlier_runs[-runs:]))
                 for centre, earlier_runs in found]
    names = {name for name, _ in variances}
    return BandPriors({name: fit_prior([v for n, v in variances if n == name], runs)
                       for name in names},
                      fit_prior([v for _, v in variances], runs))


def widen(row: dict[str, Any], earlier: EarlierRuns, priors: BandPriors) -> dict[str, Any]:
    """``row`` with its interval widened to cover a re-run, where earlier runs of its case
    exist; otherwise ``row`` itself."""
    centre = _centre(row)
    runs = earlier.of(row["case_id"]) if centre is not None else ()
    if not runs:
        return row
    prior = priors.of(centre)
    timing = dict(row["timing"])
    own_low = timing.get("ci_low_ms") or centre
    own_high = timing.get("ci_high_ms") or centre
    own = _log_variance(centre, runs)
    variance, df = moderated(own, len(runs), prior)
    half = t_975(df) * math.sqrt(2.0 * variance) if df > 0 else 0.0
    low, high = min(own_low, centre * math.exp(-half)), max(own_high, centre * math.exp(half))
    widened = low < own_low or high > own_high
    hosts = earlier.hosts_of(row["case_id"])
    timing.update({
        "ci_low_ms": low, "ci_high_ms": high,
        "between_runs": {"earlier_runs": len(runs), "hosts": len(hosts),
                         "sd_log": math.sqrt(own), "moderated_sd_log": math.sqrt(variance),
                         "df": df if math.isfinite(df) else None,
                         "prior_sd_log": math.sqrt(prior.variance),
                         "prior_df": prior.df if math.isfinite(prior.df) else None,
                         "prior_cases": prior.cases, "band": band(centre),
                         "own_interval_ms": [own_low, own_high],
                         "widened": widened},
        "interval": (f"{timing.get('interval', '')}; "
                     f"{'widened by' if widened else 'covers'} the case's spread over "
                     f"{len(runs)} earlier run{'s' if len(runs) != 1 else ''} of this "
                     f"machine model ({len(hosts)} host{'s' if len(hosts) != 1 else ''})"
                     + (f", moderated over {prior.cases} cases of the run" if prior.cases
                        else ", its own (too few cases to moderate)")).lstrip("; "),
    })
    return {**row, "timing": timing}
