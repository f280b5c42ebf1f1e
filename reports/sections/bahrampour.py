"""Bahrampour et al. 2016's tables (seed 004): CPU rows per thread count, then GPU rows per
framework/library, with "Gradient (ms)" and "Forward (ms)" columns (Tables 3, 4, 6; Table 4
adds GPU RAM) and, for the stacked autoencoders, the phase columns AE1 AE2 AE3
"Total pre-training" SE-gradient SE-forward (Tables 5 and 7). Table 6 again from the epoch
measures (the paper averages the LSTM over one epoch of variable-length batches), and
Table 8's "First compile (s)" and "Re-compile (s)" from cold and warm compile-cache runs.

Gradient = forward + loss + backward for all trainable parameters, no update (§3.1).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import Setting, by_setting, extras, label, records, setting_of, variant_text
from reports.pipeline.historical import rows_for, table_for
from reports.pipeline.naming import BAHRAMPOUR_SETS, SAE_PHASES, SAE_SETS, sort_key
from reports.render.table import Cell, Table


def _order(s: Setting) -> tuple:
    # Bahrampour lists CPU (by threads: 1, 6, 12) before GPU.
    # The whole setting last: rows alike but for a host never swap between runs.
    return (s.device != "cpu", s.hardware, s.threads, s.framework, s.variant, s.precision, s)


def _where(s: Setting) -> tuple[Cell, Cell]:
    return (Cell(f"{s.device.upper()} {s.hardware}"),
            Cell(str(s.threads) if s.device == "cpu" else "", title="intra-op threads"))


def _setting(s: Setting, extra: str) -> Cell:
    return Cell(f"{s.framework} {variant_text(s, extra)} {s.precision}")


# The seed times Table 6 over an epoch; the single-batch rows are a different measurement.
TABLE_NOTES = {
    "Table 6: LSTM": ("One fixed batch per call (single-batch forward and gradient); the paper "
                      "averages over one epoch of 124 variable-length batches, which the "
                      "'Table 6 over an epoch' table reproduces where measured."),
}


def bahrampour_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    rows = records(frame)
    out = []
    for title, models in BAHRAMPOUR_SETS.items():
        mine = [r for r in rows if r["model"] in models]
        for batch in sorted({r["batch"] for r in mine}):
            part = [r for r in mine if r["batch"] == batch]
            present = [m for m in models if any(r["model"] == m for r in part)]
            body = []
            for index, model in enumerate(present):
                groups = by_setting([r for r in part if r["model"] == model])
                extra = extras(list(groups))
                for s in sorted(groups, key=_order):
                    g, f = groups[s].get("gradient"), groups[s].get("forward")
                    if g is None and f is None:
                        continue
                    body.append(((_order(s), index), (*_where(s),
                                 *((Cell(model),) if len(present) > 1 else ()),
                                 _setting(s, extra[s]),
                                 cells.time_cell(g, ci=False, device=True),
                                 cells.time_cell(f, ci=False, device=True),
                                 cells.memory_cell([g, f]))))
            if not body:
                continue
            body.sort(key=lambda t: t[0])
            columns = ("Device", "Threads", *(("Model",) if len(present) > 1 else ()),
                       "Setting", "Gradient (ms)", "Forward (ms)", "Peak memory")
            out.append(Table(f"bahrampour-{len(out)}", f"{title}, batch {batch}", columns,
                             tuple(b for _, b in body),
                             tuple(c in ("Threads", "Gradient (ms)", "Forward (ms)",
                                         "Peak memory") for c in columns),
                             notes=("Medians in ms; ⚠ marks unstable rows.",
                                    *cells.device_notes(r for r in part if r["measure"]
                                                        in ("gradient", "forward")),
                                    *((TABLE_NOTES[title],) if title in TABLE_NOTES else ()))))
            if hist is not None:
                for model in present:
                    table = table_for(hist, model, batch, f"bahrampour-{len(out)}-hist-{model}",
                                      measures=("gradient", "forward"),
                                      labels={"gradient": "Gradient (ms)"})
                    if table is not None:
                        out.append(table)
    return out


SAE_COLUMNS = ("AE1", "AE2", "AE3", "Total pre-training", "SE gradient", "SE forward")


def sae_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    rows = records(frame)
    out = []
    for prefix, title in SAE_SETS.items():
        names = {f"{prefix}_{p}": p for p in SAE_PHASES}
        mine = [r for r in rows if r["model"] in names]
        for batch in sorted({r["batch"] for r in mine}):
            per_phase = {p: by_setting([r for r in mine if r["batch"] == batch
                                        and r["model"] == f"{prefix}_{p}"]) for p in SAE_PHASES}
            settings = sorted({s for g in per_phase.values() for s in g}, key=_order)
            extra = extras(settings)
            body = []
            for s in settings:
                ae = [per_phase[p].get(s, {}).get("gradient") for p in ("ae1", "ae2", "ae3")]
                total = (sum(r["median_ms"] for r in ae)
                         if all(r is not None and r["status"] == "ok" for r in ae) else math.nan)
                se = per_phase["se"].get(s, {})
                body.append((*_where(s), _setting(s, extra[s]),
                             *(cells.time_cell(r, ci=False, device=True) for r in ae),
                             cells.value_cell(total, "AE1 + AE2 + AE3 gradient"),
                             cells.time_cell(se.get("gradient"), ci=False, device=True),
                             cells.time_cell(se.get("forward"), ci=False, device=True)))
            out.append(Table(f"sae-{prefix}-{batch}",
                             f"Stacked autoencoders, Bahrampour {title}, batch {batch}",
                             ("Device", "Threads", "Setting", *SAE_COLUMNS), tuple(body),
                             (False, True, False) + (True,) * 6,
                             notes=("AE columns: gradient time of each pre-training phase; "
                                    "Total pre-training = their sum; SE: supervised "
                                    "fine-tuning of the stacked encoders.",
                                    *cells.device_notes(mine))))
            if hist is not None:
                table = _sae_historical(prefix, batch, hist)
                if table is not None:
                    out.append(table)
    return out


def _sae_historical(prefix: str, batch: int, hist: pd.DataFrame) -> Table | None:
    found: dict[tuple, dict] = {}
    sources = {f"{prefix}_ae1": (0, "gradient"), f"{prefix}_ae2": (1, "gradient"),
               f"{prefix}_ae3": (2, "gradient"), f"{prefix}_pretraining (sum)": (3, "gradient"),
               f"{prefix}_se": None}
    for model, where in sources.items():
        for r in rows_for(hist, model, batch):
            slot = found.setdefault((r.study, r.hardware, r.framework, r.note), {})
            if where is None:
                slot[4] = r.values.get("gradient", math.nan)
                slot[5] = r.values.get("forward", math.nan)
            else:
                slot[where[0]] = r.values.get(where[1], math.nan)
    if not found:
        return None
    body = tuple((Cell(study, kind="hist"), Cell(hw, kind="hist"),
                  Cell(f"{fw}" + (f" ({note})" if note else ""), kind="hist"),
                  *(Cell(cells.fmt_published(v.get(i, math.nan)), kind="hist") for i in range(6)))
                 for (study, hw, fw, note), v in found.items())
    return Table(f"sae-{prefix}-{batch}-hist",
                 f"Historical (published, not measured here): stacked autoencoders "
                 f"{prefix}, batch {batch}", ("Study", "Hardware", "Setting", *SAE_COLUMNS),
                 body, (False,) * 3 + (True,) * 6,
                 notes=("As published (GTX Titan X and Xeon E5-1650 v2, 2015).",))


EPOCH = {"gradient": "epoch_gradient", "forward": "epoch_forward"}
TABLE6_MODELS = BAHRAMPOUR_SETS["Table 6: LSTM"]


def _has_single_batch(frame: pd.DataFrame, model: str, batch: int) -> bool:
    return bool(((frame["model"] == model) & (frame["batch"] == batch)
                 & frame["measure"].isin(("forward", "gradient"))).any())


def _epoch_shape_note(groups: dict[Setting, dict[str, dict]], extra: dict) -> str:
    """How many batches an epoch had and how long they were padded, per distinct epoch."""
    shapes: dict[tuple, list[str]] = defaultdict(list)
    for s, measures in groups.items():
        for row in measures.values():
            if row["status"] == "ok":
                padded = row["mean_padded_length"]      # NaN for models without tokens
                shape = (cells.fmt_count(row["epoch_batches"]),
                         f"{padded:.1f}" if cells.is_num(padded) else "")
                name = label(s, extra[s], hardware=False)
                if name not in shapes[shape]:
                    shapes[shape].append(name)
    texts = []
    for (batches, padded), names in shapes.items():
        text = f"{batches} batches" + (f", mean padded length {padded} tokens" if padded else "")
        texts.append(text + (f" ({', '.join(names)})" if len(shapes) > 1 else ""))
    return "One epoch: " + "; ".join(texts) + "." if texts else ""


def epoch_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    """Table 6 as the paper measures it: gradient and forward time per batch, averaged over
    one epoch of variable-length batches (124 IMDB batches at batch 16 in the paper)."""
    rows = [r for r in records(frame) if r["measure"] in EPOCH.values()]
    out = []
    for model, batch in sorted({(r["model"], r["batch"]) for r in rows},
                               key=lambda mb: (sort_key(mb[0]), mb[1])):
        groups = by_setting([r for r in rows if r["model"] == model and r["batch"] == batch])
        extra = extras(list(groups))
        body = []
        for s in sorted(groups, key=_order):
            g, f = groups[s].get(EPOCH["gradient"]), groups[s].get(EPOCH["forward"])
            body.append((*_where(s), _setting(s, extra[s]), cells.per_batch_cell(g),
                         cells.per_batch_cell(f), cells.memory_cell([g, f])))
        notes = ["Gradient and Forward: ms per batch = the median time of one whole epoch ÷ "
                 "its number of batches, as Bahrampour et al. average Table 6 over one epoch; "
                 "not the single-batch times of 'Table 6: LSTM'. ⚠ marks unstable rows.",
                 _epoch_shape_note(groups, extra)]
        out.append(Table(f"bahrampour-epoch-{model}-b{batch}",
                         f"Table 6 over an epoch: {model}, batch {batch}",
                         ("Device", "Threads", "Setting", "Gradient (ms)", "Forward (ms)",
                          "Peak memory"), tuple(body), (False, True, False, True, True, True),
                         notes=tuple(n for n in notes if n)))
        # The paper's Table 6 is an epoch average too; shown here unless it already follows
        # the single-batch table.
        if hist is not None and model in TABLE6_MODELS and not _has_single_batch(frame, model,
                                                                                 batch):
            table = table_for(hist, model, batch, f"bahrampour-epoch-{model}-b{batch}-hist",
                              measures=("gradient", "forward"),
                              labels={"gradient": "Gradient (ms)"})
            if table is not None:
                out.append(table)
    return out


COMPILE_STATES = {"cold": "First compile (s)", "warm": "Re-compile (s)"}


def _compile_seconds_cell(measures: dict[str, dict]) -> Cell:
    """Forward + gradient first calls of one cache state, in s: Bahrampour et al. compile
    both Theano functions (Table 8). A failure of either is the cell, with its reason."""
    found = [measures[m] for m in ("forward", "gradient") if m in measures]
    if not found:
        return Cell(cells.MISSING, kind="muted")
    failed = [r for r in found if r["status"] != "ok"]
    if failed:
        return cells.failure_cell(failed[0])
    if not all(cells.is_num(r["first_call_ms"]) for r in found):
        return Cell(cells.MISSING, kind="muted", title="no first-call time recorded")
    total = sum(r["first_call_ms"] for r in found)
    return Cell(cells.fmt_seconds(total),
                title=" + ".join(f"{r['measure']} {cells.fmt_seconds(r['first_call_ms'])} s"
                                 for r in found))


def _compile_part(row: dict | None) -> str:
    if row is None:
        return cells.MISSING
    if row["status"] != "ok":
        return cells.status_text(row, short=True)
    return cells.fmt_seconds(row["first_call_ms"])


def _compile_parts_cell(measures: dict[str, dict]) -> Cell:
    parts = [_compile_part(measures.get(m)) for m in ("forward", "gradient")]
    if parts == [cells.MISSING] * 2:
        return Cell(cells.MISSING, kind="muted")
    return Cell(" / ".join(parts), title="first call of the forward / gradient function (s)")


def _forward_only(states: dict[str, dict[str, dict]]) -> bool:
    """A setting whose compile time is the forward function's alone (ORT has no gradient)."""
    measured = [m for measures in states.values() for m in measures.values()]
    return (not any(r["measure"] == "gradient" for r in measured)
            and any(r["status"] == "ok" for r in measured))


