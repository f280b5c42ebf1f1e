"""The Serving section's generation tables (reports/sections/serving.py) on real generate
rows (tests/data/generate_rows, README there): per model a table of each framework's TTFT,
TPOT, tokens/s and float64 check, unsupported rows with their reason, and generate rows
kept out of the step tables. No framework, no LoadGen run."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.pipeline import tidy
from reports.pipeline.load import load
from reports.render.build import build

ROWS = Path(__file__).resolve().parents[1] / "data" / "generate_rows"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build([ROWS], tmp_path_factory.mktemp("report"))[0]


def test_generation_tables_give_ttft_tpot_tokens_per_second_and_the_float64_check(report):
    section = next(s for s in report.sections if s.key == "serving")
    assert any("Generation" in p for p in section.paragraphs)
    tables = {t.title.split(" — ")[0]: t for t in section.tables}
    assert sorted(tables) == ["bert_tiny", "gpt2_tiny", "lenet_tiny"]
    table = tables["gpt2_tiny"]
    assert table.columns[4:9] == ("TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms",
                                  "tokens/s")
    rows = {(r[0].text, r[2].text): r for r in table.rows}
    assert sorted(rows) == [(fw, p) for fw in ("jax", "tf", "torch") for p in ("bf16", "fp32")]
    for row in rows.values():
        cells = [c.text for c in row]
        ttft50, ttft99, tpot50, tpot99 = (float(c) for c in cells[4:8])
        assert 0 < ttft50 <= ttft99 and 0 < tpot50 <= tpot99 and float(cells[8]) > 0
        assert cells[9] == "8 + 8" and cells[10] == "64" and cells[11] == "VALID"
        assert cells[12].startswith("✓ ") and "tokens as float64" in cells[12], cells[12]
        assert cells[13] == "ok"
    assert "8/8 tokens as float64" in rows[("torch", "fp32")][12].text
    bert = tables["bert_tiny"].rows
    assert len(bert) == 3 and all("not a decoder-only model" in r[13].title or
                                  "not a decoder-only model" in r[13].text for r in bert)


def test_generate_rows_stay_out_of_the_step_tables(report):
    merged = tidy.tidy(load([ROWS]))
    assert list(merged.frame["measure"]) == ["generate"] * 12 and merged.superseded == 0
    # Only the environments' table and the serving section's: no step, ranking or
    # failure table takes them in.
    assert {s.key: len(s.tables) for s in report.sections if s.tables} == {"overview": 1,
                                                                          "serving": 3}
