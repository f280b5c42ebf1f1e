"""Result rows: one JSON line per (case, measure), appended and flushed as each ends.

A row is self-describing: the case key and settings, the environment, the raw samples
with their statistics, parameter and FLOP counts, the equivalence fingerprint, and a
status with its reason. The report stage reads nothing else.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1

Status = Literal["ok", "failed", "unsupported", "oom"]
# Every job also writes a "fingerprint" row: outputs, loss and gradient norms for the
# cross-framework equivalence check, taken after the timings so first calls stay cold.
FINGERPRINT = "fingerprint"


@dataclass(frozen=True)
class Settings:
    """Everything that must be equal for two timings to be compared or averaged."""

    framework: str
    device: str                 # "cpu" or "gpu"
    precision: str              # "fp32" (strict, TF32 off), "tf32" or "bf16"
    variant: str                # the framework's execution mode, e.g. "eager", "compile"
    threads: int                # CPU intra-op threads (host threads for a GPU run)
    interop_threads: int
    execution: str = ""         # what the variant means for this framework, in words
    # "cold": a fresh process with an empty persistent compilation cache; "warm": a fresh
    # process with the cache the cold run filled (Bahrampour et al. Table 8); "": not managed.
    compile_cache: str = ""


@dataclass(frozen=True)
class CaseKey:
    suite: str
    model: str
    batch: int
    measure: str
    settings: Settings

    def id(self) -> str:
        s = self.settings
        cache = f"/cache-{s.compile_cache}" if s.compile_cache else ""
        return (f"{self.suite}/{s.framework}/{s.device}/{self.model}/b{self.batch}/"
                f"{self.measure}/{s.precision}/{s.variant}/t{s.threads}{cache}")


@dataclass(frozen=True)
class Row:
    key: CaseKey
    status: Status
    reason: str = ""
    timing: dict[str, Any] | None = None        # milliseconds; see timing_fields()
    memory: dict[str, Any] | None = None        # {"peak_bytes": int, "kind": "allocator"|"rss"}
    model_info: dict[str, Any] = field(default_factory=dict)  # params, flops, input shape
    fingerprint: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None       # adapters.base.Profile, for "profile" rows
    # "profile" rows on a GPU: the framework's own profiler beside the kernel tracer's
    # ``profile`` (suites/kernel_profile.py); "counters" rows: Nsight Compute's metrics
    # reduced as Li et al. did (suites/counters.py).
    framework_profile: dict[str, Any] | None = None
    counters: dict[str, Any] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        key = data.pop("key")
        settings = key.pop("settings")
        return {"schema": SCHEMA_VERSION, "case_id": self.key.id(), **key,
                "settings": settings, **data}


def timing_fields(timing) -> dict[str, Any]:
    """A ``suites.timer.Timing`` as the row's ``timing`` object, in milliseconds."""
    ms = 1e3
    return {
        "first_call_ms": timing.first_call_s * ms,
        "median_ms": timing.median_s * ms,
        "iqr_ms": timing.iqr_s * ms,
        "ci_low_ms": timing.ci_low_s * ms,
        "ci_high_ms": timing.ci_high_s * ms,
        "mean_ms": timing.mean_s * ms,
        "min_ms": timing.min_s * ms,
        "samples": len(timing.samples_s),
        "samples_ms": [s * ms for s in timing.samples_s],
        "inner_loops": timing.inner_loops,
        "unstable": timing.unstable,
        "unstable_reason": timing.unstable_reason,
        **timing.extra,
    }


class ResultsFile:
    """Appends rows to a JSONL file, flushing and fsyncing each, so a crash or Ctrl-C
    loses only the case in flight."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: Row) -> None:
        line = json.dumps(row.to_json(), sort_keys=False, allow_nan=False, default=str)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def finished_case_ids(self) -> set[str]:
        """Case ids already recorded, for ``--resume``; a torn last line is ignored."""
        done: set[str] = set()
        if not self.path.exists():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["case_id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        return done
