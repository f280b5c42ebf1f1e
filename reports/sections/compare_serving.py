"""Your serving run beside a published reference (``python -m reports results
published/<folder>``): each of your LoadGen rows beside the reference's row of the same
model, scenario, framework, variant, precision and device kind, by the scenario's headline.

The row-by-row comparison (reports/compare.py) pairs medians of timed steps; a serving row
has none, but one headline per scenario (reports/sections/serving.py): SingleStream's p90
and MultiStream's p99 latency, Offline's samples/s, Server's QPS under the bound, a
generation's tokens/s, a cold start's seconds. A figure counts only where its row is ``ok``
and, for a LoadGen run, VALID with its answers within their float64 bound. One LoadGen run
per side gives no interval, so a ratio here carries none, and a Server QPS is a lower bound
on both sides (the search's largest VALID target). What may still differ (the thread
budget, the batch, the framework's version, the device model, and the run's own settings:
query counts, durations, the Server batcher's sizes and its search) is listed beside each
pair.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from models.measures import GENERATE, SERVE
from reports.pipeline.cells import fmt_ms
from reports.render.table import Cell, Table
from reports.sections.serving import answered, rate_text, serve_rows, server_answer
from suites.serving.scenarios import COLD_START


def _percentile(key: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda row: ((row["serving"].get("result") or {}).get("percentiles_ms") or {}).get(key)


@dataclass(frozen=True)
class Figure:
    name: str
    value: Callable[[dict[str, Any]], float | None]
    lower_is_better: bool     # a latency or a duration; else a rate
    loadgen: bool = True      # judged by LoadGen's verdict and the float64 check


FIGURES = {
    "SingleStream": Figure("p90 ms", _percentile("90.00"), True),
    "MultiStream": Figure("p99 ms per query", _percentile("99.00"), True),
    "Offline": Figure("samples/s", lambda r: (r["serving"].get("result") or {}).get(
        "samples_per_second"), False),
    "Server": Figure("QPS at p99 ≤ bound", lambda r: server_answer(r)[0], False),
    GENERATE: Figure("tokens/s", lambda r: (r["serving"].get("generation") or {}).get(
        "tokens_per_second"), False),
    COLD_START: Figure("cold start s", lambda r: (r["serving"].get("cold_start") or {}).get(
        "total_median_s"), True, loadgen=False),
}
# What a reference row must share with yours; what may differ, with the weight of a
# mismatch when several reference rows share the key (the batch and the thread budget
# change the run, a version or a device model only its speed).
KEY = ("model", "scenario", "framework", "variant", "precision", "device")
MATCH_WEIGHTS = (("batch", 4), ("threads", 2), ("framework_version", 1), ("hardware", 1))
LABELS = {"batch": "batch", "threads": "threads", "framework_version": "version",
          "hardware": "device"}
# The serving settings that shape a run (suites/serving/scenarios.py ``recorded``,
# generate.py), as the row's ``serving.settings`` holds them, with their labels: two rows
# that differ in one ran different tests. What the harness measured or derived (the
# warm-up's fastest serve, the search's start and floor, the deadlines) is left out.
RUN_SETTINGS = {"min_query_count": "queries", "min_duration_ms": "min ms",
                "max_duration_ms": "max ms", "performance_sample_count": "samples",
                "server_max_batch": "max batch", "server_batch_sizes": "sizes",
                "server_batch_timeout_ms": "batch timeout ms",
                "server_target_latency_ms": "bound ms",
                "server_target_latency_percentile": "bound percentile",
                "server_search_runs": "search runs", "server_search_seconds": "search s",
                "prompt_tokens": "prompt", "new_tokens": "new tokens", "prompts": "prompts",
                "runs": "runs"}


def _scenario(row: dict[str, Any]) -> str:
    return GENERATE if row["measure"] == GENERATE else row["scenario"]


def figure(row: dict[str, Any]) -> float | None:
    """The row's headline, where it counts: the row ``ok`` and, for a LoadGen run, VALID
    with its checked answers within their float64 bound; else None."""
    found = FIGURES.get(_scenario(row))
    if found is None or row["status"] != "ok" or (found.loadgen and not answered(row)):
        return None
    value = found.value(row)
    return value if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 \
        else None


@dataclass(frozen=True)
class ServingPair:
    yours: dict[str, Any]
    reference: dict[str, Any]

    @property
    def figure(self) -> Figure:
        return FIGURES[_scenario(self.yours)]

    @property
    def time_ratio(self) -> float:
        """Your time per answer / the reference's: the latencies' ratio, a rate's inverse,
        so that below 1 you are faster either way."""
        mine, theirs = figure(self.yours), figure(self.reference)
        return mine / theirs if self.figure.lower_is_better else theirs / mine

    @property
    def core_ratio(self) -> float | None:
        """Your host's single-core probe time / the reference host's, each taken before
        the case's first LoadGen run (above 1: your core ran it slower); None where a row
        carries no probe."""
        mine, theirs = core_probe_ms(self.yours), core_probe_ms(self.reference)
        return mine / theirs if mine and theirs else None

    def differs(self) -> tuple[str, ...]:
        """The settings the two rows do not share: the row's own, then the run's."""
        row = tuple(f"{LABELS[k]} {self.yours[k] or '—'} vs {self.reference[k] or '—'}"
                    for k, _ in MATCH_WEIGHTS if self.yours[k] != self.reference[k])
        mine, theirs = _run_settings(self.yours), _run_settings(self.reference)
        run = tuple(f"{label} {_setting(mine.get(k))} vs {_setting(theirs.get(k))}"
                    for k, label in RUN_SETTINGS.items() if mine.get(k) != theirs.get(k))
        return row + run


def _run_settings(row: dict[str, Any]) -> dict[str, Any]:
    return row["serving"].get("settings") or {}


def _setting(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def core_probe_ms(row: dict[str, Any]) -> float | None:
    """The row's single-core probe (suites/instruments/host_probe.py probe_summary)."""
    value = (row["serving"].get("host_probe") or {}).get("core_ms")
    return value if isinstance(value, (int, float)) and value > 0 else None


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [*serve_rows(frame, SERVE), *serve_rows(frame, GENERATE)]


