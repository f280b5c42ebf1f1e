"""What each interval a row carries is, in words: the ``timing.interval`` label, written
once here for the runner (suites/stats/repetitions.py, suites/harness/rounds.py) and applied
on reading to rows written before these words (reports/pipeline/tidy.py).

The labels say "nominal": the 95% holds only where the repetitions (or processes) behind
the median are exchangeable with a re-run's. For GPU wall time they were not: with the
torch ``default-gpu`` suite run twice back to back on an H200 (commit 2efa0ce), 57.4% of the
second run's medians fell inside the first run's intervals, while device medians were within
3% in every case (docs/methodology.md#intervals gives each interval's measured coverage).
Rows written before said "95% prediction interval of a re-run's median", which that
measurement showed false.
"""

from __future__ import annotations

import re

DOC = "docs/methodology.md#intervals"


def one_repetition() -> str:
    """A row of a single repetition: its samples' bootstrap interval."""
    return ("nominal 95% bootstrap interval of the median of one repetition's samples "
            f"(assumes the samples exchangeable; see {DOC})")


def repetitions(count: int) -> str:
    """The prediction interval over the repetitions of one process."""
    return (f"nominal 95% prediction interval of the median from {count} repetitions in one "
            f"process (assumes the repetitions exchangeable; see {DOC})")


def processes(count: int, repetition_count: int, borrowed: str = "") -> str:
    """The prediction interval over the process medians of several rounds (``borrowed``:
    how the between-process spread was moderated, "" where it was not)."""
    return (f"nominal 95% prediction interval of the median of {count} process medians "
            f"({repetition_count} repetitions){borrowed} (assumes the processes exchangeable; "
            f"see {DOC})")


def spread(share: float, what: str) -> str:
    """The unstable reason of a row whose interval is wide: its half-width."""
    return f"the nominal 95% interval is ±{share:.1%} of the median ({what})"


_OLD = (
    (re.compile(r"^95% prediction interval of a re-run's median over (\d+) repetitions"),
     lambda m: repetitions(int(m[1]))),
    (re.compile(r"^95% prediction interval of a re-run's centre \(median of (\d+) process "
                r"medians, (\d+) repetitions\)((?:; between-process spread moderated over "
                r"[^;]*?\(prior df [^)]*\))?)"),
     lambda m: processes(int(m[1]), int(m[2]), m[3])),
    (re.compile(r"^bootstrap 95% CI of one run's median \(one repetition\)"),
     lambda m: one_repetition()),
)
_OLD_SPREAD = re.compile(r"a re-run's median may differ by ±([0-9.]+%) \(([^)]*)\)")


def relabel(text: str) -> str:
    """An older row's interval label in today's words; what follows its first part (the
    widening by earlier runs, suites/stats/between_runs.py) stays as written."""
    for pattern, new in _OLD:
        match = pattern.match(text)
        if match:
            return new(match) + text[match.end():]
    return text


def relabel_unstable(text: str) -> str:
    """An older row's unstable reason ("a re-run's median may differ by ±x% (...)") in
    today's words."""
    return _OLD_SPREAD.sub(lambda m: f"the nominal 95% interval is ±{m[1]} of the median "
                                     f"({m[2]})", text)
