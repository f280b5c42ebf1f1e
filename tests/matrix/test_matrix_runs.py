"""The matrix command end to end with workers of the stand-in framework
(tests/fake_framework.py) on tiny models: rows reused across suites, a run killed at seeded
random points and resumed (the same rows as an uninterrupted run, none lost, none twice),
and the time budget (a job that would not fit is not started; one still running at the
deadline is stopped and left pending). The stand-in is enough: the code under test is the
matrix's, the runner's, the worker's and the results file's, and the adapter is a plug-in
that only times a step (PyTorch's would add seconds of ``import torch`` to each worker's
start, nothing more). Nothing here asserts a duration."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fake_framework import EVENTS, REGISTRY
from tests.kill_points import lines_on_disk, wait_for_lines
from tests.tiny_suites import cases, tiny_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE_A = tiny_suite("matrix-a", cases(["lenet_tiny", "sae_tiny_se"], [2, 3]),
                     case_timeout_s=120)
# lenet_tiny at batch 2 again (reused from matrix-a), and a model of its own.
SUITE_B = tiny_suite("matrix-b", cases(["lenet_tiny", "conv_tiny"], [2]),
                     case_timeout_s=120)


@pytest.fixture(autouse=True)
def stand_in(monkeypatch) -> None:
    """The stand-in framework for this process and the matrices and workers it starts."""
    monkeypatch.setenv("DLBENCH_REGISTRY", str(REGISTRY))
    monkeypatch.setenv("DLBENCH_TRUTH", "off")


@pytest.fixture
def suites(tmp_path) -> list[Path]:
    paths = []
    for name, text in (("matrix-a", SUITE_A), ("matrix-b", SUITE_B)):
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        paths.append(path)
    return paths


def command(suites: list[Path], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "suites", "matrix", "--device", "cpu", "--frameworks", "fake",
            "--python", f"fake={sys.executable}", "--suites", *map(str, suites),
            "--out", str(out), "--history", str(out), "--compile-cache", "off", *extra]


# The results files, and with the round files too: the lines a drawn kill point counts.
RESULTS = "matrix-*/*/*.jsonl"
RESULTS_AND_ROUNDS = "matrix-*/*/fake_cpu.*json*"    # .jsonl, .round<n>.ndjson


def rows(out: Path) -> collections.Counter:
    """Case ids of every results file under ``out`` (a torn last line is not a row)."""
    found: collections.Counter = collections.Counter()
    for path in out.glob("matrix-*/*/*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                found[json.loads(line)["case_id"]] += 1
            except (ValueError, KeyError):
                continue
    return found


def measured_rows(out: Path) -> int:
    """Rows measured (not copied from an earlier suite) under ``out``."""
    count = 0
    for path in out.glob("matrix-*/*/*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                count += "reused_from" not in json.loads(line)
            except ValueError:
                continue
    return count


def logged_rows(out: Path) -> int:
    """Rows the matrix's cost log says its invocations measured."""
    from suites.matrix import log as matrix_log
    return sum(record["measured"] for record in matrix_log.load([out / "matrix"])
               if record.get("kind") == "item")


