"""convnet-benchmarks' layer-wise tables (seed 000, "Spatial Convolution layer"): a summary
ranked by total forward + backward time over L1–L5, then the breakdown per layer for
forward, backward (gradInput + gradWeight), gradInput and gradWeight, each closed by the
"_best per layer_" (cherry-picking) row. The same layout serves Li et al.'s Table I layers.

One set of tables per device, hardware and batch: the best-per-layer row only makes sense on
one machine, as in the seed.
"""

from __future__ import annotations

import math

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import Setting, by_setting, extras, records, variant_text
from reports.pipeline.historical import rows_for
from reports.pipeline.naming import LAYER_SETS
from reports.render.table import Cell, Table

BREAKDOWN = (("forward", "forward"), ("backward", "backward (total − forward)"),
             ("grad_input", "gradInput"), ("grad_weight", "gradWeights"))


def _value(measures: dict, measure: str) -> tuple[float, dict | None]:
    """(ms, failing row). backward = gradient − forward, as everywhere in this report."""
    if measure == "backward":
        grad, fwd = measures.get("gradient"), measures.get("forward")
        for r in (grad, fwd):
            if r is not None and r["status"] != "ok":
                return math.nan, r
        if grad is None or fwd is None:
            return math.nan, None
        return grad["median_ms"] - fwd["median_ms"], None
    row = measures.get(measure)
    if row is None:
        return math.nan, None
    if row["status"] != "ok":
        return math.nan, row
    return row["median_ms"], None


def _cell(value: float, failed: dict | None) -> Cell:
    if failed is not None:
        return cells.failure_cell(failed)
    return cells.value_cell(value)


FAMILY_SHORT = {"implicit GEMM": "iGEMM", "explicit GEMM (im2col)": "GEMM", "fft": "FFT",
                "winograd": "Winograd", "direct": "direct", "other": "other"}


def _family(measures: dict) -> str:
    row = measures.get("profile")
    if row is None or row["status"] != "ok" or not row.get("profile_conv_family"):
        return ""
    return FAMILY_SHORT.get(row["profile_conv_family"], row["profile_conv_family"])


def _sum(values: list[float]) -> float:
    return math.nan if any(math.isnan(v) for v in values) else sum(values)


def _device_sums(sums: tuple[float, float]) -> Cell:
    if not any(cells.is_num(v) for v in sums):
        return Cell(cells.MISSING, kind="muted")
    return Cell(" / ".join(cells.fmt_ms(v) for v in sums),
                title="sum over the layers of the GPU's kernel busy time")


def _setting_cells(s: Setting, extra: str) -> tuple[Cell, ...]:
    return (Cell(s.framework), Cell(variant_text(s, extra)), Cell(s.precision),
            Cell(str(s.threads)))


def layer_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    rows = records(frame)
    out = []
    for set_name, layers in LAYER_SETS.items():
        names = [m for m, _ in layers]
        mine = [r for r in rows if r["model"] in names]
        for device, hw, batch in sorted({(r["device"], r["hardware"], r["batch"]) for r in mine}):
            part = [r for r in mine if (r["device"], r["hardware"], r["batch"]) == (device, hw,
                                                                                 batch)]
            out += _one_machine(set_name, layers, part, device, hw, batch, len(out))
            if hist is not None:
                hist_table = _historical(set_name, layers, hist, batch, len(out))
                if hist_table is not None and hist_table.key not in {t.key for t in out}:
                    out.append(hist_table)
    return out


