"""The worker pool (suites/harness/pool.py): a matrix starts one serving worker per key and
hands it every suite that needs that key, with nothing else changed — the same rows as
separate runs, a dead or hung worker replaced by a fresh one, the budget's stops,
compile-cache jobs in processes of their own, rounds in separate processes. Run on the
stand-in framework (tests/fake_framework.py), so no framework needs to be installed; each
row names the process that measured it. Nothing here asserts a duration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fake_framework import CRASH, REGISTRY
from tests.tiny_suites import cases, tiny_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE_A = tiny_suite("pool-a", cases(["lenet_tiny", "sae_tiny_se"], [2, 3]))
SUITE_B = tiny_suite("pool-b", cases(["conv_tiny", "lenet_tiny"], [2]))
# First calls with a cold and a warm compilation cache, beside an ordinary job.
SUITE_CACHE = tiny_suite(
    "pool-cache",
    cases(["lenet_tiny"], [2], measures=("forward",),
          extra='variants = ["cached"]\ncompile_cache = ["cold", "warm"]\n'),
    cases(["conv_tiny"], [2], measures=("forward",)))


@pytest.fixture
def fake_env(monkeypatch) -> dict[str, str]:
    """The stand-in framework for this process and the workers it starts."""
    env = {"DLBENCH_REGISTRY": str(REGISTRY), "DLBENCH_TRUTH": "off"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def write_suites(folder: Path, **texts: str) -> dict[str, Path]:
    paths = {}
    for name, text in texts.items():
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(text)
    return paths


def matrix(suites: list[Path], out: Path, *extra: str, env: dict | None = None):
    command = [sys.executable, "-m", "suites", "matrix", "--device", "cpu", "--frameworks",
               "fake", "--python", f"fake={sys.executable}", "--suites", *map(str, suites),
               "--out", str(out), "--history", str(out), "--compile-cache", "off",
               "--no-reuse", *extra]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def suite_rows(out: Path, suite: str, pattern: str = "fake_cpu.jsonl") -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob(f"{suite}/*/{pattern}"))
            for line in path.read_text().splitlines()]


def items(out: Path) -> list[dict]:
    log = next(out.glob("matrix/*/costs-cpu.ndjson"))
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "item"]


def starts(out: Path) -> list[tuple[str, int]]:
    return [(r["suite"], r["worker_starts"]) for r in items(out)]


def pids(rows: list[dict]) -> set[int]:
    """The worker processes that wrote these rows (the runner's own rows, for a timeout or
    a worker's death, name none)."""
    return {row["env"]["worker_pid"] for row in rows if "worker_pid" in row["env"]}


def outcome(rows: list[dict]) -> dict[str, str]:
    return {row["case_id"]: row["status"] for row in rows}


def test_a_matrix_starts_one_worker_per_key_and_writes_the_rows_of_separate_runs(tmp_path,
                                                                               fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "pooled"
    done = matrix([suites["a"], suites["b"]], out)
    assert done.returncode == 0, done.stderr
    assert starts(out) == [("pool-a", 1), ("pool-b", 0)]
    a_rows, b_rows = suite_rows(out, "pool-a"), suite_rows(out, "pool-b")
    assert len(pids(a_rows + b_rows)) == 1
    # The unpooled path: one `suites run` per suite, each with workers of its own.
    separate = tmp_path / "separate"
    for path in (suites["a"], suites["b"]):
        run = subprocess.run([sys.executable, "-m", "suites", "run", str(path), "--framework",
                              "fake", "--out", str(separate)], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    assert outcome(a_rows) == outcome(suite_rows(separate, "pool-a"))
    assert outcome(b_rows) == outcome(suite_rows(separate, "pool-b"))
    assert set(outcome(a_rows + b_rows).values()) == {"ok"} and len(a_rows + b_rows) == 18
    assert pids(suite_rows(separate, "pool-a")) != pids(suite_rows(separate, "pool-b"))


def test_a_precision_the_framework_keeps_apart_gets_workers_of_its_own(tmp_path, fake_env):
    """The stand-in keeps its bf16 jobs apart (tests/data/fake_registry.toml), as
    TensorFlow does its TF32 jobs: they run in a worker that no fp32 job shares, and the
    next suite's fp32 jobs go on in the fp32 worker."""
    mixed = tiny_suite("pool-precisions",
                       cases(["lenet_tiny", "conv_tiny"], [2], measures=("forward",),
                             extra='precisions = ["bf16", "fp32"]\n'))
    suites = write_suites(tmp_path, mixed=mixed, b=SUITE_B)
    out = tmp_path / "out"
    done = matrix([suites["mixed"], suites["b"]], out)
    assert done.returncode == 0, done.stderr
    rows = suite_rows(out, "pool-precisions")
    assert set(outcome(rows).values()) == {"ok"} and len(rows) == 8

    def workers(precision):
        return pids([r for r in rows if r["settings"]["precision"] == precision])
    assert len(workers("bf16")) == 1 and len(workers("fp32")) == 1
    assert workers("bf16") != workers("fp32")
    assert pids(suite_rows(out, "pool-b")) == workers("fp32")
    assert starts(out) == [("pool-precisions", 2), ("pool-b", 0)]


def test_a_worker_death_in_the_second_suite_leaves_failed_rows_and_a_fresh_worker_goes_on(
        tmp_path, fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "out"
    done = matrix([suites["a"], suites["b"]], out, env={CRASH: "conv_tiny"})
    assert done.returncode == 0, done.stderr
    a_rows, b_rows = suite_rows(out, "pool-a"), suite_rows(out, "pool-b")
    failed = [r for r in b_rows if r["status"] == "failed"]
    # The pooled worker died preparing conv_tiny: its three pending measures failed.
    assert sorted(r["measure"] for r in failed) == ["fingerprint", "forward", "gradient"]
    assert all(r["model"] == "conv_tiny" and "worker process died" in r["reason"]
               for r in failed)
    rest = [r for r in b_rows if r["status"] != "failed"]
    assert len(rest) == 3 and all(r["status"] == "ok" for r in rest)
    assert starts(out) == [("pool-a", 1), ("pool-b", 1)]
    assert pids(rest).isdisjoint(pids(a_rows))
    # The run again has nothing left: the failed rows are results, not pending work.
    assert matrix([suites["a"], suites["b"]], out).returncode == 0
    assert len(suite_rows(out, "pool-b")) == 6


def test_a_timeout_kills_the_pooled_worker_and_the_next_suite_starts_a_fresh_one(tmp_path,
                                                                                fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "out"
    # pool-a's last case hangs in a child of its worker.
    marker = "pool-a/fake/cpu/sae_tiny_se/b3/fingerprint"
    done = matrix([suites["a"], suites["b"]], out, "--case-timeout", "3",
                  env={"DLBENCH_INJECT_HANG": marker})
    assert done.returncode == 0, done.stderr
    a_rows, b_rows = suite_rows(out, "pool-a"), suite_rows(out, "pool-b")
    assert [r["case_id"] for r in a_rows if r["status"] == "timeout"] == \
        [f"{marker}/fp32/eager/t1"]
    assert starts(out) == [("pool-a", 1), ("pool-b", 1)]
    assert pids(b_rows).isdisjoint(pids(a_rows))
    assert all(r["status"] == "ok" for r in b_rows) and len(a_rows) == 12
    hung = [p for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and marker in p.info["cmdline"]]
    assert not hung, hung


def write_history(folder: Path, suite: str, model: str, seconds: float) -> None:
    """An earlier run's rows saying each of ``model``'s cases took ``seconds``."""
    from suites.instruments.environment import cpu_isa, cpu_model
    path = folder / suite / "earlier" / "fake_cpu.jsonl"
    path.parent.mkdir(parents=True)
    lines = [json.dumps({
        "case_id": f"{suite}/fake/cpu/{model}/b2/{measure}/fp32/eager/t1", "model": model,
        "batch": 2, "measure": measure, "elapsed_s": seconds,
        "started_at": "2026-11-23T09:00:00+00:00",
        "settings": {"framework": "fake", "device": "cpu", "precision": "fp32",
                     "variant": "eager", "threads": 1, "compile_cache": ""},
        "env": {"cpu_model": cpu_model(), "logical_cores": psutil.cpu_count(),
                "cpu_isa": cpu_isa()}})
        for measure in ("forward", "gradient", "fingerprint")]
    path.write_text("\n".join(lines) + "\n")


def test_a_budget_stop_between_suites_then_a_rerun_lose_and_duplicate_no_row(tmp_path,
                                                                             fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "out"
    history = tmp_path / "history"
    write_history(history, "pool-b", "conv_tiny", 600.0)   # pool-b's first job: 30 minutes
    done = matrix([suites["a"], suites["b"]], out, "--budget", "1", "--history", str(history))
    assert done.returncode == 75, done.stderr
    assert len(suite_rows(out, "pool-a")) == 12 and not suite_rows(out, "pool-b")
    assert "pool-b fake: 6 to run" in done.stderr
    assert matrix([suites["a"], suites["b"]], out).returncode == 0
    rows = suite_rows(out, "pool-a") + suite_rows(out, "pool-b")
    assert len(rows) == len(outcome(rows)) == 18


def test_a_job_running_at_the_deadline_is_killed_and_its_key_has_no_worker(tmp_path, fake_env,
                                                                           monkeypatch):
    from suites.harness.pool import WorkerPool
    from suites.harness.runner import BUDGET_EXIT, Budget, Runner, RunRequest

    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "out"
    # Set before the worker starts: pool-b's first case hangs in the worker pool-a left.
    monkeypatch.setenv("DLBENCH_INJECT_HANG", "pool-b/fake/cpu/conv_tiny/b2/forward")
    with WorkerPool() as pool:
        first = Runner(RunRequest(str(suites["a"]), "fake", "cpu", out), pool=pool)
        assert first.run() == 0
        key = first.pool_key(1, 1, "all")
        assert pool.has(key) and len(first.worker_start_s) == 1
        budget = Budget(time.monotonic() + 3.0, lambda job, names: None)
        second = Runner(RunRequest(str(suites["b"]), "fake", "cpu", out), budget, pool=pool)
        assert second.run() == BUDGET_EXIT
        assert second.worker_start_s == [] and not pool.has(key)
        monkeypatch.delenv("DLBENCH_INJECT_HANG")
        again = Runner(RunRequest(str(suites["b"]), "fake", "cpu", out, resume=True), pool=pool)
        assert again.run() == 0 and len(again.worker_start_s) == 1
    rows = suite_rows(out, "pool-b")
    assert len(rows) == len(outcome(rows)) == 6
    assert "timeout" not in outcome(rows).values()


def test_compile_cache_jobs_never_run_in_a_pooled_worker(tmp_path, fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, cache=SUITE_CACHE)
    out = tmp_path / "out"
    done = matrix([suites["a"], suites["cache"]], out)
    assert done.returncode == 0, done.stderr
    pooled = pids(suite_rows(out, "pool-a"))
    rows = suite_rows(out, "pool-cache")
    assert all(r["status"] == "ok" for r in rows), rows
    by_cache = {cache: pids([r for r in rows if r["settings"]["compile_cache"] == cache])
                for cache in ("", "cold", "warm")}
    assert by_cache[""] == pooled      # the ordinary job ran in the pooled worker
    cold, warm = by_cache["cold"], by_cache["warm"]
    assert len(cold) == len(warm) == 1 and cold != warm
    assert (cold | warm).isdisjoint(pooled)
    assert starts(out) == [("pool-a", 1), ("pool-cache", 2)]


def test_rounds_share_a_worker_per_round_and_never_one_between_rounds(tmp_path, fake_env):
    suites = write_suites(tmp_path, a=SUITE_A, b=SUITE_B)
    out = tmp_path / "out"
    done = matrix([suites["a"], suites["b"]], out, "--rounds", "2")
    assert done.returncode == 0, done.stderr
    assert starts(out) == [("pool-a", 2), ("pool-b", 0)]
    rounds = [pids(suite_rows(out, "pool-a", f"fake_cpu.round{k}.ndjson")
                   + suite_rows(out, "pool-b", f"fake_cpu.round{k}.ndjson")) for k in (1, 2)]
    assert all(len(found) == 1 for found in rounds) and rounds[0] != rounds[1]
    assert len(suite_rows(out, "pool-a")) == 12 and len(suite_rows(out, "pool-b")) == 6


class IdleWorker:
    """A WorkerProcess as the pool sees it: alive until closed or killed."""

    def __init__(self) -> None:
        self.ended = False

    def alive(self) -> bool:
        return not self.ended

    def close(self) -> None:
        self.ended = True

    kill = close


def test_the_pool_closes_idle_gpu_workers_of_other_keys_and_leaves_cpu_workers_alone():
    from suites.harness.pool import WorkerKey, WorkerPool

    def key(framework: str, device: str, phase: str) -> WorkerKey:
        return WorkerKey("python", framework, device, 16, 1, phase)
    wall, device, cpu = key("torch", "gpu", "wall"), key("torch", "gpu", "device"), \
        key("torch", "cpu", "all")
    pool = WorkerPool()
    workers = {k: IdleWorker() for k in (wall, cpu)}
    for k, worker in workers.items():
        pool.give_back(k, worker)
    # The device phase's key has no worker of its own: it takes the wall phase's, which
    # then serves the device key only.
    assert pool.has(device)
    assert pool.take(device) is workers[wall] and not workers[wall].ended
    assert not pool.has(wall) and pool.has(cpu)
    pool.give_back(device, workers[wall])
    assert not pool.has(wall) and pool.has(device)
    # A wall plan after it starts a fresh worker, once the device worker is gone.
    assert pool.take(wall) is None
    assert workers[wall].ended and not pool.has(device)
    assert pool.has(cpu) and not workers[cpu].ended
    assert pool.take(device) is None        # no worker of either phase: the caller starts one
    pool.give_back(key("jax", "gpu", "wall"), other := IdleWorker())
    assert not pool.has(device)             # another framework's wall worker serves no torch
    assert pool.take(device) is None and other.ended
    kept = IdleWorker()
    pool.give_back(device, kept)
    assert pool.take(device) is kept and not kept.ended    # its own key's worker
    pool.give_back(device, kept)
    pool.take(key("jax", "gpu", "wall"))                  # another framework on the GPU
    assert kept.ended and pool.has(cpu)
    pool.give_back(device, fresh := IdleWorker())
    pool.close_gpu_workers()        # a compile-cache job's process of its own comes next
    assert fresh.ended and pool.has(cpu)
    # A framework that keeps its device phase apart (TensorFlow: its tracer lost kernels in
    # the wall worker) never hands the wall worker on.
    def apart(phase: str) -> WorkerKey:
        return WorkerKey("python", "tf", "gpu", 16, 1, phase, own_device_process=True)
    pool.give_back(apart("wall"), tf_wall := IdleWorker())
    assert not pool.has(apart("device"))
    assert pool.take(apart("device")) is None and tf_wall.ended
