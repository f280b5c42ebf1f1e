"""Cold start (suites/serving/cold_start.py) on the stand-in framework (tests/fake_framework.py,
whose ``serve`` answers with the float64 reference rounded to float32): the phases in order,
the answer checked, and a child that crashes, hangs, answers wrongly or says nothing as a
``failed`` record with its reason (``DLBENCH_INJECT_COLD_START``). No duration is asserted.
About six child processes of a fraction of a second each and one 3 s time limit."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from adapters.registry import REGISTRY_ENV, load_registry
from suites.serving import cold_start
from suites.serving.cold_start import INJECT, PHASES, Setting
from tests import fake_framework

SETTING = Setting("fake", "lenet_tiny", 2, threads=1)


@pytest.fixture(autouse=True)
def fake_registry(monkeypatch):
    monkeypatch.setenv(REGISTRY_ENV, str(fake_framework.REGISTRY))
    monkeypatch.delenv(INJECT, raising=False)


def test_repeated_cold_starts_give_ordered_phases_a_checked_answer_and_a_summary(tmp_path, capsys):
    out = tmp_path / "cold.jsonl"
    code = cold_start.main(["--framework", "fake", "--model", "lenet_tiny", "--batch", "2",
                            "--threads", "1", "--repeats", "2", "--out", str(out)])
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["cold_start", "cold_start", "cold_start_summary"]
    for repeat, line in enumerate(lines[:2], start=1):
        assert line["status"] == "ok" and line["reason"] == "" and line["repeat"] == repeat
        marks = [line[f"{phase}_s"] for phase in PHASES]
        assert all(m is not None for m in marks)
        assert marks[0] > 0 and all(a <= b for a, b in zip(marks, marks[1:]))
        assert line["total_s"] == marks[-1]
        assert list(line["phases_s"]) == list(PHASES)
        assert sum(line["phases_s"].values()) == pytest.approx(line["total_s"])
        assert 0 <= line["error"] <= line["bound"]
        assert line["variant"] == "eager" and line["execution"] == "a little numpy"
        assert line["clock"] == "clock_gettime(CLOCK_MONOTONIC)"
        assert line["framework_version"] == "0"
    summary = lines[2]
    assert summary["status"] == "ok" and summary["ok"] == 2 and summary["repeats"] == 2
    assert list(summary["phases_median_s"]) == list(PHASES)
    totals = sorted(line["total_s"] for line in lines[:2])
    assert summary["total_median_s"] == pytest.approx(sum(totals) / 2)
    assert summary["first_total_s"] == lines[0]["total_s"]
    table = capsys.readouterr().out
    assert "median" in table and "repeat 2" in table and ": ok" in table


@pytest.mark.parametrize("inject, reason, reached", [
    ("crash", "was killed by SIGKILL after phase 'weights' and printed no result", "weights"),
    ("silent", "exited with code 0 after phase 'answered' and printed no result", "answered"),
    ("wrong", "from float64, above the fp32 bound", "answered"),
])
def test_a_child_that_crashes_says_nothing_or_answers_wrongly_is_a_failed_record(
        monkeypatch, inject, reason, reached):
    monkeypatch.setenv(INJECT, inject)
    [record] = cold_start.cold_starts(SETTING, repeats=1, timeout_s=120)
    assert record.status == "failed" and reason in record.reason, record.reason
    assert "\n" not in record.reason and "Traceback" not in record.reason
    assert record.reached() == reached
    if inject == "wrong":
        # However fast it came: every phase timed, the answer refused.
        assert record.total_s is not None and record.error > record.bound
    else:
        assert record.error is None
    summary = cold_start.summarise([record])
    assert summary.status == "failed" and summary.ok == 0 and summary.total_median_s is None
    assert summary.reason.startswith("repeat 1: ")


def test_a_child_that_hangs_is_killed_with_its_process_group(monkeypatch, tmp_path):
    monkeypatch.setenv(INJECT, "hang")
    cold_start.write_inputs(SETTING, tmp_path)
    record = cold_start.run_child(SETTING, tmp_path, 1, timeout_s=3)
    assert record.status == "failed"
    assert "no answer within the time limit of 3 s" in record.reason
    assert "with its process group" in record.reason
    assert record.reached() == "interpreter" and record.total_s is None
    # The grandchild the hang waits on got the SIGKILL too: it dies (or is a zombie awaiting
    # its reaper) once scheduled, which on a busy host may take a moment.
    [stdout] = tmp_path.glob("repeat1-*/stdout")
    pids = [json.loads(line[len(cold_start.PREFIX):])["pid"] for line in stdout.read_text().splitlines()
            if '"hang"' in line]
    assert len(pids) == 1
    status = Path(f"/proc/{pids[0]}/status")
    for _ in range(100):
        if not status.exists() or "\nState:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pids[0]} outlived its group's SIGKILL by 10 s")


def test_a_framework_not_installed_is_unsupported_without_a_child(monkeypatch):
    monkeypatch.delenv(REGISTRY_ENV)
    missing = [name for name, entry in load_registry().items()
               if importlib.util.find_spec(entry.package) is None]
    if not missing:
        pytest.skip("every registered framework is installed in this interpreter")
    [record] = cold_start.cold_starts(Setting(missing[0], "lenet_tiny", 1), repeats=3)
    assert record.status == "unsupported" and "is not installed in this interpreter" in record.reason
    assert cold_start.summarise([record]).status == "unsupported"


def test_an_unknown_model_is_a_failed_record():
    [record] = cold_start.cold_starts(Setting("fake", "no_such_model", 1), repeats=2)
    assert record.status == "failed" and "no_such_model" in record.reason
