"""How each timing was taken: the independent repetitions behind its median and interval,
the device's own time beside the host's wall time, and the GPU's clocks, power and
temperature while it was sampled (suites/stats/repetitions.py, device_state.py, device_time.py).
A clock below the GPU's maximum, or a wall time far above the device time (launch-bound
work), is visible here row by row."""

from __future__ import annotations

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import label, records, setting_of
from reports.pipeline.naming import sort_key
from reports.render.table import Cell, Table


def _number(value, digits: str = ".0f") -> Cell:
    return Cell(format(value, digits)) if cells.is_num(value) else Cell(cells.MISSING,
                                                                         kind="muted")


def _device_cell(row) -> Cell:
    if not cells.is_num(row["device_median_ms"]):
        return Cell(cells.MISSING, kind="muted", title=row["device_time_reason"] or "")
    return Cell(cells.fmt_ms(row["device_median_ms"]), title=row["device_time_kind"] or "")


def _span_cell(row) -> Cell:
    span = row.get("device_span_median_ms")
    if not cells.is_num(span):
        return Cell(cells.MISSING, kind="muted")
    return Cell(cells.fmt_ms(span), title="first kernel start to last kernel end, per "
                                          "iteration; span − device = the GPU idle between "
                                          "kernels")


def _host_overhead(row) -> Cell:
    """The wall time the device's kernels do not account for (launches and the host's own
    work: the row's host overhead, or wall − device), in ms and as a share of the wall."""
    wall, overhead = row["median_ms"], row.get("host_overhead_ms")
    if cells.device_above_wall(row):
        return Cell(f"{cells.MISSING} {cells.DEVICE_ABOVE}", kind="muted",
                    title=cells.DEVICE_ABOVE_NOTE)
    if not (cells.is_num(wall) and cells.is_num(overhead)
            and cells.is_num(row["device_median_ms"])) or wall <= 0:
        return Cell(cells.MISSING, kind="muted")
    overhead = max(0.0, overhead)
    return Cell(f"{cells.fmt_ms(overhead)} ({overhead / wall:.0%})",
                title="wall − device time; 0 where the device time, timed in blocks of its "
                      "own, comes out above the wall median")


def _clock_cell(row) -> Cell:
    low, median = row["gpu_sm_clock_mhz_min"], row["gpu_sm_clock_mhz_median"]
    if not cells.is_num(median):
        return Cell(cells.MISSING, kind="muted", title=row["gpu_state_reason"] or "")
    top = row["gpu_sm_clock_max_mhz"]
    return Cell(f"{median:.0f} (min {low:.0f})",
                title=f"maximum {top:.0f} MHz" if cells.is_num(top) else "")


def conditions_table(frame: pd.DataFrame) -> Table | None:
    rows = [r for r in records(frame) if r["status"] == "ok"
            and cells.is_num(r.get("repetitions")) and cells.is_num(r["median_ms"])]
    if not rows:
        return None
    gpu = any(r["device"] == "gpu" for r in rows)
    # The span column only where some row has one (rows before it was recorded: none).
    span = gpu and any(cells.is_num(r.get("device_span_median_ms")) for r in rows)
    rows.sort(key=lambda r: (label(setting_of(r)), sort_key(r["model"]), r["batch"],
                             r["measure"]))
    body = []
    for r in rows:
        base = (Cell(r["model"]), Cell(str(r["batch"])), Cell(r["measure"]),
                Cell(label(setting_of(r))), Cell(f"{int(r['repetitions'])}"),
                cells.time_cell(r))
        extra = (_device_cell(r), *((_span_cell(r),) if span else ()), _host_overhead(r),
                 _clock_cell(r), _number(r["gpu_mem_clock_mhz_median"]),
                 _number(r["gpu_power_w_median"]), _number(r["gpu_temperature_c_max"])
                 ) if gpu else ()
        body.append(base + extra)
    columns = ("Model", "Batch", "Measure", "Setting", "Repetitions", "Wall time (ms)",
               *(("Device time (ms)", *(("Device span (ms)",) if span else ()),
                  "Host overhead (ms)", "SM clock (MHz)", "Memory clock (MHz)", "Power (W)",
                  "Max temp (°C)") if gpu else ()))
    notes = ["Repetitions = independent timing runs of the case (each with its own warm-up "
             "and inner-loop count, interleaved with the job's other measures); the median "
             "is theirs; the interval is a nominal 95% prediction interval of that median, which "
             "assumes the repetitions exchangeable (hover: each row's own label; its measured "
             "coverage: docs/methodology.md#intervals)."]
    if gpu:
        notes.append("Device time = the kernels' own (busy) time per iteration (how it "
                     "was taken: hover)"
                     + ("; Device span = first kernel start to last kernel end" if span
                        else "")
                     + "; Host overhead = wall − device time (launches and the host's own "
                     "work), with its share of the wall time. Clocks, power and temperature "
                     "are NVML readings taken while the case was sampled.")
    return Table("conditions", "Measurement conditions", columns, tuple(body),
                 (False, True, False, False, True, True,
                  *((True,) * (7 if span else 6) if gpu else ())),
                 notes=tuple(notes))
