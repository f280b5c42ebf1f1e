"""Figures (matplotlib, Agg backend, PNG bytes), only where the data exist:

* time vs batch size, gradient and forward panels (Bahrampour Figs. 1–2);
* time and peak memory vs each of Li et al.'s sweep parameters b, i, f, k, s (Figs. 3, 5),
  from parametric layer names ``conv:c=..,i=..,f=..,k=..,s=..``;
* CPU thread scaling;
* per-model bars by setting, forward + backward stacked (= total);
* the share of profiled time per layer type, stacked to 100% (Li et al. Fig. 2), shown in
  the hotspot section rather than under "Figures";
* Li et al. Fig. 6's panels (runtime and the top kernels' hardware metrics), in the
  kernel-metrics section;
* today's practice: the training step's throughput against batch size, one line per
  framework and variant, the batch that did not fit marked (section "Today's practice").
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend first: no display on CI)
import pandas as pd  # noqa: E402

from reports.pipeline.grouping import records, variant_name  # noqa: E402
from reports.pipeline.naming import is_detail_model, parse_conv, sort_key  # noqa: E402
from reports.pipeline.tidy import LAYER_TYPES  # noqa: E402
from reports.sections.practice import per_second, unit  # noqa: E402
from reports.sections.profiles import layer_shares, profile_rows  # noqa: E402

DPI = 80
SWEEP = {"b": "mini-batch size b", "i": "input size i", "f": "filters f", "k": "kernel size k",
         "s": "stride s"}


@dataclass(frozen=True)
class Plot:
    key: str          # file-safe name
    title: str
    png: bytes
    caption: str


def _safe(text: str) -> str:
    """Row strings go into figure text: keep matplotlib's mathtext from parsing ``$``."""
    return str(text).replace("$", r"\$")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "plot"


def _main_batch(rows: list[dict], model: str) -> int | None:
    """The batch a per-model figure shows: the one with the most rows (ties: the smallest),
    so a model costs one figure however many batches it was run at."""
    counts: dict[int, int] = defaultdict(int)
    for r in rows:
        if r["model"] == model:
            counts[r["batch"]] += 1
    if not counts:
        return None
    return min(counts, key=lambda b: (-counts[b], b))


def _variant(r: dict) -> str:
    return variant_name(r["variant"], r["compile_cache"])


def _line_label(r: dict) -> str:
    where = f"cpu {r['threads']}t" if r["device"] == "cpu" else "gpu"
    return _safe(f"{r['framework']} {_variant(r)} {r['precision']} {where} {r['hardware']}")


