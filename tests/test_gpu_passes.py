"""The GPU's worker processes without a GPU: the stand-in frameworks' device "gpu"
(tests/fake_framework.py) runs the runner's two phases, and their stand-in GPU admits
one process at a time, as a GPU in exclusive-process compute mode does, so a worker left
alive beside another shows up as the second one's fatal error. Checked: the pool keeps
one live GPU worker at a time (suites/worker_pool.py); a runner runs the phases it is
asked for. Nothing here asserts a duration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_framework import EVENTS, GPU_LOCK, REGISTRY

TIMER = """
[timer]
warmup = 0
min_samples = 1
max_samples = 2
budget_s = 0.01
repetitions = 2
max_repetitions = 2
"""
SUITE_A = f"""
name = "gpu-a"
case_timeout_s = 60
{TIMER}
[[cases]]
models = ["lenet_tiny", "sae_tiny_se"]
batches = [2, 3]
measures = ["forward", "gradient"]
devices = ["gpu"]
"""
SUITE_B = f"""
name = "gpu-b"
case_timeout_s = 60
{TIMER}
[[cases]]
models = ["conv_tiny", "lenet_tiny"]
batches = [2]
measures = ["forward", "gradient"]
devices = ["gpu"]
"""


@pytest.fixture
def stand_in_gpu(tmp_path, monkeypatch) -> dict[str, str]:
    """The stand-in frameworks on the stand-in GPU, for this process and the workers it
    starts; its device clock is the adapter's (CUPTI is never loaded)."""
    env = {"DLBENCH_REGISTRY": str(REGISTRY), "DLBENCH_TRUTH": "off",
           "DLBENCH_DEVICE_CLOCK": "adapter", GPU_LOCK: str(tmp_path / "gpu.lock"),
           EVENTS: str(tmp_path / "events")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def write_suites(folder: Path) -> list[Path]:
    paths = []
    for name, text in (("gpu-a", SUITE_A), ("gpu-b", SUITE_B)):
        paths.append(folder / f"{name}.toml")
        paths[-1].write_text(text)
    return paths


def rows_of(out: Path, suite: str, framework: str = "fake") -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob(f"{suite}/*/{framework}_gpu.jsonl"))
            for line in path.read_text().splitlines()]


def test_the_device_phase_starts_once_the_wall_phases_idle_worker_is_closed(
        tmp_path, stand_in_gpu, monkeypatch):
    from suites.runner import Runner, RunRequest
    from suites.worker_pool import WorkerPool

    suites = write_suites(tmp_path)
    out = tmp_path / "out"
    with WorkerPool() as pool:
        for suite in suites:
            assert Runner(RunRequest(str(suite), "fake", "gpu", out), pool=pool).run() == 0
    rows = rows_of(out, "gpu-a") + rows_of(out, "gpu-b")
    assert len(rows) == 24 and all(r["status"] == "ok" for r in rows)
    assert {r["measure"] for r in rows} == {"forward", "gradient", "fingerprint", "device_time"}
    # The control: a pool that left idle GPU workers alive would put two on the GPU.
    monkeypatch.setattr(WorkerPool, "close_gpu_workers", lambda self, keep=None: None)
    with WorkerPool() as pool:
        runner = Runner(RunRequest(str(suites[0]), "fake", "gpu", tmp_path / "control"),
                        pool=pool)
        assert runner.run() == 2
        assert "the stand-in GPU is held by process" in runner.fatal


def test_a_runner_runs_the_phases_it_is_asked_for_and_counts_only_theirs(tmp_path,
                                                                         stand_in_gpu):
    from suites.runner import Runner, RunRequest
    from suites.spec import SuiteError

    suite = str(write_suites(tmp_path)[0])
    out = tmp_path / "out"

    def runner(*phases: str) -> Runner:
        return Runner(RunRequest(suite, "fake", "gpu", out, resume=True, phases=phases))
    # Four jobs: forward, gradient and the fingerprint in the wall phase, device_time in
    # the device phase.
    assert (runner().total, runner("wall").total, runner("device").total) == (16, 12, 4)
    assert runner("device").run() == 0
    wall = runner("wall")
    assert (wall.total, wall.skipped) == (12, 0)
    rows = rows_of(out, "gpu-a")
    assert [r["measure"] for r in rows] == ["device_time"] * 4
    assert runner("wall").run() == 0
    assert (runner().total, runner().skipped) == (0, 16)
    with pytest.raises(SuiteError, match="no phase 'all' on gpu"):
        runner("all")

