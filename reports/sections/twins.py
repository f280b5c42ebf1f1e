"""The twins section: each adapter against its framework's own model (comparisons/, issue
60's bar: each framework's fastest variant within ±5% of its twin's fastest, or the measured
cause of the gap), from the twin scripts' JSON lines found under the report's inputs.

The scripts append an environment line per invocation (framework versions, GPU, dlbench's
commit), then a row per case; a published folder keeps them as ``*_vs_dlbench.ndjson``
(the report's row loader reads ``*.jsonl`` and would refuse them). Where a case was run
more than once, its last row counts. The cause is the dlbench-fastest row's kernel
comparison (``--kernels``: comparisons/kernel_gap.py), where it was traced."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from comparisons.transformer_twins import TOLERANCE, fastest_pairs
from reports.render.table import Table, cell

TITLE = "Twins: each adapter against its framework's own model"
# A twin script's results file -> the twin's name, its rows' time field and the framework
# (None: each row's ``backend``, keras-hub's two).
TWINS = {"hf_transformers_vs_dlbench": ("Hugging Face transformers", "hf_ms", "torch"),
         "keras_hub_vs_dlbench": ("keras-hub", "keras_ms", None),
         "ort_hf_vs_dlbench": ("ONNX Runtime's optimizer on the Hugging Face export", "twin_ms",
                               "ort")}
SUFFIX = ".ndjson"
BACKEND = {"jax": "jax", "tensorflow": "tf"}
PARAGRAPHS = (
    "Each twin is the same network as its framework's users write it (Hugging Face "
    "transformers for PyTorch, keras-hub for JAX and TensorFlow, ONNX Runtime's own "
    "optimizer on the Hugging Face export), given dlbench's canonical weights and checked to "
    "compute dlbench's function before both are timed in A-B-B-A order "
    "(docs/user-guide.md, twins). Ratio: dlbench's time over the twin's, each side's "
    f"fastest variant; the bar is ±{TOLERANCE:.0%}. Cause: where both sides' kernels were "
    "traced (--kernels), dlbench's step minus the twin's by kind of kernel and outside "
    "kernels, largest first.",)


def twin_files(paths: Sequence[Path]) -> list[Path]:
    """Every ``<twin>_vs_dlbench.ndjson`` under ``paths`` (files or folders), sorted."""
    found: list[Path] = []
    for path in paths:
        candidates = [path] if path.is_file() else sorted(path.rglob(f"*{SUFFIX}"))
        found += [p for p in candidates
                  if p.name.endswith(SUFFIX) and p.name[:-len(SUFFIX)] in TWINS]
    return sorted(set(found))


def read_twins(files: Iterable[Path]) -> list[dict[str, Any]]:
    """The rows of ``files``, each with its framework, twin, time field and commit (from
    the environment line before it); the last row of each case."""
    latest: dict[tuple, dict[str, Any]] = {}
    for path in files:
        twin, field, fixed = TWINS[path.name[:-len(SUFFIX)]]
        env: dict[str, Any] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if "environment" in row:
                env = row["environment"]
                continue
            framework = fixed or BACKEND.get(row.get("backend", ""), row.get("backend", ""))
            row = {**row, "framework": framework, "twin": twin, "field": field,
                   "commit": str(env.get("dlbench_commit", ""))[:7],
                   "gpu": env.get("gpu_model") or "CPU"}
            latest[(framework, row["model"], row["precision"], row["variant"],
                    row["measure"], row["gpu"])] = row
    return list(latest.values())


def _verdict(pair: dict[str, Any]) -> str:
    if pair["within"]:
        return f"within ±{TOLERANCE:.0%}"
    return "dlbench faster" if pair["ratio"] < 1 else "dlbench slower"


def twins_table(rows: Sequence[dict[str, Any]]) -> Table | None:
    """Per framework, GPU, model, precision and measure: each side's fastest variant
    (comparisons/transformer_twins.py ``fastest_pairs``, the scripts' own closing table),
    the ratio, the verdict against the bar, the measured cause (the dlbench-fastest row's
    kernel comparison) and the commits."""
    sides: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        sides.setdefault((row["framework"], row["gpu"], row["field"]), []).append(row)
    pairs = sorted(((framework, gpu, pair) for (framework, gpu, field), group in sides.items()
                    for pair in fastest_pairs(group, field.removesuffix("_ms"))),
                   key=lambda item: (item[0], item[1], item[2]["model"], item[2]["precision"],
                                     item[2]["measure"]))
    if not pairs:
        return None
    body = []
    for framework, gpu, pair in pairs:
        ours, theirs = pair["rows"]
        verdict = _verdict(pair)
        commits = sorted({ours["commit"], theirs["commit"]} - {""})
        body.append((cell(framework), cell(gpu), cell(pair["model"]), cell(pair["precision"]),
                     cell(pair["measure"]),
                     cell(f"{ours.get('dlbench_variant') or ours['variant']} "
                          f"{ours['dlbench_ms']:.3g}"),
                     cell(f"{theirs['variant']} {theirs[theirs['field']]:.3g}"),
                     cell(f"{pair['ratio']:.3f}",
                          kind="fail" if verdict == "dlbench slower" else ""),
                     cell(verdict), cell((ours.get("kernels") or {}).get("cause", "")),
                     cell(", ".join(commits) or "not recorded")))
    twins = sorted({r["twin"] for r in rows})
    return Table("twins", "Fastest variant against fastest variant (ms, wall medians)",
                 ("Framework", "GPU", "Model", "Precision", "Measure", "dlbench", "Twin",
                  "Ratio", "Verdict", "Measured cause", "Commit"),
                 tuple(body), numeric=(False,) * 7 + (True,) + (False,) * 3,
                 notes=(f"Twins: {'; '.join(twins)}.",))


def not_compared_table(rows: Sequence[dict[str, Any]]) -> Table | None:
    """The cases that were not timed, with their reason (a twin that computes another
    function, a variant the framework refuses, a failure)."""
    body = sorted({(r["framework"], r["model"], r["precision"], r["variant"], r["status"],
                    str(r.get("reason", ""))[:200]) for r in rows if r.get("status") != "ok"})
    if not body:
        return None
    return Table("twins-not-compared", "Not compared", ("Framework", "Model", "Precision",
                                                         "Variant", "Status", "Reason"),
                 tuple(tuple(cell(v) for v in r) for r in body))


def twin_tables(paths: Sequence[Path]) -> list[Table]:
    rows = read_twins(twin_files(paths))
    return [t for t in (twins_table(rows), not_compared_table(rows)) if t is not None]
