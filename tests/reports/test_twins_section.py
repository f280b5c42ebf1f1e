"""The report's twins section (reports/sections/twins.py) from the twin scripts' JSON lines:
each side's fastest variant, the ratio against issue 60's ±5% bar, the measured cause where
both sides' kernels were traced, the commit, the last row of a case run twice, and the
cases not compared with their reason."""

from __future__ import annotations

import json
from pathlib import Path

from reports.render.build import build
from reports.sections import twins
from tests.report_fixtures import write_results


def write_twins(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    env = {"environment": {"gpu_model": "NVIDIA H200", "dlbench_commit": "ffa3cbd1e528"},
           "argv": []}
    base = {"model": "gpt2", "batch": 8, "steps": 1024, "precision": "bf16",
            "measure": "train_step", "status": "ok", "same_function": True}
    lines = [env,
             {**base, "variant": "eager", "dlbench_ms": 44.0, "hf_ms": 59.0, "ratio": 0.746},
             {**base, "variant": "compile", "dlbench_ms": 31.5, "hf_ms": 29.8, "ratio": 1.057},
             {"environment": {"gpu_model": "NVIDIA H200", "dlbench_commit": "7109374f54f3"},
              "argv": []},
             # the same case again, later: it replaces the row above
             {**base, "variant": "compile", "dlbench_ms": 25.7, "hf_ms": 28.0, "ratio": 0.918,
              "kernels": {"cause": "per step, dlbench minus hf: attention -2.42 ms"}},
             {**base, "model": "vit_b16", "variant": "eager", "dlbench_ms": 21.0,
              "hf_ms": 16.0, "ratio": 1.31,
              "kernels": {"cause": "per step, dlbench minus hf: gemm +3.2 ms"}},
             {**base, "model": "bert_base", "variant": "compile", "status": "failed",
              "reason": "RuntimeError: out of memory"}]
    path = folder / "hf_transformers_vs_dlbench.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def cells(table):
    return [[c.text for c in row] for row in table.rows]


def test_fastest_variants_their_ratio_verdict_cause_and_commit(tmp_path):
    write_twins(tmp_path / "twins")
    table, skipped = twins.twin_tables([tmp_path])
    rows = {(r[2], r[4]): r for r in cells(table)}
    gpt2 = rows[("gpt2", "train_step")]
    # compile's later row (25.7 against 28.0) replaced its first (31.5 against 29.8)
    assert gpt2[:5] == ["torch", "NVIDIA H200", "gpt2", "bf16", "train_step"]
    assert gpt2[5:9] == ["compile 25.7", "compile 28", "0.918", "dlbench faster"]
    assert gpt2[9] == "per step, dlbench minus hf: attention -2.42 ms"
    assert gpt2[10] == "7109374"
    vit = rows[("vit_b16", "train_step")]
    assert vit[7:10] == ["1.312", "dlbench slower", "per step, dlbench minus hf: gemm +3.2 ms"]
    assert table.rows[[r[2] for r in cells(table)].index("vit_b16")][7].kind == "fail"
    assert cells(skipped) == [["torch", "bert_base", "bf16", "compile", "failed",
                               "RuntimeError: out of memory"]]


def test_within_the_bar_is_said_so(tmp_path):
    path = write_twins(tmp_path)
    text = path.read_text(encoding="utf-8").replace('"hf_ms": 16.0', '"hf_ms": 20.5')
    path.write_text(text, encoding="utf-8")
    table, _ = twins.twin_tables([path])
    vit = next(r for r in cells(table) if r[2] == "vit_b16")
    assert vit[7:9] == ["1.024", "within ±5%"]


def test_other_files_are_not_twins(tmp_path):
    (tmp_path / "notes.ndjson").write_text('{"environment": {}}\n', encoding="utf-8")
    (tmp_path / "hf_transformers_vs_dlbench.jsonl").write_text("{}\n", encoding="utf-8")
    assert twins.twin_files([tmp_path]) == []
    assert twins.twin_tables([tmp_path]) == []


def test_the_report_has_a_twins_section_where_a_folder_holds_twins(tmp_path):
    results = write_results(tmp_path)
    report, _ = build([results], tmp_path / "plain")
    assert "twins" not in [s.key for s in report.sections]
    write_twins(results / "twins")
    report, _ = build([results], tmp_path / "with")
    section = next(s for s in report.sections if s.key == "twins")
    assert [t.key for t in section.tables] == ["twins", "twins-not-compared"]
    assert "## Twins" in (tmp_path / "with" / "report.md").read_text(encoding="utf-8")