def _one_machine(set_name, layers, rows, device, hw, batch, serial) -> list[Table]:
    # Only the layers measured here: a suite may run L5 alone (default-cpu does).
    layers = tuple((m, label) for m, label in layers if any(r["model"] == m for r in rows))
    per_layer = {m: by_setting([r for r in rows if r["model"] == m]) for m, _ in layers}
    settings = sorted({s for groups in per_layer.values() for s in groups})
    extra = extras(settings)
    where = f"{device} {hw}, batch {batch}"
    values = {(s, m, meas): _value(per_layer[m].get(s, {}), meas)
              for s in settings for m, _ in layers
              for meas in ("gradient", "forward", "backward", "grad_input", "grad_weight")}
    tables = []

    # Summary: forward + backprop over all layers, ranked by total (seed: "ranked according
    # to the total time forward+backward calls for layers (L1 + L2 + L3 + L4 + L5)").
    summary = []
    for s in settings:
        line = []
        for meas in ("gradient", "forward", "backward"):
            got = [values[(s, m, meas)] for m, _ in layers]
            failed = next((f for _, f in got if f is not None), None)
            line.append((_sum([v for v, _ in got]), failed))
        summary.append((s, line))
    summary.sort(key=lambda t: (math.isnan(t[1][0][0]), t[1][0][0] if not
                                math.isnan(t[1][0][0]) else 0, t[0]))
    # The GPU's own time summed like the wall times, as one "total / forward" column where
    # some setting has it (on a CPU host and device time are one: no column).
    device = {s: tuple(_sum([cells.device_ms(per_layer[m].get(s, {}).get(meas))
                             for m, _ in layers]) for meas in ("gradient", "forward"))
              for s in settings}
    with_device = any(cells.is_num(v) for pair in device.values() for v in pair)
    body = [(*_setting_cells(s, extra[s]), *(_cell(v, f) for v, f in line),
             *((_device_sums(device[s]),) if with_device else ()),
             cells.memory_cell([per_layer[m].get(s, {}).get("gradient") for m, _ in layers]))
            for s, line in summary]
    best = [_sum([min((values[(s, m, meas)][0] for s in settings
                       if not math.isnan(values[(s, m, meas)][0])), default=math.nan)
                  for m, _ in layers]) for meas in ("gradient", "forward", "backward")]
    body.append((Cell("cherry-picking", emphasis="italic"), Cell("best per layer",
                                                                 emphasis="italic"),
                 Cell(""), Cell(""), *(Cell(cells.fmt_ms(v), emphasis="italic") for v in best),
                 *((Cell(""),) if with_device else ()), Cell("")))
    layer_list = ", ".join(label for _, label in layers)
    tables.append(Table(f"layers-{serial}", f"{set_name}: forward + backprop, {where}",
                        ("Framework", "Variant", "Precision", "Threads", "Total Time (ms)",
                         "Total forward time (ms)", "Total backward time (ms)",
                         *(("Device total / forward (ms)",) if with_device else ()),
                         "Peak memory (max)"), tuple(body),
                        (False,) * 4 + (True,) * (5 if with_device else 4),
                        notes=(f"Sums over {layer_list} of wall-time medians, ranked by the "
                               "total; a failed layer fails the sum.",
                               *((f"Device: {cells.DEVICE_TIME}, summed over the layers "
                                  "(— where a layer has none).",) if with_device else ()),
                               "The last row takes the best setting per layer.")))

    for meas, title in BREAKDOWN:
        if not any(not math.isnan(values[(s, m, meas)][0]) or values[(s, m, meas)][1]
                   for s in settings for m, _ in layers):
            continue
        # Which algorithm ran: the forward kernel family per layer, from the kernel
        # tracer's profile rows (suites/instruments/kernel_trace.py), beside the forward times.
        families = ({s: [_family(per_layer[m].get(s, {})) for m, _ in layers]
                     for s in settings} if meas == "forward" else {})
        with_families = any(any(f) for f in families.values())
        body = []
        for s in settings:
            got = [values[(s, m, meas)] for m, _ in layers]
            if all(math.isnan(v) and f is None for v, f in got):
                continue
            family = (Cell(" / ".join(f or "—" for f in families[s]),
                           title="dominant convolution kernel family per layer, forward pass "
                                 "(CUPTI kernel tracer)"),) if with_families else ()
            body.append((*_setting_cells(s, extra[s]), *(_cell(v, f) for v, f in got),
                         cells.value_cell(_sum([v for v, _ in got])), *family))
        mins = [min((values[(s, m, meas)][0] for s in settings
                     if not math.isnan(values[(s, m, meas)][0])), default=math.nan)
                for m, _ in layers]
        body.append((Cell("cherry-picking", emphasis="italic"),
                     Cell("best per layer", emphasis="italic"), Cell(""), Cell(""),
                     *(Cell(cells.fmt_ms(v), emphasis="italic") for v in mins),
                     Cell(cells.fmt_ms(_sum(mins)), emphasis="italic"),
                     *((Cell(""),) if with_families else ())))
        notes = ("Columns are times in milliseconds (median).",)
        if with_families:
            notes += (f"Kernel family ({' / '.join(label for _, label in layers)}): the "
                      "convolution algorithm that held most of the forward pass's kernel "
                      "time, from the kernel names (" + "; ".join(
                          f"{short} = {long}" for long, short in FAMILY_SHORT.items()
                          if short.lower() != long) +
                      "); — = no profile row.",)
        tables.append(Table(f"layers-{serial}-{meas}", f"{set_name}: {title}, {where}",
                            ("Framework", "Variant", "Precision", "Threads",
                             *(label for _, label in layers), "Total",
                             *(("Kernel family",) if with_families else ())), tuple(body),
                            (False,) * 4 + (True,) * (len(layers) + 1)
                            + ((False,) if with_families else ()),
                            notes=notes))
    return tables


def _historical(set_name, layers, hist, batch, serial) -> Table | None:
    """The seed's own Titan Black breakdown for the same layers and batch, labelled."""
    body = []
    seed_titles = {"backward": "backward (gradInput + gradWeight)"}
    for meas, title in BREAKDOWN:
        title = seed_titles.get(meas, title)
        found: dict[tuple, dict] = {}
        models = [m for m, _ in layers] + ["conv_l1-l5 (sum)"]
        for i, m in enumerate(models):
            for r in rows_for(hist, m, batch):
                if meas in r.values and r.source_table.startswith("Layer-wise breakdown"):
                    found.setdefault((r.study, r.hardware, r.framework, r.note), {})[i] = \
                        r.values[meas]
        for (study, hw, fw, note), vals in found.items():
            body.append((Cell(study, kind="hist"), Cell(hw, kind="hist"), Cell(title, kind="hist"),
                         Cell(f"{fw} ({note})", kind="hist"),
                         *(Cell(cells.fmt_published(vals.get(i, math.nan)), kind="hist")
                           for i in range(len(layers) + 1))))
    if not body:
        return None
    return Table(f"layers-hist-{set_name[:6]}-{batch}".replace(" ", ""),
                 f"Historical (published, not measured here): {set_name}, batch {batch}",
                 ("Study", "Hardware", "Measure", "Library", *(label for _, label in layers),
                  "Total"),
                 tuple(body), (False,) * 4 + (True,) * (len(layers) + 1),
                 notes=("As published (Titan Black, 2014–2015 software); the seed's Total "
                        "column is copied, not recomputed.",))
