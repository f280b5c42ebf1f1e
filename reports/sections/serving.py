"""Serving under MLPerf LoadGen (``python -m suites run serving-cpu``, suites/serving/): per
device, model and scenario a table of each framework's headline, the settings that decide
it and the float64 check of the served outputs; a latency CDF per framework for
SingleStream and p99 latency against target QPS for Server's search; per device and model
a table of greedy generation (``generate`` rows: TTFT, TPOT, tokens/s and the float64 check
of every step).

The figures are LoadGen's, read from its logs into each ``serve`` row's ``serving`` block
(suites/serving/loadgen_log.py): SingleStream's p90 latency per sample, MultiStream's p99
per 8-sample query, Offline's samples per second, and Server's answer, the largest target
QPS whose run LoadGen called VALID under the p99 bound (suites/serving/search.py), with
every probe of the search. A failed or unsupported row keeps its place in the table with
its reason; a run LoadGen called INVALID says why in its LoadGen column.

Cold starts (the rows of a suite's ``[[cold_start]]`` tables, scenario ``ColdStart``,
suites/serving/cold_start.py) get a table of their own: per framework, model and device the
median over the repeats of the total, from the spawn of a fresh process to its first checked
answer, and of each phase's own seconds.

The CDF is drawn through the points LoadGen reports (minimum, p50, p90, p95, p97, p99,
p99.9, maximum): the rows hold no per-query latencies (LoadGen writes those only in its
trace, which the harness leaves off), so between two points the line is a straight join,
not a measurement."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from models.measures import SERVE  # noqa: E402
from reports.pipeline.cells import MISSING, failure_cell, fmt_ms  # noqa: E402
from reports.render.plots import Plot, _png, _safe, slug  # noqa: E402
from reports.render.table import Cell, Table  # noqa: E402
from suites.serving.scenarios import COLD_START, SCENARIOS  # noqa: E402  (plain data: no LoadGen)

TITLE = "Serving (MLPerf LoadGen)"
PARAGRAPHS = (
    "Each framework serves the model under MLPerf Inference's LoadGen (suites/serving/): "
    "SingleStream sends one sample at a time (headline: the 90th percentile latency), "
    "MultiStream 8 samples per query (the 99th percentile of the query latency), Offline "
    "every sample at once (samples per second), Server single samples at Poisson arrival "
    "times (the largest target QPS whose 99th percentile latency LoadGen found under the "
    "bound, searched over several LoadGen runs). Latencies in ms, as LoadGen measured them "
    "from issue (Server: from each sample's scheduled arrival) to completion.",
    "LoadGen: VALID, or INVALID with LoadGen's reasons (a duration or query count too short, "
    "early stopping not met, the latency bound missed). float64: the served outputs of the "
    "checked samples against the float64 reference, max |y − y64| / max |y64| ≤ the "
    "precision's bound (✓) or above it (✗); a wrong answer fails the row however fast it "
    "came. Queries: LoadGen's query count (its minimum), duration: LoadGen's minimum and cap.",
)
# LoadGen's percentiles as it names them (loadgen_log.LoadgenResult.percentiles_ms) and
# where each sits on a CDF.
PERCENTILES = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")
CDF_NOTE = ("The curve is drawn through LoadGen's reported points only (minimum, p50, p90, "
            "p95, p97, p99, p99.9, maximum); between them the line is a join, not a "
            "measurement.")


def serve_rows(frame: pd.DataFrame, measure: str = SERVE) -> list[dict[str, Any]]:
    """The tidy frame's ``serve`` rows (reports/pipeline/tidy.py keeps each scenario apart),
    or those of ``measure`` (``generate``), each with its ``serving`` block parsed (``{}``
    where a row has none)."""
    if "measure" not in frame or not (frame["measure"] == measure).any():
        return []
    rows = []
    for row in frame[frame["measure"] == measure].to_dict("records"):
        text = row.get("serving") or ""
        rows.append({**row, "serving": json.loads(text) if text else {}})
    return rows


def _order(scenario: str) -> tuple[int, str]:
    names = list(SCENARIOS)
    return (names.index(scenario) if scenario in names else len(names), scenario)


def _result(row: dict[str, Any]) -> dict[str, Any]:
    return row["serving"].get("result") or {}


def _settings(row: dict[str, Any]) -> dict[str, Any]:
    return row["serving"].get("settings") or {}


def _percentile(row: dict[str, Any], key: str) -> str:
    return fmt_ms((_result(row).get("percentiles_ms") or {}).get(key))


def _number(value: Any, digits: str = ".4g") -> str:
    return MISSING if value is None else f"{value:{digits}}"


def probes(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A Server row's search probes (suites/serving/search.py Probe.to_dict: target_qps,
    valid, reason, achieved_qps, p99_ms, ...), those without a target left out."""
    found = (row["serving"].get("search") or {}).get("probes") or []
    return [p for p in found if isinstance(p, dict) and p.get("target_qps") is not None]


