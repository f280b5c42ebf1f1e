"""The worker without any framework: its interrupt handling, and ``--serve`` (several
plans in one process) on the stand-in framework (tests/fake_framework.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_framework import REGISTRY

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, os, signal, sys
from suites.harness import worker
if sys.argv[1] == "handler":
    worker.install_interrupt_handler()
fired = []
def callback(phase, info):
    if not fired:
        fired.append(phase)
        os.kill(os.getpid(), signal.SIGINT)   # a Ctrl-C that lands inside the callback
        sum(range(10000))                     # give the handler a bytecode boundary to run
gc.callbacks.append(callback)
gc.collect()            # Python ignores the KeyboardInterrupt raised in the callback
gc.callbacks.remove(callback)
try:
    worker.check_interrupt()
    print("went on")
except KeyboardInterrupt:
    print("stopped")
"""


def run(mode: str) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_an_interrupt_swallowed_by_a_callback_still_stops_the_worker():
    assert run("handler") == "stopped"
    assert run("default") == "went on"  # the failure the handler exists for


def serve(tmp_path: Path, plans: list[tuple[str, str, int]],
          precision: str = "fp32") -> subprocess.CompletedProcess:
    """``python -m suites.harness.worker --serve`` fed one plan per (suite, model, threads), each
    writing ``<suite>.jsonl`` and its log ``<suite>.log`` in ``tmp_path``."""
    from suites.harness.worker import Plan

    timer = {"warmup": 0, "min_samples": 1, "max_samples": 2, "budget_s": 0.01,
             "repetitions": 1, "max_repetitions": 1}
    paths = []
    for suite, model, threads in plans:
        job = {"model": model, "batch": 2, "device": "cpu", "threads": threads,
               "interop_threads": 1, "precision": precision, "variant": "eager",
               "measures": ["forward"], "pending": ["forward"], "compile_cache": "",
               "timer": timer}
        plan = Plan(suite, "fake", "cpu", threads, 1, str(tmp_path / f"{suite}.jsonl"), 0,
                    [job], log=str(tmp_path / f"{suite}.log"))
        plan.to_file(tmp_path / f"{suite}.json")
        paths.append(tmp_path / f"{suite}.json")
    return subprocess.run([sys.executable, "-m", "suites.harness.worker", "--serve"], cwd=ROOT,
                          input="".join(f"{path}\n" for path in paths), capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "DLBENCH_REGISTRY": str(REGISTRY),
                               "DLBENCH_TRUTH": "off"})


def test_serve_runs_each_plan_in_one_process_with_its_stderr_in_the_plans_log(tmp_path):
    from suites.harness.events import PlanDone, RowWritten, parse

    done = serve(tmp_path, [("one", "lenet_tiny", 1), ("two", "conv_tiny", 1)])
    assert done.returncode == 0, done.stderr
    events = [event for line in done.stdout.splitlines() if (event := parse(line)) is not None]
    assert sum(isinstance(event, PlanDone) for event in events) == 2
    assert isinstance(events[-1], PlanDone)
    assert {event.case_id.split("/")[0] for event in events
            if isinstance(event, RowWritten)} == {"one", "two"}
    one, two = ([json.loads(line) for line in (tmp_path / f"{suite}.jsonl").read_text()
                 .splitlines()] for suite in ("one", "two"))
    assert [r["suite"] for r in one + two] == ["one", "two"]
    # The framework was started once.
    assert len({row["env"]["worker_pid"] for row in one + two}) == 1
    # The framework's own writes to file descriptor 2 follow the plan they belong to.
    assert "preparing lenet_tiny" in (tmp_path / "one.log").read_text()
    assert "conv_tiny" not in (tmp_path / "one.log").read_text()
    assert "preparing conv_tiny" in (tmp_path / "two.log").read_text()


def test_a_serving_worker_refuses_a_plan_for_other_thread_settings(tmp_path):
    done = serve(tmp_path, [("one", "lenet_tiny", 1), ("two", "conv_tiny", 2)])
    assert done.returncode != 0
    assert (tmp_path / "one.jsonl").exists() and not (tmp_path / "two.jsonl").exists()
    assert "a plan with another threads" in (tmp_path / "two.log").read_text()


def test_a_serving_worker_goes_on_from_the_wall_phase_to_the_device_phase_never_back(tmp_path):
    """CUPTI may load after a process's wall samples, never before them
    (suites/harness/device_pass.py): a wall worker takes device plans, a device worker no wall plan."""
    from suites.harness.worker import Plan, Worker

    def plan(phase: str) -> Plan:
        return Plan("s", "fake", "gpu", 1, 1, str(tmp_path / f"{phase}.jsonl"), 0, [],
                    phase=phase)
    worker = Worker.__new__(Worker)
    worker.plan = plan("wall")
    worker.switch_to(plan("wall"))
    assert not worker.after_wall
    worker.switch_to(plan("device"))
    assert worker.after_wall and worker.plan.phase == "device"
    worker.switch_to(plan("device"))
    with pytest.raises(ValueError, match="a plan with another phase"):
        worker.switch_to(plan("wall"))


def test_a_jobs_release_is_billed_to_the_next_jobs_first_row(tmp_path):
    """The rows' elapsed_s are what the matrix plans from (suites/matrix/estimate.py), so a
    worker's rows must add up to its time: a job's release (closing what it built, after
    its last row) is no row's own, and goes into the next job's first row."""
    import time

    from tests.fake_cupti import FakeCupti
    from tests.fake_worker import SimulatedPrepared, job, make_worker

    release = 1.0

    class SlowToRelease(SimulatedPrepared):
        released = False

        def close(self) -> None:
            if not self.released:      # the first job's release only
                type(self).released = True
                time.sleep(release)

    path = tmp_path / "rows.jsonl"
    worker = make_worker(path, SlowToRelease(FakeCupti()), phase="wall")
    began = time.perf_counter()
    worker.run_job(job(["forward"]))
    worker.run_job(job(["forward"], model="sae_tiny_se"))
    ended = time.perf_counter()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["model"] for row in rows] == ["sae_tiny_ae2", "sae_tiny_se"]
    billed = sum(row["elapsed_s"] for row in rows)
    # The rows and the release still to bill (the second job's) are the worker's two jobs,
    # counted once (each row's elapsed_s rounded to the millisecond): all that is left out
    # is the call between the jobs, far shorter than the first job's release, which was
    # billed.
    accounted = billed + worker.release_s
    assert accounted <= ended - began + 0.0005 * len(rows)
    assert accounted > ended - began - release / 2
    assert rows[1]["elapsed_s"] >= release


def test_a_precision_the_adapter_does_not_know_is_an_unsupported_row(tmp_path):
    """fp16 is ONNX Runtime's alone (adapters/base.py Adapter.precisions): elsewhere the
    worker writes a row saying so instead of running fp32 under the fp16 label."""
    done = serve(tmp_path, [("half", "lenet_tiny", 1)], precision="fp16")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "half.jsonl").read_text().splitlines()]
    assert [(row["status"], row["settings"]["precision"]) for row in rows] \
        == [("unsupported", "fp16")], rows
    assert "no fp16 precision" in rows[0]["reason"], rows[0]["reason"]