def _legend(fig, axes) -> None:
    """One legend for the figure, right of the last panel, from every panel's lines."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(text, handle)
    if seen:
        axes[-1].legend(list(seen.values()), list(seen), fontsize=7, loc="upper left",
                        bbox_to_anchor=(1.02, 1))


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and r["median_ms"] > 0]


# The measures that time one batch per call, in the order of their panels. Epoch rows (a
# whole epoch per call), transfers and profiles are other quantities and stay off these axes.
SINGLE_BATCH = ("gradient", "train_step", "forward")


def _single_batch(rows: list[dict]) -> list[dict]:
    """Ok rows of the single-batch measures."""
    return [r for r in _ok(rows) if r["measure"] in SINGLE_BATCH]


def _no_threads(r: dict) -> str:
    return _safe(f"{r['framework']} {_variant(r)} {r['precision']} {r['hardware']}")


def line_styles(labels) -> dict[str, dict[str, object]]:
    """One style per line label for a whole figure: ten colours, then the same ten dashed,
    then dotted. Panels that share a figure's one legend must agree on a label's colour; each
    panel's own colour cycle gave the n-th line of that panel the n-th colour, so where a
    panel lacked a framework (ONNX Runtime has no gradient) the legend named the wrong
    line."""
    palette = plt.get_cmap("tab10").colors
    dashes = ("-", "--", ":", "-.")
    return {label: {"color": palette[i % len(palette)],
                    "ls": dashes[(i // len(palette)) % len(dashes)]}
            for i, label in enumerate(sorted(set(labels)))}


def _lines(ax, rows: list[dict], x: str, y: str = "median_ms", scale: float = 1.0,
           name=_line_label, min_points: int = 2,
           styles: dict[str, dict[str, object]] | None = None) -> int:
    """One line per setting, in its figure-wide style (``line_styles``); a setting measured
    at fewer than ``min_points`` x values is no line (a lone CPU point would only squash the
    GPU lines)."""
    series: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        if r[y] == r[y]:   # not NaN
            series[name(r)].append((r[x], r[y] * scale))
    series = {k: v for k, v in series.items() if len({p[0] for p in v}) >= min_points}
    styles = styles if styles is not None else line_styles(series)
    for name, points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name,
                **styles[name])
    return len(series)


def batch_plots(rows: list[dict]) -> list[Plot]:
    out = []
    for model in sorted({r["model"] for r in rows if is_detail_model(r["model"])}, key=sort_key):
        mine = _single_batch([r for r in rows if r["model"] == model])
        batches: dict[tuple, set] = defaultdict(set)
        for r in mine:
            batches[(_line_label(r), r["measure"])].add(r["batch"])
        if max((len(b) for b in batches.values()), default=0) < 2:
            continue
        measures = [m for m in SINGLE_BATCH if any(r["measure"] == m for r in mine)]
        fig, axes = plt.subplots(1, len(measures), figsize=(5.5 * len(measures), 3.6),
                                 squeeze=False)
        styles = line_styles(_line_label(r) for r in mine)
        for ax, measure in zip(axes[0], measures):
            _lines(ax, [r for r in mine if r["measure"] == measure], "batch", styles=styles)
            ax.set_title(_safe(f"{model}: {measure}"))
            ax.set_xlabel("batch size")
            ax.set_ylabel("median time (ms)")
            ax.grid(alpha=0.3)
        _legend(fig, list(axes[0]))
        out.append(Plot(slug(f"batch_{model}"), f"{model}: time vs batch size", _png(fig),
                        "Median time per batch (Bahrampour et al. Figs. 1–2)."))
    return out


def sweep_plots(rows: list[dict]) -> list[Plot]:
    convs = []
    for r in _ok(rows):
        p = parse_conv(r["model"])
        if p is not None and r["measure"] in ("gradient", "forward"):
            convs.append({**r, **{f"p_{k}": v for k, v in p.items()}, "p_b": r["batch"]})
    out = []
    for param, name in SWEEP.items():
        others = [f"p_{k}" for k in ("b", "c", "i", "f", "k", "s", "p") if k != param]
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in convs:
            groups[tuple(r[o] for o in others)].append(r)
        best = max(groups.values(), key=lambda g: len({r[f"p_{param}"] for r in g}),
                   default=[])
        if len({r[f"p_{param}"] for r in best}) < 2:
            continue
        measure = "gradient" if any(r["measure"] == "gradient" for r in best) else "forward"
        chosen = [r for r in best if r["measure"] == measure]
        memory = [r for r in chosen if r["peak_bytes"] == r["peak_bytes"]]
        fig, axes = plt.subplots(1, 2 if memory else 1, figsize=(11 if memory else 5.5, 3.6),
                                 squeeze=False)
        styles = line_styles(_line_label(r) for r in chosen)
        _lines(axes[0][0], chosen, f"p_{param}", styles=styles)
        axes[0][0].set_ylabel(f"{measure} median (ms)")
        if memory:
            _lines(axes[0][1], memory, f"p_{param}", "peak_bytes", 1 / 2**20, styles=styles)
            axes[0][1].set_ylabel("peak memory (MiB)")
        fixed = ", ".join(f"{o[2:]}={best[0][o]}" for o in others)
        for ax in axes[0]:
            ax.set_xlabel(name)
            ax.grid(alpha=0.3)
            ax.set_title(_safe(f"sweep over {param} ({fixed})"), fontsize=9)
        _legend(fig, list(axes[0]))
        out.append(Plot(f"sweep_{param}", f"Convolution layer: time and memory vs {name}",
                        _png(fig), "Li et al. Fig. 3 (runtime) and Fig. 5 (memory), one "
                        "parameter varied, the others fixed."))
    return out


def thread_plots(rows: list[dict]) -> list[Plot]:
    cpu = _single_batch([r for r in rows if r["device"] == "cpu"])
    out = []
    for model in sorted({r["model"] for r in cpu}, key=sort_key):
        # the batch with the most thread counts measured (ties: the smallest batch)
        counts: dict[int, set] = defaultdict(set)
        for r in cpu:
            if r["model"] == model:
                counts[r["batch"]].add(r["threads"])
        batch = min(counts, key=lambda b: (-len(counts[b]), b))
        mine = [r for r in cpu if r["model"] == model and r["batch"] == batch]
        if len({r["threads"] for r in mine}) < 2:
            continue
        measures = [m for m in SINGLE_BATCH if any(r["measure"] == m for r in mine)]
        fig, axes = plt.subplots(1, len(measures), figsize=(5.5 * len(measures), 3.6),
                                 squeeze=False)
        styles = line_styles(_no_threads(r) for r in mine)
        for ax, measure in zip(axes[0], measures):
            _lines(ax, [r for r in mine if r["measure"] == measure], "threads",
                   name=_no_threads, styles=styles)
            ax.set_xscale("log", base=2)
            ax.set_title(_safe(f"{model} b{batch}: {measure}"))
            ax.set_xlabel("intra-op threads")
            ax.set_ylabel("median time (ms)")
            ax.grid(alpha=0.3)
        _legend(fig, list(axes[0]))
        out.append(Plot(slug(f"threads_{model}_b{batch}"), f"{model}, batch {batch}: CPU "
                        "thread scaling", _png(fig), "Bahrampour et al. report 1, 6 and 12 "
                        "threads (Tables 3–7)."))
    return out


def _bar_panel(ax, shown: list[tuple], title: str) -> None:
    names = [s[1] for s in shown]
    fwd = [s[2] or 0 for s in shown]
    bwd = [(s[3] - s[2]) if s[3] is not None and s[2] is not None else (s[3] or 0)
           for s in shown]
    ax.barh(names, fwd, label="forward")
    ax.barh(names, bwd, left=fwd, label="backward (total − forward)")
    for y, s in enumerate(shown):
        if s[4]:   # what did not run, written where the bar would continue
            ax.annotate(s[4], (fwd[y] + bwd[y], y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=7, color="#a40e26")
    ax.set_xlabel("median time (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=7)
    ax.margins(x=0.15)


def bar_plots(rows: list[dict]) -> list[Plot]:
    out = []
    for model in sorted({r["model"] for r in rows if is_detail_model(r["model"])}, key=sort_key):
        measured = [r for r in rows if r["measure"] in ("forward", "gradient")]
        batch = _main_batch(measured, model)
        if batch is None:
            continue
        mine = [r for r in rows if r["model"] == model and r["batch"] == batch]
        panels = []
        for device in ("gpu", "cpu"):   # separate axes: CPU bars would squash GPU bars
            bars: dict[str, dict] = defaultdict(dict)
            for r in mine:
                if r["measure"] in ("forward", "gradient") and r["device"] == device:
                    bars[_line_label(r)][r["measure"]] = r
            shown = []
            for name, m in bars.items():
                f, g = m.get("forward"), m.get("gradient")
                fwd = f["median_ms"] if f is not None and f["status"] == "ok" else None
                tot = g["median_ms"] if g is not None and g["status"] == "ok" else None
                if fwd is None and tot is None:
                    continue
                missing = [f"{r['measure']}: {'OOM' if r['status'] == 'oom' else r['status']}"
                           for r in (f, g) if r is not None and r["status"] != "ok"]
                shown.append((tot if tot is not None else fwd, name, fwd, tot,
                               _safe(", ".join(missing))))
            if shown:
                panels.append((device, sorted(shown, reverse=True)))
        if not panels:
            continue
        heights = [0.45 * len(p[1]) + 1.0 for p in panels]
        fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, sum(heights) + 0.4),
                                 squeeze=False, gridspec_kw={"height_ratios": heights})
        for ax, (device, shown) in zip(axes[:, 0], panels):
            _bar_panel(ax, shown, _safe(f"{model}, batch {batch}: {device}"))
        out.append(Plot(slug(f"bars_{model}_b{batch}"), f"{model}, batch {batch}: by setting",
                        _png(fig), "Forward and backward stacked; bar length = total. "
                        "GPU and CPU on separate axes."))
    return out


def _profile_label(r: dict) -> str:
    where = f" {r['threads']}t" if r["device"] == "cpu" else ""
    return _safe(f"{r['model']} b{r['batch']} · {r['framework']} {_variant(r)} "
                 f"{r['precision']}{where}")


def _distinct(bars: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """Bars named alike (two hosts with one CPU model) would share a row of the axis."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for name, value in bars:
        seen[name] += 1
        out.append((name if seen[name] == 1 else f"{name} ({seen[name]})", value))
    return out


