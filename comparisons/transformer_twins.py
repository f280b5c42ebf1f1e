"""What the transformer twins (issue 60: Hugging Face for PyTorch, keras-hub for JAX and
TensorFlow, ONNX Runtime's optimizer on the Hugging Face export) share, framework-free:
the sizes a twin's config needs read from dlbench's IR, the models and shapes they run,
the ±5% bar and its table of fastest variants, the command line's list parsing, the
results file and the exit status. Where a gap's cause is measured: comparisons/kernel_gap.py."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models import ir
from models.zoo import get_model

MODELS = ("gpt2", "bert_base", "vit_b16")
# The transformers-gpu suite's shapes (suites/transformers-gpu.toml): GPT-2 8×1024, BERT
# 32×512, ViT-B/16 128 images (197 tokens).
SUITE_BATCH = {"gpt2": 8, "bert_base": 32, "vit_b16": 128}
TOLERANCE = 0.05   # the bar: dlbench within ±5% of its twin
# models.reference's float64 runs on the host: only where the batch's forward is at most
# this many FLOPs (the tiny models; GPT-2 1×128 is 3.2e10, about a minute).
FLOAT64_MAX_FLOPS = 2e9


@dataclass(frozen=True)
class Shape:
    """The sizes a twin's config needs, read from dlbench's IR."""

    family: str        # gpt2, bert or vit
    layers: int
    width: int
    heads: int
    vocab: int         # token vocabulary (GPT-2, BERT) or classes (ViT)
    positions: int     # position table rows (ViT: tokens, the class token included)
    image: int = 0     # ViT's image side and patch
    patch: int = 0
    eps: float = 0.0   # every LayerNorm's epsilon (one per family in models/families)


def shape_of(model: ir.Model) -> Shape:
    nodes = list(ir.walk(model.body))
    attention = [n for n in nodes if isinstance(n, ir.SelfAttention)]
    position = next(n for n in nodes if isinstance(n, ir.PositionEmbedding))
    patch = next((n for n in nodes if isinstance(n, ir.PatchEmbedding)), None)
    eps = {n.eps for n in nodes if isinstance(n, ir.LayerNorm)}
    if len(eps) != 1:
        raise ValueError(f"{model.name}: LayerNorm epsilons {sorted(eps)}, a twin takes one")
    first = attention[0]
    if patch is not None:
        classes = [n for n in nodes if isinstance(n, ir.Dense)][-1].out_features
        return Shape("vit", len(attention), first.dim, first.heads, classes, position.positions,
                     model.input.shape[-1], patch.patch, eps.pop())
    vocab = next(n for n in nodes if isinstance(n, ir.Embedding)).vocab
    return Shape("gpt2" if first.causal else "bert", len(attention), first.dim, first.heads,
                 vocab, position.positions, eps=eps.pop())


def is_transformer(model: ir.Model) -> bool:
    return model.family == "transformer" and any(isinstance(n, ir.SelfAttention)
                                                 for n in ir.walk(model.body))


def model_for(name: str, steps: int | None) -> ir.Model:
    """The zoo's model, at ``steps`` tokens where given (GPT-2 and BERT)."""
    if steps is None or name == "vit_b16" or name.endswith("_tiny"):
        return get_model(name)
    return get_model(f"{name}:s={steps}")


def relative_difference(ours: np.ndarray, theirs: np.ndarray,
                        valid: np.ndarray | None = None) -> float:
    """The largest difference over the largest magnitude of ``theirs``, on valid steps
    (float64 host arrays; logits of padded steps are unspecified by the IR)."""
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if valid is not None:
        a, b = a[valid], b[valid]
    return float(np.abs(a - b).max() / (np.abs(b).max() + 1e-30))


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [item for item in text.split(",") if item]
    if unknown := sorted(set(items) - set(allowed)):
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {allowed}")
    return [item for item in allowed if item in items]   # train_step timed last