def server_answer(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """The largest passing target QPS (the search's answer) and the bound."""
    search = row["serving"].get("search") or {}
    answer = search.get("answer_qps")
    if answer is None:
        passing = [p["target_qps"] for p in probes(row) if p.get("valid")]
        answer = max(passing) if passing else None
    return answer, _settings(row).get("server_target_latency_ms")


def answered(row: dict[str, Any]) -> bool:
    """The row's figures count: the row ``ok``, LoadGen called its run VALID and its
    checked answers are within their float64 bound (the glance and the comparison with a
    reference rank and pair only such rows)."""
    serving = row["serving"]
    return (row["status"] == "ok" and bool((serving.get("result") or {}).get("valid"))
            and bool((serving.get("check") or {}).get("passed")))


def rate_text(value: float | None) -> str:
    """A rate per second: four significant digits, whole numbers from 1000 up (no exponent)."""
    return MISSING if value is None else f"{value:.0f}" if value >= 1000 else f"{value:.4g}"


def _server_failed_above(row: dict[str, Any], answer: float | None) -> float | None:
    """The smallest target above the answer (above nothing when none passed) that LoadGen
    did not call VALID: the search's bracket, within which the largest rate that meets the
    bound lies. A probe whose serve raised is no latency verdict and is left out."""
    failed = [p["target_qps"] for p in probes(row) if not p.get("valid") and not p.get("error")
              and (answer is None or p["target_qps"] > answer)]
    return min(failed) if failed else None


def _collector(row: dict[str, Any]) -> dict[str, Any] | None:
    """The garbage collector's pauses during the row's LoadGen run (suites/serving/
    collector.py): a Server row's answering probe's; None in rows from before they were
    recorded, and for a Server row that found no answer."""
    if row["scenario"] == "Server":
        answer, _ = server_answer(row)
        found = [p.get("gc") for p in probes(row) if p["target_qps"] == answer]
        return found[0] if found and found[0] else None
    return row["serving"].get("gc") or None


def _recorded_gc(rows: list[dict[str, Any]]) -> bool:
    """Whether any row recorded the collector's pauses (rows before it did not: their
    tables go without the column)."""
    return any(row["serving"].get("gc") or any(p.get("gc") for p in probes(row))
               for row in rows)


def gc_cell(row: dict[str, Any]) -> Cell:
    """How many full (generation 2) collections ran during the LoadGen run, and the longest:
    each holds the interpreter, and the samples in flight, for its length."""
    found = _collector(row)
    if found is None:
        return Cell(MISSING)
    count = (found.get("collections") or {}).get("2", 0)
    longest = (found.get("longest_ms") or {}).get("2", 0.0)
    return Cell(f"{count} (longest {longest:.3g} ms)" if count else "0",
                title=f"all generations: {found.get('collections')}, "
                      f"{found.get('total_ms')} ms in all")


def headline(row: dict[str, Any]) -> tuple[str, ...]:
    """The scenario's headline cells (``HEADLINE_COLUMNS``) for one row."""
    scenario, result = row["scenario"], _result(row)
    if scenario == "SingleStream":
        return tuple(_percentile(row, k) for k in ("90.00", "50.00", "99.00", "99.90"))
    if scenario == "MultiStream":
        return tuple(_percentile(row, k) for k in ("99.00", "50.00", "90.00"))
    if scenario == "Offline":
        return (_number(result.get("samples_per_second"), ".1f"), _number(row["batch"], "d"))
    if scenario == "Server":
        answer, bound = server_answer(row)
        tried = probes(row)
        return ("none" if answer is None else rate_text(answer),
                rate_text(_server_failed_above(row, answer)), _number(bound, "g"),
                _percentile(row, "99.00") if answer is not None else MISSING,
                rate_text(result.get("completed_samples_per_second") if answer is not None
                     else None),
                f"{sum(bool(p.get('valid')) for p in tried)} of {len(tried)}" if tried else MISSING)
    return ()


HEADLINE_COLUMNS = {
    "SingleStream": ("p90 ms", "p50 ms", "p99 ms", "p99.9 ms"),
    "MultiStream": ("p99 ms / query", "p50 ms", "p90 ms"),
    "Offline": ("samples/s", "batch"),
    "Server": ("QPS at p99 ≤ bound", "failed at QPS", "bound ms", "p99 ms there",
               "completed samples/s", "probes VALID"),
}


def _validity(row: dict[str, Any]) -> Cell:
    result = _result(row)
    if "valid" not in result:
        return Cell(MISSING)
    if result["valid"]:
        return Cell("VALID")
    reason = " ".join(str(result.get("reason") or "").split())
    return Cell(f"INVALID: {reason}" if reason else "INVALID", kind="fail", title=reason)


def check_cell(row: dict[str, Any]) -> Cell:
    """The float64 check of the served outputs: ✓ / ✗ with the error and the bound."""
    check = row["serving"].get("check")
    if not check:
        return Cell(MISSING)
    if check.get("problem"):
        return Cell(f"✗ {check['problem']}", kind="fail", title=check["problem"])
    error, bound = check.get("error"), check.get("bound")
    text = f"{error:.2g} ≤ {bound:.2g}" if check.get("passed") else f"{error:.2g} > {bound:.2g}"
    return Cell(("✓ " if check.get("passed") else "✗ ") + text,
                kind="" if check.get("passed") else "fail",
                title=f"{check.get('norm', '')} over samples {check.get('samples')}")


def _queries(row: dict[str, Any]) -> str:
    """LoadGen's query count and the minimum asked for; Offline's one query, its samples."""
    count, least = _result(row).get("query_count"), _settings(row).get("min_query_count")
    per_query = _result(row).get("samples_per_query")
    if row["scenario"] == "Offline" and count is not None and per_query is not None:
        return f"{count} × {per_query} samples"
    if count is None and least is None:
        return MISSING
    return f"{_number(count, 'd')} (≥ {_number(least, 'd')})"


def _duration(row: dict[str, Any]) -> str:
    settings = _settings(row)
    low, high = settings.get("min_duration_ms"), settings.get("max_duration_ms")
    if low is None:
        return MISSING
    return f"{low / 1e3:g}–{high / 1e3:g} s" if high is not None else f"≥ {low / 1e3:g} s"


def _batcher_notes(rows: list[dict[str, Any]]) -> list[str]:
    """The Server batcher's settings in words, one note per distinct setting; where the rows
    differ (a folder that merges runs of two commits), each note names the frameworks whose
    rows it describes."""
    by_note: dict[str, set[str]] = {}
    for row in rows:
        s = _settings(row)
        if not {"server_max_batch", "server_batch_timeout_ms", "server_search_runs"} <= set(s):
            continue
        note = (f"Server's batcher: up to {s['server_max_batch']} samples per serve call, a "
                f"short batch sent after {s['server_batch_timeout_ms']:g} ms"
                + (f", padded to the smallest of sizes "
                   f"{', '.join(str(n) for n in s['server_batch_sizes'])} that holds it"
                   if s.get("server_batch_sizes") else "")
                + f"; the search: at most {s['server_search_runs']} LoadGen runs"
                + (f" and {s['server_search_seconds']:g} s of them"
                   if "server_search_seconds" in s else ""))
        by_note.setdefault(note, set()).add(row["framework"])
    if len(by_note) < 2:
        return list(by_note)
    return [f"{note} ({', '.join(sorted(frameworks))} rows)"
            for note, frameworks in sorted(by_note.items())]


def _table(rows: list[dict[str, Any]], key: tuple[str, str, str, str]) -> Table:
    device, hardware, model, scenario = key
    heads = HEADLINE_COLUMNS.get(scenario, ())
    body = []
    with_gc = _recorded_gc(rows)
    for row in sorted(rows, key=lambda r: (r["framework"], r["variant"], r["precision"],
                                           r["threads"])):
        status = Cell("ok") if row["status"] == "ok" else failure_cell(row)
        threads = str(row["threads"]) if device == "cpu" else MISSING
        values = headline(row)
        body.append((Cell(row["framework"]), Cell(row["variant"]), Cell(row["precision"]),
                     Cell(threads), *(Cell(v) for v in values), Cell(_queries(row)),
                     Cell(_duration(row)), _validity(row),
                     *((gc_cell(row),) if with_gc else ()), check_cell(row), status))
    notes = sorted({row["serving"]["timing"] for row in rows if row["serving"].get("timing")})
    if scenario == "Server":
        notes += _batcher_notes(rows)
        notes.append("QPS at p99 ≤ bound: the largest target QPS that LoadGen called VALID; "
                     "failed at QPS: the smallest target above it that was not VALID. The "
                     "largest rate that meets the bound lies between the two; the search "
                     "stops at 1.1× apart or when its runs or seconds are used "
                     "(suites/serving/search.py).")
    if scenario not in HEADLINE_COLUMNS:
        notes.append(f"{scenario!r} is no scenario the serving harness runs.")
    if with_gc:
        notes.append(GC_NOTE)
    columns = ("Framework", "Variant", "Precision", "Threads", *heads, "Queries", "Duration",
               "LoadGen", *(("full GCs",) if with_gc else ()), "float64", "Status")
    numeric = (False, False, False, True, *(True for _ in heads), True, False, False,
               *((False,) if with_gc else ()), False, False)
    what = SCENARIOS[scenario].headline if scenario in SCENARIOS else "no headline"
    return Table(slug(f"serving-{device}-{hardware}-{model}-{scenario}"),
                 f"{model} — {scenario} ({what}) — {device.upper()} {hardware}",
                 columns, tuple(body), numeric, tuple(notes))


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["device"], row["hardware"], row["model"], row["scenario"])].append(row)
    return dict(sorted(groups.items(), key=lambda kv: (*kv[0][:3], _order(kv[0][3]))))


