"""Data-parallel scaling (``python -m parallel``): the scaling table and the figure of
efficiency against N per framework, read from the rows' ``scaling`` objects.

Efficiency: weak scaling (fixed per-device batch b) t₁(b) / t_N(b); strong scaling (fixed
global batch B) t₁(B) / (N · t_N(B/N)), against the same framework's one-device step on
the same engine. Communication share: the part of the step the gradient all-reduce adds
(1 − step without all-reduce / step with it): exposed communication, not what overlaps
with the backward pass. NCCL kernels: their device time per step from CUPTI's kernel
records and the part that ran beside compute kernels on the same GPU
(``parallel/communication.py``): the measured reason a step scales below 100%.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from reports.pipeline.load import Loaded  # noqa: E402
from reports.render.plots import Plot, _png, _safe  # noqa: E402
from reports.render.table import Cell, Table  # noqa: E402
from reports.sections.scaling_loss import EXPLAIN_BELOW, StepLoss, below_target, trace_problem  # noqa: E402

MEASURE = "data_parallel"


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row of each data-parallel case (reruns keep the last)."""
    latest = {row.get("case_id") or id(row): row for row in rows
              if row.get("measure") == MEASURE and isinstance(row.get("scaling"), dict)}
    return list(latest.values())


def scaling_rows(loaded: Loaded) -> list[dict[str, Any]]:
    """The latest row of each data-parallel case, in table order."""
    return sorted(latest_rows([raw.data for raw in loaded.rows]), key=lambda r: (
        r["settings"]["framework"], r["settings"]["device"], r["settings"]["precision"],
        r["model"], r["scaling"].get("mode", ""), r["scaling"].get("base_batch", 0),
        r["scaling"].get("devices", 0)))


def _hardware(row: dict[str, Any]) -> str:
    env = row.get("env") or {}
    if row["settings"]["device"] == "gpu":
        return env.get("gpu_model") or "GPU"
    return env.get("cpu_model") or "CPU"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _kernels(row: dict[str, Any]) -> str:
    """NCCL kernel ms per step (share of the step), and how much of it overlapped compute
    (rows traced before the overlap was measured give the total only)."""
    kernels = row["scaling"].get("communication_kernels")
    median_ms = (row.get("timing") or {}).get("median_ms")
    if not kernels or not median_ms:
        return "—"
    refused = trace_problem(row)
    if refused:
        return refused
    ms = kernels["nccl_kernel_ms_per_step"]
    text = f"{ms:.2f} ms ({ms / median_ms:.0%})"
    overlap = kernels.get("overlap_share")
    if overlap is not None:
        text += f", {overlap:.0%} overlapped"
    return text


def scaling_table(rows: list[dict[str, Any]]) -> Table | None:
    if not rows:
        return None
    body = []
    for row in rows:
        s, timing = row["scaling"], row.get("timing") or {}
        ok = row["status"] == "ok"
        step = (f"{timing['median_ms']:.2f} ({timing['ci_low_ms']:.2f}–"
                f"{timing['ci_high_ms']:.2f})") if ok else row["status"]
        body.append((
            Cell(row["settings"]["framework"]), Cell(_hardware(row)),
            Cell(row["settings"]["precision"]), Cell(row["model"]),
            Cell(s.get("mode", "")), Cell(str(s.get("devices", ""))),
            Cell(str(s.get("per_device_batch", ""))), Cell(str(s.get("global_batch", ""))),
            Cell(s.get("engine") or "—"), Cell(s.get("backend") or "—"),
            Cell(step, kind="" if ok else "fail", title=row.get("reason", "")),
            Cell(f"{s['images_per_s']:.1f}" if ok and s.get("images_per_s") else "—"),
            Cell(percent(s.get("efficiency")) if ok else "—"),
            Cell(percent(s.get("communication_share")) if ok else "—"),
            Cell(_kernels(row),
                 title=s.get("communication_kernels_reason") or ""),
        ))
    return Table("scaling", "Data-parallel scaling",
                 ("Framework", "Hardware", "Precision", "Model", "Mode", "N", "Batch/device",
                  "Global batch", "Engine", "Backend", "Step ms (95% CI)", "Images/s",
                  "Efficiency", "Comm. share", "NCCL kernels"), tuple(body),
                 (False,) * 5 + (True,) * 3 + (False, False) + (True,) * 5,
                 notes=("Step: forward, loss, backward and gradient all-reduce, no optimizer "
                        "update (ONNX Runtime: one forward pass per session).",
                        "Efficiency: weak t₁(b)/t_N(b); strong t₁(B)/(N·t_N(B/N)), against the "
                        "same framework's one-device step.",
                        "Comm. share: 1 − (step without the all-reduce)/(step): the exposed "
                        "communication time.",
                        "NCCL kernels: their device time per step (share of the step) from "
                        "CUPTI's kernel records, and the part of it that ran while a compute "
                        "kernel ran on the same GPU (overlapped); the rest is exposed. NCCL "
                        "kernels include time spent waiting for the slowest GPU."))


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


