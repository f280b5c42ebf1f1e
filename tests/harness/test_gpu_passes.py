"""The GPU's worker processes without a GPU: the stand-in frameworks' device "gpu"
(tests/fake_framework.py) runs the runner's two phases, and their stand-in GPU admits
one process at a time, as a GPU in exclusive-process compute mode does, so a worker left
alive beside another shows up as the second one's fatal error. Checked: the pool keeps
one live GPU worker at a time (suites/harness/pool.py); a runner runs the phases it is
asked for; the matrix runs the first suite for every framework, then each framework's
others, a framework's wall pass over a stage's suites before its device pass, the device
pass in the wall pass's worker; a budget stop or a kill
between or in the passes resumes to the rows of an uninterrupted run; rounds keep their
own processes. Nothing here asserts a duration."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from itertools import groupby
from pathlib import Path

import psutil
import pytest

from tests.fake_framework import EVENTS
from tests.tiny_suites import cases, tiny_suite

ROOT = Path(__file__).resolve().parents[2]
STAND_IN_GPU = "Stand-in GPU"       # the device model the plans and histories name


SUITE_A = tiny_suite("gpu-a", cases(["lenet_tiny", "sae_tiny_se"], [2, 3], device="gpu"))
SUITE_B = tiny_suite("gpu-b", cases(["conv_tiny", "lenet_tiny"], [2], device="gpu"))


def write_suites(folder: Path) -> list[Path]:
    paths = []
    for name, text in (("gpu-a", SUITE_A), ("gpu-b", SUITE_B)):
        paths.append(folder / f"{name}.toml")
        paths[-1].write_text(text)
    return paths


def rows_of(out: Path, suite: str, framework: str = "fake") -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob(f"{suite}/*/{framework}_gpu.jsonl"))
            for line in path.read_text().splitlines()]


def test_the_device_phase_goes_on_in_the_wall_workers_process_and_no_gpu_worker_idles_beside_another(
        tmp_path, stand_in_gpu, monkeypatch):
    from suites.harness.pool import WorkerPool
    from suites.harness.runner import Runner, RunRequest

    suites = write_suites(tmp_path)
    out = tmp_path / "out"
    with WorkerPool() as pool:
        for suite in suites:
            assert Runner(RunRequest(str(suite), "fake", "gpu", out), pool=pool).run() == 0
    rows = rows_of(out, "gpu-a") + rows_of(out, "gpu-b")
    assert len(rows) == 24 and all(r["status"] == "ok" for r in rows)
    assert {r["measure"] for r in rows} == {"forward", "gradient", "fingerprint", "device_time"}
    # gpu-a's device rows come from its wall worker, after its wall rows; gpu-b's wall
    # phase needed a fresh worker, since a worker that ran a device plan takes no wall one.
    pid_a = {r["env"]["worker_pid"] for r in rows_of(out, "gpu-a")}
    pid_b = {r["env"]["worker_pid"] for r in rows_of(out, "gpu-b")}
    assert len(pid_a) == len(pid_b) == 1 and pid_a != pid_b
    measures_a = [r["measure"] for r in rows_of(out, "gpu-a")]
    assert measures_a[-4:] == ["device_time"] * 4 and "device_time" not in measures_a[:-4]
    device_rows = [r for r in rows if r["measure"] == "device_time"]
    assert all("in the wall phase's process after its last wall sample"
               in r["device_times"]["method"] for r in device_rows)
    # The control: a pool that left idle GPU workers alive would put gpu-a's device
    # worker and gpu-b's wall worker on the GPU together.
    monkeypatch.setattr(WorkerPool, "close_gpu_workers", lambda self, keep=None: None)
    with WorkerPool() as pool:
        first = Runner(RunRequest(str(suites[0]), "fake", "gpu", tmp_path / "control"), pool=pool)
        assert first.run() == 0
        second = Runner(RunRequest(str(suites[1]), "fake", "gpu", tmp_path / "control"), pool=pool)
        assert second.run() == 2
        assert "the stand-in GPU is held by process" in second.fatal


def test_suites_run_measures_the_device_phase_as_the_matrix_does(tmp_path, stand_in_gpu):
    """`python -m suites run` (what every nox session types) pools its workers as the
    matrix does: the device phase goes on in the wall phase's worker, on the jobs it kept
    built, and no job is built again. Without the pool each device row would say "in a
    process of its own ... on the job built again"."""
    from suites.__main__ import main

    suite = write_suites(tmp_path)[0]
    assert main(["run", str(suite), "--framework", "fake", "--device", "gpu",
                 "--out", str(tmp_path / "out")]) == 0
    rows = rows_of(tmp_path / "out", "gpu-a")
    device = [r for r in rows if r["measure"] == "device_time"]
    assert len(device) == 4 and all(r["status"] == "ok" for r in device)
    assert len({r["env"]["worker_pid"] for r in rows}) == 1
    assert all("in the wall phase's process after its last wall sample" in r["device_times"]["method"]
               and "kept built" in r["device_times"]["method"] for r in device)
    events = [line.split() for line in (tmp_path / "events").read_text().splitlines()]
    assert [e[1] for e in events] == ["gpu"] * 4 + ["reapply"] * 4


