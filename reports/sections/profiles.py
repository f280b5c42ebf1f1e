"""Li et al. 2016's profiles (seed 003): Fig. 2, the share of one iteration's time per layer
type (conv, pool, ReLU, FC, concat) for AlexNet, GoogLeNet, VGG and Overfeat, and Fig. 4, the
most expensive kernels — here as tables, per device and hardware: one row per model and
setting with the percentage per layer type ("hotspot layers"), then each one's top 5 kernels
(framework operations where the profiler sees no device kernels, as on a CPU).

"profile" rows carry no timing: a profiler's overhead makes its times unfit to set beside the
timer's medians, so only the split of the profiled time is compared.
"""

from __future__ import annotations

import json

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import Setting, extras, label, records, setting_of
from reports.pipeline.naming import sort_key
from reports.pipeline.tidy import LAYER_TYPES
from reports.render.table import Cell, Table

PROFILE = "profile"
LAYER_COLUMNS = {"conv": "conv %", "pool": "pool %", "relu": "ReLU %", "fc": "FC %",
                 "concat": "concat %", "norm": "norm %", "other": "other %"}
TOP_KERNELS = 5          # Li et al. Fig. 4 names a handful of kernels per network
NAME_CHARS = 72          # GPU kernel names run to hundreds of characters; full name on hover


def profile_rows(frame: pd.DataFrame) -> list[dict]:
    return [r for r in records(frame) if r["measure"] == PROFILE]


def layer_shares(row: dict) -> dict[str, float]:
    """Percent of the profiled time per layer type; the shares sum to 100 (empty when the
    row profiled nothing)."""
    ms = {kind: row[f"profile_{kind}_ms"] for kind in LAYER_TYPES}
    total = sum(v for v in ms.values() if cells.is_num(v))
    if total <= 0:
        return {}
    return {kind: 100.0 * v / total if cells.is_num(v) else 0.0 for kind, v in ms.items()}


def _machines(rows: list[dict]) -> list[tuple[str, str]]:
    # GPU first: Li et al. profile GPU training.
    return sorted({(r["device"], r["hardware"]) for r in rows},
                  key=lambda k: (k[0] != "gpu", k[1]))


def _ordered(rows: list[dict]) -> list[tuple[dict, Setting]]:
    found = [(r, setting_of(r)) for r in rows]
    return sorted(found, key=lambda rs: (sort_key(rs[0]["model"]), rs[0]["batch"], rs[1]))


def _setting_name(s: Setting, extra: str) -> str:
    return label(s, extra, hardware=False)


def _share_cells(row: dict) -> tuple[Cell, ...]:
    """The layer-type percentages, the largest in bold (Li et al.: convolution dominates);
    a failed profile is one failure cell, with its reason."""
    if row["status"] != "ok":
        return (cells.failure_cell(row),) + (Cell(cells.MISSING, kind="muted"),) * (
            len(LAYER_TYPES) - 1)
    shares = layer_shares(row)
    if not shares:
        return (Cell(cells.MISSING, kind="muted", title="nothing profiled"),) * len(LAYER_TYPES)
    top = max(shares.values())
    return tuple(Cell(f"{shares[kind]:.1f}", title=f"{row[f'profile_{kind}_ms']:.4g} ms per "
                      "iteration", emphasis="bold" if shares[kind] == top else "")
                 for kind in LAYER_TYPES)


def _profiled_cell(row: dict) -> Cell:
    if row["status"] != "ok":
        return Cell(cells.MISSING, kind="muted")
    return Cell(cells.fmt_ms(row["profile_total_ms"]),
                title=f"per iteration, over {cells.fmt_count(row['profile_iterations'])} "
                      "profiled iterations")


def _beside(row: dict) -> str:
    """The framework's own profiler, where the kernel tracer gave the row (GPU)."""
    tool = row.get("framework_profile_tool") or ""
    return f"beside it (op names, in the row's framework_profile): {tool}" if tool else ""