def pair_serving(yours_frame: pd.DataFrame, reference_frame: pd.DataFrame
                 ) -> tuple[list[ServingPair], int]:
    """(pairs, your rows with a headline but no reference row with one under the same
    ``KEY``). Among several candidates the one with the fewest (weighted) differences."""
    reference: dict[tuple, list[dict[str, Any]]] = {}
    for row in _rows(reference_frame):
        if figure(row) is not None:
            reference.setdefault(_key(row), []).append(row)
    pairs, unmatched = [], 0
    for row in _rows(yours_frame):
        if figure(row) is None:
            continue
        candidates = reference.get(_key(row))
        if not candidates:
            unmatched += 1
            continue
        best = min(candidates, key=lambda c: sum(w for k, w in MATCH_WEIGHTS if c[k] != row[k]))
        pairs.append(ServingPair(row, best))
    pairs.sort(key=lambda p: (p.yours["framework"], p.yours["device"], p.yours["model"],
                              list(FIGURES).index(_scenario(p.yours)), p.yours["variant"],
                              p.yours["precision"]))
    return pairs, unmatched


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_scenario(row) if k == "scenario" else row[k] for k in KEY)


def _value(value: float, figure: Figure) -> str:
    """As the serving tables write it: milliseconds as latencies, seconds to three digits,
    a rate as a rate."""
    if not figure.lower_is_better:
        return rate_text(value)
    return f"{value:.3g}" if figure.name.endswith(" s") else fmt_ms(value)


def serving_table(pairs: list[ServingPair]) -> Table:
    body = []
    for p in pairs:
        y, r, name = p.yours, p.reference, p.figure.name
        body.append((Cell(y["model"]), Cell(_scenario(y)), Cell(f"{y['framework']} {y['variant']}"),
                     Cell(y["precision"]), Cell(y["device"]), Cell(name),
                     Cell(_value(figure(y), p.figure), title=y["hardware"]),
                     Cell(_value(figure(r), p.figure), title=f"{r['hardware']}: {r['source']}"),
                     Cell(f"{p.time_ratio:.2f}×", emphasis="" if p.differs() else "bold"),
                     Cell(f"{p.core_ratio:.2f}×" if p.core_ratio else "—"),
                     Cell("; ".join(p.differs()) or "—", kind="fail" if p.differs() else "")))
    return Table("compare-serving", "Serving beside the reference",
                 ("Model", "Scenario", "Framework", "Precision", "Device", "Headline",
                  "Yours", "Reference", "Time ratio", "Core probe", "Settings that differ"),
                 tuple(body), (False,) * 6 + (True,) * 4 + (False,),
                 notes=("Pairs: the same model, scenario, framework, variant, precision and "
                        "device kind; each side's row ok and, under LoadGen, VALID with its "
                        "answers within their float64 bound. Time ratio = your latency (or "
                        "seconds) / the reference's, and for a rate (samples/s, QPS, tokens/s) "
                        "the reference's / yours: below 1× you are faster either way. One "
                        "LoadGen run a side: no interval. A Server QPS is the search's largest "
                        "VALID target, a lower bound on each side. Bold: every listed setting "
                        "agrees.",
                        "Core probe: your host's single-core probe time / the reference host's "
                        "(suites/instruments/host_probe.py), each taken before the case's first "
                        "LoadGen run; above 1× your core ran it slower. A row bound by one "
                        "thread launching kernels (batch 1, no compiled graph) follows it; "
                        "'—' where a row carries no probe."))


def section_parts(yours_frame: pd.DataFrame, reference_frame: pd.DataFrame
                  ) -> tuple[tuple[str, ...], tuple[Table, ...]]:
    """The serving comparison's paragraph and table (empty when no serving row pairs)."""
    pairs, unmatched = pair_serving(yours_frame, reference_frame)
    if not pairs:
        return (), ()
    alike = [p.time_ratio for p in pairs if not p.differs()]
    text = (f"{len(pairs)} of your serving rows have a reference row of the same model, "
            f"scenario, framework, variant, precision and device kind"
            + (f"; in the {len(alike)} whose settings all agree, your time per answer is "
               f"{statistics.geometric_mean(alike):.2f}× the reference's (geometric mean; "
               f"{min(alike):.2f}× to {max(alike):.2f}×)" if alike else "")
            + (f"; {len(pairs) - len(alike)} differ in a setting, named beside each"
               if len(alike) < len(pairs) else "") + "."
            + (f" {unmatched} row(s) without one." if unmatched else "")
            + _core_sentence(pairs))
    return (text,), (serving_table(pairs),)


def _core_sentence(pairs: list[ServingPair]) -> str:
    """The hosts' single-core probes compared, where both sides carry them."""
    ratios = [p.core_ratio for p in pairs if p.core_ratio]
    if not ratios:
        return ""
    return (f" Your host's single-core probe took {statistics.median(ratios):.2f}× the "
            f"reference host's (median "
            f"over {len(ratios)} pairs): a launch-bound row moves with it.")
