"""What a run will cost, from what earlier runs of the same cases cost on the same kind of
machine: the matrix's plan (``python -m suites matrix``) and its time budget.

Each row records ``elapsed_s``, the worker's seconds since its previous row (a job's first
row includes the job's build and first calls, and the release of the job before it), so
the rows of a worker sum to what its jobs cost. Rows written before that field existed
give the same figure from the gaps between their ``started_at`` stamps, which are whole
seconds: good in sum, coarse per row.

A pending case is estimated from, in order of preference:

1. the same case (same suite and case id, threads aside on a GPU, where they only name
   the host's core count) on the same device model, the newest such row;
2. the same computation measured for another suite (``suites.harness.reuse.signature``), whose
   timer may differ: the plan says how many cases are estimated this way;
3. on a GPU model with no row of the case, the same case or computation on another GPU
   model (an H200 plan from H100 rows: the same SM count and clocks, so compilation,
   launches and host work cost alike and only memory-bound kernels differ); the plan says
   how many cases and which models;
4. nothing: the plan counts such cases as "no estimate" and never guesses them.

A device_time case of a framework whose wall pass keeps its jobs built for the device pass
(suites/harness/kept_jobs.py) is estimated from a row measured on a kept job where one exists,
of this device model or, failing that, another: a row of a job built again counts the
build and first calls a kept job does not make (TensorFlow's 122 kept device_time rows on
4x H200 took 18 s, the same cases built again 251 s).

Where a row says whether its first call compiled or loaded from the persistent
compilation cache (JAX's ``compile_events``), the estimate prefers rows of the cache state
the run will meet: a re-run on a host that kept its cache took JAX's ``default-gpu`` from
334 s to 180 s on an H100, so cold history would overstate it by almost half.

History comes from the run's own output folder and any other folders given (the published
reference data, by default): only rows of this device model count, and rows copied from
another suite (``reused_from``) cost nothing and are left out. Worker start-up and the
float64 truth come from the matrix's cost log (``suites/matrix/log.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from suites.rows.keys import Machine, case_key
from suites.rows.results import json_lines, results_files, stamped_at

# A gap between two rows' stamps longer than this is a pause between runs, not a cost.
MAX_GAP_S = 900.0


def computation_key(row: dict[str, Any]) -> tuple:
    """The computation a row measured, whatever suite it was for."""
    s = row.get("settings") or {}
    return (s.get("framework"), s.get("device"), row.get("model"), row.get("batch"),
            row.get("measure"), s.get("precision"), s.get("variant"),
            s.get("threads") if s.get("device") == "cpu" else None, s.get("compile_cache"))


def row_costs(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float | None]]:
    """Each row of one results file (in file order) with the worker seconds it cost."""
    out = []
    previous = None
    for row in rows:
        stamp = stamped_at(row)
        cost = row.get("elapsed_s")
        if cost is None and stamp is not None and previous is not None and \
                0 <= stamp - previous <= MAX_GAP_S:
            cost = stamp - previous
        previous = stamp if stamp is not None else previous
        out.append((row, None if row.get("reused_from") else cost))
    return out


COLD, WARM = "cold", "warm"


def cache_state(row: dict[str, Any]) -> str:
    """Whether the row's first call compiled (``cold``) or loaded everything from the
    host's persistent compilation cache (``warm``); "" where the row does not say, and for
    a compile-cache job, whose first call meets a folder of its own (empty for its cold
    call, filled by that for its warm one) whatever the host's holds: its rows are what it
    costs on any host."""
    if (row.get("settings") or {}).get("compile_cache"):
        return ""
    events = (row.get("timing") or {}).get("compile_events") or {}
    if events.get("persistent_cache_misses"):
        return COLD
    if events.get("persistent_cache_hits"):
        return WARM
    return ""


def measured_on_kept_job(row: dict[str, Any]) -> bool:
    """Whether a device_time row was measured on the job its wall pass kept built
    (suites/harness/device_pass.py ``method``)."""
    return row.get("measure") == "device_time" and \
        "kept built" in ((row.get("device_times") or {}).get("method") or "")


@dataclass(frozen=True)
class OtherGpus:
    """The rows of every GPU model but ``name``: the fallback of a plan for a model that
    has not run a case yet."""

    name: str
    device: str = "gpu"

    def matches(self, env: dict[str, Any], device: str) -> bool:
        return device == "gpu" and env.get("gpu_model") not in (None, "", self.name)


@dataclass(frozen=True)
class CacheView:
    """A framework's persistent compilation cache as a run will meet it: this host, whether
    its cache folder already holds files, and the hosts whose runs wrote into that folder
    (suites/matrix/compile_cache.py: a folder carried from another host, on a volume that outlives
    a rented machine, or copied). A case is expected to load from it (``warm``) only where
    it ran before, with the cache kept, on this host or on one of those."""

    host: str
    kept: bool
    filled_by: frozenset[str] = frozenset()

    def state(self, hosts: Iterable[str]) -> str:
        ran_on = set(hosts)
        return WARM if self.kept and (self.host in ran_on or ran_on & self.filled_by) else COLD


@dataclass(frozen=True)
class History:
    by_case: dict[str, float]          # case_key → seconds (newest row)
    by_computation: dict[tuple, float]  # computation_key → seconds (newest row)
    rows: int                          # rows of this machine that carried a cost
    # (case_key, cache_state) → seconds (newest row of that state)
    by_case_state: dict[tuple[str, str], float] = field(default_factory=dict)
    hosts_by_case: dict[str, frozenset[str]] = field(default_factory=dict)
    # case_key → compile seconds of the newest cold row (what a warm run does not spend)
    compile_by_case: dict[str, float] = field(default_factory=dict)
    models: tuple[str, ...] = ()       # the device models the counted rows ran on
    fallback: History | None = None    # other GPU models' rows (OtherGpus)
    # case_key → seconds of the newest device_time row measured on a kept job
    kept_device: dict[str, float] = field(default_factory=dict)

    def case_seconds(self, case_id: str, computation: tuple, device: str,
                     cache: CacheView | None = None, kept: bool = False
                     ) -> tuple[float | None, str]:
        """(seconds, "case" | "other suite" | "other device") or (None, ""); with
        ``cache``, rows whose first call met the compilation cache as this run's will are
        preferred; with ``kept`` (the framework keeps its jobs for the device pass), a
        device_time row measured on a kept job, of this model or another."""
        key = case_key(case_id, device)
        if kept and key in self.kept_device:
            return self.kept_device[key], "case"
        if kept and self.fallback is not None and key in self.fallback.kept_device:
            return self.fallback.kept_device[key], "other device"
        state = cache.state(self.hosts_by_case.get(key, ())) if cache is not None else ""
        found = self.by_case_state.get((key, state)) if state else None
        if found is None and state == WARM and (key, COLD) in self.by_case_state:
            # No warm run of the case yet: its cold cost without the compilation. Per row
            # this may go below zero (a job's compilations land in whichever of its rows
            # comes next); the job's rows sum right.
            found = self.by_case_state[(key, COLD)] - self.compile_by_case.get(key, 0.0)
        if found is None:
            found = self.by_case.get(key)
        if found is not None:
            return found, "case"
        found = self.by_computation.get(computation)
        if found is not None:
            return found, "other suite"
        if self.fallback is not None:
            found, _ = self.fallback.case_seconds(case_id, computation, device)
            if found is not None:
                return found, "other device"
        return None, ""


def costed_rows(folders: Iterable[Path]) -> list[tuple[dict[str, Any], float]]:
    """Every earlier row under ``folders`` that carries a cost, with the cost."""
    return [(row, cost) for path in results_files(folders)
            for row, cost in row_costs(json_lines(path)) if cost is not None]


def load_history(folders: Iterable[Path], machine: Machine) -> History:
    """The costs of earlier rows of ``machine``; on a GPU, those of the other GPU models
    behind them (``History.fallback``)."""
    rows = costed_rows(folders)
    history = history_of(rows, machine)
    if machine.device != "gpu":
        return history
    other = history_of(rows, OtherGpus(machine.name))
    return replace(history, fallback=other) if other.rows else history


def history_of(rows: list[tuple[dict[str, Any], float]], machine: Machine | OtherGpus
               ) -> History:
    newest: dict[str, tuple[float, float]] = {}
    newest_computation: dict[tuple, tuple[float, float]] = {}
    newest_state: dict[tuple[str, str], tuple[float, float]] = {}
    hosts: dict[str, set[str]] = {}
    compiled: dict[str, tuple[float, float]] = {}
    kept: dict[str, tuple[float, float]] = {}
    models: set[str] = set()
    counted = 0
    for row, cost in rows:
        settings = row.get("settings") or {}
        env = row.get("env") or {}
        if not machine.matches(env, settings.get("device", "")):
            continue
        counted += 1
        models.add(env.get("gpu_model" if machine.device == "gpu" else "cpu_model") or "")
        when = stamped_at(row) or 0.0
        key = case_key(row.get("case_id", ""), machine.device)
        if key not in newest or newest[key][0] <= when:
            newest[key] = (when, cost)
        hosts.setdefault(key, set()).add(env.get("host", ""))
        state = (key, cache_state(row))
        if state[1] and (state not in newest_state or newest_state[state][0] <= when):
            newest_state[state] = (when, cost)
            if state[1] == COLD:
                events = (row.get("timing") or {}).get("compile_events") or {}
                compiled[key] = (when, float(events.get("compile_s") or 0.0))
        if measured_on_kept_job(row) and (key not in kept or kept[key][0] <= when):
            kept[key] = (when, cost)
        computation = computation_key(row)
        if computation not in newest_computation or \
                newest_computation[computation][0] <= when:
            newest_computation[computation] = (when, cost)
    return History({k: v for k, (_, v) in newest.items()},
                   {k: v for k, (_, v) in newest_computation.items()}, counted,
                   {k: v for k, (_, v) in newest_state.items()},
                   {k: frozenset(v) for k, v in hosts.items()},
                   {k: v for k, (_, v) in compiled.items()},
                   tuple(sorted(m for m in models if m)),
                   kept_device={k: v for k, (_, v) in kept.items()})


@dataclass(frozen=True)
class Estimate:
    """The estimated seconds of some cases, and how many had none."""

    seconds: float = 0.0
    cases: int = 0
    from_other_suite: int = 0
    unknown: int = 0
    from_other_device: int = 0

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.seconds + other.seconds, self.cases + other.cases,
                        self.from_other_suite + other.from_other_suite,
                        self.unknown + other.unknown,
                        self.from_other_device + other.from_other_device)

    def text(self) -> str:
        if self.cases and self.unknown == self.cases:
            return "no estimate"
        words = minutes(self.seconds)
        notes = []
        if self.unknown:
            notes.append(f"{self.unknown} without estimate")
        if self.from_other_suite:
            notes.append(f"{self.from_other_suite} from other suites")
        if self.from_other_device:
            notes.append(f"{self.from_other_device} from another GPU model")
        return words + (f" ({'; '.join(notes)})" if notes else "")


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def estimate_cases(history: History, cases: Iterable[tuple[str, tuple]], device: str,
                   cache: CacheView | None = None, kept: bool = False) -> Estimate:
    """Sum the estimates of (case id, computation key) pairs."""
    total = Estimate()
    for case_id, computation in cases:
        seconds, how = history.case_seconds(case_id, computation, device, cache, kept)
        total = total + Estimate(seconds or 0.0, 1, int(how == "other suite"),
                                 int(seconds is None), int(how == "other device"))
    return total
