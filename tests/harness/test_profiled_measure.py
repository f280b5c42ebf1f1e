"""Which measure a job's profile and counters rows trace (suites/harness/worker.py)."""

from types import SimpleNamespace

import pytest

from suites.harness.job import WorkerJob
from suites.harness.worker import Worker

TRAINABLE = SimpleNamespace(entry=SimpleNamespace(measures=["forward", "gradient", "profile"]))
INFERENCE = SimpleNamespace(entry=SimpleNamespace(measures=["forward", "profile"]))


@pytest.mark.parametrize(("worker", "measures", "expected"), [
    (TRAINABLE, ["forward", "gradient", "profile"], "gradient"),   # kernels-gpu, Li et al.
    (TRAINABLE, ["profile"], "gradient"),
    (TRAINABLE, ["counters"], "gradient"),
    (TRAINABLE, ["forward", "profile"], "forward"),                 # gpu-forward-profile
    (INFERENCE, ["forward", "gradient", "profile"], "forward"),
    (INFERENCE, ["counters"], "forward"),
])
def test_profile_follows_what_the_job_times(worker, measures, expected):
    job = WorkerJob("m", 1, "fp32", "eager", pending=tuple(measures), measures=tuple(measures))
    assert Worker.profiled_measure(worker, job) == expected


@pytest.mark.parametrize(("worker", "measures", "expected"), [
    (TRAINABLE, ["forward", "gradient"], "gradient"),
    (TRAINABLE, ["forward", "train_step"], "train_step"),            # transformers-gpu
    (TRAINABLE, ["profile"], "gradient"),                            # Li et al.'s profiles
    (TRAINABLE, ["forward", "profile"], ""),                         # gpu-forward-profile
    (TRAINABLE, ["forward", "transfer"], ""),
    (INFERENCE, ["counters"], ""),
])
def test_the_fingerprint_holds_the_gradients_of_what_the_job_measured(worker, measures,
                                                                      expected):
    job = WorkerJob("m", 1, "fp32", "eager", pending=tuple(measures), measures=tuple(measures))
    worker = SimpleNamespace(entry=worker.entry)
    worker.profiled_measure = lambda job: Worker.profiled_measure(worker, job)
    assert Worker.fingerprint_gradients(worker, job) == expected
