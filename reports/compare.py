"""Your run beside a published reference (``python -m reports results published/<folder>``).

A directory given to the report is the *reference* when it is a published folder (its
README.md carries ``reports.publish``'s generated block) or when named with
``--reference``; every other row is *yours*. The usual tables show both side by side (their
hosts differ, so no row is merged); this module adds one section: each of your timed rows
beside the reference row of the same model, measure, framework and device (cpu/gpu), with
the ratio of medians and every setting in which the two differ, so that a ratio is never
read as a like-for-like comparison when it is not (another framework version, precision,
batch, variant, thread count or device model).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import records
from reports.pipeline.load import Loaded, under_roots
from reports.pipeline.naming import sort_key
from reports.pipeline.tidy import tidy
from reports.render.table import Cell, Table
from reports.sections.compare_scaling import section_parts as scaling_section
from reports.sections.compare_serving import section_parts as serving_section

# Settings compared between your row and the reference row, with the weight of a mismatch
# when choosing among several reference rows: batch and precision change the computation,
# the variant the execution, threads and versions only the speed.
MATCH_WEIGHTS = (("batch", 8), ("precision", 8), ("variant", 4), ("compile_cache", 4),
                 ("threads", 2), ("framework_version", 1), ("hardware", 1))
LABELS = {"batch": "batch", "precision": "precision", "variant": "variant",
          "compile_cache": "compile cache", "threads": "threads",
          "framework_version": "version", "hardware": "device"}
TIMED = ("median_ms", "ci_low_ms", "ci_high_ms")


def is_published(path: Path) -> bool:
    """A folder written by ``python -m reports.publish`` (its README has the block)."""
    from reports.publish import BEGIN

    readme = path / "README.md"
    return path.is_dir() and readme.is_file() and BEGIN in readme.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Pair:
    yours: dict
    reference: dict
    differs: tuple[str, ...]     # "batch 16 vs 32", ... (yours first)

    @property
    def ratio(self) -> float:
        return self.yours["median_ms"] / self.reference["median_ms"]

    @property
    def device_ratio(self) -> float:
        """Your device time / the reference's, where both rows have one (GPU rows of a
        framework with a device clock); NaN otherwise. The GPU's own time leaves out the
        host's launches and overhead, so it compares the GPUs where wall time also compares
        the hosts' CPUs."""
        yours, reference = cells.device_ms(self.yours), cells.device_ms(self.reference)
        if not (cells.is_num(yours) and cells.is_num(reference)) or reference <= 0:
            return math.nan
        return yours / reference

    @property
    def overlap(self) -> bool:
        """The two 95% CIs overlap: the medians are not told apart."""
        return (self.yours["ci_low_ms"] <= self.reference["ci_high_ms"]
                and self.reference["ci_low_ms"] <= self.yours["ci_high_ms"])


def _timed(row: dict) -> bool:
    """A timed row this comparison pairs: data-parallel rows are paired by their own key
    (reports/sections/compare_scaling.py), never by the nearest settings."""
    return row["status"] == "ok" and row["measure"] != "data_parallel" and all(
        isinstance(row.get(k), float) and math.isfinite(row[k]) and row[k] > 0 for k in TIMED)


def _differences(yours: dict, reference: dict) -> tuple[str, ...]:
    return tuple(f"{LABELS[k]} {yours[k] or '—'} vs {reference[k] or '—'}"
                 for k, _ in MATCH_WEIGHTS if yours[k] != reference[k])


