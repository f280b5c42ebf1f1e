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
``data/device_peaks.csv``; CPUs have none (blank). The share is the model FLOP utilisation
(MFU) of Chowdhery et al. 2022 (PaLM), appendix B: model FLOPs per second over the peak,
whatever the kernels actually execute.

Transformers (models/families/transformer.py): the count is each matrix product of the
definition, 2 FLOPs per multiply-accumulate, the LM or MLM head's product with the token
table included, the embedding gathers, LayerNorm, GELU, softmax and bias adds left out
(models/analysis.py). Self-attention's scores Q·Kᵀ and weighted sum P·V count 2·T·T·d each
per sequence in full, the causal mask's unused upper triangle included
(models/ops/transformer/attention.py ``flops``): PaLM's convention, whose training count per
token, 6N + 12·L·H·Q·T, is 3 × (2N + 4·L·d·T) with d = H·Q; our 2N is the definition's
matrix products (GPT-2: 2 × (85 M block weights + 38.6 M of its tied head) per token).
Kaplan et al. 2020, table 1, count C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn per token with
N the non-embedding parameters: their N leaves the head out, and their context term is half
of ours. Kernels differ: PyTorch's math backend and einsum
attention compute the whole T × T square, flash and memory-efficient kernels skip the
blocks the causal mask removes (about half at long T), so a causal row's MFU is model
FLOPs, not executed FLOPs. A padded token batch (BERT with IMDB-like lengths) is counted
at its padded length T, the length the step computes (``flops_per_step``).

Throughput in the row's own unit (``rate_unit``, ``items_per_s``): tokens per second for a
transformer fed tokens (batch × T, the T the step computes: a padded batch's padding
counts, as the kernels run over it), images per second for image input (ViT, the CNNs),
sequences per second for the LSTM, examples otherwise; the energy per item
(``joules_per_item``: J/token, J/image) divides the GPU's energy of one iteration likewise.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import pandas as pd

from models.analysis import analyse
from models.measures import FLOP_FACTORS
from models.zoo import UnknownModel, get_model

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


@dataclass(frozen=True)
class Rate:
    """What a row's throughput counts: ``unit`` (plural: tokens, images, sequences,
    examples) and how many of them one example of the batch is."""

    unit: str
    per_example: float


def _number(value) -> float:
    return float("nan") if value is None else float(value)


def rate_of(family: str, input_shape: list, seq_len: float) -> Rate:
    """The unit from the row's model record (models.analysis' input shape, the worker's
    ``seq_len``: the batch's padded length). A transformer's (T,) input is tokens, T of
    them per example, the padded length where the batch has one; a (C, H, W) input is an
    image; the LSTM's token input a sequence (one recurrence per example)."""
    if family == "transformer" and len(input_shape) == 1:
        steps = seq_len if seq_len == seq_len else input_shape[0]
        return Rate("tokens", float(steps))
    if len(input_shape) == 3:
        return Rate("images", 1.0)
    if seq_len == seq_len or family == "lstm":
        return Rate("sequences", 1.0)
    return Rate("examples", 1.0)


@lru_cache(maxsize=256)
def _flops_at_length(model: str, steps: int) -> float:
    """Forward FLOPs per example of ``model`` fed ``steps`` tokens (a padded batch shorter
    than its context), from the definition; NaN where the zoo no longer has the model."""
    try:
        found = get_model(model)
        return float(analyse(replace(found, input=replace(found.input, shape=(steps,)))).flops)
    except (UnknownModel, ValueError):
        return math.nan


def flops_per_example(row) -> float:
    """The row's forward FLOPs per example at the length its step computed: the model's
    figure, counted again at the padded length where a token batch is shorter."""
    shape = json.loads(row.input_shape or "[]")
    steps = row.seq_len
    if row.family == "transformer" and len(shape) == 1 and steps == steps \
            and int(steps) != shape[0]:
        return _flops_at_length(row.model, int(steps))
    return row.flops_per_example


def add_throughput(frame: pd.DataFrame, peaks: tuple[DevicePeak, ...]) -> pd.DataFrame:
    achieved, peak_tf, share, device, source = [], [], [], [], []
    units, per_step, per_s, joules, step_flops = [], [], [], [], []
    for row in frame.itertuples(index=False):
        # Each measure's factor, and why, is declared with it (models/measures.py).
        factor = FLOP_FACTORS.get(row.measure)
        rate = rate_of(row.family, json.loads(row.input_shape or "[]"), row.seq_len)
        timed = row.status == "ok" and row.median_ms > 0
        flops = flops_per_example(row) * row.batch * factor if factor is not None else math.nan
        value = flops / (row.median_ms / 1e3) / 1e12 if timed else math.nan
        items = row.batch * rate.per_example
        units.append(rate.unit)
        per_step.append(items)
        step_flops.append(flops)
        per_s.append(items / (row.median_ms / 1e3) if timed else math.nan)
        energy = _number(getattr(row, "energy_per_iteration_j", None))
        joules.append(energy / items if timed and items > 0 else math.nan)
        found = find_peak(row.gpu_model, peaks) if row.device == "gpu" else None
        top = found.tflops.get(row.precision) if found else None
        achieved.append(value)
        peak_tf.append(top if top else math.nan)
        share.append(value / top if top and not math.isnan(value) else math.nan)
        device.append(found.device if found else "")
        source.append(found.source if found else "")
    return frame.assign(achieved_tflops=achieved, peak_tflops=peak_tf, peak_share=share,
                        rate_unit=pd.Series(units, dtype=object, index=frame.index),
                        items_per_step=per_step, items_per_s=per_s, joules_per_item=joules,
                        flops_per_step=step_flops,
                        peak_device=pd.Series(device, dtype=object, index=frame.index),
                        peak_source=pd.Series(source, dtype=object, index=frame.index))