# suites/serving/cold_start.py PHASES and the column each becomes.
COLD_START_PHASES = (("interpreter", "Python start s"), ("imported", "import s"),
                     ("adapter", "adapter s"), ("weights", "weights s"),
                     ("prepared", "prepare s"), ("answered", "first answer s"))


def cold_start_table(rows: list[dict[str, Any]], device: str, hardware: str) -> Table:
    """One device's cold starts: the medians over each row's ``ok`` repeats."""
    body = []
    for row in sorted(rows, key=lambda r: (r["framework"], r["model"], r["variant"],
                                           r["precision"])):
        summary = row["serving"].get("cold_start") or {}
        phases = summary.get("phases_median_s") or {}
        status = Cell("ok") if row["status"] == "ok" else failure_cell(row)
        body.append((Cell(row["framework"]), Cell(row["model"]), Cell(_number(row["batch"], "d")),
                     Cell(row["variant"]), Cell(row["precision"]),
                     Cell(f"{summary.get('ok', 0)} of {summary.get('repeats', 0)}"),
                     Cell(_number(summary.get("total_median_s"), ".3g")),
                     *(Cell(_number(phases.get(phase), ".3g")) for phase, _ in COLD_START_PHASES),
                     Cell(_number(summary.get("first_total_s"), ".3g")), status))
    columns = ("Framework", "Model", "Batch", "Variant", "Precision", "Repeats ok",
               "total s (median)", *(name for _, name in COLD_START_PHASES), "first repeat s",
               "Status")
    numeric = (False, False, True, False, False, False, True,
               *(True for _ in COLD_START_PHASES), True, False)
    notes = ("From the parent's clock just before it started a fresh process to the end of "
             "each phase: Python start (the interpreter up to dlbench's first statement), "
             "import (the framework), adapter (threads, device), weights (read from a file "
             "as a checkpoint), prepare (the network built, compiled where the framework "
             "compiles ahead), first answer (the first serve, with JAX's and TensorFlow's "
             "tracing and compilation). Medians of each phase over the repeats that answered "
             "correctly; they need not add up to the total's median. The page cache is not "
             "dropped: the first repeat may read the framework from disk.",)
    return Table(slug(f"serving-cold-start-{device}-{hardware}"),
                 f"Cold start: a fresh process to its first checked answer — "
                 f"{device.upper()} {hardware}", columns, tuple(body), numeric, notes)