def _cache_pairs(rows: list[dict]) -> dict[tuple, dict[str, dict[str, dict]]]:
    """(model, batch, setting without its cache state) → cache state → measure → row."""
    pairs: dict[tuple, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        s = setting_of(r)
        pairs[(r["model"], r["batch"], replace(s, compile_cache=""))][s.compile_cache][
            r["measure"]] = r
    return pairs


def compile_tables(frame: pd.DataFrame, hist: pd.DataFrame | None = None) -> list[Table]:
    """Table 8 per device and hardware: one row per model and setting, the cold run's first
    calls as "First compile (s)" beside the warm run's as "Re-compile (s)"."""
    rows = [r for r in records(frame)
            if r["compile_cache"] in COMPILE_STATES and r["measure"] in ("forward", "gradient")]
    out = []
    for device, hw in sorted({(r["device"], r["hardware"]) for r in rows},
                             key=lambda k: (k[0] != "cpu", k[1])):
        pairs = _cache_pairs([r for r in rows if (r["device"], r["hardware"]) == (device, hw)])
        extra = extras(sorted({s for _, _, s in pairs}))
        cpu = device == "cpu"
        body, forward_only = [], []
        for model, batch, s in sorted(pairs, key=lambda k: (sort_key(k[0]), k[1], _order(k[2]))):
            states = pairs[(model, batch, s)]
            if _forward_only(states):
                forward_only.append(f"{label(s, extra[s], hardware=False)} ({model}, batch "
                                    f"{batch})")
            body.append((Cell(model), Cell(str(batch)),
                         *((Cell(str(s.threads)),) if cpu else ()), _setting(s, extra[s]),
                         *(_compile_seconds_cell(states.get(c, {})) for c in COMPILE_STATES),
                         *(_compile_parts_cell(states.get(c, {})) for c in COMPILE_STATES)))
        columns = ("Model", "Batch", *(("Threads",) if cpu else ()), "Setting",
                   *COMPILE_STATES.values(), "First compile fwd / grad (s)",
                   "Re-compile fwd / grad (s)")
        notes = ["First compile: a fresh process with an empty persistent compilation cache "
                 "(cold); Re-compile: a fresh process reusing the cache the cold run filled "
                 "(warm). Each is the first call of the forward plus the first call of the "
                 "gradient computation, in s (Bahrampour et al. compile both functions); a "
                 "first call also runs the step once."]
        if forward_only:
            notes.append("Forward only, no gradient measured, so the time is the forward "
                         "function's alone: " + "; ".join(forward_only) + ".")
        out.append(Table(f"bahrampour-compile-{len(out)}",
                         f"Table 8: first compile vs re-compile (s), {device.upper()} {hw}",
                         columns, tuple(body),
                         tuple(c in ("Batch", "Threads") or c.endswith("(s)") for c in columns),
                         notes=tuple(notes)))
    if out and hist is not None:
        published = _compile_historical(hist)
        if published is not None:
            out.append(published)
    return out


def _compile_historical(hist: pd.DataFrame) -> Table | None:
    part = hist[(hist["source_table"] == "Table 8")
                & hist["measure"].isin(("first_compile", "recompile"))]
    found: dict[tuple, dict[str, float]] = {}
    for r in part.to_dict("records"):
        key = (r["study"], r["hardware"], r["framework"], r["model"], r["note"])
        found.setdefault(key, {})[r["measure"]] = r["value_ms"]
    if not found:
        return None
    body = tuple((Cell(study, kind="hist"), Cell(hw, kind="hist"), Cell(fw, kind="hist"),
                  Cell(model, kind="hist"), Cell(note, kind="hist"),
                  *(Cell(cells.fmt_published(round(values.get(m, math.nan) / 1e3, 6)),
                         kind="hist", title="Table 8") for m in ("first_compile", "recompile")))
                 for (study, hw, fw, model, note), values in found.items())
    return Table("bahrampour-compile-hist",
                 "Historical (published, not measured here): Bahrampour Table 8, Theano "
                 "compile times", ("Study", "Hardware", "Framework", "Network", "Note",
                                   *COMPILE_STATES.values()), body,
                 (False,) * 5 + (True, True),
                 notes=("As published: Theano compiling both the gradient and the forward "
                        "function, with an empty cache (first) and again (re-compile); "
                        "'sae (all phases)' is Table 5's small stacked autoencoder as a "
                        "whole. Table 8 states no batch size or thread count.",))