LOSS_NOTES = (
    "Ideal step: the one-device step t₁ (weak) or t₁/N (strong). Lost = step − ideal.",
    "Timed split: all-reduce = step − the same step without the all-reduce; per-device "
    "step = step without the all-reduce − ideal (work that does not shrink with the shard).",
    "CUPTI split of the traced steps, each against the one-device step's own figure scaled "
    "like the ideal: GPU idle = more time with no kernel running (launch gaps, host work); "
    "compute = more compute-kernel time; exposed NCCL = NCCL kernel time no compute kernel "
    "hid. The three add up to the traced step minus the ideal traced step.")


def batch_label(scaling: dict[str, Any]) -> str:
    """The batch a case keeps fixed: per GPU (weak scaling) or in all (strong)."""
    batch = scaling["base_batch"]
    return f"{batch}/GPU" if scaling["mode"] == "weak" else f"{batch} in all"


def _loss_cells(row: dict[str, Any], loss: StepLoss) -> tuple[str, ...]:
    s = row["scaling"]
    return (row["settings"]["framework"], _hardware(row), row["settings"]["precision"],
            row["model"], s["mode"], batch_label(s), str(s["devices"]), percent(loss.efficiency),
            f"{loss.step_ms:.2f}", f"{loss.ideal_ms:.2f}", f"{loss.lost_ms:+.2f}",
            _ms(loss.allreduce_ms), _ms(loss.per_device_ms), _ms(loss.idle_ms),
            _ms(loss.compute_ms), _ms(loss.exposed_nccl_ms), loss.cause)


LOSS_HEADERS = ("Framework", "Hardware", "Precision", "Model", "Mode", "Batch", "N",
                "Efficiency", "Step ms", "Ideal ms", "Lost ms", "All-reduce",
                "Per-device step", "GPU idle", "Compute", "Exposed NCCL", "Largest part")


def loss_table(rows: list[dict[str, Any]]) -> Table | None:
    """The cases below 90% and where their lost time goes (reports/sections/scaling_loss.py)."""
    explained = below_target(rows)
    if not explained:
        return None
    traced = LOSS_HEADERS.index("GPU idle")   # the CUPTI split's cells carry its note
    body = tuple(tuple(Cell(text, title=loss.trace_note if index >= traced else "")
                       for index, text in enumerate(_loss_cells(row, loss)))
                 for row, loss in explained)
    return Table("scaling-loss", f"Below {EXPLAIN_BELOW:.0%}: where the step's time goes",
                 LOSS_HEADERS, body, (False,) * 7 + (True,) * 9 + (False,), notes=LOSS_NOTES)


def below_count(rows: list[dict[str, Any]]) -> int:
    """How many GPU cases fall below the target, for a published folder's README (their
    split is the report's 'Below 90%' table)."""
    return len(below_target([r for r in latest_rows(rows) if r["settings"]["device"] == "gpu"]))


