"""Smaller tables: failures (never dropped), host→device transfers and their share of a
training step (Li et al. Fig. 7), the parametric convolution sweeps (Li et al. Fig. 3 and 5,
as numbers) and the ratios."""

from __future__ import annotations

import json
import math

import pandas as pd

from reports.pipeline import cells
from reports.pipeline.grouping import label, records, setting_of
from reports.pipeline.naming import parse_conv, sort_key
from reports.pipeline.ratios import Ratio
from reports.render.table import Cell, Table


def _reason_key(row: dict) -> tuple[str, str]:
    return row["status"], " ".join(str(row["reason"] or "").split())


def failure_tables(frame: pd.DataFrame) -> list[Table]:
    """Every failed row, and first each distinct reason once with where it occurred: a
    framework that lacks a measure altogether (ONNX Runtime's gradients) is one line there,
    and its rows below point to it by number."""
    bad = [r for r in records(frame) if r["status"] != "ok"]
    if not bad:
        return []
    bad.sort(key=lambda r: (sort_key(r["model"]), r["batch"], r["measure"], r["framework"]))
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in bad:
        groups.setdefault(_reason_key(r), []).append(r)
    shared = {key: n for n, key in enumerate((k for k, rows in groups.items() if len(rows) > 1),
                                             start=1)}
    reasons = tuple((Cell(str(n)), Cell(status, kind="fail"), Cell(reason or "—"),
                     Cell(", ".join(sorted({f"{r['framework']} {r['device']}"
                                            for r in groups[(status, reason)]}))),
                     Cell(", ".join(sorted({r["measure"] for r in groups[(status, reason)]}))),
                     Cell(str(len(groups[(status, reason)]))))
                    for (status, reason), n in shared.items())
    body = tuple((Cell(r["model"]), Cell(str(r["batch"])), Cell(r["measure"]),
                  Cell(label(setting_of(r))), Cell(cells.status_text(r, short=True),
                                                   kind="fail"),
                  Cell(f"reason {shared[_reason_key(r)]}" if _reason_key(r) in shared
                       else r["reason"] or "—", title=r["reason"] or "")) for r in bad)
    out = []
    if reasons:
        out.append(Table("failure-reasons", "Reasons shared by several failed rows",
                         ("#", "Status", "Reason", "Framework, device", "Measures", "Rows"),
                         reasons, (True, False, False, False, False, True)))
    out.append(Table("failures", f"Failures ({len(bad)} rows: OOM, unsupported, failed, timeout)",
                     ("Model", "Batch", "Measure", "Setting", "Status", "Reason"), body,
                     (False, True, False, False, False, False),
                     notes=("Kept as rows, like convnet-benchmarks' Limitations column; "
                            "'reason n' is row n of the table above.",)))
    return out


def _gradient_rows(frame: pd.DataFrame) -> dict[tuple, dict]:
    """(model, batch, setting) → its gradient row, to set a transfer beside."""
    return {(r["model"], r["batch"], setting_of(r)): r for r in records(frame)
            if r["measure"] == "gradient"}


def transfer_share(transfer: dict, gradient: dict | None) -> float:
    """Li et al. Fig. 7: transfer / (transfer + one gradient computation), with total = one
    gradient computation plus the host → device transfer of its input batch."""
    if gradient is None or transfer["status"] != "ok" or gradient["status"] != "ok":
        return math.nan
    total = transfer["median_ms"] + gradient["median_ms"]
    return transfer["median_ms"] / total if total > 0 else math.nan


def _share_cell(transfer: dict, gradient: dict | None) -> Cell:
    if gradient is None:
        return Cell(cells.MISSING, kind="muted", title="no gradient row of this setting")
    if gradient["status"] != "ok":
        return Cell(cells.MISSING, kind="muted", title=f"gradient {cells.status_text(gradient)}")
    share = transfer_share(transfer, gradient)
    if not cells.is_num(share):
        return Cell(cells.MISSING, kind="muted")
    return Cell(f"{share:.1%}", title=f"{cells.fmt_ms(transfer['median_ms'])} / "
                f"({cells.fmt_ms(transfer['median_ms'])} + "
                f"{cells.fmt_ms(gradient['median_ms'])} gradient) ms")


