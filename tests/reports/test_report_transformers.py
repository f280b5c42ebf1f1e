"""The Transformers section (reports/sections/practice.py, reports/pipeline/peaks.py): tokens/s
(images/s for ViT), model FLOP utilisation with attention counted, peak memory, J/token and
the attention implementation, on synthetic rows; no framework."""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.analysis import analyse
from models.zoo import get_model
from reports.pipeline.load import load
from reports.render.build import make_report
from tests import report_fixtures as fx

GPU = "NVIDIA H100 80GB HBM3"
H100_BF16_PEAK = 989.5                            # reports/data/device_peaks.csv, H100 SXM
COUNTER = "NVML total energy counter over 4.10 s of the case running"
FLASH = "flash (aten::_scaled_dot_product_flash_attention)"
ADAMW = "AdamW lr=0.0001 (decoupled, every parameter): torch.optim.AdamW, foreach"


def info(model: str, seq_len: int | None = None) -> dict:
    stats = analyse(get_model(model))
    out = {"family": "transformer", "params": stats.params,
           "flops_per_example": stats.flops, "input_shape": list(stats.input_shape)}
    return out | ({"seq_len": seq_len} if seq_len else {})


def row(model, batch, measure, device, median, *, seq_len=None, energy_j=None,
        attention="", suite="transformers-gpu", precision="bf16", **kw):
    extra = {"attention": attention} if attention else {}
    if energy_j is not None:
        extra |= {"energy_per_iteration_j": energy_j, "energy_source": COUNTER,
                  "gpu_energy_power_w": energy_j / median * 1e3}
    out = fx.make_row(model, batch, measure, "torch", device, median, precision=precision,
                      threads=4, suite=suite, timing_extra=extra, **kw)
    out["model_info"] = info(model, seq_len)
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("transformers") / "results"
    root.mkdir()
    gpt2_train = row("gpt2", 8, "train_step", "gpu", 100.0, seq_len=1024, energy_j=30.0,
                     attention=FLASH, peak_bytes=40 * 2**30)
    gpt2_train["timing"]["optimizer"] = ADAMW
    # A case whose worker died before building the model: the runner's row, no model_info.
    died = row("gpt2:s=16384", 1, "forward", "gpu", None, seq_len=16384, status="failed",
               reason="worker process died (it was killed by SIGABRT)")
    del died["model_info"]
    rows = [gpt2_train, died,
            row("vit_b16", 128, "forward", "gpu", 50.0, energy_j=20.0, attention=FLASH),
            row("gpt2:s=4096", 2, "forward", "gpu", None, seq_len=4096, status="oom",
                reason="CUDA out of memory. Tried to allocate 12.00 GiB"),
            # BERT's IMDB-like lengths: a batch padded to 11 of its 16 steps
            row("bert_tiny", 4, "forward", "cpu", 2.0, seq_len=11, suite="transformers-cpu",
                precision="fp32", attention="math (aten::_scaled_dot_product_attention_math)")]
    fx._write(root / "rows.jsonl", rows)
    return make_report(load([root]))


def section(report):
    return next(s for s in report.sections if s.key == "transformers")


def table(report, title):
    return next(t for t in section(report).tables if t.title == title)


def cells_of(table, index: int = 0) -> dict[str, str]:
    return {c: cell.text for c, cell in zip(table.columns, table.rows[index])}


def frame_row(report, model):
    frame = report.frame
    return frame[frame["model"] == model].iloc[0]


def test_gpt2_mfu_counts_attention_as_palm_does(report):
    """By hand from the architecture (PaLM appendix B): per token, 2N of the matrix
    products (12 layers of 12·d² weights, the tied head's d·V) plus the attention's 4·L·T·d
    forward; a training step is 3 ×."""
    d, layers, vocab, steps = 768, 12, 50257, 1024
    forward = steps * (2 * layers * 12 * d * d + 2 * d * vocab) + layers * 4 * steps * steps * d
    r = frame_row(report, "gpt2")
    assert r["flops_per_step"] == 3 * 8 * forward
    assert r["achieved_tflops"] == pytest.approx(3 * 8 * forward / 0.1 / 1e12)
    assert r["peak_share"] == pytest.approx(3 * 8 * forward / 0.1 / 1e12 / H100_BF16_PEAK)
    assert r["rate_unit"] == "tokens" and r["items_per_s"] == pytest.approx(8 * 1024 / 0.1)
    assert r["joules_per_item"] == pytest.approx(30.0 / (8 * 1024))


def test_the_gpt2_table_shows_tokens_mfu_memory_energy_and_attention(report):
    t = table(report, f"gpt2 on {GPU}")
    got = cells_of(t)
    assert got["Tokens/s"] == "81,920"
    assert got["Attention"] == FLASH
    assert got["Peak memory (GiB)"] == "40"
    assert got["J/token"] == "0.00366"
    assert got["Utilisation"] == f"{frame_row(report, 'gpt2')['peak_share']:.1%}"


def test_vit_counts_images(report):
    got = cells_of(table(report, f"vit_b16 on {GPU}"))
    assert got["Images/s"] == "2,560" and got["J/image"] == "0.156"


def test_an_out_of_memory_length_is_a_row(report):
    got = cells_of(table(report, f"gpt2:s=4096 on {GPU}"))
    assert got["Median (ms)"] == "OOM" and got["Tokens/s"] == "—"


def test_a_padded_batch_counts_the_tokens_and_flops_of_its_padded_length(report):
    r = frame_row(report, "bert_tiny")
    model = get_model("bert_tiny")
    at_11 = analyse(replace(model, input=replace(model.input, shape=(11,)))).flops
    assert at_11 < analyse(model).flops
    assert r["items_per_step"] == 4 * 11 and r["flops_per_step"] == 4 * at_11
    assert r["items_per_s"] == pytest.approx(44 / 2e-3)


def test_transformer_rows_stay_out_of_the_practice_section(report):
    """Also the row written without model_info: its family is the zoo's."""
    assert all(s.key != "practice" for s in report.sections)
    got = cells_of(table(report, f"gpt2:s=16384 on {GPU}"))
    assert got["Median (ms)"].startswith("failed") and got["Tokens/s"] == "—"


def test_the_training_steps_optimizer_is_named(report):
    """The optimizer the row records reaches the tidy frame and the table's notes."""
    assert frame_row(report, "gpt2")["optimizer"] == ADAMW
    assert frame_row(report, "vit_b16")["optimizer"] == ""
    notes = [t.notes for t in section(report).tables if t.title.startswith("gpt2 ")]
    assert any(f"torch: {ADAMW}" in note for group in notes for note in group)
