"""The row's timing record (suites/rows/records.py): written in one place, every key of
the rows in today's order, what a row leaves out left out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from suites.rows.records import GROUP_OF, Timing
from suites.stats.repetitions import combined_timing
from suites.stats.timer import TimerSettings, summarise

ROOT = Path(__file__).resolve().parents[2]


def published_timings(limit: int = 400) -> list[dict]:
    found = []
    for path in sorted(ROOT.glob("published/**/*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                timing = json.loads(line).get("timing")
                if timing and "repetitions" in timing:
                    found.append(timing)
        if len(found) >= limit:
            break
    return found


def test_published_timings_read_back_to_the_same_json():
    # Rows of earlier versions put some keys elsewhere: the keys and values must match, the
    # order is today's (the tests below).
    timings = published_timings()
    if not timings:
        pytest.skip("no published rows in this checkout")
    for timing in timings:
        again = json.loads(json.dumps(Timing.from_dict(timing).to_dict()))
        # A group written whole by today's code may have gained a member since an older row
        # was written: that member comes back null (not measured), and nothing else differs.
        added = {k for k in set(again) - set(timing) if again[k] is None and k in GROUP_OF}
        assert {k: v for k, v in again.items() if k not in added} == timing


def test_a_worker_timing_keeps_its_groups_whole_and_leaves_out_the_rest():
    runs = [summarise(0.1, [0.010] * 5, 1, TimerSettings())] * 2
    timing = combined_timing(runs, TimerSettings())
    written = timing.to_dict()
    # Measured and found none: null; a GPU group, rounds, fresh process: absent.
    assert written["device_median_ms"] is None and written["launch_bound"] is None
    assert "gpu_readings" not in written and "rounds" not in written
    assert "fresh_process_after" not in written
    assert list(written)[:3] == ["first_call_ms", "median_ms", "iqr_ms"]
    with pytest.raises(AttributeError):
        timing.median_ms = 1.0      # frozen
    with pytest.raises(TypeError):
        timing.adapter["layout"] = "NHWC"   # read-only


def test_the_adapters_fields_sit_after_the_repetitions_and_before_the_instruments():
    runs = [summarise(0.1, [0.010] * 5, 1, TimerSettings())]
    timing = Timing.from_dict({**combined_timing(runs, TimerSettings()).to_dict(),
                               "layout": "NHWC", "host_readings": 2, "host_state_reason": ""})
    keys = list(timing.to_dict())
    assert timing.adapter == {"layout": "NHWC"} and timing.host_readings == 2
    assert keys.index("launch_bound_reason") < keys.index("layout") < keys.index("host_load_1m")
    assert timing.to_dict()["host_load_1m"] is None      # its group is written whole
