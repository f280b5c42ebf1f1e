"""Where the fault-injection tests (tests/harness/test_faults.py, tests/matrix/
test_matrix_runs.py) stop a run: at a point drawn over the length of an uninterrupted run,
or once the run has written a drawn number of rows. The stand-in framework
(tests/fake_framework.py) spends most of a run starting the runner and its worker and
writes its rows in the last quarter or less (a second of a four-second run, here), so
points drawn over the run's length alone would seldom land between two rows; a drawn row
count lands there whatever the host's load."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def lines_on_disk(out: Path, pattern: str) -> int:
    """Whole lines (a torn tail is not one) of the files under ``out`` that ``pattern``
    (a glob) names."""
    return sum(path.read_bytes().count(b"\n") for path in out.glob(pattern))


def wait_for_lines(proc: subprocess.Popen, out: Path, pattern: str, count: int,
                   limit_s: float = 240.0) -> bool:
    """Wait until the files hold ``count`` lines or more; False if ``proc`` ended first
    (or ``limit_s`` passed). Polled every 10 ms, so a kill that follows lands before the
    next job's rows (a stand-in job takes a tenth of a second or so)."""
    deadline = time.monotonic() + limit_s
    while proc.poll() is None and time.monotonic() < deadline:
        if lines_on_disk(out, pattern) >= count:
            return True
        time.sleep(0.01)
    return False
