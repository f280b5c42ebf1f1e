"""Bahrampour et al. 2016's tables (seed 004): CPU rows per thread count, then GPU rows per
framework/library, with "Gradient (ms)" and "Forward (ms)" columns (Tables 3, 4, 6; Table 4
adds GPU RAM) and, for the stacked autoencoders, the phase columns AE1 AE2 AE3
"Total pre-training" SE-gradient SE-forward (Tables 5 and 7).

Gradient = forward + loss + backward for all trainable parameters, no update (§3.1).
"""

from __future__ import annotations

import math

import pandas as pd

from reports import cells
from reports.grouping import Setting, by_setting, extras, records, variant_text
from reports.historical import rows_for, table_for
from reports.naming import BAHRAMPOUR_SETS, SAE_PHASES, SAE_SETS
from reports.table import Cell, Table


def _order(s: Setting) -> tuple:
    # Bahrampour lists CPU (by threads: 1, 6, 12) before GPU.
    return (s.device != "cpu", s.hardware, s.threads, s.framework, s.variant, s.precision)


def _where(s: Setting) -> tuple[Cell, Cell]:
    return (Cell(f"{s.device.upper()} {s.hardware}"),
            Cell(str(s.threads) if s.device == "cpu" else "", title="intra-op threads"))


def _setting(s: Setting, extra: str) -> Cell:
    return Cell(f"{s.framework} {variant_text(s, extra)} {s.precision}")


def bahrampour_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    rows = records(frame)
    out = []
    for title, models in BAHRAMPOUR_SETS.items():
        mine = [r for r in rows if r["model"] in models]
        for batch in sorted({r["batch"] for r in mine}):
            part = [r for r in mine if r["batch"] == batch]
            present = [m for m in models if any(r["model"] == m for r in part)]
            body = []
            for index, model in enumerate(present):
                groups = by_setting([r for r in part if r["model"] == model])
                extra = extras(list(groups))
                for s in sorted(groups, key=_order):
                    g, f = groups[s].get("gradient"), groups[s].get("forward")
                    if g is None and f is None:
                        continue
                    body.append(((_order(s), index), (*_where(s),
                                 *((Cell(model),) if len(present) > 1 else ()),
                                 _setting(s, extra[s]), cells.time_cell(g, ci=False),
                                 cells.time_cell(f, ci=False), cells.memory_cell([g, f]))))
            if not body:
                continue
            body.sort(key=lambda t: t[0])
            columns = ("Device", "Threads", *(("Model",) if len(present) > 1 else ()),
                       "Setting", "Gradient (ms)", "Forward (ms)", "Peak memory")
            out.append(Table(f"bahrampour-{len(out)}", f"{title}, batch {batch}", columns,
                             tuple(b for _, b in body),
                             tuple(c in ("Threads", "Gradient (ms)", "Forward (ms)",
                                         "Peak memory") for c in columns),
                             notes=("Medians in ms; ⚠ marks unstable rows.",)))
            if hist is not None:
                for model in present:
                    table = table_for(hist, model, batch, f"bahrampour-{len(out)}-hist-{model}",
                                      measures=("gradient", "forward"),
                                      labels={"gradient": "Gradient (ms)"})
                    if table is not None:
                        out.append(table)
    return out


SAE_COLUMNS = ("AE1", "AE2", "AE3", "Total pre-training", "SE gradient", "SE forward")


def sae_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    rows = records(frame)
    out = []
    for prefix, title in SAE_SETS.items():
        names = {f"{prefix}_{p}": p for p in SAE_PHASES}
        mine = [r for r in rows if r["model"] in names]
        for batch in sorted({r["batch"] for r in mine}):
            per_phase = {p: by_setting([r for r in mine if r["batch"] == batch
                                        and r["model"] == f"{prefix}_{p}"]) for p in SAE_PHASES}
            settings = sorted({s for g in per_phase.values() for s in g}, key=_order)
            extra = extras(settings)
            body = []
            for s in settings:
                ae = [per_phase[p].get(s, {}).get("gradient") for p in ("ae1", "ae2", "ae3")]
                total = (sum(r["median_ms"] for r in ae)
                         if all(r is not None and r["status"] == "ok" for r in ae) else math.nan)
                se = per_phase["se"].get(s, {})
                body.append((*_where(s), _setting(s, extra[s]),
                             *(cells.time_cell(r, ci=False) for r in ae),
                             cells.value_cell(total, "AE1 + AE2 + AE3 gradient"),
                             cells.time_cell(se.get("gradient"), ci=False),
                             cells.time_cell(se.get("forward"), ci=False)))
            out.append(Table(f"sae-{prefix}-{batch}",
                             f"Stacked autoencoders, Bahrampour {title}, batch {batch}",
                             ("Device", "Threads", "Setting", *SAE_COLUMNS), tuple(body),
                             (False, True, False) + (True,) * 6,
                             notes=("AE columns: gradient time of each pre-training phase; "
                                    "Total pre-training = their sum; SE: supervised "
                                    "fine-tuning of the stacked encoders.",)))
            if hist is not None:
                table = _sae_historical(prefix, batch, hist)
                if table is not None:
                    out.append(table)
    return out


def _sae_historical(prefix: str, batch: int, hist: pd.DataFrame) -> Table | None:
    found: dict[tuple, dict] = {}
    sources = {f"{prefix}_ae1": (0, "gradient"), f"{prefix}_ae2": (1, "gradient"),
               f"{prefix}_ae3": (2, "gradient"), f"{prefix}_pretraining (sum)": (3, "gradient"),
               f"{prefix}_se": None}
    for model, where in sources.items():
        for r in rows_for(hist, model, batch):
            slot = found.setdefault((r.study, r.hardware, r.framework, r.note), {})
            if where is None:
                slot[4] = r.values.get("gradient", math.nan)
                slot[5] = r.values.get("forward", math.nan)
            else:
                slot[where[0]] = r.values.get(where[1], math.nan)
    if not found:
        return None
    body = tuple((Cell(study, kind="hist"), Cell(hw, kind="hist"),
                  Cell(f"{fw}" + (f" ({note})" if note else ""), kind="hist"),
                  *(Cell(cells.fmt_published(v.get(i, math.nan)), kind="hist") for i in range(6)))
                 for (study, hw, fw, note), v in found.items())
    return Table(f"sae-{prefix}-{batch}-hist",
                 f"Historical (published, not measured here): stacked autoencoders "
                 f"{prefix}, batch {batch}", ("Study", "Hardware", "Setting", *SAE_COLUMNS),
                 body, (False,) * 3 + (True,) * 6,
                 notes=("As published (GTX Titan X and Xeon E5-1650 v2, 2015).",))
