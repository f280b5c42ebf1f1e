"""The README's "one model, several GPUs" table (reports/pipeline/gpus.py) on hand-made rows."""

from __future__ import annotations

import math

import pandas as pd

from reports.pipeline.gpus import several_gpus_table


def row(hardware: str, framework: str, model: str, median: float, device_ms: float = math.nan,
        variant: str = "eager", **changes) -> dict:
    return {"hardware": hardware, "framework": framework, "model": model, "variant": variant,
            "device": "gpu", "status": "ok", "measure": "gradient", "batch": 16,
            "precision": "fp32", "median_ms": median, "device_median_ms": device_ms, **changes}


def seed(hardware: str, model: str, value: float, **changes) -> dict:
    return {"study": "cnn-benchmarks", "source_table": model, "hardware": hardware,
            "framework": "Torch7", "model": model, "batch": 16, "measure": "gradient",
            "value_ms": value, "note": "", **changes}


def test_each_gpu_and_framework_gets_its_fastest_fp32_row_beside_the_seed_gpus():
    frame = pd.DataFrame([
        row("H100", "torch", "resnet50", 26.6, 21.5),
        row("H100", "torch", "resnet50", 30.0, 25.0, variant="compile"),     # slower variant
        row("H100", "torch", "resnet50", 12.0, precision="tf32"),             # not fp32
        row("H100", "torch", "resnet50", 5.0, batch=64),                      # not batch 16
        row("H200", "torch", "resnet50", 22.1),
        row("H200", "jax", "vgg16", 37.3, 35.5),
        row("H200", "jax", "lenet", 0.4),                                     # no seed row
    ])
    hist = pd.DataFrame([
        seed("Pascal Titan X", "resnet50", 103.58),
        seed("Pascal Titan X", "resnet50", 105.0),                           # older cuDNN
        seed("Pascal Titan X", "vgg16", 128.62),
        seed("CPU: Dual Xeon E5-2630 v3", "resnet50", 6627.25),               # not a GPU
        seed("GTX 1080", "resnet50", 149.82, measure="forward"),             # not the total
    ])
    table = several_gpus_table(frame, hist)
    assert table.columns == ("GPU", "Framework", "resnet50", "vgg16")
    texts = [tuple(c.text for c in r) for r in table.rows]
    assert texts == [("H100", "torch", "26.60 (dev 21.50)", "—"),
                     ("H200", "jax", "—", "37.30 (dev 35.50)"),
                     ("H200", "torch", "22.10", "—"),
                     ("Pascal Titan X", "Torch7 (historical)", "103.58", "128.62")]


def test_no_table_without_a_network_that_a_published_and_a_seed_gpu_both_ran():
    hist = pd.DataFrame([seed("GTX 1080", "resnet50", 149.82)])
    assert several_gpus_table(pd.DataFrame([row("H200", "jax", "lenet", 0.4)]), hist) is None
    # A CPU-only folder: no GPU row at all.
    assert several_gpus_table(pd.DataFrame([row("EPYC", "jax", "resnet50", 900.0, device="cpu")]),
                              hist) is None


def test_a_gpu_published_twice_is_read_from_its_first_folder_only():
    from reports.pipeline.gpus import one_run_per_gpu
    first = pd.DataFrame([row("H200", "torch", "resnet50", 22.3), row("H100", "torch", "resnet50", 26.6)])
    second = pd.DataFrame([row("H200", "torch", "resnet50", 21.0),            # a luckier run
                           row("H200", "jax", "resnet50", 24.6),
                           row("A100", "torch", "resnet50", 40.0)])
    kept = one_run_per_gpu([first, second])
    assert sorted(zip(kept["hardware"], kept["framework"], kept["median_ms"])) == [
        ("A100", "torch", 40.0), ("H100", "torch", 26.6), ("H200", "torch", 22.3)]
