"""The Serving section (reports/sections/serving.py) on real serve rows (tests/data/
serving_rows, README there): a table per scenario with each framework's headline, LoadGen's
verdict and the float64 check, the CDF and Server figures written, and the tidy step
keeping each scenario's row (MultiStream and Server both serve batches of 8) apart. No
framework, no LoadGen run."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from reports.pipeline import tidy
from reports.pipeline.load import load
from reports.render.build import build
from reports.sections.serving import cdf_points, framework_styles, serve_rows, serving_tables

ROWS = Path(__file__).resolve().parents[1] / "data" / "serving_rows"


def rehosted(root: Path, host: str, edit: Callable[[dict], None] = lambda row: None) -> Path:
    """ROWS' serving rows as host ``host`` would have written them under ``root``, each row
    passed to ``edit`` first (a user's run beside a reference, or two hosts' references)."""
    folder = root / "serving-trim" / host
    folder.mkdir(parents=True, exist_ok=True)
    for source in ROWS.rglob("*_cpu.jsonl"):
        rows = [json.loads(line) for line in source.read_text().splitlines()]
        for row in rows:
            row["env"] = {**row["env"], "host": host}
            edit(row)
        (folder / source.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One report of the rows, written (a build costs seconds: built once)."""
    out = tmp_path_factory.mktemp("report")
    report, _ = build([ROWS], out)
    return report, out


def serving_section(report):
    return next(s for s in report.sections if s.key == "serving")


def test_tidy_keeps_every_scenario_s_row_apart_and_reruns_still_supersede(tmp_path):
    merged = tidy.tidy(load([ROWS]))
    serve = merged.frame[merged.frame["measure"] == "serve"]
    assert merged.superseded == 0 and len(serve) == 10
    assert sorted(serve.loc[serve["framework"] == "torch", "scenario"]) == [
        "Bursty", "MultiStream", "Offline", "Server", "SingleStream"]
    # MultiStream and Server share model and batch: only the scenario tells them apart.
    assert set(serve.loc[serve["batch"] == 8, "scenario"]) == {"MultiStream", "Server"}
    assert all(json.loads(text)["timing"] for text in serve["serving"])
    # A rerun of one scenario is still a rerun: the later row stands.
    source = next(ROWS.rglob("torch_cpu.jsonl"))
    first = json.loads(source.read_text().splitlines()[0])
    again = {**first, "started_at": "2099-01-01T00:00:00"}
    copy = tmp_path / "rows"
    shutil.copytree(ROWS, copy)
    (copy / "rerun.jsonl").write_text(json.dumps(again) + "\n")
    merged = tidy.tidy(load([copy]))
    assert merged.superseded == 1 and merged.superseded_ids == (first["case_id"],)


def test_the_serving_section_gives_each_scenario_s_headline_and_why_rows_failed(built):
    report, _ = built
    section = serving_section(report)
    tables = {t.title.split(" — ")[1].split(" (")[0]: t for t in section.tables}
    assert list(tables) == ["SingleStream", "MultiStream", "Offline", "Server", "Bursty"]

    def rows(scenario):
        table = tables[scenario]
        return {r[0].text: dict(zip(table.columns, (c.text for c in r))) for r in table.rows}

    # The numbers are the rows' LoadGen figures, formatted (reports/pipeline/cells.fmt_ms).
    single = rows("SingleStream")
    raw = {json.loads(line)["settings"]["framework"]: json.loads(line)
           for path in ROWS.rglob("*.jsonl") for line in path.read_text().splitlines()
           if json.loads(line)["scenario"] == "SingleStream"}
    p90 = raw["ort"]["serving"]["result"]["percentiles_ms"]["90.00"]
    assert single["ort"]["p90 ms"] == f"{p90:.2f}"
    assert single["ort"]["LoadGen"] == "VALID" and single["ort"]["float64"].startswith("✓ ")
    assert single["torch"]["Threads"] == "2" and single["torch"]["Queries"] == "662 (≥ 662)"
    assert rows("MultiStream")["ort"]["p99 ms / query"] == "29.10"
    assert rows("Offline")["ort"]["samples/s"] == "12204.1"
    assert rows("Offline")["ort"]["Queries"].startswith("1 × ")
    server = rows("Server")
    assert server["ort"]["QPS at p99 ≤ bound"] == "9718" and server["ort"]["bound ms"] == "15"
    assert server["ort"]["probes VALID"] == "1 of 4" and server["ort"]["Status"] == "ok"
    # The search's bracket: the smallest failing target above the answer (13,743 of the
    # probes 38,872 ✗, 9,718 ✓, 19,436 ✗, 13,743 ✗); with no answer, the lowest tried.
    assert server["ort"]["failed at QPS"] == "13743"
    assert server["torch"]["QPS at p99 ≤ bound"] == "none"
    assert server["torch"]["failed at QPS"] == "264.8"
    assert any("lies between the two" in note for note in tables["Server"].notes)
    assert server["torch"]["Status"].startswith("failed (no target QPS meets the p99 bound")
    # The unknown scenario's failures share one reason: said once, under the table.
    assert any("unknown scenario 'Bursty'" in note for note in tables["Bursty"].notes)
    # Serve rows stay out of the timing tables and the failures section.
    failures = [t for s in report.sections if s.key == "failures" for t in s.tables]
    assert not any("serve" in c.text for t in failures for r in t.rows for c in r)
    assert [p.key.split("-")[1] for p in section.plots] == ["cdf", "server"]