def split(loaded: Loaded, reference_roots: tuple[Path, ...]) -> tuple[pd.DataFrame,
                                                                      pd.DataFrame]:
    """(yours, reference) as two tidy tables, each merged on its own: a run on the host
    that wrote the reference has the same settings as its rows, and one merged table would
    keep only the later of each pair. Compile-cache rows (Table 8) are left out, as in
    every steady-state table."""
    roots = tuple(p.resolve() for p in reference_roots)
    sides: tuple[list, list] = ([], [])
    for row in loaded.rows:
        sides[under_roots(row.path, roots)].append(row)
    frames = []
    for rows in sides:
        if not rows:
            frames.append(pd.DataFrame(columns=["compile_cache"]))
            continue
        frame = tidy(Loaded(tuple(rows), loaded.files, ())).frame
        frames.append(frame[frame["compile_cache"] == ""].reset_index(drop=True))
    return frames[0], frames[1]


def _pair_key(row: dict) -> tuple:
    """What a reference row must share with yours: model, measure, framework, device, and
    whether both are practice-suite rows (bf16 / TF32 at large batches: reports/sections/practice.py),
    so a practice row is never set beside a strict-fp32 one, nor the other way round."""
    return (row["model"], row["measure"], row["framework"], row["device"],
            bool(row["practice"]))


def pair_rows(yours_frame: pd.DataFrame, reference_frame: pd.DataFrame
              ) -> tuple[list[Pair], list[dict]]:
    """(pairs, your timed rows without a reference row of their model, measure, framework
    and device). Among several candidates the reference row with the fewest (weighted)
    differing settings is taken."""
    reference: dict[tuple, list[dict]] = defaultdict(list)
    for r in records(reference_frame):
        if _timed(r):
            reference[_pair_key(r)].append(r)
    yours = [r for r in records(yours_frame) if _timed(r)]
    pairs, unmatched = [], []
    for r in yours:
        candidates = reference.get(_pair_key(r))
        if not candidates:
            unmatched.append(r)
            continue
        best = min(candidates, key=lambda c: sum(w for k, w in MATCH_WEIGHTS if c[k] != r[k]))
        pairs.append(Pair(r, best, _differences(r, best)))
    pairs.sort(key=lambda p: (p.yours["framework"], p.yours["device"],
                              sort_key(p.yours["model"]), p.yours["batch"],
                              p.yours["measure"], p.yours["variant"], p.yours["threads"]))
    return pairs, unmatched


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _ratio_text(value: float) -> str:
    return f"{value:.2f}×" if cells.is_num(value) else cells.MISSING


def summary_table(pairs: list[Pair]) -> Table:
    groups: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[(p.yours["framework"], p.yours["device"])].append(p)
    # Device columns only where a pair has device time on both sides: a CPU comparison
    # keeps its table as it was.
    device = any(cells.is_num(p.device_ratio) for p in pairs)
    body = []
    for (framework, dev), group in sorted(groups.items()):
        like = [p for p in group if not p.differs]
        ratios = [p.device_ratio for p in group if cells.is_num(p.device_ratio)]
        body.append((Cell(framework), Cell(dev), Cell(str(len(group))),
                     Cell(f"{geomean([p.ratio for p in group]):.2f}×"),
                     Cell(f"{min(p.ratio for p in group):.2f}× – "
                          f"{max(p.ratio for p in group):.2f}×"),
                     Cell(str(len(like))),
                     Cell(f"{geomean([p.ratio for p in like]):.2f}×" if like else "—"),
                     Cell(str(sum(p.overlap for p in group))),
                     *((Cell(str(len(ratios))),
                        Cell(_ratio_text(geomean(ratios)) if ratios else cells.MISSING,
                             kind="" if ratios else "muted")) if device else ())))
    notes = ["Ratio = your wall-time median / the reference's: below 1× you are faster. "
             "'Same settings': rows whose batch, precision, variant, compile cache, threads, "
             "framework version and device model all agree; 'Within CIs': rows whose two "
             "95% CIs overlap."]
    if device:
        notes.append("Device ratio = your GPU's own (kernel busy) time / the reference's, over "
                     "the rows where both have one: it leaves out host overhead, which "
                     "depends on each host's CPU, so it is the ratio that compares the GPUs.")
    return Table("compare-summary", "Your run / the reference, per framework and device",
                 ("Framework", "Device", "Rows", "Geo-mean ratio", "Range",
                  "Same settings", "Geo-mean (same settings)", "Within CIs",
                  *(("Rows with device time", "Geo-mean device ratio") if device else ())),
                 tuple(body), (False, False) + (True,) * (8 if device else 6),
                 notes=tuple(notes))


