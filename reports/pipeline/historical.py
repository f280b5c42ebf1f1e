"""Published numbers from the seed studies (``data/historical.csv``), shown beside today's
rows for the same model and batch, always labelled historical.

Transcribed by hand from the seeds: convnet-benchmarks' Titan Black tables (seed 000),
cnn-benchmarks' GTX 1080 / Titan X / CPU tables (001), its cloud fork's GPUs (002) and
Bahrampour et al.'s Tables 3–8 (004). Li et al. (003) publish figures only, no numbers.
Values are as published, in ms (Table 8's compile times, published in s, × 1000); the seeds'
own inconsistencies are kept and noted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports.pipeline.cells import fmt_published
from reports.render.table import Cell, Table

HISTORICAL_CSV = Path(__file__).parent / "data" / "historical.csv"
COLUMNS = ("study", "source_table", "hardware", "framework", "model", "batch", "measure",
           "value_ms", "note")


@dataclass(frozen=True)
class HistoricalRow:
    study: str
    source_table: str
    hardware: str
    framework: str
    note: str
    values: dict            # measure -> ms (forward, backward, gradient, grad_input, ...)


def load_historical(path: Path = HISTORICAL_CSV) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype={"batch": int, "value_ms": float}, keep_default_na=False,
                        na_values={"value_ms": [""]})
    for column in COLUMNS:
        if column not in ("batch", "value_ms"):
            frame[column] = frame[column].astype(object)
    return frame


def rows_for(hist: pd.DataFrame, model: str, batch: int) -> list[HistoricalRow]:
    """One row per published table line, measures side by side. Backward or total are
    derived (gradient = forward + backward) only where the seed gives the other two."""
    part = hist[(hist["model"] == model) & (hist["batch"] == batch)]
    out: dict[tuple, dict] = {}
    for r in part.to_dict("records"):
        key = (r["study"], r["source_table"], r["hardware"], r["framework"], r["note"])
        out.setdefault(key, {})[r["measure"]] = r["value_ms"]
    rows = []
    for (study, table, hw, fw, note), values in out.items():
        if "backward" not in values and {"gradient", "forward"} <= set(values):
            values["backward"] = round(values["gradient"] - values["forward"], 6)
        if "gradient" not in values and {"backward", "forward"} <= set(values):
            values["gradient"] = round(values["forward"] + values["backward"], 6)
        rows.append(HistoricalRow(study, table, hw, fw, note, values))
    return rows


LABELS = {"forward": "Forward (ms)", "backward": "Backward (ms)", "gradient": "Total (ms)",
          "grad_input": "gradInput (ms)", "grad_weight": "gradWeight (ms)"}


def table_for(hist: pd.DataFrame, model: str, batch: int, key: str,
              measures: tuple[str, ...] = ("forward", "backward", "gradient"),
              labels: dict | None = None) -> Table | None:
    rows = rows_for(hist, model, batch)
    rows = [r for r in rows if any(m in r.values for m in measures)]
    if not rows:
        return None
    labels = {**LABELS, **(labels or {})}
    first = measures[-1] if "gradient" in measures else measures[0]
    rows.sort(key=lambda r: (r.study, r.values.get(first, math.inf)))
    body = []
    for r in rows:
        body.append((Cell(r.study, kind="hist"), Cell(r.hardware, kind="hist"),
                     Cell(r.framework, kind="hist"), Cell(r.note, kind="hist"),
                     *(Cell(fmt_published(r.values.get(m, math.nan)), kind="hist",
                            title=r.source_table) for m in measures)))
    studies = sorted({r.study for r in rows})
    return Table(key, f"Historical (published, not measured here): {model}, batch {batch}",
                 ("Study", "Hardware", "Framework", "Note", *(labels[m] for m in measures)),
                 tuple(body), (False,) * 4 + (True,) * len(measures),
                 notes=(f"As published in {', '.join(studies)}; other hardware, software and "
                        "(for convnet-benchmarks) averages of 10 runs — compare orders of "
                        "magnitude, not digits.",))
