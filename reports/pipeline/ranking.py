"""Which of several timed rows is the fastest, and whether that is told apart at all.

Rankings read the wall-time median: it is the one figure every framework has, on every
device, with an interval (``ci_low_ms``–``ci_high_ms``: where a re-run's median is expected,
95%). Device times are shown beside it, but not every framework has one yet and they carry
no interval, so they rank nothing. A fastest row whose interval reaches into the runner-up's
is not ranked: a re-run could put the two the other way round.
"""

from __future__ import annotations

from reports.pipeline.cells import is_num

FIGURE = "wall-time median"


def rule(what: str) -> str:
    """The footnote's words for the bold mark; ``what`` says the fastest of what."""
    return (f"bold: {what} by {FIGURE}, only where its 95% interval (where a re-run's "
            "median is expected) lies wholly below the runner-up's; where the two overlap a "
            "re-run could swap them, so the case is not ranked and nothing is bold")


def _by_median(rows) -> list[dict]:
    """The ok rows with a wall median, fastest first (None and failures left out)."""
    timed = [r for r in rows if r is not None and r["status"] == "ok"
             and is_num(r["median_ms"])]
    return sorted(timed, key=lambda r: r["median_ms"])


def fastest(rows) -> dict | None:
    """The ok row with the lowest wall median, ranked or not."""
    timed = _by_median(rows)
    return timed[0] if timed else None


def clear_winner(rows) -> dict | None:
    """The ok row with the lowest wall median when its interval lies wholly below the next
    row's; None with fewer than two timed rows, when the intervals overlap, or when either
    interval is missing (nothing tells the two apart then)."""
    timed = _by_median(rows)
    if len(timed) < 2:
        return None
    best, runner_up = timed[0], timed[1]
    if not (is_num(best["ci_high_ms"]) and is_num(runner_up["ci_low_ms"])):
        return None
    return best if best["ci_high_ms"] < runner_up["ci_low_ms"] else None


def overlap_text(rows, name) -> str:
    """Hover text of the fastest row of a case left unranked: which row it overlaps
    (``name`` names a row); empty with fewer than two timed rows."""
    timed = _by_median(rows)
    if len(timed) < 2:
        return ""
    return (f"fastest {FIGURE}, but its 95% interval overlaps {name(timed[1])}'s: "
            "not ranked")
