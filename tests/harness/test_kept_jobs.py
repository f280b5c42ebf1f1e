"""Jobs kept built from the wall phase for the device phase (suites/harness/kept_jobs.py): the
device phase of a kept job builds nothing and sets the job's process-wide settings again;
the memory rule decides what is kept; a later job's peak memory leaves out what kept
jobs hold. Run on the stand-in GPU (tests/fake_framework.py); nothing here asserts a
duration."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from adapters.base import Memory
from suites.harness.kept_jobs import KEEP_BELOW, KeptJob, KeptJobs, KeptKey
from suites.harness.worker import own_memory
from tests.fake_framework import MEMORY_USED
from tests.tiny_suites import cases, tiny_suite

SUITE_A = tiny_suite("gpu-a", cases(["lenet_tiny", "sae_tiny_se"], [2, 3], device="gpu"))
SUITE_B = tiny_suite("gpu-b", cases(["conv_tiny", "lenet_tiny"], [2], device="gpu"))


def test_the_memory_rule_keeps_a_job_only_below_its_share_and_once_per_case():
    used = [0.0]
    kept = KeptJobs(lambda: used[0])
    first, second, third = (KeptJob(object(), {}) for _ in range(3))
    a, b = KeptKey("r.jsonl", ("lenet", 2)), KeptKey("r.jsonl", ("lenet", 3))
    assert kept.offer(a, first) and len(kept) == 1
    assert not kept.offer(a, second) and kept.declined == "this case is kept already"
    used[0] = KEEP_BELOW
    assert not kept.offer(b, second) and kept.declined == "35% of the GPU's memory in use"
    used[0] = KEEP_BELOW - 0.01
    assert kept.offer(b, second)
    assert KeptJobs(lambda: None).offer(a, third) is False
    assert kept.take(a) is first and kept.take(a) is None and len(kept) == 1
    assert kept.take(b) is second and len(kept) == 0


def test_a_rows_peak_memory_leaves_out_what_kept_jobs_held_when_it_was_built():
    assert own_memory(Memory(1000, "allocator"), 300) == {
        "peak_bytes": 700, "kind": "allocator", "held_before_build_bytes": 300}
    # Nothing kept (None) or nothing held: the adapter's figure as it is.
    assert own_memory(Memory(1000, "allocator"), None) == {"peak_bytes": 1000, "kind": "allocator"}
    assert own_memory(Memory(1000, "allocator"), 0) == {"peak_bytes": 1000, "kind": "allocator"}
    assert own_memory(Memory(None, "allocator"), 300) == {"peak_bytes": None, "kind": "allocator"}


def run_suites(tmp_path: Path, *texts: str, framework: str = "fake"
               ) -> tuple[list[dict], list[list[str]]]:
    """Each suite's wall then device phase in one pool (the device phase in the wall
    worker's process, as the matrix runs them): the rows, and the events of the stand-in
    (``<pid> gpu <model> b<batch>`` per build, ``<pid> reapply ...`` per kept job used)."""
    from suites.harness.pool import WorkerPool
    from suites.harness.runner import Runner, RunRequest

    out = tmp_path / "out"
    paths = []
    for index, text in enumerate(texts):
        paths.append(tmp_path / f"suite-{index}.toml")
        paths[-1].write_text(text)
    with WorkerPool() as pool:
        for phase in ("wall", "device"):
            for path in paths:
                request = RunRequest(str(path), framework, "gpu", out, resume=True,
                                     phases=(phase,))
                assert Runner(request, pool=pool).run() == 0
    rows = [json.loads(line) for path in sorted(out.glob(f"*/*/{framework}_gpu.jsonl"))
            for line in path.read_text().splitlines()]
    events = [line.split() for line in (tmp_path / "events").read_text().splitlines()]
    return rows, events


def test_the_device_phase_takes_each_job_its_wall_phase_built(tmp_path, stand_in_gpu):
    rows, events = run_suites(tmp_path, SUITE_A, SUITE_B)
    # gpu-a's four jobs and gpu-b's two were built once each (lenet_tiny b2 once for each
    # suite), by one process, all in the wall phases: the device phases built nothing
    # and set each job's settings again.
    kinds = [e[1] for e in events]
    assert kinds == ["gpu"] * 6 + ["reapply"] * 6
    assert len({e[0] for e in events}) == 1
    builds = collections.Counter(" ".join(e[2:]) for e in events if e[1] == "gpu")
    assert builds == {"lenet_tiny b2": 2, "lenet_tiny b3": 1, "sae_tiny_se b2": 1,
                      "sae_tiny_se b3": 1, "conv_tiny b2": 1}
    assert {" ".join(e[2:]) for e in events if e[1] == "reapply"} == {"fp32 eager"}
    device = [r for r in rows if r["measure"] == "device_time"]
    assert len(device) == 6 and all(r["status"] == "ok" for r in device)
    assert all("on the job its wall samples ran, kept built" in r["device_times"]["method"]
               for r in device)
    assert {r["model_info"]["params"] for r in device} == {
        r["model_info"]["params"] for r in rows if r["measure"] == "forward"}


@pytest.mark.parametrize("used", [KEEP_BELOW, 0.9])
def test_above_the_memory_rules_share_the_device_phase_builds_its_jobs_again(
        tmp_path, stand_in_gpu, monkeypatch, used):
    monkeypatch.setenv(MEMORY_USED, str(used))
    rows, events = run_suites(tmp_path, SUITE_A)
    builds = collections.Counter(" ".join(e[2:]) for e in events if e[1] == "gpu")
    assert sum(builds.values()) == 8 and set(builds.values()) == {2}
    assert "reapply" not in [e[1] for e in events]
    device = [r for r in rows if r["measure"] == "device_time"]
    assert len(device) == 4 and all("on the job built again" in r["device_times"]["method"]
                                    for r in device)


def test_a_framework_whose_registry_entry_does_not_keep_jobs_builds_them_again(
        tmp_path, stand_in_gpu):
    rows, events = run_suites(tmp_path, SUITE_A, framework="fake2")
    assert [e[1] for e in events] == ["gpu"] * 8
    assert all("on the job built again" in r["device_times"]["method"]
               for r in rows if r["measure"] == "device_time")
    assert not any("held_before_build_bytes" in (r.get("memory") or {}) for r in rows)


def test_only_cases_with_device_phase_work_left_are_kept(tmp_path, stand_in_gpu):
    from suites.harness.runner import Runner, RunRequest

    suite = tmp_path / "gpu-a.toml"
    suite.write_text(SUITE_A)
    out = tmp_path / "out"

    def runner(*phases: str) -> Runner:
        return Runner(RunRequest(str(suite), "fake", "gpu", out, resume=True, phases=phases))
    assert len(runner("wall").keep_cases) == 4
    assert runner("device").run() == 0
    # Every device_time row written (the device phase ran first here): the wall phase
    # keeps nothing, since no device phase would take it.
    assert runner("wall").keep_cases == set()
    cpu = tmp_path / "cpu.toml"
    cpu.write_text(tiny_suite("cpu-a", cases(["lenet_tiny"], [2], device="cpu")))
    assert Runner(RunRequest(str(cpu), "fake", "cpu", out)).keep_cases == set()


def test_compile_cache_jobs_run_first_so_their_processes_leave_the_kept_jobs_alone(
        tmp_path, stand_in_gpu):
    # bahrampour2016's first calls with a cold and a warm compilation cache run in
    # processes of their own, which close every idle GPU worker: run after the ordinary
    # jobs' wall phase, they would take its kept jobs with them.
    suite = tiny_suite(
        "gpu-cache",
        cases(["conv_tiny", "sae_tiny_se"], [2], device="gpu"),
        cases(["lenet_tiny"], [2], device="gpu", measures=("forward",),
              extra='variants = ["cached"]\ncompile_cache = ["cold", "warm"]\n'))
    rows, events = run_suites(tmp_path, suite)
    assert [" ".join(e[1:]) for e in events] == [
        "gpu lenet_tiny b2", "gpu lenet_tiny b2", "gpu conv_tiny b2", "gpu sae_tiny_se b2",
        "reapply fp32 eager", "reapply fp32 eager"]
    pids = [e[0] for e in events]
    assert len(set(pids[:2] + pids[2:3])) == 3 and len(set(pids[2:])) == 1
    assert {r["status"] for r in rows} == {"ok"}