def fastest_pairs(rows: list[dict[str, Any]], twin: str) -> list[dict[str, Any]]:
    """Per model, precision and measure: each side's fastest variant, and their ratio (the
    issue's bar). ``twin`` names the twin's fields (``{twin}_ms``); ``rows`` gives the two
    rows the pair came from (dlbench's, the twin's)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] == "ok":
            groups.setdefault((row["model"], row["precision"], row["measure"]), []).append(row)
    out = []
    for (model, precision, measure_name), group in groups.items():
        ours = min(group, key=lambda r: r["dlbench_ms"])
        theirs = min(group, key=lambda r: r[f"{twin}_ms"])
        ratio = ours["dlbench_ms"] / theirs[f"{twin}_ms"]
        out.append({"model": model, "precision": precision, "measure": measure_name,
                    "dlbench_variant": ours["variant"], "dlbench_ms": ours["dlbench_ms"],
                    f"{twin}_variant": theirs["variant"], f"{twin}_ms": theirs[f"{twin}_ms"],
                    "ratio": ratio, "within": abs(ratio - 1) <= TOLERANCE,
                    "rows": (ours, theirs)})
    return out


def print_table(rows: list[dict[str, Any]], twin: str, label: str) -> None:
    """Every row, then each side's fastest variant against the ±5% bar."""
    print(f"\n{'model':<10} {'precision':<9} {'variant':<8} {'measure':<10} {'dlbench ms':>11} "
          f"{label + ' ms':>11} {'ratio':>6}  verdict")
    for row in rows:
        if row["status"] != "ok":
            print(f"{row['model']:<10} {row['precision']:<9} {row['variant']:<8} "
                  f"{row['measure']:<10} {row['status']}: {row['reason']}")
            continue
        verdict = "ok" if abs(row["ratio"] - 1) <= TOLERANCE else f"outside ±{TOLERANCE:.0%}"
        if not row["same_function"]:
            verdict += ", outputs DIFFER"
        print(f"{row['model']:<10} {row['precision']:<9} {row['variant']:<8} "
              f"{row['measure']:<10} {row['dlbench_ms']:11.3f} {row[f'{twin}_ms']:11.3f} "
              f"{row['ratio']:6.3f}  {verdict}")
    print("\nfastest variant of each side (the issue's ±5% bar):")
    for pair in fastest_pairs(rows, twin):
        print(f"{pair['model']:<10} {pair['precision']:<9} {pair['measure']:<10} dlbench "
              f"{pair['dlbench_variant']} {pair['dlbench_ms']:.3f} ms, {label} "
              f"{pair[f'{twin}_variant']} {pair[f'{twin}_ms']:.3f} ms, ratio "
              f"{pair['ratio']:.3f} "
              f"{'ok' if pair['within'] else 'OUTSIDE: see the attention backends and a profile'}")


def wants_float64(choice: str, flops: float) -> bool:
    """Whether a case is checked against float64: ``--float64 yes``, or ``auto`` where the
    batch's forward is at most ``FLOAT64_MAX_FLOPS``."""
    return choice == "yes" or (choice == "auto" and flops <= FLOAT64_MAX_FLOPS)


class ResultsLog:
    """A twin's JSON Lines file in ``folder`` (none where ``folder`` is None): a first line
    with the environment (the adapter's, plus dlbench's commit, the host and the time, as
    every benchmark row has them) and the arguments, then each row as it ends, flushed.
    The scripts name it ``<twin>_vs_dlbench.ndjson``: the report's twins section reads those
    (reports/sections/twins.py), and its benchmark-row loader, which reads ``*.jsonl``,
    passes them by."""

    def __init__(self, folder: Path | None, name: str, env: dict[str, Any],
                 argv: list[str] | None):
        self.out = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self.out = (folder / name).open("a")
            from datetime import datetime

            from suites.instruments.environment import dlbench_commit, host_id
            env = {**env, "dlbench_commit": dlbench_commit(), "host": host_id(),
                   "started_at": datetime.now().isoformat(timespec="seconds")}
            self.write({"environment": env, "argv": sys.argv[1:] if argv is None else argv})

    def write(self, row: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.write(json.dumps(row, default=str) + "\n")
            self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def exit_status(rows: list[dict[str, Any]]) -> int:
    """1 where a twin computed another function than dlbench (said on stderr), else 0."""
    differing = sorted({r["model"] for r in rows if r["status"] == "ok" and not r["same_function"]})
    if differing:
        print(f"error: outputs differ for {', '.join(differing)}", file=sys.stderr)
        return 1
    return 0