def profile_plots(frame: pd.DataFrame) -> list[Plot]:
    """Li et al. Fig. 2: per device and hardware, one bar per model and setting, its
    profiled time split by layer type and stacked to 100%."""
    shown = [(r, layer_shares(r)) for r in profile_rows(frame) if r["status"] == "ok"]
    shown = [(r, shares) for r, shares in shown if shares]
    out = []
    for device, hw in sorted({(r["device"], r["hardware"]) for r, _ in shown},
                             key=lambda k: (k[0] != "gpu", k[1])):
        mine = sorted(((r, shares) for r, shares in shown
                       if (r["device"], r["hardware"]) == (device, hw)),
                      key=lambda rs: (sort_key(rs[0]["model"]), rs[0]["batch"],
                                      _profile_label(rs[0])))
        bars = _distinct([(_profile_label(r), shares) for r, shares in mine])
        names = [name for name, _ in bars]
        fig, ax = plt.subplots(figsize=(8.5, 0.4 * len(bars) + 1.4))
        left = [0.0] * len(bars)
        colours = plt.get_cmap("tab10").colors
        for i, kind in enumerate(LAYER_TYPES):
            widths = [shares[kind] for _, shares in bars]
            ax.barh(names, widths, left=left, label=kind, color=colours[i % len(colours)])
            left = [a + b for a, b in zip(left, widths)]
        ax.invert_yaxis()           # the first model on top, as a table reads
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of profiled time per iteration")
        ax.set_title(_safe(f"share of time per layer type: {device} {hw}"), fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
        out.append(Plot(slug(f"hotspots_{device}_{hw}"), f"Hotspot layers, {device} {hw}",
                        _png(fig), "Share of the profiled time per layer type, stacked to "
                        "100% (Li et al. Fig. 2)."))
    return out


def _practice_line(r: dict) -> str:
    return _safe(f"{r['framework']} {_variant(r)}")


def _not_run(r: dict) -> str:
    return "OOM" if r["status"] == "oom" else r["status"]


def practice_plots(frame: pd.DataFrame) -> list[Plot]:
    """Today's practice: per hardware, model and precision swept over batch sizes, the
    training step's examples per second (batch ÷ wall median) against the batch, log2 axis,
    one line per framework and variant; a batch that did not run (OOM) is a red × on its
    line's level, at the height of the line's last point below it."""
    rows = [r for r in records(frame) if r["measure"] == "train_step"]
    out = []
    for hw, model, precision in sorted({(r["hardware"], r["model"], r["precision"])
                                        for r in rows}):
        mine = [r for r in rows if (r["hardware"], r["model"], r["precision"])
                == (hw, model, precision)]
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        failed: dict[str, list[dict]] = defaultdict(list)
        for r in mine:
            rate = per_second(r)
            if rate == rate:
                series[_practice_line(r)].append((r["batch"], rate))
            elif r["status"] not in ("ok", "unsupported"):
                failed[_practice_line(r)].append(r)
        if max((len({b for b, _ in p}) for p in series.values()), default=0) < 2:
            continue
        fig, ax = plt.subplots(figsize=(7.0, 3.8))
        styles = line_styles(series)
        for name, points in sorted(series.items()):
            points.sort()
            line = ax.plot([b for b, _ in points], [v for _, v in points], marker="o",
                           label=name, **styles[name])[0]
            for r in failed.get(name, ()):
                below = [v for b, v in points if b < r["batch"]] or [points[-1][1]]
                ax.plot([r["batch"]], [below[-1]], marker="x", markersize=9, mew=2,
                        linestyle="none", color="#a40e26")
                ax.annotate(_safe(_not_run(r)), (r["batch"], below[-1]), xytext=(5, 5),
                            textcoords="offset points", fontsize=7, color=line.get_color())
        batches = sorted({r["batch"] for r in mine})
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"{unit(mine[0])} per second")
        # From zero: a flat knee must look flat; headroom above the top point for the
        # label of a batch that did not run there.
        top = max(v for points in series.values() for _, v in points)
        ax.set_ylim(bottom=0, top=top * 1.12)
        ax.set_title(_safe(f"{model} {precision} training step: {hw}"), fontsize=9)
        ax.grid(alpha=0.3)
        _legend(fig, [ax])
        out.append(Plot(slug(f"practice_{model}_{precision}_{hw}"),
                        f"{model}, {precision}: training-step throughput vs batch size, {hw}",
                        _png(fig), "Today's practice: examples per second (batch ÷ wall-time "
                        "median) of one training step (forward, backward, SGD-momentum "
                        "update) against the batch size, log2 axis, one line per framework "
                        "and variant; a red × marks a batch that did not run (OOM: the "
                        "device's memory ran out), at the level of its line's last point."))
    return out


