"""The plain-text summary printed to stdout (the runner's "first report"): one line per
model, batch and setting with forward and total times, status and equivalence; the practice
suites' rows after them, apart (reports/sections/practice.py), with their throughput."""

from __future__ import annotations

from reports.pipeline import cells
from reports.pipeline.equivalence import FINGERPRINT
from reports.pipeline.grouping import by_setting, records, variant_text
from reports.pipeline.naming import sort_key
from reports.sections import practice

HEADER = ("model", "batch", "hardware", "framework", "variant", "prec", "thr", "forward ms",
          "total ms", "equiv")
WIDTHS = (18, 5, 24, 10, 20, 5, 3, 16, 16, 10)


def _clip(text: str, width: int) -> str:
    # Row strings reach a terminal: drop control characters (ANSI escapes included).
    text = "".join(c for c in str(text) if c.isprintable())
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _time(row) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return cells.status_text(row, short=True).upper() if row["status"] == "oom" else \
            row["status"]
    text = cells.fmt_ms(row["median_ms"])
    return text + (f" {cells.UNSTABLE}" if row["unstable"] else "")


PRACTICE_HEADER = ("model", "batch", "hardware", "framework", "variant", "prec", "measure",
                   "ms", "per s", "util", "equiv")
PRACTICE_WIDTHS = (18, 5, 24, 10, 20, 5, 10, 10, 9, 6, 10)


def _practice_lines(rows: list[dict]) -> list[tuple]:
    rows = [r for r in rows if r["measure"] in practice.MEASURES]
    rows.sort(key=lambda r: (sort_key(r["model"]), r["hardware"], practice.row_order(r)))
    return [(r["model"], r["batch"], r["hardware"], r["framework"], r["variant"],
             r["precision"], practice.MEASURE_NAMES.get(r["measure"], r["measure"]), _time(r),
             practice.fmt_rate(practice.per_second(r)),
             f"{r['peak_share']:.0%}" if cells.is_num(r["peak_share"]) else "—",
             r["equiv"]) for r in rows]


def _table(header, widths, lines) -> list[str]:
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    return out + [fmt.format(*(_clip(v, w) for v, w in zip(line, widths))).rstrip()
                  for line in lines]


def render(report) -> str:
    everything = records(report.frame)
    rows = [r for r in everything if not r["practice"]]
    lines = []
    for model, batch in sorted({(r["model"], r["batch"]) for r in rows},
                               key=lambda mb: (sort_key(mb[0]), mb[1])):
        groups = by_setting([r for r in rows if r["model"] == model and r["batch"] == batch])
        for s, m in sorted(groups.items()):
            fwd, grad = m.get("forward"), m.get("gradient")
            if fwd is None and grad is None:
                continue
            printed = m.get(FINGERPRINT)
            checks = [report.equivalence.rows.get(r["source"]) for r in (fwd, grad, printed)
                      if r]
            checks = [c for c in checks if c is not None and c.agree is not None]
            equiv = ("—" if not checks else "✓" if all(c.agree for c in checks)
                     else f"✗ {max(c.worst for c in checks):.0e}")
            lines.append((model, batch, s.hardware, s.framework, variant_text(s, ""), s.precision,
                          s.threads, _time(fwd), _time(grad), equiv))
    today = _practice_lines([r for r in everything if r["practice"]])
    out = _table(HEADER, WIDTHS, lines) if lines or not today else []
    if today:
        out += [""] if out else []
        out += ["Today's practice (practice suites; per s = batch / median):"]
        out += _table(PRACTICE_HEADER, PRACTICE_WIDTHS, today)
    n = len(report.frame)
    tail = [f"{n} rows; {report.superseded} superseded by reruns" if report.superseded
            else f"{n} rows"]
    out += [""] + tail
    return "\n".join(out) + "\n"