def interconnect_lines(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for row in rows:
        env = row.get("env") or {}
        link = env.get("interconnect")
        host = env.get("host", "?")
        if row["settings"]["device"] != "gpu":
            seen.setdefault(host + " (cpu)", f"{host}: CPU run, no GPU interconnect (null).")
        elif link:
            pairs = ", ".join(f"{k}: {v}" for k, v in sorted(link.get("links", {}).items()))
            seen[host] = f"{host}: GPU interconnect from {link.get('source')}: {pairs or '—'}."
        else:
            seen.setdefault(host, f"{host}: GPU interconnect not reported (no nvidia-smi).")
    return tuple(seen.values())


def _host(row: dict[str, Any]) -> str:
    return (row.get("env") or {}).get("host") or "?"


# A marker per host: a run beside the reference data (``python -m reports results
# published/<folder>``) draws both hosts' curves in one panel, told apart by marker.
HOST_MARKERS = ("o", "s", "^", "D", "v", "P")


def efficiency_plot(rows: list[dict[str, Any]]) -> Plot | None:
    ok = [r for r in rows if r["status"] == "ok" and r["scaling"].get("efficiency") is not None]
    frameworks = sorted({(r["settings"]["framework"], r["settings"]["device"]) for r in ok})
    if not frameworks:
        return None
    fig, axes = plt.subplots(1, len(frameworks), figsize=(4.2 * len(frameworks), 3.4),
                             squeeze=False, sharey=True)
    # One colour per case (model, mode, batch) in every panel, so frameworks compare at a
    # glance; precision is the line style, the host the marker.
    cases = sorted({(r["model"], r["scaling"]["mode"], r["scaling"]["base_batch"]) for r in ok})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {case: palette[i % len(palette)] for i, case in enumerate(cases)}
    hosts = sorted({_host(r) for r in ok})
    marker = {host: HOST_MARKERS[i % len(HOST_MARKERS)] for i, host in enumerate(hosts)}
    drawn: set[tuple] = set()   # the cases with a line in some panel
    for ax, (framework, device) in zip(axes[0], frameworks):
        # Keyed by (model, mode, batch, precision, host): one line per run of a case.
        lines: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
        for r in ok:
            s = r["scaling"]
            if (r["settings"]["framework"], r["settings"]["device"]) != (framework, device):
                continue
            precision = r["settings"]["precision"]
            if s["devices"] == 1:
                # One-device baseline: the start of both modes' lines at this batch.
                for mode in ("weak", "strong"):
                    lines[(r["model"], mode, s["base_batch"], precision, _host(r))].append(
                        (1, 1.0))
                continue
            lines[(r["model"], s["mode"], s["base_batch"], precision, _host(r))].append(
                (s["devices"], s["efficiency"]))
        for key, points in sorted(lines.items()):
            # A baseline alone (the mode it was set down for has no N > 1 row) is no line.
            if not any(n > 1 for n, _ in points):
                continue
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker[key[4]],
                    color=colour.get(key[:3], "black"), ls="--" if key[3] == "bf16" else "-")
            drawn.add(key[:3])
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.axhline(0.9, color="grey", lw=0.8, ls="--")
        ax.set_title(_safe(f"{framework} ({device})"), fontsize=9)
        ax.set_xlabel("devices N")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0][0].set_ylabel("scaling efficiency")
    # One legend for the figure, below the panels: a colour per case, a style per precision
    # and, with several hosts, a marker per host (a legend per panel listed up to 14 lines
    # over the curves it named).
    handles = [Line2D([], [], color=colour[case], lw=2,
                      label=_safe(f"{case[0]} {case[1]} b{case[2]}")) for case in sorted(drawn)]
    handles += [Line2D([], [], color="black", ls="-", label="fp32"),
                Line2D([], [], color="black", ls="--", label="bf16")]
    if len(hosts) > 1:
        handles += [Line2D([], [], color="black", ls="", marker=marker[host],
                           label=_safe(host)) for host in hosts]
    columns = min(len(handles), 5)
    legend_rows = -(-len(handles) // columns)
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=7, frameon=False)
    fig.set_figheight(3.4 + 0.22 * legend_rows)
    fig.tight_layout(rect=(0, 0.2 * legend_rows / fig.get_figheight(), 1, 1))
    return Plot("scaling-efficiency", "Scaling efficiency against N", _png(fig),
                "Efficiency of the data-parallel step against the number of devices, per "
                "framework (grey dashes: 90%; bf16 lines dashed, fp32 solid).")


# The GPU counts a published scaling folder answers for (the lent multi-GPU hosts' sizes):
# a count without rows is said to be not run, never left out silently.
PUBLISHED_COUNTS = (2, 4, 8)


def _summary_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if row["status"] != "ok":
        return row["status"]
    return percent(row["scaling"].get("efficiency"))


def efficiency_summary(rows: list[dict[str, Any]]) -> list[str]:
    """A compact Markdown table for a published folder's README: one line per model, mode,
    batch and precision, one column per framework, each cell the efficiency at every GPU
    count some row of the folder has ('not run' where this case lacks it), then one line
    naming the published counts (``PUBLISHED_COUNTS``) no row has. The report's
    'Data-parallel scaling' section has the full table, with the NCCL overlap."""
    gpu = [r for r in latest_rows(rows) if r["settings"]["device"] == "gpu"]
    if not gpu:
        return []
    counts = sorted({r["scaling"]["devices"] for r in gpu} - {1})
    frameworks = sorted({r["settings"]["framework"] for r in gpu})
    groups: dict[tuple, dict[tuple[str, int], dict[str, Any]]] = defaultdict(dict)
    for row in gpu:
        s = row["scaling"]
        if s["devices"] == 1:
            continue
        key = (row["model"], s["mode"], s["base_batch"], row["settings"]["precision"])
        groups[key][(row["settings"]["framework"], s["devices"])] = row
    shown = " / ".join(f"N = {n}" for n in counts)
    lines = ["| Model | Mode | Batch | Precision | " + " | ".join(frameworks) + " |",
             "|:---|:---|---:|:---|" + "---:|" * len(frameworks)]
    for key in sorted(groups):
        model, mode, batch, precision = key
        label = batch_label({"base_batch": batch, "mode": mode})
        cells = []
        for fw in frameworks:
            texts = [_summary_cell(groups[key].get((fw, n))) for n in counts]
            same = len(set(texts)) == 1 and not texts[0].endswith("%")   # "unsupported"
            cells.append(texts[0] if same else " / ".join(texts))
        lines.append(f"| {model} | {mode} | {label} | {precision} | " + " | ".join(cells) + " |")
    absent = [n for n in PUBLISHED_COUNTS if n not in counts]
    lines += ["", f"Each cell: {shown}." + (
        f" Not run: N = {', '.join(map(str, absent))} (no row of this folder has it)."
        if absent else "")]   # the caller's next line continues this paragraph
    return lines