def hotspot_tables(frame: pd.DataFrame) -> list[Table]:
    """Li et al. Fig. 2 as numbers: per device and hardware, the percentage of the profiled
    time per layer type, one row per model and setting."""
    rows = profile_rows(frame)
    out = []
    for device, hw in _machines(rows):
        part = _ordered([r for r in rows if (r["device"], r["hardware"]) == (device, hw)])
        extra = extras([s for _, s in part])
        body = tuple((Cell(r["model"]), Cell(str(r["batch"])), Cell(_setting_name(s, extra[s])),
                      *_share_cells(r), _profiled_cell(r), Cell(r["profile_measure"] or "—"),
                      Cell(r["profile_tool"] or "—", title=_beside(r))) for r, s in part)
        columns = ("Model", "Batch", "Setting", *LAYER_COLUMNS.values(),
                   "Profiled (ms/iter)", "Profiled", "Tool")
        out.append(Table(f"hotspots-{len(out)}",
                         f"Hotspot layers: share of profiled time per layer type, "
                         f"{device.upper()} {hw}", columns, body,
                         (False, True, False) + (True,) * (len(LAYER_TYPES) + 1) + (False,) * 2,
                         notes=("Li et al. Fig. 2: percent of one iteration's profiled time "
                                "per layer type (each row sums to 100; bold: the largest). "
                                "Operations are classified by name (suites/instruments/profiling.py); "
                                "norm = batch/local response normalisation; other = "
                                "element-wise work, softmax, loss, copies and fusions whose "
                                "name tells nothing. Profiled: gradient = a training "
                                "iteration without the optimizer update (forward + loss + "
                                "backward), forward = inference.",
                                "Profiled ms include the profiler's overhead: compare "
                                "shares here, times in the timed tables.",
                                "Tool 'CUPTI activity API': one kernel tracer for every "
                                "framework on a GPU, classifying kernels by name; fused or "
                                "generic element-wise kernels (XLA fusions, Eigen kernels) "
                                "count as other there (hover the tool for the framework's "
                                "own profiler, kept in the row).")))
    return out


def _kernels(row: dict) -> list[dict]:
    return json.loads(row["profile_top_kernels"] or "[]")[:TOP_KERNELS]


def _kernel_line(first: bool, row: dict, name: str, rank: int, kernel: dict) -> tuple[Cell, ...]:
    total = row["profile_total_ms"]
    share = (f"{100.0 * kernel['ms'] / total:.1f}" if cells.is_num(total) and total > 0
             else cells.MISSING)
    text = kernel["name"] if len(kernel["name"]) <= NAME_CHARS else (
        kernel["name"][:NAME_CHARS - 1] + "…")
    return (Cell(row["model"] if first else ""), Cell(str(row["batch"]) if first else ""),
            Cell(name if first else ""), Cell(str(rank)), Cell(text, title=kernel["name"]),
            Cell("GPU kernel" if row["profile_kernel_level"] else "framework op"),
            Cell(cells.fmt_ms(kernel["ms"])), Cell(f"{kernel['calls']:.3g}"), Cell(share))


def top_kernel_tables(frame: pd.DataFrame) -> list[Table]:
    """Li et al. Fig. 4 as numbers: per model and setting the most expensive kernels (or
    framework operations), ms per iteration and share of the profiled time."""
    rows = profile_rows(frame)
    out = []
    for device, hw in _machines(rows):
        part = _ordered([r for r in rows if (r["device"], r["hardware"]) == (device, hw)])
        extra = extras([s for _, s in part])
        body = []
        for r, s in part:
            name = _setting_name(s, extra[s])
            if r["status"] != "ok":
                body.append((Cell(r["model"]), Cell(str(r["batch"])), Cell(name), Cell(""),
                             cells.failure_cell(r), *(Cell(cells.MISSING, kind="muted"),) * 4))
                continue
            kernels = _kernels(r)
            if not kernels:
                body.append((Cell(r["model"]), Cell(str(r["batch"])), Cell(name), Cell(""),
                             Cell("no kernels recorded", kind="muted"),
                             *(Cell(cells.MISSING, kind="muted"),) * 4))
            for rank, kernel in enumerate(kernels, start=1):
                body.append(_kernel_line(rank == 1, r, name, rank, kernel))
        out.append(Table(f"top-kernels-{len(out)}",
                         f"Top kernels: the {TOP_KERNELS} most expensive per model and setting, "
                         f"{device.upper()} {hw}",
                         ("Model", "Batch", "Setting", "#", "Kernel or operation", "Kind",
                          "ms/iter", "Calls/iter", "% of profiled"), tuple(body),
                         (False, True, False, True, False, False, True, True, True),
                         notes=("Li et al. Fig. 4. Kind: 'GPU kernel' = device kernels as the "
                                "profiler timed them; 'framework op' = the framework's "
                                "operations (self time), where the profiler sees no device "
                                "kernels (CPU). % of profiled = ms per iteration ÷ the "
                                "profiled ms per iteration of the hotspot table.",)))
    return out
