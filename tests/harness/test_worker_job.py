"""What the runner sends a worker (suites/harness/job.py): read back as written, and a bad
field named in one line when the job is made."""

from __future__ import annotations

import json

import pytest

from suites.harness.job import WorkerJob
from suites.harness.worker import Plan
from suites.stats.timer import TimerSettings


def test_a_plan_file_reads_back_the_jobs_it_was_written_with(tmp_path):
    job = WorkerJob("sae_tiny_ae2", 2, "fp32", "eager", pending=("forward",),
                    timer=TimerSettings(warmup=1), measures=("forward", "gradient"),
                    fresh_after="out of memory", recorded={"forward": (1.5, None)})
    plan = Plan("s", "torch", "cpu", 1, 1, str(tmp_path / "r.jsonl"), 0, [job])
    plan.to_file(tmp_path / "plan.json")
    again = Plan.from_file(tmp_path / "plan.json")
    assert again.jobs == (job,) and again.jobs[0].timer.warmup == 1
    assert json.loads((tmp_path / "plan.json").read_text())["jobs"][0]["pending"] == ["forward"]


@pytest.mark.parametrize(("change", "named"), [
    ({"batch": "2"}, "'batch'"),
    ({"batch": 0}, "'batch'"),
    ({"pending": "forward"}, "'pending'"),
    ({"compile_cache": "hot"}, "'compile_cache'"),
    ({"timer": {"warmpu": 1}}, "warmpu"),
    ({"pending": ["forward"], "pendnig": ["forward"]}, "'pendnig'"),
])
def test_a_bad_field_is_named(change, named):
    data = {"model": "m", "batch": 2, "precision": "fp32", "variant": "eager",
            "pending": ["forward"], **change}
    with pytest.raises(ValueError, match=named) as raised:
        WorkerJob.from_dict(data)
    assert "\n" not in str(raised.value)


def test_a_missing_field_is_named():
    with pytest.raises(ValueError, match="pending"):
        WorkerJob.from_dict({"model": "m", "batch": 2, "precision": "fp32", "variant": "eager"})
