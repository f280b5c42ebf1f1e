"""The one ranking rule (reports/pipeline/ranking.py), branch by branch, on synthetic rows
shaped like the tidy table's records: GPU device time, GPU wall time widened by earlier
runs, GPU not ranked, CPU wall time."""

from __future__ import annotations

import math

from reports.pipeline import ranking


def row(wall, low=None, high=None, *, device=None, gpu=True, earlier=math.nan, name=""):
    """A tidy record: wall median and interval (±1% unless given), device time, the
    launch-bound mark as tidy.host_columns computes it, earlier runs behind the interval."""
    return {"status": "ok", "framework": name, "device": "gpu" if gpu else "cpu",
            "median_ms": wall, "ci_low_ms": wall * 0.99 if low is None else low,
            "ci_high_ms": wall * 1.01 if high is None else high,
            "device_median_ms": math.nan if device is None else device,
            "launch_bound": None if device is None else device < 0.5 * wall,
            "earlier_runs": earlier}


def old_rule_winner(rows):
    """The rule before this one: the lowest wall median, bold where its interval lies below
    the runner-up's, on every device."""
    timed = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["median_ms"])
    best, second = timed[0], timed[1]
    return best if best["ci_high_ms"] < second["ci_low_ms"] else None


def test_gpu_ranks_by_device_time_within_three_percent_not_distinguishable():
    # wall intervals wholly apart (the old rule bolds a), device times 2% apart: a re-run on
    # another host could swap the wall times, the device times reproduce within 3%
    a = row(10.0, 9.9, 10.1, device=9.0, name="a")
    b = row(11.0, 10.9, 11.1, device=9.18, name="b")
    assert old_rule_winner([a, b]) is a
    result = ranking.rank([b, a])
    assert result.figure == ranking.DEVICE
    assert result.tied == (a, b)
    assert result.winner is None and ranking.clear_winner([a, b]) is None
    assert "within 3%" in ranking.overlap_text([a, b], lambda r: r["framework"])


def test_gpu_device_time_beyond_three_percent_ranks_even_against_the_wall_time():
    # b's wall median is the lower one, but its kernels take 5% longer
    a = row(10.0, device=9.0, name="a")
    b = row(9.5, device=9.45, name="b")
    result = ranking.rank([a, b])
    assert result.order == (a, b) and result.tied == (a,)
    assert ranking.clear_winner([b, a]) is a and ranking.fastest([b, a]) is a
    assert math.isclose(result.ratio(b), 1.05)


def test_gpu_launch_bound_case_without_earlier_runs_is_not_ranked():
    a = row(1.0, 0.95, 1.05, device=0.1, name="a")       # device 10% of wall: launch-bound
    b = row(2.0, 1.9, 2.1, device=1.8, name="b")
    result = ranking.rank([a, b])
    assert not result.ranked and result.winner is None and result.tied == ()
    assert "launch-bound" in result.reason
    assert result.order == (a, b)                        # still ordered, by wall time
    assert ranking.overlap_text([a, b], str).startswith("not ranked: launch-bound")


def test_gpu_row_without_device_time_and_no_earlier_runs_is_not_ranked():
    a, b = row(1.0, device=0.9), row(2.0)
    result = ranking.rank([a, b])
    assert not result.ranked and result.reason.startswith("no device time")


def test_gpu_wall_time_ranks_where_earlier_runs_widened_every_interval():
    a = row(1.0, 0.95, 1.05, device=0.1, earlier=2)
    b = row(2.0, 1.9, 2.1, device=1.8, earlier=1)
    assert ranking.rank([a, b]).figure == ranking.WALL
    assert ranking.clear_winner([b, a]) is a
    overlapping = row(1.1, 1.04, 1.2, device=0.2, earlier=2)
    assert ranking.rank([a, overlapping]).tied == (a, overlapping)
    # one row without earlier runs: its interval says nothing of a re-run's median
    assert not ranking.rank([a, row(2.0, 1.9, 2.1, device=1.8)]).ranked


def test_cpu_ranks_by_wall_time_where_the_intervals_do_not_overlap():
    a = row(100.0, 90.0, 110.0, gpu=False)
    b = row(130.0, 115.0, 140.0, gpu=False)
    c = row(105.0, 100.0, 130.0, gpu=False)
    assert ranking.rank([b, a]).figure == ranking.WALL
    assert ranking.clear_winner([b, a]) is a
    assert ranking.rank([a, b, c]).tied == (a, c)
    assert ranking.clear_winner([a, b, c]) is None
    assert "interval overlaps" in ranking.overlap_text([a, c], lambda r: "c")
    missing = row(120.0, math.nan, math.nan, gpu=False)
    assert ranking.clear_winner([a, missing]) is None     # no interval: not told apart


def test_failures_and_absent_rows_are_not_ranked_against():
    a = row(1.0, device=0.9)
    failed = {**row(0.5, device=0.4), "status": "oom"}
    assert ranking.rank([a, None, failed]).order == (a,)
    assert ranking.clear_winner([a, None, failed]) is None          # alone
    assert ranking.rank([None, failed]).order == ()