def test_a_runner_runs_the_phases_it_is_asked_for_and_counts_only_theirs(tmp_path,
                                                                         stand_in_gpu):
    from suites.harness.runner import Runner, RunRequest
    from suites.harness.spec import SuiteError

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


# --- the matrix -----------------------------------------------------------------------------

def matrix(suites: list[Path], out: Path, *extra: str, frameworks=("fake", "fake2"),
           env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(matrix_command(suites, out, *extra, frameworks=frameworks),
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def matrix_command(suites: list[Path], out: Path, *extra: str,
                   frameworks=("fake", "fake2")) -> list[str]:
    return [sys.executable, "-m", "suites", "matrix", "--device", "gpu", "--device-name",
            STAND_IN_GPU, "--frameworks", *frameworks,
            *(f"--python={name}={sys.executable}" for name in frameworks),
            "--suites", *map(str, suites), "--out", str(out), "--history", str(out),
            "--compile-cache", "off", *extra]


def invocations(out: Path) -> list[list[dict]]:
    """The cost log's item records, one list per invocation of the matrix."""
    log = next(out.glob("matrix/*/costs-gpu.ndjson"))
    found: list[list[dict]] = [[]]
    for record in map(json.loads, log.read_text().splitlines()):
        if record["kind"] == "run":
            found.append([])
        elif record["kind"] == "item":
            found[-1].append(record)
    return found[:-1]


def items(out: Path) -> list[dict]:
    return [record for invocation in invocations(out) for record in invocation]


def all_rows(out: Path) -> collections.Counter:
    """(case id, status) of every row under ``out``, counted."""
    return collections.Counter((row["case_id"], row["status"])
                               for path in out.glob("gpu-*/*/*_gpu.jsonl")
                               for row in map(json.loads, path.read_text().splitlines()))


def planned(stderr: str) -> list[tuple[str, str, str]]:
    """(framework, suite, pass) of each item of the plan printed before the run."""
    lines = [line.split() for line in stderr.splitlines() if line.startswith("gpu-")]
    return [(framework, suite, phase) for suite, framework, phase, *_ in lines
            if phase in ("wall", "device")]


def test_each_framework_runs_its_wall_pass_then_its_device_pass_in_one_worker_a_stage(
        tmp_path, stand_in_gpu):
    out = tmp_path / "out"
    done = matrix(write_suites(tmp_path), out)
    assert done.returncode == 0, done.stderr     # a second live worker would be fatal
    # The first suite for both frameworks, then the other suite (suites/matrix/plan.py
    # stages); in each stage a framework's wall pass, then its device pass.
    order = [(framework, suite, phase) for suite in ("gpu-a", "gpu-b")
             for framework in ("fake", "fake2") for phase in ("wall", "device")]
    assert planned(done.stderr) == order
    log = items(out)
    assert [(r["framework"], r["suite"], r["phase"]) for r in log] == order
    assert [r["worker_starts"] for r in log] == [1, 0] * 4
    rows = all_rows(out)
    assert {status for _, status in rows} == {"ok"} and set(rows.values()) == {1}
    assert len(rows) == 2 * (16 + 8)
    # Every case a framework prepared, in the order the processes prepared them: one
    # process per framework and stage, one after the other, each one's device rows after
    # all its wall rows.
    pids = [int(line.split()[0]) for line in Path(stand_in_gpu[EVENTS]).read_text().splitlines()]
    runs = [pid for pid, _ in groupby(pids)]
    expected = []
    for suite in ("gpu-a", "gpu-b"):
        for framework in ("fake", "fake2"):
            measured = [row for row in rows_of(out, suite, framework)
                        if "reused_from" not in row]
            assert len({r["env"]["worker_pid"] for r in measured}) == 1
            expected.append(measured[0]["env"]["worker_pid"])
            last_wall = max(r["started_at"] for r in measured if r["measure"] != "device_time")
            assert min(r["started_at"] for r in measured
                       if r["measure"] == "device_time") >= last_wall
    assert runs == expected


def write_history(folder: Path, seconds: float) -> None:
    """An earlier run's rows on the stand-in GPU saying each device_time case of gpu-a
    took ``seconds``."""
    path = folder / "gpu-a" / "earlier" / "fake_gpu.jsonl"
    path.parent.mkdir(parents=True)
    lines = [json.dumps({
        "case_id": f"gpu-a/fake/gpu/{model}/b{batch}/device_time/fp32/eager/t16",
        "model": model, "batch": batch, "measure": "device_time", "elapsed_s": seconds,
        "started_at": "2026-11-24T09:00:00+00:00",
        "settings": {"framework": "fake", "device": "gpu", "precision": "fp32",
                     "variant": "eager", "threads": 16, "compile_cache": ""},
        "env": {"gpu_model": STAND_IN_GPU}})
        for model in ("lenet_tiny", "sae_tiny_se") for batch in (2, 3)]
    path.write_text("\n".join(lines) + "\n")


def test_a_budget_stop_between_the_passes_resumes_with_the_device_pass(tmp_path,
                                                                      stand_in_gpu):
    suites = write_suites(tmp_path)
    clean = tmp_path / "clean"
    assert matrix(suites, clean, frameworks=("fake",)).returncode == 0
    out = tmp_path / "out"
    history = tmp_path / "history"
    write_history(history, 600.0)       # gpu-a's device pass: 40 minutes
    stopped = matrix(suites, out, "--budget", "1", "--history", str(history),
                     frameworks=("fake",))
    assert stopped.returncode == 75, stopped.stderr
    assert "gpu-a fake device pass: 4 to run" in stopped.stderr
    assert {case.split("/")[5] for case, _ in all_rows(out)} == {"forward", "gradient",
                                                                  "fingerprint"}
    resumed = matrix(suites, out, frameworks=("fake",))
    assert resumed.returncode == 0, resumed.stderr
    assert all_rows(out) == all_rows(clean)
    first, second = invocations(out)
    assert [(r["suite"], r["phase"], r["stopped"]) for r in first] == [
        ("gpu-a", "wall", "done"), ("gpu-b", "wall", "done"), ("gpu-a", "device", "budget")]
    # Nothing was left of the wall pass: the device pass started one worker.
    assert [(r["phase"], r["measured"] > 0, r["worker_starts"]) for r in second] == [
        ("wall", False, 0), ("wall", False, 0), ("device", True, 1), ("device", True, 0)]


def command_line(process: psutil.Process) -> str:
    """A child's command line, or "" for one that exited (or became a zombie) between
    being listed and being read: the matrix closes the wall pass's worker before its
    device pass starts, while the test polls."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):   # ZombieProcess is a NoSuchProcess
        return ""


def kill_at_the_hang(proc: subprocess.Popen, marker: str) -> None:
    """Once a process of ``proc``'s tree hangs in the case ``marker`` names
    (DLBENCH_INJECT_HANG), SIGKILL ``proc`` and check that every process under it died
    with it (the hang's own process outlives the worker that waited on it: it is killed
    here)."""
    hung: list[psutil.Process] = []
    deadline = time.monotonic() + 240
    while not hung and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        hung = [p for p in tree if marker in command_line(p)]
    assert hung, f"the run never reached the hanging case {marker}"
    descendants = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for child in hung:
        child.kill()
    gone, alive = psutil.wait_procs(descendants, timeout=20)
    assert not alive, [command_line(p) for p in alive]


def test_a_kill_in_the_device_pass_resumes_to_the_rows_of_an_uninterrupted_run(
        tmp_path, stand_in_gpu):
    suites = write_suites(tmp_path)
    clean = tmp_path / "clean"
    assert matrix(suites, clean).returncode == 0
    out = tmp_path / "out"
    # fake's second device job of the first stage hangs: its wall pass over gpu-a and one
    # device_time row are on disk.
    marker = "gpu-a/fake/gpu/lenet_tiny/b3/device_time"
    proc = subprocess.Popen(matrix_command(suites, out), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "DLBENCH_INJECT_HANG": marker})
    kill_at_the_hang(proc, marker)
    measures = collections.Counter(case.split("/")[5] for case, _ in all_rows(out))
    # fake's wall pass over gpu-a (four jobs), one device_time row.
    assert measures == {"forward": 4, "gradient": 4, "fingerprint": 4, "device_time": 1}
    resumed = matrix(suites, out)
    assert resumed.returncode == 0, resumed.stderr
    assert all_rows(out) == all_rows(clean)


def test_rounds_on_the_gpu_keep_each_round_in_processes_of_its_own(tmp_path, stand_in_gpu):
    out = tmp_path / "out"
    done = matrix(write_suites(tmp_path), out, "--rounds", "2", frameworks=("fake",))
    assert done.returncode == 0, done.stderr
    merged = [row for suite in ("gpu-a", "gpu-b") for row in rows_of(out, suite)]
    timed = [r for r in merged if r["measure"] in ("forward", "gradient")]
    assert len(timed) == 12 and all(r["timing"]["rounds"] == 2 for r in timed)
    assert sum(r["measure"] == "device_time" for r in merged) == 6

    def pids(index: int) -> set[int]:
        return {json.loads(line)["env"]["worker_pid"]
                for path in out.glob(f"gpu-*/*/fake_gpu.round{index}.ndjson")
                for line in path.read_text().splitlines()}
    assert not pids(1) & pids(2)
    # A suite's rounds follow each other, each closing the worker of the one before, so
    # each suite starts a wall worker per round; round 1's device worker serves both.
    assert [(r["suite"], r["phase"], r["worker_starts"]) for r in items(out)] == [
        ("gpu-a", "wall", 2), ("gpu-b", "wall", 2), ("gpu-a", "device", 1),
        ("gpu-b", "device", 0)]


def test_earlier_runs_widen_a_gpu_matrix_runs_intervals_and_leave_its_rows_as_they_were(
        tmp_path, stand_in_gpu):
    """--earlier takes one round through the round file on a GPU too: the same rows as a
    plain run, device pass included, each timed one with the earlier run in its interval."""
    suites = write_suites(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    assert matrix(suites, first, frameworks=("fake",)).returncode == 0
    for path in first.glob("gpu-*/*/fake_gpu.jsonl"):     # the stand-in GPU's rows, named
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "env": {**r["env"], "gpu_model": STAND_IN_GPU}})
                                + "\n" for r in rows))
    done = matrix(suites, second, "--earlier", str(first), frameworks=("fake",))
    assert done.returncode == 0, done.stderr

    def statuses(out: Path) -> collections.Counter:
        return collections.Counter((r["case_id"], r["status"])
                                   for suite in ("gpu-a", "gpu-b") for r in rows_of(out, suite))
    assert statuses(second) == statuses(first) and sum(statuses(first).values()) == 24
    timed = [r for suite in ("gpu-a", "gpu-b") for r in rows_of(second, suite)
             if r["measure"] in ("forward", "gradient")]
    assert len(timed) == 12
    assert all(r["timing"]["between_runs"]["earlier_runs"] == 1 for r in timed)
    assert all(r["timing"]["ci_low_ms"] <= r["timing"]["between_runs"]["own_interval_ms"][0]
               for r in timed)


def test_a_matrix_run_names_its_host_in_the_cache_folder_it_points_its_workers_at(
        tmp_path, stand_in_gpu):
    # So that a plan on another host that is given this folder (a volume that outlives a
    # rented machine, a copy) knows whose earlier rows it holds the programs of.
    from suites.matrix.compile_cache import HOSTS_FILE
    out, cache = tmp_path / "out", tmp_path / "cache"
    done = matrix(write_suites(tmp_path)[:1], out, "--compile-cache", str(cache),
                  frameworks=("fake",), env={"DLBENCH_HOST_ID": "host-a"})
    assert done.returncode == 0, done.stderr
    assert (cache / "gpu" / HOSTS_FILE.format(framework="fake")).read_text() == "host-a\n"