def test_the_cdf_runs_through_loadgen_s_points_and_the_figures_are_written(built):
    loaded = load([ROWS])
    ort = next(r.data for r in loaded.rows if r.data["scenario"] == "SingleStream"
               and r.data["settings"]["framework"] == "ort")
    points = cdf_points({"serving": ort["serving"]})
    assert [q for _, q in points] == pytest.approx([0.0, 0.5, 0.9, 0.95, 0.97, 0.99, 0.999, 1.0])
    assert [ms for ms, _ in points] == sorted(ms for ms, _ in points)
    report, out = built
    pngs = sorted(p.name for p in (out / "plots").glob("serving-*.png"))
    assert pngs == sorted(f"{p.key}.png" for p in serving_section(report).plots)
    assert len(pngs) == 2 and all((out / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    text = (out / "report.md").read_text()
    assert "## Serving (MLPerf LoadGen)" in text and "drawn through LoadGen's reported points" in text


def test_every_line_of_a_figure_has_a_style_of_its_own_and_its_framework_s_colour():
    """Four frameworks' 16 lines (as in ResNet-50's Server figure of the H200): a colour per
    framework, a marker per variant, a dashed line for the lower precisions, and no two
    lines alike, where one colour a line repeated itself after ten."""
    variants = {"torch": ("eager", "compile", "compile_reduce_overhead"), "jax": ("jit",),
                "tf": ("graph", "xla"), "ort": ("ort_all", "ort_cuda_graph")}
    rows = [{"framework": fw, "variant": v, "precision": p, "device": "gpu", "threads": 16}
            for fw, vs in variants.items() for v in vs for p in ("fp32", "bf16")]
    styles = framework_styles(rows)
    assert len(styles) == len(rows) == 16
    assert len({(s["color"], s["ls"], s["marker"]) for s in styles.values()}) == 16
    colours = {fw: {s["color"] for label, s in styles.items() if label.startswith(fw + " ")}
               for fw in variants}
    assert all(len(c) == 1 for c in colours.values())
    assert len(set().union(*colours.values())) == 4
    assert {s["ls"] for label, s in styles.items() if label.endswith("fp32")} == {"-"}
    assert {s["ls"] for label, s in styles.items() if label.endswith("bf16")} == {"--"}
    torch_markers = {s["marker"] for label, s in styles.items() if label.startswith("torch ")}
    assert len(torch_markers) == 3


def test_no_serve_rows_no_serving_rows(tmp_path):
    """The section is built only where serve rows exist (reports/render/build.py)."""
    from tests import report_fixtures as fx
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(fx.make_row("lenet_tiny", 1, "forward", "torch", "cpu", 1.0)) + "\n")
    assert serve_rows(tidy.tidy(load([path])).frame) == []


def test_rows_that_recorded_the_collector_s_pauses_get_a_full_gc_column(tmp_path):
    """suites/serving/collector.py: a run's full collections and the longest, in their own
    column where a row recorded them (a Server row: its answering probe's); tables of older
    rows go without it."""
    copy = tmp_path / "rows"
    shutil.copytree(ROWS, copy)
    pauses = {"collections": {"0": 40, "1": 4, "2": 2}, "longest_ms": {"0": 0.1, "1": 1.0,
              "2": 61.2}, "total_ms": 130.0}
    for path in copy.rglob("ort_cpu.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            if row["scenario"] == "SingleStream":
                row["serving"]["gc"] = pauses
            if row["scenario"] == "Server":
                for probe in row["serving"]["search"]["probes"]:
                    probe["gc"] = {**pauses, "collections": {"0": 1, "1": 0, "2": 0}}
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tables = {t.title.split(" — ")[1].split(" (")[0]: t
              for t in serving_tables(serve_rows(tidy.tidy(load([copy])).frame))}

    def cells(scenario):
        table = tables[scenario]
        return {r[0].text: dict(zip(table.columns, (c.text for c in r))) for r in table.rows}

    assert cells("SingleStream")["ort"]["full GCs"] == "2 (longest 61.2 ms)"
    assert cells("SingleStream")["torch"]["full GCs"] == "—"
    assert cells("Server")["ort"]["full GCs"] == "0"
    assert any("generation 2" in note for note in tables["SingleStream"].notes)
    assert "full GCs" not in tables["Offline"].columns


def test_your_serving_rows_are_compared_with_the_reference_s_by_their_headlines(tmp_path):
    """The real rows published as the reference; yours the same rows with the torch p90
    halved, its Offline rate doubled (time ratio 0.5 both: below 1 you are faster), ONNX
    Runtime's Server run on 4 threads (named beside its pair) and its MultiStream run
    INVALID (no figure, no pair). Failed rows (Bursty, torch's Server) pair nothing."""
    from reports import compare, publish
    from reports.sections.compare_serving import pair_serving

    reference = tmp_path / "published" / "cpu-ref"
    assert publish.main([str(ROWS), "--to", str(reference)]) == 0

    def edit(row: dict) -> None:
        result = (row.get("serving") or {}).get("result") or {}
        fw, scenario = row["settings"]["framework"], row["scenario"]
        if fw == "torch" and scenario == "SingleStream":
            result["percentiles_ms"]["90.00"] /= 2
        if fw == "torch" and scenario == "Offline":
            result["samples_per_second"] *= 2
        if fw == "ort" and scenario == "Server":
            row["settings"]["threads"] = 4
        if fw == "ort" and scenario == "MultiStream":
            result["valid"] = False

    loaded = load([rehosted(tmp_path / "results", "userbox", edit), reference])
    pairs, unmatched = pair_serving(*compare.split(loaded, (reference,)))
    by = {(p.yours["framework"], p.yours["scenario"]): p for p in pairs}
    assert sorted(by) == [("ort", "Offline"), ("ort", "Server"), ("ort", "SingleStream"),
                          ("torch", "MultiStream"), ("torch", "Offline"),
                          ("torch", "SingleStream")] and unmatched == 0
    assert by[("torch", "SingleStream")].time_ratio == pytest.approx(0.5)
    assert by[("torch", "Offline")].time_ratio == pytest.approx(0.5)
    assert by[("torch", "MultiStream")].time_ratio == pytest.approx(1.0)
    assert by[("ort", "Server")].differs() == ("threads 4 vs 2",)
    assert by[("torch", "SingleStream")].differs() == ()
    text, tables = compare.section_parts(loaded, (reference,))
    assert any(t.key == "compare-serving" for t in tables)
    assert any(line.startswith("6 of your serving rows have a reference row") for line in text)


def test_the_server_note_names_the_prepared_sizes_where_the_rows_recorded_them(tmp_path):
    """Rows that recorded their batcher's prepared sizes say them under the Server table;
    the test data's rows, written before the sizes were recorded, say none."""
    def server_notes(root):
        tables = {t.title.split(" — ")[1].split(" (")[0]: t
                  for t in serving_tables(serve_rows(tidy.tidy(load([root])).frame))}
        return [n for n in tables["Server"].notes if n.startswith("Server's batcher")]

    assert not any("padded" in note for note in server_notes(ROWS))
    copy = tmp_path / "rows"
    shutil.copytree(ROWS, copy)
    for path in copy.rglob("*_cpu.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            if row["scenario"] == "Server" and row["serving"].get("settings"):
                row["serving"]["settings"]["server_batch_sizes"] = [1, 2, 4, 8]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert any(", padded to the smallest of sizes 1, 2, 4, 8 that holds it; the search: at most "
               in note for note in server_notes(copy))


def test_server_notes_that_differ_between_rows_name_the_frameworks_they_describe(tmp_path):
    """A folder that merges two commits' rows (one batcher with sizes, one without) gives
    one note per setting, each naming whose rows it describes; one setting names none."""
    copy = tmp_path / "rows"
    shutil.copytree(ROWS, copy)
    [torch_rows] = copy.rglob("torch_cpu.jsonl")
    rows = [json.loads(line) for line in torch_rows.read_text().splitlines()]
    for row in rows:
        if row["scenario"] == "Server" and row["serving"].get("settings"):
            row["serving"]["settings"]["server_batch_sizes"] = [1, 2, 4, 8]
    torch_rows.write_text("".join(json.dumps(row) + "\n" for row in rows))
    [server] = [t for t in serving_tables(serve_rows(tidy.tidy(load([copy])).frame))
                if " — Server (" in t.title]
    notes = [n for n in server.notes if n.startswith("Server's batcher")]
    assert len(notes) == 2
    assert [n.endswith("(torch rows)") for n in notes] == ["sizes 1, 2, 4, 8" in n for n in notes]
    assert sum(n.endswith("(ort rows)") for n in notes) == 1
    [same] = [t for t in serving_tables(serve_rows(tidy.tidy(load([ROWS])).frame))
              if " — Server (" in t.title]
    assert not any(n.endswith("rows)") for n in same.notes if n.startswith("Server's batcher"))


def test_each_pair_sets_the_hosts_single_core_probes_side_by_side(tmp_path):
    """Reference rows that carry a core probe of 2 ms; yours the same rows, torch's with a
    probe of 3 ms, ONNX Runtime's with none: torch's pairs say 1.50×, ONNX Runtime's '—',
    and the paragraph gives the median over the pairs that have both."""
    from reports import compare
    from reports.sections.compare_serving import pair_serving

    def probes(core_ms: dict[str, float]) -> Callable[[dict], None]:
        def edit(row: dict) -> None:
            fw = row["settings"]["framework"]
            if row.get("serving") and fw in core_ms:
                row["serving"]["host_probe"] = {"core_ms": core_ms[fw], "wakeup_us": None,
                                                "readings": 5}
        return edit

    reference = rehosted(tmp_path / "reference", "refbox", probes({"torch": 2.0, "ort": 2.0}))
    mine = rehosted(tmp_path / "results", "userbox", probes({"torch": 3.0}))
    loaded = load([mine, reference])
    pairs, _ = pair_serving(*compare.split(loaded, (reference,)))
    ratios = [p.core_ratio for p in pairs if p.yours["framework"] == "torch"]
    assert ratios and all(r == pytest.approx(1.5) for r in ratios)
    assert {p.core_ratio for p in pairs if p.yours["framework"] == "ort"} == {None}
    text, tables = compare.section_parts(loaded, (reference,))
    torch_pairs = sum(p.yours["framework"] == "torch" for p in pairs)
    assert any(f"single-core probe took 1.50× the reference host's (median over {torch_pairs} "
               "pairs)" in line for line in text)
    [table] = [t for t in tables if t.key == "compare-serving"]
    column = table.columns.index("Core probe")
    cells = {(row[2].text.split()[0], row[column].text) for row in table.rows}
    assert {framework for framework, _ in cells} == {"torch", "ort"}
    assert all(text == ("1.50×" if framework == "torch" else "—") for framework, text in cells)


def test_a_pair_whose_runs_differ_names_the_run_settings_that_differ(tmp_path):
    """Yours: ONNX Runtime's Server searched in 8 runs with sizes 1, 2, 4 and 8 where the
    reference's searched in 4 with no sizes recorded: the pair names both, so its ratio is
    not read as like for like; the pairs whose runs match name nothing."""
    from reports import compare
    from reports.sections.compare_serving import pair_serving

    def searched_longer(row: dict) -> None:
        settings = (row.get("serving") or {}).get("settings")
        if row["scenario"] == "Server" and settings:
            settings.update(server_search_runs=8, server_batch_sizes=[1, 2, 4, 8])

    rehosted(tmp_path / "reference", "refbox")
    loaded = load([rehosted(tmp_path / "results", "userbox", searched_longer),
                   tmp_path / "reference"])
    pairs, _ = pair_serving(*compare.split(loaded, (tmp_path / "reference",)))
    by = {(p.yours["framework"], p.yours["scenario"]): p for p in pairs}
    assert by[("ort", "Server")].differs() == ("sizes 1,2,4,8 vs —", "search runs 8 vs 4")
    assert all(p.differs() == () for key, p in by.items() if key[1] != "Server")
    # The paragraph's mean is over the pairs whose settings all agree.
    text, _ = compare.section_parts(loaded, (tmp_path / "reference",))
    alike = sum(not p.differs() for p in pairs)
    assert any(f"; in the {alike} whose settings all agree, your time per answer is 1.00×"
               in line and "; 1 differ in a setting, named beside each." in line for line in text)