def _time_cell(row: dict, title: str) -> Cell:
    """A median of the pair table, with the GPU's own time where the row has it."""
    device = cells.device_ms(row)
    text = cells.fmt_ms(row["median_ms"])
    if cells.is_num(device):
        text += f" (dev {cells.fmt_ms(device)})"
    text += cells.device_marks(row)
    return Cell(text, title=title)


def pair_table(pairs: list[Pair]) -> Table:
    device = any(cells.is_num(p.device_ratio) for p in pairs)
    body = []
    for p in pairs:
        y, r = p.yours, p.reference
        body.append((Cell(y["model"]), Cell(str(y["batch"])), Cell(y["measure"]),
                     Cell(y["precision"]), Cell(f"{y['framework']} {y['variant']}"),
                     Cell(y["device"]),
                     _time_cell(y, y["hardware"]),
                     _time_cell(r, f"{r['hardware']}: {r['source']}"),
                     Cell(f"{p.ratio:.2f}×" + ("" if not p.overlap else " ≈"),
                          emphasis="" if p.differs else "bold"),
                     *((Cell(_ratio_text(p.device_ratio),
                             kind="" if cells.is_num(p.device_ratio) else "muted"),)
                       if device else ()),
                     Cell("; ".join(p.differs) or "—", kind="fail" if p.differs else "")))
    notes = ["Ratio = your wall-time median / the reference's; ≈: the two 95% confidence "
             "intervals overlap. Bold: every compared setting agrees. A ratio with differing "
             "settings is not a like-for-like comparison; read it with the differences beside "
             "it."]
    if device:
        notes.append("dev: the GPU's own (kernel busy) time per iteration; Device ratio = "
                     "yours / the reference's, where both rows have one (it carries no "
                     "interval).")
    return Table("compare-rows", "Each row beside the reference",
                 ("Model", "Batch", "Measure", "Precision", "Framework", "Device",
                  "Yours (ms)", "Reference (ms)", "Ratio",
                  *(("Device ratio",) if device else ()), "Settings that differ"), tuple(body),
                 (False, True, False, False, False, False, True, True, True,
                  *((True,) if device else ()), False),
                 notes=tuple(notes))


def section_parts(loaded: Loaded, reference_roots: tuple[Path, ...]
                  ) -> tuple[tuple[str, ...], tuple[Table, ...]]:
    """The comparison section's paragraphs and tables (empty when nothing pairs); the
    data-parallel cases in a table of their own (reports/sections/compare_scaling.py)."""
    yours, reference = split(loaded, reference_roots)
    pairs, unmatched = pair_rows(yours, reference)
    scaling_text, scaling_tables = scaling_section(loaded, reference_roots)
    serving_text, serving_tables = serving_section(yours, reference)
    names = ", ".join(str(p) for p in reference_roots)
    text = [f"Reference: {names}."]
    if pairs or unmatched or not (scaling_text or serving_text):
        text[0] += (f" {len(pairs)} of your timed rows have a reference row of the same "
                    "model, measure, framework and device.")
    if unmatched:
        missing = sorted({f"{r['framework']} {r['device']} {r['model']} {r['measure']}"
                          for r in unmatched})
        text.append(f"{len(unmatched)} row(s) without one: " + ", ".join(missing[:20])
                    + (", …" if len(missing) > 20 else "") + ".")
    text += [*scaling_text, *serving_text]
    tables = (summary_table(pairs), pair_table(pairs)) if pairs else ()
    return tuple(text), tables + scaling_tables + serving_tables
