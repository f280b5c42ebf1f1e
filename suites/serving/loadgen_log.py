"""LoadGen's result, read from the two logs it writes (``mlperf_log_summary.txt`` and
``mlperf_log_detail.txt``, LoadGen 5.0.18).

The summary is text for people: its ``Result is : VALID`` line is the verdict and its
headline line the scenario's figure. The detail log holds the same results as one JSON
object per line after ``:::MLLOG `` (``{"key": ..., "value": ...}``), which this module
reads for the numbers: the percentiles (``result_90.00_percentile_latency_ns``; in
MultiStream, ``result_99.00_percentile_per_query_latency_ns``, a query being 8 samples),
the throughput (in Server, the scheduled and the completed samples per second beside the
target QPS) and the reasons a run is invalid."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUMMARY = "mlperf_log_summary.txt"
DETAIL = "mlperf_log_detail.txt"
_MLLOG = ":::MLLOG "
_PERCENTILE = re.compile(r"result_(\d+\.\d+)_percentile_(per_query_)?latency_ns")
# With token latencies (TestSettings.use_token_latencies, the generate measure) LoadGen
# 5.0.18 also logs, per query, the time to the first token (FirstTokenComplete) and the
# time per output token ((latency - first token) / (tokens - 1)), each as percentiles.
_FIRST_TOKEN = re.compile(r"result_first_token_(\d+\.\d+)_percentile_latency_ns")
_PER_TOKEN = re.compile(r"result_time_per_output_token_(\d+\.\d+)_percentile_ns")
_VERDICT = re.compile(r"^Result is\s*:\s*(VALID|INVALID)\s*$", re.MULTILINE)
_HEADLINE = re.compile(r"^(\d+\.\d+th percentile latency \(ns\)|Samples per second|"
                       r"Completed samples per second)\s*:\s*(\S+)\s*$", re.MULTILINE)
NS_PER_MS = 1e6


class LogError(ValueError):
    """The logs are missing or lack what every LoadGen run writes; the message says which."""


@dataclass(frozen=True)
class LoadgenResult:
    """One LoadGen run's result. Latencies in milliseconds; ``percentiles_ms`` keyed by
    LoadGen's percentile ("50.00", "90.00", "99.00", "99.90", ...), per query in
    MultiStream, per sample otherwise."""

    scenario: str
    valid: bool
    reason: str                      # why INVALID ("" when VALID)
    headline: str                    # the summary's headline line, as LoadGen wrote it
    percentiles_ms: dict[str, float]
    mean_ms: float | None
    min_ms: float | None
    max_ms: float | None
    samples_per_second: float | None  # Offline's figure
    qps: float | None                 # queries per second with LoadGen's overhead
    query_count: int | None
    samples_per_query: int | None
    version: str
    # Server: the QPS asked for, the rate LoadGen scheduled and the rate the SUT completed
    # (result_completed_samples_per_sec, the summary's headline), the queries over the
    # latency target; None in the other scenarios.
    target_qps: float | None = None
    scheduled_samples_per_second: float | None = None
    completed_samples_per_second: float | None = None
    overlatency_query_count: int | None = None
    # Token latencies (the generate measure): time to first token and time per output
    # token, keyed as ``percentiles_ms``, and the completed tokens per second; empty and None
    # for a run without them.
    first_token_ms: dict[str, float] = field(default_factory=dict)
    per_token_ms: dict[str, float] = field(default_factory=dict)
    tokens_per_second: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def detail_entries(text: str) -> dict[str, Any]:
    """Every key of a detail log with its last value; lines that are not MLLOG JSON are
    left out."""
    entries: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith(_MLLOG):
            continue
        try:
            record = json.loads(line[len(_MLLOG):])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "key" in record:
            entries[record["key"]] = record.get("value")
    return entries


def _ms(value: Any) -> float | None:
    return None if value is None else float(value) / NS_PER_MS


def _invalid_reason(entries: dict[str, Any]) -> str:
    parts = []
    if entries.get("result_perf_constraints_met") is False:
        parts.append(_latency_over_target(entries))
    if entries.get("result_min_duration_met") is False:
        parts.append(f"min duration not met ({entries.get('effective_min_duration_ms')} ms)")
    if entries.get("result_min_queries_met") is False:
        parts.append(f"min query count not met ({entries.get('result_query_count')} of "
                     f"{entries.get('effective_min_query_count')})")
    if entries.get("early_stopping_met") is False:
        text = " ".join(str(entries.get("early_stopping_result", "")).split())
        parts.append("early stopping not met" + (f": {text}" if text else ""))
    invalid = " ".join(str(entries.get("result_invalid_reason", "")).split())
    if invalid:
        parts.append(invalid)
    return "; ".join(parts) or "LoadGen logged no reason"


def _latency_over_target(entries: dict[str, Any]) -> str:
    """Server's performance constraint: the target percentile's latency above the target
    latency (LoadGen 5.0.18 logs the verdict, ``result_perf_constraints_met``, and both
    figures)."""
    percentile = entries.get("effective_target_latency_percentile")
    target = _ms(entries.get("effective_target_latency_ns"))
    if percentile is None or target is None:
        return "performance constraints not met"
    key = f"result_{100 * float(percentile):.2f}_percentile_latency_ns"
    found = _ms(entries.get(key))
    latency = f"{found:.3g} ms" if found is not None else "not logged"
    return (f"performance constraints not met (p{100 * float(percentile):g} latency {latency} "
            f"> target {target:.3g} ms)")


def parse(summary: str, detail: str) -> LoadgenResult:
    """The result of one run from its logs' texts; ``LogError`` if either lacks the
    verdict."""
    verdict = _VERDICT.search(summary)
    if verdict is None:
        raise LogError(f"{SUMMARY} has no 'Result is : VALID/INVALID' line")
    entries = detail_entries(detail)
    if "result_validity" not in entries:
        raise LogError(f"{DETAIL} has no result_validity entry")
    valid = verdict.group(1) == "VALID"
    if valid != (entries["result_validity"] == "VALID"):
        raise LogError(f"the logs disagree: summary {verdict.group(1)}, detail "
                       f"{entries['result_validity']}")
    per_query = any(_PERCENTILE.fullmatch(k) and _PERCENTILE.fullmatch(k).group(2)
                    for k in entries)
    percentiles = {}
    for key, value in entries.items():
        found = _PERCENTILE.fullmatch(key)
        if found and bool(found.group(2)) == per_query:
            percentiles[found.group(1)] = float(value) / NS_PER_MS
    suffix = "_query" if per_query else ""
    headline = _HEADLINE.search(summary)
    count = entries.get("result_query_count")
    spq = entries.get("effective_samples_per_query")
    return LoadgenResult(
        scenario=str(entries.get("effective_scenario", "")), valid=valid,
        reason="" if valid else _invalid_reason(entries),
        headline=" : ".join(headline.groups()) if headline else "",
        percentiles_ms=dict(sorted(percentiles.items(), key=lambda kv: float(kv[0]))),
        mean_ms=_ms(entries.get(f"result_mean{suffix}_latency_ns")),
        min_ms=_ms(entries.get(f"result_min{suffix}_latency_ns")),
        max_ms=_ms(entries.get(f"result_max{suffix}_latency_ns")),
        samples_per_second=entries.get("result_samples_per_second"),
        qps=entries.get("result_qps_with_loadgen_overhead"),
        query_count=None if count is None else int(count),
        samples_per_query=None if spq is None else int(spq),
        version=str(entries.get("loadgen_version", "")),
        target_qps=entries.get("effective_target_qps") if "result_completed_samples_per_sec" in entries
        else None,
        scheduled_samples_per_second=entries.get("result_scheduled_samples_per_sec"),
        completed_samples_per_second=entries.get("result_completed_samples_per_sec"),
        overlatency_query_count=entries.get("result_overlatency_query_count"),
        first_token_ms=_percentiles(entries, _FIRST_TOKEN),
        per_token_ms=_percentiles(entries, _PER_TOKEN),
        tokens_per_second=entries.get("result_completed_tokens_per_second"))


def _percentiles(entries: dict[str, Any], pattern: re.Pattern) -> dict[str, float]:
    found = {m.group(1): float(v) / NS_PER_MS for k, v in entries.items()
             if (m := pattern.fullmatch(k))}
    return dict(sorted(found.items(), key=lambda kv: float(kv[0])))


def read(folder: Path) -> LoadgenResult:
    """``parse`` of the logs LoadGen wrote into ``folder``."""
    try:
        return parse((folder / SUMMARY).read_text(), (folder / DETAIL).read_text())
    except FileNotFoundError as error:
        raise LogError(f"LoadGen wrote no {Path(error.filename).name} in {folder}") from None
