"""Your data-parallel scaling run beside a published reference (``python -m reports
results published/h200x4-<date>``): each of your scaling cases beside the reference's run
of the same computation, with both steps and both efficiencies.

A scaling row's ``batch`` is the global batch and its variant names N, so the row-by-row
comparison (reports/compare.py), which pairs the nearest settings, would set a two-GPU
step beside a one-GPU one. Here a pair is the same framework, device kind, model, mode,
per-device and global batch, N and precision (``suites.rows.scaling.row_key``, the key the
scaling plan estimates by), from any scaling suite: ``scaling`` and ``scaling-short``
run the same computation with a few more or fewer timed steps. What may still differ (the
GPU model, the framework's version, the interconnect, the ranks' thread pools) is listed
beside each pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.pipeline.load import Loaded, under_roots
from reports.render.table import Cell, Table
from reports.sections.scaling import MEASURE, batch_label, latest_rows, percent
from suites.rows.scaling import Key, row_key

# Efficiencies closer than this are called the same: between two runs of one case on two
# hosts of one kind, 23 of 30 PyTorch, JAX and ONNX Runtime efficiencies agreed within
# 2.5 points (h200x4-2026-11b (at 2efa0ce)'s README, 4x H200).
SAME_POINTS = 2.5


@dataclass(frozen=True)
class ScalingPair:
    yours: dict[str, Any]
    reference: dict[str, Any]

    @property
    def points(self) -> float | None:
        """Your efficiency minus the reference's, in percentage points (None at N = 1)."""
        mine, theirs = (r["scaling"].get("efficiency") for r in (self.yours, self.reference))
        if mine is None or theirs is None or self.yours["scaling"]["devices"] == 1:
            return None
        return 100.0 * (mine - theirs)

    @property
    def step_ratio(self) -> float:
        return self.yours["timing"]["median_ms"] / self.reference["timing"]["median_ms"]

    def differs(self) -> tuple[str, ...]:
        """The settings that differ, yours first."""
        out = []
        for label, pick in (("GPU", _gpu), ("version", _version), ("link", _link),
                            ("threads", _threads)):
            mine, theirs = pick(self.yours), pick(self.reference)
            if mine != theirs:
                out.append(f"{label} {mine or '—'} vs {theirs or '—'}")
        return tuple(out)


def _gpu(row: dict[str, Any]) -> str:
    env = row.get("env") or {}
    return env.get("gpu_model") or env.get("cpu_model") or ""


def _version(row: dict[str, Any]) -> str:
    return str((row.get("env") or {}).get("framework_version") or "")


def _threads(row: dict[str, Any]) -> str:
    """Each rank's intra-op / inter-op pools ("" where the rows did not record them)."""
    settings = row.get("settings") or {}
    intra, inter = settings.get("threads") or 0, settings.get("interop_threads") or 0
    return f"{intra}/{inter}" if intra or inter else ""


def _link(row: dict[str, Any]) -> str:
    links = ((row.get("env") or {}).get("interconnect") or {}).get("links") or {}
    return ", ".join(sorted(set(links.values())))


def _timed(row: dict[str, Any]) -> bool:
    return row.get("status") == "ok" and bool((row.get("timing") or {}).get("median_ms"))


def pair_scaling(loaded: Loaded, reference_roots: tuple[Path, ...]
                 ) -> tuple[list[ScalingPair], int]:
    """(pairs, your timed scaling cases without a reference run of the same computation)."""
    roots = tuple(p.resolve() for p in reference_roots)
    sides: tuple[list[dict], list[dict]] = ([], [])
    for row in loaded.rows:
        if row.data.get("measure") == MEASURE and isinstance(row.data.get("scaling"), dict):
            sides[under_roots(row.path, roots)].append(row.data)
    reference: dict[Key, dict[str, Any]] = {}
    # Several reference runs of one computation (two suites, two folders): the newest.
    for row in sorted(latest_rows(sides[1]), key=lambda r: str(r.get("started_at") or "")):
        key = row_key(row)
        if key is not None and _timed(row):
            reference[key] = row
    pairs, unmatched = [], 0
    for row in latest_rows(sides[0]):
        key = row_key(row)
        if key is None or not _timed(row):
            continue
        if key in reference:
            pairs.append(ScalingPair(row, reference[key]))
        else:
            unmatched += 1
    pairs.sort(key=_order)
    return pairs, unmatched


def _order(pair: ScalingPair) -> tuple:
    row, s = pair.yours, pair.yours["scaling"]
    return (row["settings"]["framework"], row["model"], s["mode"], s["base_batch"],
            s["devices"], row["settings"]["precision"])


def scaling_table(pairs: list[ScalingPair]) -> Table:
    body = []
    for p in pairs:
        y, r = p.yours, p.reference
        s = y["scaling"]
        points = p.points
        body.append((Cell(y["settings"]["framework"]), Cell(y["settings"]["precision"]),
                     Cell(y["model"]), Cell(s["mode"]), Cell(batch_label(s)),
                     Cell(str(s["devices"])),
                     Cell(f"{y['timing']['median_ms']:.2f}"),
                     Cell(f"{r['timing']['median_ms']:.2f}", title=r.get("case_id", "")),
                     Cell(f"{p.step_ratio:.2f}×"),
                     Cell(percent(s.get("efficiency"))),
                     Cell(percent(r["scaling"].get("efficiency"))),
                     Cell("—" if points is None else f"{points:+.1f}",
                          emphasis="bold" if points is not None
                          and abs(points) > SAME_POINTS else ""),
                     Cell("; ".join(p.differs()) or "—")))
    return Table("compare-scaling", "Data-parallel scaling beside the reference",
                 ("Framework", "Precision", "Model", "Mode", "Batch", "N", "Your step ms",
                  "Reference step ms", "Step ratio", "Your efficiency",
                  "Reference efficiency", "Points", "Settings that differ"),
                 tuple(body), (False,) * 5 + (True,) * 7 + (False,),
                 notes=("Pairs: the same framework, model, mode, per-device and global batch, "
                        "N and precision, from any scaling suite. Step ratio = your median "
                        "step / the reference's. Points = your efficiency − the reference's; "
                        f"bold beyond ±{SAME_POINTS:g} (two hosts of one kind, the same "
                        "case: 23 of 30 efficiencies agreed within that).",))


def section_parts(loaded: Loaded, reference_roots: tuple[Path, ...]
                  ) -> tuple[tuple[str, ...], tuple[Table, ...]]:
    """The scaling comparison's paragraph and table (empty when no scaling case pairs)."""
    pairs, unmatched = pair_scaling(loaded, reference_roots)
    if not pairs:
        return (), ()
    scaled = [p.points for p in pairs if p.points is not None]
    close = sum(abs(v) <= SAME_POINTS for v in scaled)
    text = [f"{len(pairs)} of your data-parallel cases have a reference run of the same "
            f"computation; of their {len(scaled)} efficiencies at N > 1, {close} are within "
            f"{SAME_POINTS:g} points of the reference's."
            + (f" {unmatched} case(s) without one." if unmatched else "")]
    return tuple(text), (scaling_table(pairs),)