def run(suites, out, *extra, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(command(suites, out, *extra), cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_second_suite_reuses_the_first_suites_rows_and_a_rerun_does_nothing(tmp_path, suites):
    out = tmp_path / "out"
    done = run(suites, out)
    assert done.returncode == 0, done.stderr
    found = rows(out)
    assert all(n == 1 for n in found.values())
    b_rows = [json.loads(line) for path in out.glob("matrix-b/*/fake_cpu.jsonl")
              for line in path.read_text().splitlines()]
    reused = {r["case_id"]: r["reused_from"] for r in b_rows if "reused_from" in r}
    assert set(reused) == {f"matrix-b/fake/cpu/lenet_tiny/b2/{m}/fp32/eager/t1"
                           for m in ("forward", "gradient", "fingerprint")}
    assert all(source.startswith("matrix-a/") for source in reused.values())
    assert all(r["status"] == "ok" for r in b_rows)
    log = [json.loads(line) for line in next(out.glob("matrix/*/costs-cpu.ndjson")).read_text()
           .splitlines()]
    items = [r for r in log if r["kind"] == "item"]
    assert [(r["suite"], r["reused"], r["stopped"]) for r in items] == [
        ("matrix-a", 0, "done"), ("matrix-b", 3, "done")]
    assert items[0]["measured"] == 12 and items[1]["measured"] == 3
    # One worker for both suites (suites/harness/pool.py).
    assert [r["worker_starts"] for r in items] == [1, 0]
    # Everything is done: the same command writes no row and says so in the plan.
    again = run(suites, out)
    assert again.returncode == 0 and rows(out) == found
    assert "nothing to run" in again.stderr


def test_killed_at_random_points_then_resumed_gives_the_rows_of_an_uninterrupted_run(
        tmp_path, suites):
    clean = tmp_path / "clean"
    started = time.monotonic()
    assert run(suites, clean).returncode == 0
    duration = time.monotonic() - started
    expected = rows(clean)
    rng = random.Random(20261123)
    between_rows = 0
    for attempt in range(3):
        out = tmp_path / f"killed{attempt}"
        proc = subprocess.Popen(command(suites, out), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        if attempt < 2:
            # Once the run has written a drawn number of rows, leaving a job's rows or more
            # to write: between two rows, one SIGKILL and one SIGTERM (tests/kill_points.py).
            wait_for_lines(proc, out, RESULTS, rng.randint(1, len(expected) - 3))
        else:
            # Anywhere in an uninterrupted run's length: the start, the rows, the end.
            time.sleep(rng.uniform(0.5, duration))
        workers = psutil.Process(proc.pid).children(recursive=True)
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL if attempt % 2 == 0 else signal.SIGTERM)
        proc.wait()
        between_rows += running and 0 < sum(rows(out).values()) < len(expected)
        # No worker outlives its runner (it would go on writing beside the resumed run).
        gone, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, alive
        done = run(suites, out)
        assert done.returncode == 0, done.stderr
        found = rows(out)
        assert set(found) == set(expected)
        assert all(n == 1 for n in found.values()), found
        # The cost log covers every row measured, those of the killed invocation too.
        assert logged_rows(out) == measured_rows(out)
    # The faults landed mid-run: a stand-in too fast for its kills would test nothing.
    assert between_rows >= 1


def write_history(out: Path, seconds: float) -> None:
    """An earlier run's rows saying each of matrix-a's cases took ``seconds``."""
    from suites.instruments.environment import cpu_isa, cpu_model
    path = out / "history" / "matrix-a" / "earlier" / "fake_cpu.jsonl"
    path.parent.mkdir(parents=True)
    lines = []
    for model in ("lenet_tiny", "sae_tiny_se"):
        for batch in (2, 3):
            for measure in ("forward", "gradient", "fingerprint"):
                lines.append(json.dumps({
                    "case_id": f"matrix-a/fake/cpu/{model}/b{batch}/{measure}/fp32/eager/t1",
                    "model": model, "batch": batch, "measure": measure, "elapsed_s": seconds,
                    "started_at": "2026-11-23T09:00:00+00:00",
                    "settings": {"framework": "fake", "device": "cpu", "precision": "fp32",
                                 "variant": "eager", "threads": 1, "compile_cache": ""},
                    "env": {"cpu_model": cpu_model(), "logical_cores": psutil.cpu_count(),
                            "cpu_isa": cpu_isa()}}))
    path.write_text("\n".join(lines) + "\n")


def test_a_budget_too_small_for_the_next_job_stops_before_it_and_says_what_is_left(
        tmp_path, suites):
    out = tmp_path / "out"
    write_history(out, seconds=600.0)        # every job "takes" 30 minutes
    done = run(suites, out, "--budget", "1", "--history", str(out / "history"))
    assert done.returncode == 75, done.stderr
    assert not rows(out)
    assert "left (run the same command again to continue)" in done.stderr
    assert "matrix-a fake: 12 to run" in done.stderr
    # Without the budget the same command completes the work.
    assert run(suites, out).returncode == 0
    assert len(rows(out)) == 18


def test_a_job_running_at_the_deadline_is_stopped_and_left_pending(tmp_path, suites):
    from suites.matrix.run import STOP_MARGIN_S
    out = tmp_path / "out"
    # The first job hangs; the budget's deadline stops it (no timeout row is written). The
    # deadline (the budget less the margin kept for stopping) falls 15 s after the start:
    # a stand-in run's first job starts within a few seconds (its runner and worker
    # starting), and the check below says so if it did not.
    events = tmp_path / "events"
    hang = {"DLBENCH_INJECT_HANG": "matrix-a/fake/cpu/lenet_tiny/b2/forward",
            EVENTS: str(events)}
    done = run(suites, out, "--budget", f"{(STOP_MARGIN_S + 15) / 60:.4f}", env=hang)
    assert done.returncode == 75, done.stderr
    # The deadline found the hanging job running (built: the stand-in noted it), not
    # waiting to start.
    assert "cpu lenet_tiny b2" in events.read_text(), done.stderr
    statuses = [json.loads(line)["status"] for path in out.glob("matrix-*/*/*.jsonl")
                for line in path.read_text().splitlines()]
    assert "timeout" not in statuses
    assert run(suites, out).returncode == 0
    found = rows(out)
    assert len(found) == 18 and all(n == 1 for n in found.values())


def test_rounds_killed_and_resumed_merge_every_case_once(tmp_path, suites):
    """--rounds 2: a run killed in any round and run again merges the same rows as an
    uninterrupted one, each once, every timed row spanning both processes."""
    clean = tmp_path / "clean"
    assert run(suites, clean, "--rounds", "2").returncode == 0
    expected = rows(clean)
    merged = [json.loads(line) for path in clean.glob("matrix-a/*/fake_cpu.jsonl")
              for line in path.read_text().splitlines()]
    timed = [r for r in merged if r["measure"] in ("forward", "gradient")]
    assert len(timed) == 8 and all(r["timing"]["rounds"] == 2 for r in timed)
    assert all(len(r["timing"]["round_medians_ms"]) == 2 for r in timed)
    assert sorted(p.name for p in clean.glob("matrix-a/*/fake_cpu.round*.ndjson")) == [
        "fake_cpu.round1.ndjson", "fake_cpu.round2.ndjson"]
    out = tmp_path / "killed"
    proc = subprocess.Popen(command(suites, out, "--rounds", "2"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    # Once the run has written a drawn number of lines of its round files and merged
    # results, leaving three or more to write: in round 1, round 2 or the merge
    # (tests/kill_points.py).
    lines = lines_on_disk(clean, RESULTS_AND_ROUNDS)
    wait_for_lines(proc, out, RESULTS_AND_ROUNDS, random.Random(20261124).randint(1, lines - 3))
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The kill landed mid-run: a stand-in too fast for it would test nothing.
    assert running and 0 < lines_on_disk(out, RESULTS_AND_ROUNDS) < lines
    done = run(suites, out, "--rounds", "2")
    assert done.returncode == 0, done.stderr
    found = rows(out)
    assert set(found) == set(expected)
    assert all(n == 1 for n in found.values()), found
