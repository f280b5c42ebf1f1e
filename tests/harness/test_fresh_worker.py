"""Out of memory after other jobs: the job goes on in a fresh worker (suites/harness/worker.py,
suites/harness/runner.py), with the stand-in framework on its stand-in GPU (tests/fake_framework.py
``FAKE_OOM`` / ``FAKE_OOM_AFTER_OTHERS``; ``FAKE_EVENTS`` says which process prepared
what). Checked: a job refused only after other jobs runs in a fresh worker and its rows
say why; a job refused there too is ``oom`` with both attempts in its reason; a job that
is its worker's first is ``oom`` at once; every case has exactly one row. A worker that
aborts (``FAKE_ABORT``) leaves its job's rows ``failed``, naming the FATAL line it wrote, and
the next job runs in a fresh one."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from suites.harness.runner import Runner, RunRequest
from tests.fake_framework import ABORT, EVENTS, GPU_LOCK, OOM, OOM_AFTER_OTHERS, REGISTRY
from tests.tiny_suites import cases, tiny_suite

FIRST, SECOND = "lenet_tiny", "sae_tiny_se"


@pytest.fixture
def stand_in_gpu(tmp_path, monkeypatch) -> Path:
    """The stand-in framework on its GPU for this process and its workers; the events file."""
    events = tmp_path / "events"
    for name, value in {"DLBENCH_REGISTRY": str(REGISTRY), "DLBENCH_TRUTH": "off",
                        "DLBENCH_DEVICE_CLOCK": "adapter", GPU_LOCK: str(tmp_path / "gpu.lock"),
                        EVENTS: str(events)}.items():
        monkeypatch.setenv(name, value)
    return events


def run(tmp_path: Path, models: list[str]) -> list[dict]:
    suite = tmp_path / "fresh.toml"
    suite.write_text(tiny_suite("fresh", cases(models, [2], device="gpu")))
    out = tmp_path / "out"
    assert Runner(RunRequest(str(suite), "fake", "gpu", out)).run() == 0
    return [json.loads(line) for path in out.glob("fresh/*/fake_gpu.jsonl")
            for line in path.read_text().splitlines()]


def preparing_processes(events: Path, phase_start: int = 0) -> dict[str, list[str]]:
    """Per model, the processes that prepared it, in order."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for line in events.read_text().splitlines()[phase_start:]:
        pid, _, model, _ = line.split()
        found[model].append(pid)
    return found


def by_measure(rows: list[dict], model: str) -> dict[str, dict]:
    return {row["measure"]: row for row in rows if row["model"] == model}


def test_a_job_refused_after_other_jobs_runs_in_a_fresh_worker_and_says_so(
        tmp_path, stand_in_gpu, monkeypatch):
    monkeypatch.setenv(OOM_AFTER_OTHERS, SECOND)
    rows = run(tmp_path, [FIRST, SECOND])
    ids = [row["case_id"] for row in rows]
    assert len(ids) == len(set(ids)) == 8     # forward, gradient, fingerprint, device_time
    assert {row["status"] for row in rows} == {"ok"}
    second = by_measure(rows, SECOND)
    for measure in ("forward", "gradient"):
        note = second[measure]["timing"]["fresh_process_after"]
        assert f"out of memory preparing {SECOND}" in note
        assert "in a worker that had run 1 other job" in note
    assert "fresh_process_after" not in by_measure(rows, FIRST)["forward"]["timing"]
    processes = preparing_processes(stand_in_gpu)
    # Wall phase: the first attempt beside the first model, then a process of its own;
    # the device phase's process refuses it again after the first model, and so on.
    assert processes[SECOND][0] == processes[FIRST][0]
    assert processes[SECOND][1] != processes[FIRST][0]
    assert second["forward"]["env"]["worker_pid"] != by_measure(rows, FIRST)["forward"]["env"]["worker_pid"]


def test_a_job_refused_in_a_fresh_worker_too_is_oom_with_both_attempts(
        tmp_path, stand_in_gpu, monkeypatch):
    monkeypatch.setenv(OOM, SECOND)
    rows = run(tmp_path, [FIRST, SECOND])
    ids = [row["case_id"] for row in rows]
    assert len(ids) == len(set(ids))
    assert {row["status"] for row in by_measure(rows, FIRST).values()} == {"ok"}
    second = by_measure(rows, SECOND)
    assert set(second) == {"forward", "gradient", "fingerprint", "device_time"}
    for row in second.values():
        assert row["status"] == "oom"
        assert row["reason"].startswith(f"FakeOutOfMemory: out of memory preparing {SECOND}")
        assert "in a fresh process; before that," in row["reason"]
        assert "in a worker that had run 1 other job" in row["reason"]
    # Each phase: the attempt after the first model, then one in a fresh process.
    assert len(set(preparing_processes(stand_in_gpu)[SECOND])) == 4


def test_a_job_refused_as_its_workers_first_is_oom_at_once(tmp_path, stand_in_gpu,
                                                            monkeypatch):
    monkeypatch.setenv(OOM, SECOND)
    rows = run(tmp_path, [SECOND, FIRST])
    second = by_measure(rows, SECOND)
    assert {row["status"] for row in second.values()} == {"oom"}
    assert not any("fresh process" in row["reason"] for row in second.values())
    # Once in each phase's first process.
    processes = preparing_processes(stand_in_gpu)
    assert len(processes[SECOND]) == 2
    first = by_measure(rows, FIRST)
    assert {row["status"] for row in first.values()} == {"ok"}
    # The worker where the oom stood is retired: the next job runs in a fresh one, saying why.
    assert processes[FIRST][0] != processes[SECOND][0]
    assert first["forward"]["env"]["worker_pid"] != second["forward"]["env"]["worker_pid"]
    note = first["forward"]["timing"]["fresh_process_after"]
    assert note.startswith(f"{SECOND} b2 fp32 eager ran out of device memory in the worker")
    assert "not trusted" in note


def test_a_worker_that_aborts_leaves_failed_rows_that_name_the_cause_and_the_next_job_goes_on(
        tmp_path, stand_in_gpu, monkeypatch):
    # The abort's FATAL line, not the stack trace after it, is the rows' cause.
    monkeypatch.setenv(ABORT, FIRST)
    rows = run(tmp_path, [FIRST, SECOND])
    first = by_measure(rows, FIRST)
    assert {row["status"] for row in first.values()} == {"failed"}
    for row in first.values():
        assert row["reason"].startswith("worker process died (it was killed by SIGABRT): "
                                        "conv_2d_gpu.h:1028: Check failed: "), row["reason"]
        assert "(INTERNAL: an illegal memory access was encountered); see " in row["reason"]
    assert {row["status"] for row in by_measure(rows, SECOND).values()} == {"ok"}
