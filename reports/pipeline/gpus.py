"""One model, several GPUs: the cnn-benchmarks networks' forward + backward time at batch 16
on every published GPU, per framework, beside the seeds' own GPUs.

cnn-benchmarks (seed 001) and its cloud-GPU fork (002) are remembered for this view: each
network's "Total (ms)" at batch 16 on a GTX 1080, a Pascal Titan X, a K80, ... A column
per network, a row per GPU and framework; the seeds' rows (Torch7, each GPU's fastest
published cuDNN line, ``reports/data/historical.csv``) below today's and always labelled
historical. A published cell is the framework's fastest fp32 variant by wall median, the
device time beside it where the row has one; only the networks that a seed GPU and a
published GPU both ran are kept, so that every column compares across the generations.
"""

from __future__ import annotations

import pandas as pd

from reports.pipeline.cells import fmt_ms, fmt_published
from reports.render.table import Cell, Table

BATCH = 16                          # cnn-benchmarks' batch for every network
MEASURE = "gradient"                # forward + backward: its "Total (ms)"
STUDIES = ("cnn-benchmarks",)       # the seed rows: seed 001 and its cloud fork (002)


def one_run_per_gpu(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Each GPU model's rows from the first of ``frames`` (one per published folder, in name
    order) that has any: the fastest of two runs of one GPU would favour whichever run the
    host happened to favour."""
    seen: set[str] = set()
    kept = []
    for rows in frames:
        present = set(rows["hardware"])
        kept.append(rows[~rows["hardware"].isin(seen)])
        seen |= present
    return pd.concat(kept, ignore_index=True)


def published_times(frame: pd.DataFrame) -> pd.DataFrame:
    """(hardware, framework, model) → the fastest fp32 GPU row's wall and device medians."""
    rows = frame[(frame["device"] == "gpu") & (frame["status"] == "ok")
                 & (frame["measure"] == MEASURE) & (frame["batch"] == BATCH)
                 & (frame["precision"] == "fp32")]
    best = rows.loc[rows.groupby(["hardware", "framework", "model"], sort=False)["median_ms"]
                    .idxmin()]
    return best[["hardware", "framework", "model", "median_ms", "device_median_ms"]]


def seed_times(hist: pd.DataFrame) -> pd.DataFrame:
    """(hardware, model) → the seeds' fastest published total at batch 16."""
    rows = hist[hist["study"].isin(STUDIES) & (hist["batch"] == BATCH)
                & (hist["measure"] == MEASURE) & hist["value_ms"].notna()
                & ~hist["hardware"].str.startswith("CPU")]
    return rows.groupby(["hardware", "framework", "model"], as_index=False)["value_ms"].min()


def several_gpus_table(frame: pd.DataFrame, hist: pd.DataFrame) -> Table | None:
    """The table, or None where no network ran on both a published and a seed GPU."""
    ours, seeds = published_times(frame), seed_times(hist)
    # Networks in the order the published rows list them (the suites' order).
    models = [m for m in dict.fromkeys(ours["model"]) if m in set(seeds["model"])]
    if not models:
        return None
    body = []
    for (hardware, framework), part in ours.groupby(["hardware", "framework"], sort=True):
        by_model = part.set_index("model")
        cells = []
        for model in models:
            if model not in by_model.index:
                cells.append(Cell("—", kind="muted"))
                continue
            wall, device = by_model.at[model, "median_ms"], by_model.at[model, "device_median_ms"]
            text = fmt_ms(wall) + (f" (dev {fmt_ms(device)})" if pd.notna(device) else "")
            cells.append(Cell(text))
        body.append((Cell(hardware), Cell(framework), *cells))
    for (hardware, framework), part in seeds.groupby(["hardware", "framework"], sort=False):
        by_model = part.set_index("model")["value_ms"]
        body.append((Cell(hardware, kind="hist"), Cell(f"{framework} (historical)", kind="hist"),
                     *(Cell(fmt_published(by_model[m]) if m in by_model.index else "—",
                            kind="hist")
                       for m in models)))
    return Table(
        "several-gpus", f"One model, several GPUs: forward + backward (ms), batch {BATCH}",
        ("GPU", "Framework", *models), tuple(body),
        numeric=(False, False, *([True] * len(models))),
        notes=(f"Each published GPU's fastest fp32 variant per framework (from the first "
               f"published folder of that GPU, by name), wall-time median "
               f"of one gradient computation (forward, loss, backward) at batch {BATCH}, "
               "with the GPU's own time ('dev') where the row has it; ONNX Runtime is "
               "absent (an inference engine here).",
               "Historical rows: cnn-benchmarks and its cloud-GPU fork, Torch7, the fastest "
               "cuDNN line published for that GPU (reports/data/historical.csv); other "
               "hardware, software and weights, for scale only."))
