"""Li et al. 2016's nvprof metrics and events (Fig. 6, Table II) under their current
Nsight Compute names, and the reduction Li et al. describe (their 4.C): profile the top
kernels, then "take a weighted average of those top kernels ... The weight of each kernel
is determined by the percentage of its runtime in the whole implementation".

Plain data and arithmetic on parsed rows: the ncu process itself is ``suites/instruments/counters.py``.

Mapping (nvprof → ncu; NVIDIA's "Nsight Compute CLI: nvprof metric comparison" table) and
its caveats:

* achieved_occupancy → ``sm__warps_active.avg.pct_of_peak_sustained_active`` (same
  definition: active warps per active cycle over the SM's maximum).
* ipc → ``sm__inst_executed.avg.per_cycle_active``: warp instructions per active cycle of
  one SM, as nvprof's. On Hopper an SM issues from 4 sub-partitions (Kepler's K40c from 4
  schedulers with dual issue), so the ceilings differ (4 here, up to 8 on a K40c).
* warp_execution_efficiency → ``smsp__thread_inst_executed_per_inst_executed.ratio`` / 32
  × 100: the ratio is active threads per executed warp instruction.
* gld_efficiency / gst_efficiency →
  ``smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct`` / ``_st.pct``: bytes
  requested over bytes moved in 32-byte sectors. nvprof on Kepler counted 128-byte L1
  transactions for cached loads, so old and new percentages are not on one scale.
* shared_efficiency → ``smsp__sass_average_data_bytes_per_wavefront_mem_shared.pct``:
  requested over transferred shared-memory bytes per wavefront. nvprof's Kepler figure
  could exceed 100% (Li et al. report cuDNN "over 130%": 64-bit bank mode moving two
  32-bit words per bank per cycle); the wavefront-based one cannot.
* Table II's registers per thread → ``launch__registers_per_thread``; shared memory per
  block → ``launch__shared_mem_per_block_static`` + ``launch__shared_mem_per_block_dynamic``
  (bytes; reported in KB as Li's table).
* Weights: ``gpu__time_duration.sum`` of each kernel under ncu. ncu serialises kernels,
  flushes caches between replay passes and locks clocks to base by default, so these
  durations serve as weights, never as the runtime panel, which comes from the timed
  ``forward``/``gradient`` rows.

A kernel for which a metric does not apply (no global stores: ncu prints "n/a") is left
out of that metric's average, and the row records the share of the weight that had a
value; a kernel that issues such instructions with zero efficiency counts as zero, as in
Li et al. (cuDNN's kernels "use little global memory ... is 0%").
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

TOP_KERNELS = 10
TIME = "gpu__time_duration.sum"
KERNEL_NAME = "Kernel Name"
WARP_SIZE = 32


@dataclass(frozen=True)
class Metric:
    key: str            # Li et al.'s nvprof name
    label: str
    unit: str
    ncu: tuple[str, ...]    # Nsight Compute metrics it is computed from
    scale: float = 1.0      # applied to the sum of the ncu metrics

    def value(self, row: dict[str, float | None]) -> float | None:
        parts = [row.get(name) for name in self.ncu]
        if any(p is None for p in parts):
            return None
        return sum(parts) * self.scale


# Fig. 6's five panels (six metrics: global load and store share a panel).
FIG6 = (
    Metric("achieved_occupancy", "achieved occupancy", "%",
           ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    Metric("ipc", "IPC", "instructions/cycle", ("sm__inst_executed.avg.per_cycle_active",)),
    Metric("warp_execution_efficiency", "warp execution efficiency", "%",
           ("smsp__thread_inst_executed_per_inst_executed.ratio",), 100.0 / WARP_SIZE),
    Metric("gld_efficiency", "global load efficiency", "%",
           ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",)),
    Metric("gst_efficiency", "global store efficiency", "%",
           ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",)),
    Metric("shared_efficiency", "shared memory efficiency", "%",
           ("smsp__sass_average_data_bytes_per_wavefront_mem_shared.pct",)),
)
# Table II's two events.
TABLE2 = (
    Metric("registers_per_thread", "registers per thread", "registers",
           ("launch__registers_per_thread",)),
    Metric("shared_memory_per_block_kb", "shared memory per block", "KB",
           ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"),
           1.0 / 1024),
)
METRICS = FIG6 + TABLE2


def ncu_metric_names() -> list[str]:
    names = [TIME]
    for metric in METRICS:
        names.extend(n for n in metric.ncu if n not in names)
    return names


@dataclass(frozen=True)
class KernelCounters:
    """One profiled kernel launch: its name, duration under ncu (ns) and raw metrics."""

    name: str
    duration_ns: float
    values: dict[str, float | None]


_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
       "second": 1e9, "s": 1e9}


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[KernelCounters]:
    """``ncu --csv --page raw`` output: a header row, a units row, one row per kernel.
    Lines before the header (ncu's own ``==PROF==`` messages) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    rows = list(reader)
    units: dict[str, str] = {}
    if rows and rows[0] and rows[0][0] == "":
        units = dict(zip(header, rows.pop(0), strict=False))
    kernels = []
    for fields in rows:
        if len(fields) != len(header):
            continue
        row = dict(zip(header, fields, strict=True))
        duration = _number(row.get(TIME, ""))
        if duration is None:
            continue
        duration *= _NS.get(units.get(TIME, "nsecond"), 1.0)
        values = {name: _number(row[name]) for name in header
                  if name in {n for m in METRICS for n in m.ncu}}
        kernels.append(KernelCounters(row[KERNEL_NAME], duration, values))
    return kernels


def reduce_counters(kernels: Iterable[KernelCounters], iterations: int,
                    top: int = TOP_KERNELS) -> dict:
    """Li et al.'s estimate: each metric averaged over the launches of the ``top`` kernels
    (by total time), weighted by time. Returns plain data for the row."""
    kernels = list(kernels)
    if not kernels:
        raise ValueError("no profiled kernels")
    totals: dict[str, float] = defaultdict(float)
    for k in kernels:
        totals[k.name] += k.duration_ns
    ranked = sorted(totals, key=lambda name: -totals[name])[:top]
    chosen = set(ranked)
    all_ns = sum(totals.values())
    top_ns = sum(totals[name] for name in ranked)
    launches = [k for k in kernels if k.name in chosen]
    metrics = {}
    for metric in METRICS:
        weighted, weight = 0.0, 0.0
        for k in launches:
            value = metric.value(k.values)
            if value is None or math.isnan(value):
                continue
            weighted += value * k.duration_ns
            weight += k.duration_ns
        metrics[metric.key] = {
            "value": weighted / weight if weight else None, "unit": metric.unit,
            "label": metric.label, "ncu": list(metric.ncu),
            "weight_covered": weight / top_ns if top_ns else 0.0}
    return {
        "iterations": iterations,
        "launches": len(kernels),
        "top_kernels": [{"name": name, "share": totals[name] / all_ns,
                         "ms_under_ncu": totals[name] / 1e6 / iterations} for name in ranked],
        "top_share": top_ns / all_ns,
        "metrics": metrics,
    }
