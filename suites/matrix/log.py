"""The matrix's cost log: what each suite and framework took, so that the next plan is
better and a full run's cost can be stated (``python -m suites matrix --costs``).

One JSON object a line in ``<out>/matrix/<host>/costs-<device>.ndjson`` (not ``.jsonl``:
the report reads every ``*.jsonl`` as result rows), appended and fsynced like rows:

* ``"kind": "item"``: one suite with one framework in one invocation: wall seconds,
  worker start-ups, rows measured and reused, and how much of the rows' own time went to
  first calls (compilation, tracing, autotuning), profiles, counters and fingerprints;
  on a GPU two, one per pass (``phase``: "wall", then "device" after every suite's wall
  pass; "all" on a CPU), which the totals and the mean worker start add up as they add
  up invocations;
* ``"kind": "truth"``: the float64 references computed before the frameworks ran;
* ``"kind": "run"``: one invocation: its wall time, budget and how it ended.

A run stopped and resumed leaves one record per invocation; totals add them up. An
invocation killed outright (SIGKILL, a lost host) logs nothing; the next one finds the rows
it wrote that no record covers and logs them as an ``"unlogged"`` item (``unlogged_item``):
their own time, from the first one's start to the last one's end, without the worker
start-ups and the case in flight that the kill took with it.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suites.rows.results import files_under, json_lines, stamped_at


def log_path(out: Path, host: str, device: str) -> Path:
    return out / "matrix" / host / f"costs-{device}.ndjson"


def append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, allow_nan=False, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every record of the given logs (or of the logs under the given folders, plain or
    gzipped as published/ stores them)."""
    records = []
    for path in paths:
        files = [path] if path.is_file() else files_under(path, "costs-*.ndjson") \
            if path.exists() else []
        for file in files:
            records.extend(json_lines(file))
    return records


@dataclass(frozen=True)
class ItemCost:
    """One suite × framework in one invocation (times in seconds)."""

    suite: str
    framework: str
    device: str
    device_name: str
    commit: str
    started_at: str
    wall_s: float
    worker_starts: int
    worker_start_s: float
    measured: int
    reused: int
    first_calls_s: float
    profile_s: float
    counters_s: float
    fingerprint_s: float
    # "done", "budget", "interrupted", "error", "unavailable"; "unlogged": rows that an
    # invocation killed before it could log them wrote (``unlogged_item``)
    stopped: str
    device_time_s: float = 0.0   # the device phase's device_time rows (GPU)
    phase: str = "all"    # the pass: "all" (CPU), "wall" or "device" (GPU)

    def record(self) -> dict[str, Any]:
        return {"kind": "item", **asdict(self)}


