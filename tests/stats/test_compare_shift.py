"""``python -m suites compare``'s run shift: the ratio a later run's medians share, and the
interval check with it divided out (suites/stats/compare.py: run_shift)."""

from __future__ import annotations

import pytest

from suites.stats.compare import Pair, Timed, probe_line, probe_ratio, run_shift, shift_line


def case(name: str, median: float, half_width: float = 0.05) -> Timed:
    return Timed(name, median, median * (1 - half_width), median * (1 + half_width), 3, False)


def runs(medians: dict[str, float], factors: dict[str, float]) -> list[Pair]:
    return [Pair(case(name, median), case(name, median * factors[name]))
            for name, median in medians.items()]


def test_a_shift_every_case_shares_is_divided_out_but_a_case_of_its_own_is_not():
    # Eight cases of >= 5 ms, seven 30% slower in the later run, one twice as slow.
    medians = {f"c{i}": 10.0 + i for i in range(8)}
    factors = {name: 1.3 for name in medians} | {"c7": 2.0}
    pairs = runs(medians, factors)
    shift = run_shift(pairs)
    assert shift.ratios == {">= 5 ms": pytest.approx(1.3)}
    assert shift.slower == 1.0
    # Raw, none is inside the ±5% intervals; with the others' 1.3 divided out, all but c7.
    assert not any(p.inside for p in pairs)
    assert shift.inside_after == pytest.approx(7 / 8)


def test_a_band_of_few_cases_borrows_the_other_cases_ratio():
    # One sub-millisecond case, 40% slower, and six large ones 10% slower: the small case's
    # own ratio would excuse it; the others' (1.1) does not.
    medians = {"small": 0.5} | {f"big{i}": 20.0 + i for i in range(6)}
    factors = {"small": 1.4} | {f"big{i}": 1.1 for i in range(6)}
    shift = run_shift(runs(medians, factors))
    assert shift.ratios["< 1 ms"] == pytest.approx(1.4)
    assert shift.inside_after == pytest.approx(6 / 7)


def test_the_line_names_the_ratio_per_band_and_the_share_inside():
    medians = {f"c{i}": 2.0 + i / 10 for i in range(5)}
    line = shift_line(runs(medians, dict.fromkeys(medians, 1.0)), 1)
    assert "run 2 / run 1" in line and "1-5 ms x1.000" in line and "100.0%" in line


def probed(name: str, median: float, core: float | None, wakeup: float | None = None) -> Timed:
    return Timed(name, median, median * 0.95, median * 1.05, 3, False,
                 host_core_probe_ms=core, host_wakeup_us=wakeup)


def test_probes_that_moved_with_the_run_are_marked_changed():
    # Every case 40% slower; the single-core probe steady, the wake-up 38% slower.
    pairs = [Pair(probed(f"c{i}", 0.5, 5.0, 50.0), probed(f"c{i}", 0.7, 5.1, 50.0 * 1.38))
             for i in range(5)]
    assert probe_ratio(pairs, "host_wakeup_us") == (pytest.approx(1.38), 5)
    line = probe_line(pairs, 1)
    assert "run 2 / run 1" in line
    assert "single-core speed x1.020 (steady, 5 cases)" in line
    assert "cross-core wake-up x1.380 (changed, 5 cases)" in line


def test_a_run_with_one_cpu_has_no_wake_up_probe():
    pairs = [Pair(probed(f"c{i}", 0.5, 5.0), probed(f"c{i}", 0.5, 4.0)) for i in range(3)]
    line = probe_line(pairs, 2)
    assert "run 3 / run 1" in line and "single-core speed x0.800 (changed" in line
    assert "wake-up" not in line


def test_rows_without_probes_print_no_probe_line():
    # Older rows (and a run where only one side has a probe) give no ratio.
    pairs = [Pair(probed("a", 1.0, None), probed("a", 1.0, 5.0, 50.0)),
             Pair(probed("b", 1.0, 5.0, 50.0), probed("b", 1.0, None))]
    assert probe_ratio(pairs, "host_core_probe_ms") is None and probe_line(pairs, 1) is None