def serving_tables(rows: list[dict[str, Any]]) -> list[Table]:
    served = [r for r in rows if r["scenario"] != COLD_START]
    cold: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["scenario"] == COLD_START:
            cold[(row["device"], row["hardware"])].append(row)
    return ([_table(found, key) for key, found in _groups(served).items()]
            + [cold_start_table(found, *key) for key, found in sorted(cold.items())])


GENERATION_PARAGRAPH = (
    "Generation (suites/serving/generate.py): greedy decoding at batch 1 with a key/value "
    "cache of fixed capacity (prompt + new tokens), each framework's generator compiled once "
    "for the prefill and once for the decode step where it compiles; LoadGen's SingleStream "
    "with token latencies times it. TTFT: from a query's issue to the prefill's token on the "
    "host; TPOT: per query, (latency − TTFT) / (new tokens − 1); percentiles over the "
    "queries, tokens/s LoadGen's completed tokens per second. float64: one generation's "
    "logits at every step against the float64 reference on the same tokens (teacher "
    "forcing), the largest step's max |y − y64| / max |y64| ≤ the precision's bound, and "
    "how many greedy tokens are float64's argmax (a different token is allowed only where "
    "float64's lead over it is within twice the bound).",)
GENERATION_COLUMNS = ("Framework", "Variant", "Precision", "Threads", "TTFT p50 ms",
                      "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "tokens/s",
                      "prompt + new", "runs", "LoadGen", "float64", "Status")