def rows_cost(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Where newly written rows' time went: first calls, profiles, counters, fingerprints,
    device time."""
    spent: dict[str, float] = defaultdict(float)
    for row in rows:
        timing = row.get("timing") or {}
        spent["first_calls_s"] += (timing.get("first_call_ms") or 0.0) / 1e3
        measure = row.get("measure")
        if measure in ("profile", "counters", "fingerprint", "device_time"):
            spent[f"{measure}_s"] += row.get("elapsed_s") or 0.0
    return {k: round(v, 3) for k, v in spent.items()}


UNLOGGED = "unlogged"
# Rows and records are stamped to the second: a row written in the second an item's record
# starts or ends is that invocation's.
STAMP_SLACK_S = 1.0


def logged_spans(records: Iterable[dict[str, Any]], suite: str, framework: str,
                 phase: str) -> list[tuple[float, float]]:
    """The wall-clock spans of one item's logged invocations."""
    spans = []
    for record in records:
        if record.get("kind") == "item" and record.get("suite") == suite \
                and record.get("framework") == framework and record.get("phase") == phase:
            start = stamped_at(record)
            if start is not None:
                spans.append((start - STAMP_SLACK_S,
                              start + float(record.get("wall_s") or 0.0) + STAMP_SLACK_S))
    return spans


def unlogged_item(records: Iterable[dict[str, Any]], rows: Iterable[dict[str, Any]],
                  suite: str, framework: str, device: str, device_name: str,
                  phase: str) -> ItemCost | None:
    """The cost of the measured ``rows`` of one item (suite, framework, pass) that no
    logged invocation wrote, or None where every row is covered. A row's ``started_at``
    is when it was written and its ``elapsed_s`` the worker's time since the row before
    (the job's build, and the previous job's release, counted into its first), so the
    rows span from the first one's start to the last one's end: that is the record's
    wall time."""
    spans = logged_spans(records, suite, framework, phase)
    unlogged = []
    for row in rows:
        written = stamped_at(row)
        if written is None or any(low <= written <= high for low, high in spans):
            continue
        unlogged.append((written, row))
    if not unlogged:
        return None
    unlogged.sort(key=lambda pair: pair[0])
    first_written, first = unlogged[0]
    began = first_written - float(first.get("elapsed_s") or 0.0)
    spent = rows_cost(row for _, row in unlogged)
    commit = ((first.get("env") or {}).get("dlbench_commit")) or ""
    return ItemCost(suite, framework, device, device_name, commit,
                    datetime.fromtimestamp(began, UTC).isoformat(timespec="seconds"),
                    round(unlogged[-1][0] - began, 3), 0, 0.0, len(unlogged), 0,
                    spent.get("first_calls_s", 0.0), spent.get("profile_s", 0.0),
                    spent.get("counters_s", 0.0), spent.get("fingerprint_s", 0.0), UNLOGGED,
                    spent.get("device_time_s", 0.0), phase)


def worker_start_s(records: Iterable[dict[str, Any]], framework: str, device_name: str) -> float | None:
    """The mean start-up of a framework's worker on this device model, from the log."""
    starts = [(r["worker_start_s"], r["worker_starts"]) for r in records
              if r.get("kind") == "item" and r.get("framework") == framework
              and r.get("device_name") == device_name and r.get("worker_starts")]
    count = sum(n for _, n in starts)
    return sum(s for s, _ in starts) / count if count else None


def truth_rate(records: Iterable[dict[str, Any]], device_name: str) -> float | None:
    """GFLOP per wall second the float64 references ran at on this host's kind."""
    done = [(r["gflop"], r["seconds"]) for r in records
            if r.get("kind") == "truth" and r.get("device_name") == device_name
            and r.get("seconds", 0) > 1.0]
    gflop, seconds = sum(g for g, _ in done), sum(s for _, s in done)
    return gflop / seconds if seconds else None


def minutes_table(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Minutes per suite (rows) and framework (columns), invocations added up, with the
    float64 truth and the total: (header, rows) for printing or a README table."""
    items = [r for r in records if r.get("kind") == "item"]
    frameworks = list(dict.fromkeys(r["framework"] for r in items))
    suites = list(dict.fromkeys(r["suite"] for r in items))
    cell: dict[tuple[str, str], float] = defaultdict(float)
    for r in items:
        cell[(r["suite"], r["framework"])] += r["wall_s"]
    header = ["suite", *frameworks, "all"]
    rows = []
    for suite in suites:
        values = [cell.get((suite, f)) for f in frameworks]
        rows.append([suite, *(f"{v / 60:.1f}" if v is not None else "—" for v in values),
                     f"{sum(v or 0 for v in values) / 60:.1f}"])
    truth = sum(r["seconds"] for r in records if r.get("kind") == "truth")
    total_items = sum(cell.values())
    rows.append(["float64 truth", *([""] * len(frameworks)), f"{truth / 60:.1f}"])
    rows.append(["total", *(f"{sum(cell[(s, f)] for s in suites) / 60:.1f}" for f in frameworks),
                 f"{(total_items + truth) / 60:.1f}"])
    return header, rows