def all_plots(frame: pd.DataFrame) -> list[Plot]:
    rows = records(frame)
    return batch_plots(rows) + sweep_plots(rows) + thread_plots(rows) + bar_plots(rows)


FIG6_PANELS = (("median_ms", "runtime (ms)"), ("counter_achieved_occupancy", "achieved occupancy (%)"),
               ("counter_warp_execution_efficiency", "warp execution efficiency (%)"),
               ("counter_gld_efficiency", "global load efficiency (%)"),
               ("counter_gst_efficiency", "global store efficiency (%)"),
               ("counter_ipc", "IPC (per SM)"),
               ("counter_shared_efficiency", "shared memory efficiency (%)"))


def fig6_plots(frame: pd.DataFrame) -> list[Plot]:
    """Li et al. Fig. 6: per GPU and batch, one panel per quantity (runtime, then the
    hardware metrics of the top kernels), grouped bars of each framework per layer."""
    rows = records(frame)
    counted = [r for r in rows if r["measure"] == "counters" and r["status"] == "ok"]
    out = []
    for hw, batch in sorted({(r["hardware"], r["batch"]) for r in counted}):
        mine = [r for r in counted if (r["hardware"], r["batch"]) == (hw, batch)]
        layers = sorted({r["model"] for r in mine}, key=sort_key)
        series = sorted({_profile_series(r) for r in mine})
        values = {(r["model"], _profile_series(r)): r for r in mine}
        runtime = {}    # the timed median of the measure the counters row profiled
        for r in rows:
            key = (r["model"], _profile_series(r))
            if (key in values and (r["hardware"], r["batch"], r["status"]) == (hw, batch, "ok")
                    and r["measure"] == values[key]["counters_measure"]):
                runtime[key] = r["median_ms"]
        fig, axes = plt.subplots(len(FIG6_PANELS), 1, figsize=(8.5, 1.7 * len(FIG6_PANELS)),
                                 sharex=True)
        width = 0.8 / max(len(series), 1)
        for ax, (column, title) in zip(axes, reversed(FIG6_PANELS)):  # runtime at the bottom
            for i, name in enumerate(series):
                ys = [runtime.get((m, name), float("nan")) if column == "median_ms"
                      else values.get((m, name), {}).get(column, float("nan")) for m in layers]
                ax.bar([x + i * width for x in range(len(layers))], ys, width, label=name)
            ax.set_ylabel(title, fontsize=7)
            ax.tick_params(labelsize=7)
        axes[-1].set_xticks([x + 0.4 - width / 2 for x in range(len(layers))])
        axes[-1].set_xticklabels([_safe(m) for m in layers], fontsize=7)
        axes[0].set_title(_safe(f"GPU metrics of the top kernels: {hw}, batch {batch}"),
                          fontsize=9)
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
        out.append(Plot(slug(f"fig6_{hw}_{batch}"), f"Fig. 6 panels, {hw}, batch {batch}",
                        _png(fig), "Li et al. Fig. 6: from bottom to top the runtime (timed "
                        "median), achieved occupancy, warp execution efficiency, global "
                        "load and store efficiency, IPC and shared memory efficiency of the "
                        "top kernels (time-weighted, Nsight Compute)."))
    return out


def _profile_series(r: dict) -> str:
    return _safe(f"{r['framework']} {_variant(r)} {r['precision']}")