GC_NOTE = ("full GCs: Python's full (generation 2) garbage collections during the LoadGen run "
           "(Server: the answering run) and the longest; each holds the interpreter, and with "
           "it the samples in flight, for its length (suites/serving/collector.py).")


def generation_check_cell(row: dict[str, Any]) -> Cell:
    """One generation against float64: the worst step's error and the bound, and the
    greedy tokens that are float64's argmax."""
    check = row["serving"].get("check")
    cell = check_cell(row)
    if not check or check.get("greedy_matches") is None:
        return cell
    tokens = f"{check['greedy_matches']}/{check.get('steps')} tokens as float64"
    explained = [m["step"] for m in check.get("mismatches") or []]
    if explained and check.get("passed"):
        tokens += f" (steps {explained} within the bound of a tie)"
    return Cell(f"{cell.text}, {tokens}", kind=cell.kind, title=cell.title)


def _generation_table(rows: list[dict[str, Any]], key: tuple[str, str, str]) -> Table:
    device, hardware, model = key
    with_gc = _recorded_gc(rows)
    body = []
    for row in sorted(rows, key=lambda r: (r["framework"], r["variant"], r["precision"],
                                           r["threads"])):
        figures = row["serving"].get("generation") or {}
        settings = _settings(row)
        ttft, tpot = figures.get("ttft_ms") or {}, figures.get("tpot_ms") or {}
        length = (f"{settings['prompt_tokens']} + {settings['new_tokens']}"
                  if {"prompt_tokens", "new_tokens"} <= set(settings) else MISSING)
        body.append((Cell(row["framework"]), Cell(row["variant"]), Cell(row["precision"]),
                     Cell(str(row["threads"]) if device == "cpu" else MISSING),
                     Cell(fmt_ms(ttft.get("50.00"))), Cell(fmt_ms(ttft.get("99.00"))),
                     Cell(fmt_ms(tpot.get("50.00"))), Cell(fmt_ms(tpot.get("99.00"))),
                     Cell(_number(figures.get("tokens_per_second"), ".1f")), Cell(length),
                     Cell(_number(settings.get("runs"), "d")), _validity(row),
                     *((gc_cell(row),) if with_gc else ()), generation_check_cell(row),
                     Cell("ok") if row["status"] == "ok" else failure_cell(row)))
    notes = tuple(sorted({row["serving"]["timing"] for row in rows if row["serving"].get("timing")}))
    columns = (*GENERATION_COLUMNS[:12], *(("full GCs",) if with_gc else ()),
               *GENERATION_COLUMNS[12:])
    numeric = (False, False, False, True, True, True, True, True, True, False, True, False,
               *((False,) if with_gc else ()), False, False)
    return Table(slug(f"generation-{device}-{hardware}-{model}"),
                 f"{model} — greedy generation, batch 1 (TTFT, TPOT, tokens/s) — "
                 f"{device.upper()} {hardware}", columns, tuple(body), numeric,
                 (*notes, GC_NOTE) if with_gc else notes)


