"""Interval labels (suites/stats/intervals.py): what the runner writes, and older rows'
labels rewritten on reading (reports/pipeline/tidy.py), their widening by earlier runs kept."""

from __future__ import annotations

from reports.pipeline.load import load
from reports.pipeline.tidy import tidy
from suites.stats import intervals
from tests import report_fixtures as fx

OLD = "95% prediction interval of a re-run's median over 5 repetitions"
WIDENED = ("; widened by the case's spread over 1 earlier run of this machine model (1 host), "
           "moderated over 27 cases")


def test_every_label_says_nominal_what_it_assumes_and_where_its_coverage_is():
    for label in (intervals.one_repetition(), intervals.repetitions(5),
                  intervals.processes(3, 15, "; between-process spread moderated over 20 "
                                             "cases (prior df 4.1)")):
        assert label.startswith("nominal 95% ")
        assert "exchangeable" in label and "docs/methodology.md#intervals" in label
        assert "re-run" not in label


def test_older_labels_are_rewritten_and_their_widening_kept():
    assert intervals.relabel(OLD) == intervals.repetitions(5)
    assert intervals.relabel(OLD + WIDENED) == intervals.repetitions(5) + WIDENED
    rounds = ("95% prediction interval of a re-run's centre (median of 3 process medians, 15 "
              "repetitions); between-process spread moderated over 20 cases (prior df 4.1)")
    assert intervals.relabel(rounds) == intervals.processes(
        3, 15, "; between-process spread moderated over 20 cases (prior df 4.1)")
    assert intervals.relabel("bootstrap 95% CI of one run's median (one repetition)") == \
        intervals.one_repetition()
    new = intervals.repetitions(7)
    assert intervals.relabel(new) == new                       # today's words stay
    assert intervals.relabel_unstable("a re-run's median may differ by ±12.5% (5 "
                                      "repetitions)") == \
        "the nominal 95% interval is ±12.5% of the median (5 repetitions)"


def test_rows_are_relabelled_on_reading_not_in_the_file(tmp_path):
    row = fx.make_row("resnet50", 16, "forward", "torch", "gpu", 7.0, unstable=True,
                      timing_extra={"interval": OLD + WIDENED,
                                    "unstable_reason": "a re-run's median may differ by "
                                                       "±12.5% (5 repetitions)"})
    fx._write(tmp_path / "r.jsonl", [row])
    frame = tidy(load([tmp_path])).frame
    assert frame.loc[0, "interval"] == intervals.repetitions(5) + WIDENED
    assert frame.loc[0, "unstable_reason"].startswith("the nominal 95% interval is ±12.5%")
    assert OLD in (tmp_path / "r.jsonl").read_text()
