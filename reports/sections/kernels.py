"""Kernel-level tables: Li et al. 2016's Fig. 6 (runtime and five hardware metrics of the
top kernels, per Table I configuration and framework) and Table II (registers per thread
and shared memory per block), from the ``counters`` rows (Nsight Compute, reduced in
``suites/instruments/ncu_metrics.py``); and the kernel tracer's check, per profile row, of the kernel
total against the timed median of the same measure.
"""

from __future__ import annotations

import math

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import Setting, by_setting, extras, label, records, setting_of
from reports.pipeline.naming import sort_key
from reports.render.table import Cell, Table
from suites.instruments.kernel_trace import TRACER_BAND, finite_ratio, tracer_reading

COUNTERS = "counters"
# Fig. 6's panels, bottom to top in the paper; gld/gst share one panel there.
FIG6_COLUMNS = (("achieved_occupancy", "Occupancy %"), ("warp_execution_efficiency", "Warp eff. %"),
                ("gld_efficiency", "gld eff. %"), ("gst_efficiency", "gst eff. %"),
                ("ipc", "IPC"), ("shared_efficiency", "Shared eff. %"))
TABLE2_COLUMNS = (("registers_per_thread", "Registers"),
                  ("shared_memory_per_block_kb", "Shared Memory (KB)"))
