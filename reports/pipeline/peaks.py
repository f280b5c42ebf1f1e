"""Achieved TFLOP/s and the share of the device's peak.

Convention (stated in the report): FLOPs = forward FLOPs per example (``models.analysis``:
2 × multiply-accumulates) × batch; a gradient step counts 3 × forward (one forward, two
backward products: w.r.t. inputs and weights — the usual training estimate, as in
Kaplan et al. 2020's 6N vs 2N). A training step (``train_step``: forward, backward and the
optimizer's update, models/measures.py; SGD with momentum, or AdamW for the transformers:
models/optimizers.py) counts 3 × forward as well: SGD's update adds 4 FLOPs per parameter
(b ← m·b + g, w ← w − lr·b), about 0.1 GFLOP for ResNet-50's 25.6 M parameters against
3 × 8.2 GFLOP per example, under 0.5% at batch 1 and 0.002% at batch 256; AdamW's about 15
per parameter, under 0.1% of GPT-2 small's step at 8 × 1024 tokens; so it is left out as
the usual training estimate leaves it out. grad_input and
grad_weight are each one backward product, 1 × forward. Transfers have no FLOPs. The peak
is the datasheet figure for the row's precision (fp32, tf32 or bf16) from
``data/device_peaks.csv``; CPUs have none (blank).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from models.measures import FLOP_FACTORS

PEAKS_CSV = Path(__file__).parent / "data" / "device_peaks.csv"


@dataclass(frozen=True)
class DevicePeak:
    match: str
    device: str
    tflops: dict            # precision -> TFLOP/s (absent when the datasheet has none)
    source: str


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.lower()).strip()


def load_peaks(path: Path = PEAKS_CSV) -> tuple[DevicePeak, ...]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    peaks = []
    for row in rows:
        tflops = {p: float(row[f"{p}_tflops"]) for p in ("fp32", "tf32", "bf16")
                  if row[f"{p}_tflops"].strip()}
        peaks.append(DevicePeak(row["match"], row["device"], tflops, row["source"]))
    # The longest pattern first, so "H100 PCIe" wins over "H100" and "GTX 1080 Ti" over
    # "GTX 1080".
    return tuple(sorted(peaks, key=lambda p: -len(p.match)))


def find_peak(gpu_name: str, peaks: tuple[DevicePeak, ...]) -> DevicePeak | None:
    name = _norm(gpu_name or "")
    if not name:
        return None
    for peak in peaks:
        # Whole-token start, no digit after: "A10" must not match "A100", nor "L4" "L40S";
        # "K40" still matches "K40c".
        if re.search(rf"(?<![a-z0-9]){re.escape(_norm(peak.match))}(?!\d)", name):
            return peak
    return None


def add_throughput(frame: pd.DataFrame, peaks: tuple[DevicePeak, ...]) -> pd.DataFrame:
    achieved, peak_tf, share, device, source = [], [], [], [], []
    for row in frame.itertuples(index=False):
        # Each measure's factor, and why, is declared with it (models/measures.py).
        factor = FLOP_FACTORS.get(row.measure)
        ok = (row.status == "ok" and factor is not None and row.median_ms > 0
              and not math.isnan(row.flops_per_example))
        value = (row.flops_per_example * row.batch * factor / (row.median_ms / 1e3) / 1e12
                 if ok else math.nan)
        found = find_peak(row.gpu_model, peaks) if row.device == "gpu" else None
        top = found.tflops.get(row.precision) if found else None
        achieved.append(value)
        peak_tf.append(top if top else math.nan)
        share.append(value / top if top and not math.isnan(value) else math.nan)
        device.append(found.device if found else "")
        source.append(found.source if found else "")
    return frame.assign(achieved_tflops=achieved, peak_tflops=peak_tf, peak_share=share,
                        peak_device=pd.Series(device, dtype=object, index=frame.index),
                        peak_source=pd.Series(source, dtype=object, index=frame.index))
