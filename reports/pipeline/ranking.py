"""Which of several timed rows is the fastest, and whether that is told apart at all: the
one ranking rule behind the report's bold marks and the README's results at a glance
(reports/glance.py).

Each case is ranked by the figure that reproduces on its device (docs/methodology.md
#device-time and #intervals):

- On a GPU, by device time (the kernels' busy time per iteration), where the case is not
  launch-bound. Device medians reproduced within 3% across H200 hosts and commits (74 of 76
  cases of 1 ms or more), while a re-run's wall median fell inside the first run's nominal
  95% interval for only 57% of cases; so two rows are told apart only where their device
  times differ by more than ``DEVICE_REPRODUCES``.
- On a GPU, by wall time only where every row's interval covers the spread between earlier
  runs of the machine model (``python -m suites run --earlier``: the row's
  ``timing.between_runs``; ``earlier_runs`` in the tidy table), and then only where the
  fastest row's interval lies wholly below the next one's. A launch-bound case (device time
  under half the wall time: the wall time is the host's) or one without device time, whose
  intervals no earlier runs widened, is not ranked.
- On a CPU, by wall time, told apart only where the 95% intervals do not overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.pipeline.cells import device_ms, is_num, launch_bound

# Two device medians within this share of each other are not told apart: what device
# medians of one case reproduced within across hosts (docs/methodology.md#device-time).
DEVICE_REPRODUCES = 0.03
DEVICE = "device-time median"
WALL = "wall-time median"


@dataclass(frozen=True)
class Ranking:
    """A case's rows ranked by the rule above. ``order``: the timed rows, fastest first by
    ``figure`` (by wall time where the case is not ranked); ``tied``: the rows not told apart
    from the fastest (the fastest first), empty where the case is not ranked; ``reason``: why
    it is not ranked ("" where it is)."""
    figure: str                      # DEVICE, WALL, or "" where not ranked
    order: tuple[dict, ...]
    tied: tuple[dict, ...]
    reason: str = ""

    @property
    def ranked(self) -> bool:
        return bool(self.figure)

    @property
    def fastest(self) -> dict | None:
        return self.order[0] if self.order else None

    @property
    def winner(self) -> dict | None:
        """The fastest row where it is told apart from every other timed row."""
        if self.ranked and len(self.order) > 1 and len(self.tied) == 1:
            return self.order[0]
        return None

    def value(self, row) -> float:
        """The figure this case is ranked (or, not ranked, ordered) by, for one of its rows."""
        return device_ms(row) if self.figure == DEVICE else row["median_ms"]

    def ratio(self, row) -> float:
        """``row``'s figure over the fastest's."""
        return self.value(row) / self.value(self.order[0])


def _timed(rows) -> list[dict]:
    """The ok rows with a wall median (None and failures left out)."""
    return [r for r in rows if r is not None and r["status"] == "ok" and is_num(r["median_ms"])]


def covers_earlier_runs(row) -> bool:
    """The row's interval covers the spread between earlier runs of its machine model
    (suites/stats/between_runs.py widen)."""
    runs = row.get("earlier_runs")
    return is_num(runs) and runs > 0


def _by_interval(timed: list[dict], figure: str) -> Ranking:
    """Wall time: the rows whose interval reaches the fastest's are not told apart from it;
    a row without an interval is told apart from none."""
    order = tuple(sorted(timed, key=lambda r: r["median_ms"]))
    best = order[0]

    def apart(r) -> bool:
        return is_num(best["ci_high_ms"]) and is_num(r["ci_low_ms"]) and \
            best["ci_high_ms"] < r["ci_low_ms"]
    return Ranking(figure, order, (best, *(r for r in order[1:] if not apart(r))))


def rank(rows) -> Ranking:
    """The case's ``rows`` (None and failures allowed) ranked by the module's rule."""
    timed = _timed(rows)
    if not timed:
        return Ranking("", (), (), "nothing timed")
    if not any(r.get("device") == "gpu" for r in timed):
        return _by_interval(timed, WALL)
    bound = [r for r in timed if launch_bound(r)]
    if not bound and all(is_num(device_ms(r)) for r in timed):
        order = tuple(sorted(timed, key=device_ms))
        limit = device_ms(order[0]) * (1 + DEVICE_REPRODUCES)
        return Ranking(DEVICE, order, (order[0], *(r for r in order[1:] if device_ms(r) <= limit)))
    if all(covers_earlier_runs(r) for r in timed):
        return _by_interval(timed, WALL)
    reason = ("launch-bound (device time under half the wall time: the wall time is the host's)"
              if bound else "no device time")
    return Ranking("", tuple(sorted(timed, key=lambda r: r["median_ms"])), (),
                   f"{reason}, and no interval widened by earlier runs")


def rule(what: str) -> str:
    """The footnote's words for the bold mark; ``what`` says the fastest of what."""
    return (f"bold: {what}, only where told apart from the runner-up: on a GPU by "
            f"{DEVICE} where the case is not launch-bound (apart by more than "
            f"{DEVICE_REPRODUCES:.0%}: what device medians reproduce within across hosts), "
            f"by {WALL} only where earlier runs widened the intervals (--earlier) and the "
            "fastest's lies wholly below the runner-up's, otherwise not ranked; on a CPU by "
            f"{WALL}, where the nominal 95% intervals do not overlap (docs/methodology.md#intervals)")


def fastest(rows) -> dict | None:
    """The fastest timed row by the case's ranking figure, told apart or not."""
    return rank(rows).fastest


def clear_winner(rows) -> dict | None:
    """The fastest row where the rule tells it apart from every other timed row; None with
    fewer than two timed rows, where the runner-up is not told apart, or where the case is
    not ranked."""
    return rank(rows).winner


def overlap_text(rows, name) -> str:
    """Hover text of the fastest row of a case without a winner: which row it is not told
    apart from, or why the case is not ranked (``name`` names a row); empty with fewer than
    two timed rows."""
    ranking = rank(rows)
    if len(ranking.order) < 2:
        return ""
    if not ranking.ranked:
        return f"not ranked: {ranking.reason}"
    other = ranking.tied[1]
    if ranking.figure == DEVICE:
        return (f"fastest {DEVICE}, but within {DEVICE_REPRODUCES:.0%} of {name(other)}'s: "
                "not distinguishable")
    return (f"fastest {WALL}, but its 95% interval overlaps {name(other)}'s: "
            "not distinguishable")