def transfer_table(frame: pd.DataFrame) -> Table | None:
    rows = [r for r in records(frame) if r["measure"] in ("transfer", "transfer_pinned")]
    if not rows:
        return None
    gradients = _gradient_rows(frame)
    paired = [(r, gradients.get((r["model"], r["batch"], setting_of(r)))) for r in rows]
    with_share = any(g is not None for _, g in paired)
    body = []
    for r, grad in sorted(paired, key=lambda rg: (sort_key(rg[0]["model"]), rg[0]["batch"],
                                                  rg[0]["framework"], rg[0]["measure"])):
        shape = json.loads(r["input_shape"] or "[]")
        size = r["batch"] * math.prod(shape) * (2 if r["precision"] == "bf16" else 4)
        rate = (size / (r["median_ms"] / 1e3) / 1e9 if r["status"] == "ok" and shape
                and r["median_ms"] > 0 else math.nan)
        buffer = r.get("host_buffer") or ("pinned" if r["measure"] == "transfer_pinned"
                                          else "pageable")
        body.append((Cell(r["model"]), Cell(str(r["batch"])), Cell(label(setting_of(r))),
                     Cell(buffer.split(" ")[0], title=buffer), cells.time_cell(r),
                     cells.value_cell(size / 2**20),
                     Cell(f"{rate:.3g}" if cells.is_num(rate) else cells.MISSING),
                     *((_share_cell(r, grad),) if with_share else ())))
    notes = ["Size = batch × input shape × 4 bytes (2 for bf16). Host buffer: pageable "
             "(ordinary memory, staged by the driver) or pinned (page-locked, read by the "
             "copy engine directly), as Li et al. Fig. 7's discussion distinguishes."]
    if with_share:
        notes.append("Share of total = transfer / (transfer + gradient), as in Li et al. "
                     "Fig. 7: total = one gradient computation of the same model, batch and "
                     "setting plus the host → device transfer of its input batch.")
    return Table("transfer", "Host → device transfer of one input batch",
                 ("Model", "Batch", "Setting", "Host buffer", "Time (ms)", "Size (MiB)",
                  "GB/s", *(("Share of total",) if with_share else ())), tuple(body),
                 (False, True, False, False, True, True, True,
                  *((True,) if with_share else ())),
                 notes=tuple(notes))


def sweep_table(frame: pd.DataFrame) -> Table | None:
    rows = [r for r in records(frame) if parse_conv(r["model"]) is not None
            and r["measure"] in ("forward", "gradient")]
    if not rows:
        return None
    groups: dict[tuple, dict] = {}
    for r in rows:
        groups.setdefault((r["model"], r["batch"], setting_of(r)), {})[r["measure"]] = r
    body = []
    for (model, batch, s), m in sorted(groups.items(), key=lambda kv: (
            tuple(parse_conv(kv[0][0]).values()), kv[0][1], kv[0][2])):
        p = parse_conv(model)
        body.append((Cell(str(batch)), *(Cell(str(p[k])) for k in "cifks"), Cell(label(s)),
                     cells.time_cell(m.get("forward")), cells.time_cell(m.get("gradient")),
                     cells.memory_cell([m.get("gradient"), m.get("forward")])))
    return Table("sweeps", "Single convolution layers (Li et al.'s (b, i, f, k, s) tuples)",
                 ("b", "c", "i", "f", "k", "s", "Setting", "Forward (ms)", "Total (ms)",
                  "Peak memory"), tuple(body), (True,) * 6 + (False,) + (True,) * 3,
                 notes=("b batch, c input channels, i input size, f filters, k kernel, "
                        "s stride; Li et al.'s base configuration is (64, 128, 64, 11, 1).",))


def ratio_table(ratios: list[Ratio], kind: str) -> Table | None:
    chosen = [r for r in ratios if r.kind == kind]
    if not chosen:
        return None
    body = tuple((Cell(r.fast), Cell(r.slow), Cell(r.context),
                  Cell(f"{r.low:.2f}×"), Cell(f"{r.median:.2f}×"), Cell(f"{r.high:.2f}×"),
                  Cell(str(len(r.models)), title=", ".join(r.models))) for r in chosen)
    what = "frameworks" if kind == "framework" else "devices"
    return Table(f"ratios-{kind}", f"Speed ratios between {what}",
                 ("Faster", "Slower", "Measure, where", "Min", "Median", "Max", "Models"),
                 body, (False, False, False, True, True, True, True),
                 notes=(("Ratio = wall-time median of the slower / of the faster, per model "
                         "and batch; each framework's fastest ok variant (same hardware, "
                         "precision and, on CPU, threads).") if kind == "framework" else
                        ("Ratio of wall-time medians per model and batch; same framework, "
                         "variant and precision; each device's fastest ok row."),))
