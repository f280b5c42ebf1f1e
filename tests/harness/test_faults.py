"""Fault injection on the runner with workers of the stand-in framework
(tests/fake_framework.py, tiny models, tiny budgets): SIGKILL at seeded random points then
``--resume``; a full disk mid-run; a hanging case. After each, the results file must hold
exactly one readable row per case: none lost, none duplicated, no unreadable line (a torn
tail is cut off and kept in ``.torn``). The stand-in is enough: the code under test is the
runner's, the worker's and the results file's, and the adapter is a plug-in that only
times a step (PyTorch's would add seconds of ``import torch`` to each start, nothing
more). Nothing here asserts a duration except the time limit under test, with slack."""

from __future__ import annotations

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

from tests.fake_framework import REGISTRY
from tests.kill_points import wait_for_lines

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["lenet_tiny", "sae_tiny_se"]
BATCHES = [1, 2, 3]
MEASURES = ["forward", "gradient"]
EXPECTED = len(MODELS) * len(BATCHES) * (len(MEASURES) + 1)   # + one fingerprint per job
SUITE = f"""
name = "faults"
case_timeout_s = 120
[timer]
warmup = 0
min_samples = 1
max_samples = 2
budget_s = 0.01
[[cases]]
models = {json.dumps(MODELS)}
batches = {BATCHES}
measures = {json.dumps(MEASURES)}
devices = ["cpu"]
threads = [1]
"""
KILLS = 20


def command(suite: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "suites", "run", str(suite), "--framework", "fake",
            "--out", str(out), *extra]


def audit(out: Path) -> dict[str, int]:
    """Rows, distinct cases, duplicates and unreadable lines of the one results file."""
    files = list(out.rglob("*.jsonl"))
    assert len(files) <= 1, files
    ids, unreadable, torn = [], 0, 0
    if files:
        *lines, tail = files[0].read_bytes().split(b"\n")
        torn = int(bool(tail))   # no newline at the end: a torn write the next run repairs
        for line in lines:
            try:
                ids.append(json.loads(line)["case_id"])
            except (ValueError, KeyError, TypeError):
                unreadable += 1
    return {"rows": len(ids), "cases": len(set(ids)), "duplicated": len(ids) - len(set(ids)),
            "unreadable": unreadable, "torn_tail": torn}


@pytest.fixture(autouse=True)
def stand_in(monkeypatch) -> None:
    """The stand-in framework for this process and the runners and workers it starts."""
    monkeypatch.setenv("DLBENCH_REGISTRY", str(REGISTRY))
    monkeypatch.setenv("DLBENCH_TRUTH", "off")


@pytest.fixture
def suite(tmp_path) -> Path:
    path = tmp_path / "faults.toml"
    path.write_text(SUITE)
    return path