MAPPING_NOTE = (
    "Metrics: Nsight Compute's names for Li et al.'s nvprof metrics (suites/instruments/ncu_metrics.py): "
    "occupancy = sm__warps_active.avg.pct_of_peak_sustained_active; IPC = "
    "sm__inst_executed.avg.per_cycle_active (per SM); warp eff. = "
    "smsp__thread_inst_executed_per_inst_executed.ratio / 32; gld/gst eff. = "
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld/st.pct (32-byte sectors, "
    "not Kepler's 128-byte transactions); shared eff. = "
    "smsp__sass_average_data_bytes_per_wavefront_mem_shared.pct (cannot exceed 100%, "
    "nvprof's could).")
REDUCTION_NOTE = ("Each metric is the average over the top 10 kernels weighted by their "
                  "share of kernel time under ncu (Li et al. 4.C); kernels for which a "
                  "metric does not apply are left out of it.")


def counter_rows(frame: pd.DataFrame) -> list[dict]:
    return [r for r in records(frame) if r["measure"] == COUNTERS]


def _machines(rows: list[dict]) -> list[tuple[str, str, int]]:
    return sorted({(r["device"], r["hardware"], r["batch"]) for r in rows})


def _metric_cell(row: dict, key: str, digits: str = ".1f") -> Cell:
    value = row[f"counter_{key}"]
    if not cells.is_num(value):
        return Cell(cells.MISSING, kind="muted", title="no top kernel reported this metric")
    return Cell(format(value, digits))


def _runtime(timed: dict, measure: str) -> Cell:
    row = timed.get(measure)
    if row is None:
        return Cell(cells.MISSING, kind="muted", title=f"no {measure} row")
    if row["status"] != "ok":
        return cells.failure_cell(row)
    return cells.value_cell(row["median_ms"])


def _profiled_measure(row: dict) -> str:
    # What the counters row profiled: gradient, or forward for an inference engine.
    return row["counters_measure"] or ("forward" if row["framework"] == "ort" else "gradient")


def fig6_tables(frame: pd.DataFrame) -> list[Table]:
    """Fig. 6 in the paper's layout: per configuration (rows grouped by layer), each
    framework's runtime and the five metrics (six columns: gld and gst apart)."""
    rows = counter_rows(frame)
    everything = records(frame)
    out = []
    for device, hw, batch in _machines(rows):
        mine = [r for r in rows if (r["device"], r["hardware"], r["batch"]) == (device, hw, batch)]
        found = sorted(((r, setting_of(r)) for r in mine),
                       key=lambda rs: (sort_key(rs[0]["model"]), rs[1]))
        extra = extras([s for _, s in found])
        body = []
        for r, s in found:
            timed = by_setting([t for t in everything if t["model"] == r["model"]
                                and t["batch"] == r["batch"]]).get(s, {})
            measure = _profiled_measure(r)
            head = (Cell(r["model"]), Cell(label(s, extra[s], hardware=False)), Cell(measure))
            if r["status"] != "ok":
                body.append((*head, _runtime(timed, measure), cells.failure_cell(r),
                             *(Cell(cells.MISSING, kind="muted"),) * (len(FIG6_COLUMNS) - 1)))
                continue
            body.append((*head, _runtime(timed, measure),
                         *(_metric_cell(r, key, ".2f" if key == "ipc" else ".1f")
                           for key, _ in FIG6_COLUMNS)))
        out.append(Table(f"fig6-{len(out)}", f"Fig. 6: runtime and GPU metrics of the top "
                         f"kernels, {device.upper()} {hw}, batch {batch}",
                         ("Layer", "Setting", "Measure", "Runtime (ms)",
                          *(name for _, name in FIG6_COLUMNS)), tuple(body),
                         (False, False, False) + (True,) * (len(FIG6_COLUMNS) + 1),
                         notes=("Li et al. 2016 Fig. 6 (Tesla K40c, nvprof): runtime, "
                                "achieved occupancy, warp execution efficiency, global "
                                "load/store efficiency, IPC and shared memory efficiency per "
                                "Table I configuration. Runtime: the timed median of the "
                                "measure (not the ncu run, which replays every kernel).",
                                REDUCTION_NOTE, MAPPING_NOTE)))
    return out


def table2_tables(frame: pd.DataFrame) -> list[Table]:
    """Table II: per framework, registers per thread and shared memory per block of its top
    kernels (time-weighted), the mean over the profiled configurations and their range."""
    rows = [r for r in counter_rows(frame) if r["status"] == "ok"]
    out = []
    for device, hw in sorted({(r["device"], r["hardware"]) for r in rows}):
        groups: dict[Setting, list[dict]] = {}
        for r in rows:
            if (r["device"], r["hardware"]) == (device, hw):
                groups.setdefault(setting_of(r), []).append(r)
        extra = extras(list(groups))
        body = []
        for s in sorted(groups):
            mine = groups[s]
            line = [Cell(label(s, extra[s], hardware=False))]
            for key, _ in TABLE2_COLUMNS:
                values = [r[f"counter_{key}"] for r in mine if cells.is_num(r[f"counter_{key}"])]
                if not values:
                    line.append(Cell(cells.MISSING, kind="muted"))
                    continue
                mean = sum(values) / len(values)
                line.append(Cell(f"{mean:.0f}" if key == "registers_per_thread" else f"{mean:.1f}",
                                 title=f"{min(values):.4g} to {max(values):.4g} over "
                                       f"{len(values)} configuration(s)"))
            models = sorted({r["model"] for r in mine}, key=sort_key)
            body.append((*line, Cell(", ".join(models))))
        out.append(Table(f"table2-{len(out)}", f"Table II: registers per thread and shared "
                         f"memory per block, {device.upper()} {hw}",
                         ("Implementation", *(name for _, name in TABLE2_COLUMNS),
                          "Configurations"), tuple(body), (False, True, True, False),
                         notes=("Li et al. 2016 Table II. Per framework: the time-weighted "
                                "average over the top kernels of each configuration "
                                "(launch__registers_per_thread; launch__shared_mem_per_block_"
                                "static + _dynamic), then the mean over the configurations "
                                "(hover: the range).",)))
    if out:
        out.append(table2_published())
    return out


# Li et al. 2016 Table II as published (Tesla K40c, nvprof; seed 003): registers per
# thread and shared memory per block (KB) of each implementation's top kernels.
LI_TABLE2 = (("Caffe", 86, 8.5), ("cuDNN", 80, 8.4), ("Torch-cunn", 84, 8.1),
             ("Theano-CorrMM", 72, 7.0), ("cuda-convnet2", 116, 16.0), ("fbfft", 106, 10.0),
             ("Theano-fft", 2, 4.5))


def table2_published() -> Table:
    return Table("table2-hist", "Historical (published, not measured here): Li et al. 2016 "
                 "Table II, Tesla K40c", ("Implementation", "Registers", "Shared Memory (KB)"),
                 tuple((Cell(name, kind="hist"), Cell(str(registers), kind="hist"),
                        Cell(f"{smem:g}", kind="hist")) for name, registers, smem in LI_TABLE2),
                 (False, True, True),
                 notes=("As published (nvprof on a Tesla K40c, 2016 software).",))


def _ratio_cell(ratio: float) -> Cell:
    if not cells.is_num(ratio):
        return Cell(cells.MISSING)
    return Cell(f"{ratio:.2f}", emphasis="" if abs(ratio - 1) <= TRACER_BAND else "bold")


def tracer_check_table(frame: pd.DataFrame) -> Table | None:
    """Per kernel-tracer profile row: the per-iteration kernel total beside the timed
    median of the same measure and setting, and the host time of the traced iterations."""
    everything = records(frame)
    traced = [r for r in everything if r["measure"] == "profile" and r["status"] == "ok"
              and r["profile_tool"].startswith("CUPTI")]
    if not traced:
        return None
    timed = {(r["model"], r["batch"], r["measure"], setting_of(r)): r for r in everything
             if r["status"] == "ok" and cells.is_num(r.get("median_ms", math.nan))}
    extra = extras([setting_of(r) for r in traced])
    body = []
    for r in sorted(traced, key=lambda r: (r["hardware"], sort_key(r["model"]), r["batch"],
                                           setting_of(r))):
        s = setting_of(r)
        match = timed.get((r["model"], r["batch"], r["profile_measure"], s))
        median = match["median_ms"] if match else math.nan
        device = match.get("device_median_ms", math.nan) if match else math.nan
        kernels = r["profile_total_ms"]
        busy = r["profile_busy_ms"]
        body.append((Cell(r["hardware"]), Cell(r["model"]), Cell(str(r["batch"])),
                     Cell(label(s, extra[s], hardware=False)), Cell(r["profile_measure"]),
                     cells.value_cell(kernels), cells.value_cell(busy),
                     cells.value_cell(r["profile_wall_ms"]),
                     cells.value_cell(median), cells.value_cell(device),
                     _ratio_cell(finite_ratio(busy, median)),
                     _ratio_cell(finite_ratio(busy, device)),
                     Cell(tracer_reading(busy, r["profile_wall_ms"], median, device))))
    return Table("tracer-check", "Kernel tracer: per-iteration kernel time against the "
                 "timed median", ("Hardware", "Model", "Batch", "Setting", "Measure",
                                  "Kernels summed (ms/iter)", "Busy (ms/iter)",
                                  "Traced wall (ms/iter)", "Timed median (ms)",
                                  "Device median (ms)", "Busy ÷ median", "Busy ÷ device",
                                  "Reading"), tuple(body),
                 (False, False, True, False, False, True, True, True, True, True, True, True,
                  False),
                 notes=("Kernels summed: the CUPTI kernel records per traced iteration, "
                        "each counted once (suites/instruments/kernel_trace.py); busy: the same "
                        "records with overlaps merged, the GPU's busy time. A sum above "
                        "the busy time is kernels that ran at the same time on concurrent "
                        "streams, not double counting: the busy time is what the timed "
                        "median is set against. Traced wall: host time of the same "
                        "iterations, synced at both ends; timed median: the measure's row "
                        "from the timer; device median: the same row's device time, timed "
                        "apart from the trace (CUDA events, or the device phase). Busy ÷ "
                        "median below 1 is time the GPU spent idle inside an iteration "
                        "(launch gaps, host work, synchronisation); busy ÷ device should "
                        "be 1 whatever the idle time. Bold: more than 10% away from 1. The "
                        "reading says why: busy time matching the device median but not "
                        "the wall median is idle time; busy above the device median is "
                        "other kernels than the timed samples' (a framework that autotunes "
                        "again in another process), below it kernels missing from the "
                        "trace.",))