def generation_tables(rows: list[dict[str, Any]]) -> list[Table]:
    """One table per device and model of the ``generate`` rows."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["device"], row["hardware"], row["model"])].append(row)
    return [_generation_table(found, key) for key, found in sorted(groups.items())]


def _label(row: dict[str, Any]) -> str:
    threads = f" {row['threads']}t" if row["device"] == "cpu" else ""
    return _safe(f"{row['framework']} {row['variant']} {row['precision']}{threads}")


MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def framework_styles(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each serving line's style in one figure, by its label (reports/render/plots.py
    ``line_styles`` styles the timed figures by label alone): a colour per framework, a line style
    per precision (solid fp32, dashed the lower ones) and a marker per variant within its
    framework, so that 15 lines of four frameworks stay apart where one colour a line ran
    out of colours after ten."""
    palette = plt.get_cmap("tab10").colors
    frameworks = sorted({r["framework"] for r in rows})
    variants = {fw: sorted({r["variant"] for r in rows if r["framework"] == fw})
                for fw in frameworks}
    return {_label(r): {"color": palette[frameworks.index(r["framework"]) % len(palette)],
                        "ls": "-" if r["precision"] == "fp32" else "--",
                        "marker": MARKERS[variants[r["framework"]].index(r["variant"])
                                          % len(MARKERS)]}
            for r in rows}