def test_sigkill_at_random_points_then_resume_loses_and_duplicates_nothing(tmp_path, suite):
    # An uninterrupted run's length on this host: the span the time-drawn kill points cover
    # (the stand-in's run is a few seconds, most of them the runner's and worker's start).
    clean = tmp_path / "clean"
    started = time.monotonic()
    subprocess.run(command(suite, clean), cwd=ROOT, capture_output=True, timeout=600)
    run_s = time.monotonic() - started
    out = tmp_path / "out"
    rng = random.Random(20261123)
    tried = landed = between_rows = torn_injected = 0
    for attempt in range(KILLS):
        before = audit(out)["rows"]
        proc = subprocess.Popen(command(suite, out, "--resume"), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        if attempt % 3 != 2 and before + 1 <= EXPECTED - 3:
            # Once this run has written a drawn number of rows more, leaving a job's rows
            # or more to write: between two rows (tests/kill_points.py).
            wait_for_lines(proc, out, "**/*.jsonl", rng.randint(before + 1, EXPECTED - 3))
        else:
            # Anywhere in an uninterrupted run's length: the start, a torn tail's repair,
            # the rows, the end.
            time.sleep(rng.uniform(0.0, run_s))
        tried += 1
        alive = proc.poll() is None
        if alive:
            os.killpg(proc.pid, signal.SIGKILL)   # runner and worker at once, no cleanup
            landed += 1
        proc.wait()
        state = audit(out)
        assert state["duplicated"] == 0 and state["unreadable"] == 0, (attempt, state)
        if alive and before < state["rows"] < EXPECTED:
            between_rows += 1                     # killed after a row, with rows to come
        files = list(out.rglob("*.jsonl"))
        if files and (attempt % 3 == 1 or state["cases"] == EXPECTED and not torn_injected):
            # A write torn by the kill itself is rare (one os.write per row): make some,
            # each before a run killed at a drawn time, which may land before its repair
            # (and one for the last run to repair, if the loop ends before any).
            with files[0].open("ab") as handle:
                handle.write(b'{"schema": 1, "case_id": "torn/by/a/kil')
            torn_injected += 1
        if state["cases"] == EXPECTED:
            break
    result = subprocess.run(command(suite, out, "--resume"), cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    final = audit(out)
    assert final["torn_tail"] == 0
    lost = EXPECTED - final["cases"]
    figures = (f"kills tried {tried}, landed {landed}, between rows {between_rows}, torn tails "
               f"injected {torn_injected}, rows expected {EXPECTED}, lost {lost}, duplicated "
               f"{final['duplicated']}, unreadable {final['unreadable']}")
    print(f"\nfault injection (SIGKILL): {figures}")
    assert lost == 0 and final["duplicated"] == 0 and final["unreadable"] == 0, figures
    assert tried >= KILLS or final["cases"] == EXPECTED
    # The faults landed mid-run: a stand-in too fast for its kills would test nothing.
    assert between_rows >= 1, figures
    assert torn_injected >= 1, figures
    torn = list(out.rglob("*.jsonl.torn"))
    assert torn and torn[0].read_bytes().count(b"torn/by/a/kil") >= torn_injected


def full_disk(tmp_path: Path) -> tuple[Path, dict[str, str], callable]:
    """A 16 KiB tmpfs where this machine lets the test mount one, else an injected ENOSPC
    at the same size (suites.rows.results.INJECT_ENOSPC)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                              capture_output=True)
        if done.returncode == 0:
            return mount, {}, lambda: subprocess.run(["umount", "-l", str(mount)])
    return mount, {"DLBENCH_INJECT_ENOSPC_AT": str(16 * 1024)}, lambda: None


def test_full_disk_mid_run_is_one_line_exit_2_and_resume_completes(tmp_path, suite):
    small, env, release = full_disk(tmp_path)
    try:
        result = subprocess.run(command(suite, small), cwd=ROOT, capture_output=True,
                                text=True, timeout=600, env={**os.environ, **env})
        kind = "injected ENOSPC" if env else "16 KiB tmpfs"
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert len(lines) == 1 and "No space left on device" in lines[0], result.stderr
        assert str(small) in lines[0] and "--resume" in lines[0]
        partial = audit(small)
        assert 0 < partial["cases"] < EXPECTED and partial["unreadable"] == 0, partial
        # Move the results to a roomy disk, as a user would, and finish the run.
        roomy = tmp_path / "roomy"
        for path in small.rglob("*"):
            if path.is_file():
                target = roomy / path.relative_to(small)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
    finally:
        release()
    result = subprocess.run(command(suite, roomy, "--resume"), cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    final = audit(roomy)
    lost = EXPECTED - final["cases"]
    figures = (f"{kind}: rows before the disk filled {partial['rows']}, rows expected "
               f"{EXPECTED}, lost {lost}, duplicated {final['duplicated']}, unreadable "
               f"{final['unreadable']}; error line: {lines[0]}")
    print(f"\nfault injection (full disk): {figures}")
    assert lost == 0 and final["duplicated"] == 0 and final["unreadable"] == 0, figures


def test_out_under_a_regular_file_is_one_line_and_exit_2(tmp_path, suite):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(command(suite, blocker / "results"), cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(blocker) in result.stderr and "Not a directory" in result.stderr


def test_a_hanging_case_becomes_a_timeout_row_and_the_suite_goes_on(tmp_path, suite):
    # A stand-in case takes a tenth of a second or so (a few samples of a little numpy),
    # so a limit of 3 s is far above every case but the hung ones, which wait it out.
    limit = 3.0
    marker = f"b2/gradient/fp32/eager/t1#{os.getpid()}"
    out = tmp_path / "out"
    started = time.monotonic()
    result = subprocess.run(command(suite, out, "--case-timeout", str(limit)), cwd=ROOT,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "DLBENCH_INJECT_HANG": marker.split("#")[0]})
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in next(out.rglob("*.jsonl")).read_text().splitlines()]
    timeouts = [r for r in rows if r["status"] == "timeout"]
    assert len(timeouts) == len(MODELS), timeouts     # b2/gradient of each model
    assert all(r["time_limit_s"] == limit and f"{limit:g} s" in r["reason"] for r in timeouts)
    assert all(r["wall_s"] >= limit for r in timeouts)   # from the case's start to the kill
    assert len({r["case_id"] for r in rows}) == len(rows) == EXPECTED  # the rest ran
    assert sum(r["status"] == "ok" for r in rows) == EXPECTED - len(MODELS)
    # The hung child the worker waited on went with it: the whole tree was killed.
    hung = [p for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and marker.split("#")[0] in p.info["cmdline"]]
    assert not hung, hung
    print(f"\nhang -> timeout: {len(timeouts)} hung cases at a {limit:g} s limit, killed "
          f"after {', '.join(str(r['wall_s']) + ' s' for r in timeouts)}; whole suite "
          f"({EXPECTED} rows) in {elapsed:.1f} s")