def _legend(ax) -> None:
    """The legend beside the axes, where it hides no point."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _plain_ticks(axis) -> None:
    """A log axis's tick labels as plain numbers (2, 10, 500), not powers of ten: every
    decade, and its 2 and 5 between, so that labels never run into each other."""
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(
        lambda value, _: f"{value:g}" if f"{value:.0e}"[0] in "25" else ""))


def cdf_points(row: dict[str, Any]) -> list[tuple[float, float]]:
    """(latency ms, fraction of samples at or below it): LoadGen's minimum (0), its
    percentiles and its maximum (1)."""
    result = _result(row)
    found = result.get("percentiles_ms") or {}
    points = [(float(found[k]), float(k) / 100) for k in PERCENTILES if found.get(k) is not None]
    if result.get("min_ms") is not None:
        points.insert(0, (float(result["min_ms"]), 0.0))
    if result.get("max_ms") is not None:
        points.append((float(result["max_ms"]), 1.0))
    return points


def _figure_groups(rows: list[dict[str, Any]], scenario: str):
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["scenario"] == scenario:
            groups[(row["device"], row["hardware"], row["model"])].append(row)
    return sorted(groups.items())


def cdf_plots(rows: list[dict[str, Any]]) -> list[Plot]:
    """SingleStream's latency CDF, one figure per device and model, a line per framework."""
    out = []
    for (device, hardware, model), found in _figure_groups(rows, "SingleStream"):
        lines = [(r, cdf_points(r)) for r in found]
        lines = [(r, p) for r, p in lines if len(p) >= 2]
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
        styles = framework_styles([r for r, _ in lines])
        for row, points in sorted(lines, key=lambda rp: _label(rp[0])):
            ax.plot([p[0] for p in points], [p[1] for p in points], ms=3, lw=1,
                    **styles[_label(row)],
                    label=_label(row) + ("" if _result(row).get("valid") else " (INVALID)"))
        ax.set_xscale("log")
        _plain_ticks(ax.xaxis)
        ax.set_xlabel("latency per sample (ms, log scale)")
        ax.set_ylabel("fraction of samples")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", lw=0.3)
        _legend(ax)
        ax.set_title(_safe(f"{model} SingleStream, {device} {hardware}"), fontsize=9)
        out.append(Plot(slug(f"serving-cdf-{device}-{hardware}-{model}"),
                        f"{model}: SingleStream latency CDF ({device} {hardware})", _png(fig),
                        f"LoadGen's per-sample latency of each framework. {CDF_NOTE}"))
    return out


def server_plots(rows: list[dict[str, Any]]) -> list[Plot]:
    """Server's search: each probe's p99 latency against its target QPS, a line per
    framework (filled markers: VALID, hollow: INVALID), the bound as a dashed line."""
    out = []
    for (device, hardware, model), found in _figure_groups(rows, "Server"):
        series = [(r, sorted((p["target_qps"], p["p99_ms"], bool(p.get("valid")))
                             for p in probes(r) if p.get("p99_ms") is not None)) for r in found]
        series = [(r, s) for r, s in series if s]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
        styles = framework_styles([r for r, _ in series])
        for row, points in sorted(series, key=lambda rs: _label(rs[0])):
            style = styles[_label(row)]
            ax.plot([p[0] for p in points], [p[1] for p in points], lw=1, label=_label(row),
                    **style)
            for qps, p99, valid in points:
                ax.plot([qps], [p99], marker=style["marker"], color=style["color"],
                        markerfacecolor=style["color"] if valid else "none")
        for bound in sorted({b for b in (_settings(r).get("server_target_latency_ms")
                                         for r, _ in series) if b is not None}):
            ax.axhline(bound, color="grey", ls="--", lw=0.8)
            ax.annotate(f"p99 bound {bound:g} ms", (0.99, bound), xycoords=("axes fraction", "data"),
                        fontsize=7, color="grey", va="bottom", ha="right")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_ticks(ax.xaxis)
        _plain_ticks(ax.yaxis)
        ax.set_xlabel("target QPS (log scale)")
        ax.set_ylabel("p99 latency ms (log scale)")
        ax.grid(True, which="both", lw=0.3)
        _legend(ax)
        ax.set_title(_safe(f"{model} Server, {device} {hardware}"), fontsize=9)
        out.append(Plot(slug(f"serving-server-{device}-{hardware}-{model}"),
                        f"{model}: Server p99 latency against target QPS ({device} {hardware})",
                        _png(fig),
                        "Each point one LoadGen run of the QPS search (filled: VALID, hollow: "
                        "INVALID), its p99 latency per sample from the scheduled arrival."))
    return out


def serving_plots(rows: list[dict[str, Any]]) -> list[Plot]:
    return cdf_plots(rows) + server_plots(rows)
