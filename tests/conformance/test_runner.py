"""The runner end to end with this session's framework: rows, failures as data, Ctrl-C
and --resume. Tiny models and small time budgets keep it quick; nothing here asserts a
duration."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from suites.rows.results import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
name = "{name}"
[timer]
warmup = 1
min_samples = 3
budget_s = 0.2
[[cases]]
models = {models}
batches = {batches}
measures = ["forward", "gradient"]
devices = ["cpu"]
threads = [1]
"""


def suite_file(tmp_path: Path, name: str, models: list[str], batches: list[int]) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SUITE.format(name=name, models=json.dumps(models), batches=batches))
    return path


def rows_of(out: Path) -> list[dict]:
    files = list(out.rglob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def run(suite: Path, framework: str, out: Path, *extra: str, **kwargs):
    return subprocess.run([sys.executable, "-m", "suites", "run", str(suite), "--framework",
                           framework, "--out", str(out), *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, **kwargs)


def test_rows_record_settings_environment_and_statistics(tmp_path, framework, entry):
    suite = suite_file(tmp_path, "rows", ["lenet_tiny"], [4])
    result = run(suite, framework, tmp_path / "out",
                 env={**os.environ, "DLBENCH_TRUTH_CACHE": str(tmp_path / "truth")})
    assert result.returncode == 0, result.stderr
    rows = {row["measure"]: row for row in rows_of(tmp_path / "out")}
    assert set(rows) == {"forward", "gradient", "fingerprint"}
    forward = rows["forward"]
    assert forward["schema"] == SCHEMA_VERSION and forward["status"] == "ok"
    assert forward["settings"]["framework"] == framework
    assert forward["settings"]["threads"] == 1
    assert forward["settings"]["variant"] == entry.variants[0]
    assert forward["settings"]["precision"] == "fp32"
    timing = forward["timing"]
    assert len(timing["samples_ms"]) == timing["samples"] >= 3
    assert timing["ci_low_ms"] <= timing["median_ms"] <= timing["ci_high_ms"]
    assert timing["first_call_ms"] > 0
    # Independent repetitions behind the median (suites/stats/repetitions.py), and the CPU run's
    # reasons for having no GPU state and no separate device time.
    assert timing["repetitions"] == len(timing["repetition_medians_ms"]) >= 3
    assert math.isclose(timing["median_ms"], statistics.median(timing["repetition_medians_ms"]))
    assert timing["gpu_sm_clock_mhz_median"] is None and timing["gpu_state_reason"]
    assert timing["device_median_ms"] is None and timing["device_time_reason"]
    assert forward["memory"]["peak_bytes"] > 0
    assert forward["model_info"]["params"] > 0
    for key in ("host", "cpu_model", "physical_cores", "python", "framework_version",
                "dlbench_commit"):
        assert forward["env"][key], key
    assert rows["fingerprint"]["fingerprint"]["output_head"]
    # Its errors against the float64 truth, which the runner computed once, before the
    # worker started, and cached (models/truth.py).
    vs_f64 = rows["fingerprint"]["fingerprint"]["vs_f64"]
    assert 0 <= vs_f64["output"] < 1e-4 and vs_f64["reference_cached"] is True
    assert "float64 reference for lenet_tiny at batch 4" in result.stdout + result.stderr
    assert len(list((tmp_path / "truth").glob("*.npz"))) == 1
    assert ("grad_norms" in vs_f64) == ("gradient" in entry.measures)
    if "gradient" not in entry.measures:
        assert rows["gradient"]["status"] == "unsupported" and rows["gradient"]["reason"]


def test_out_of_memory_is_a_row_and_the_suite_goes_on(tmp_path, framework):
    suite = suite_file(tmp_path, "oom", ["sae_tiny_se"], [4])
    # 2**20 images of 3×224×224 fp32 is 630 GB: no machine here can allocate the batch.
    suite.write_text(suite.read_text() + """
[[cases]]
models = ["resnet50"]
batches = [1048576]
measures = ["forward"]
devices = ["cpu"]
threads = [1]

[[cases]]
models = ["lenet_tiny"]
batches = [2]
measures = ["forward"]
devices = ["cpu"]
threads = [1]
""")
    result = run(suite, framework, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    by_case = {(r["model"], r["batch"], r["measure"]): r for r in rows_of(tmp_path / "out")}
    oom = by_case[("resnet50", 1048576, "forward")]
    assert oom["status"] == "oom" and oom["reason"]
    assert by_case[("lenet_tiny", 2, "forward")]["status"] == "ok"  # the suite went on


def test_ctrl_c_keeps_finished_rows_and_resume_completes(tmp_path, framework):
    # Enough cases that Ctrl-C after the second row leaves most undone; the quickest to
    # build (under JAX each network's compile is the case's cost).
    models = ["lenet_tiny", "sae_tiny_se", "alexnet_tiny", "conv_tiny", "lstm_tiny"]
    suite = suite_file(tmp_path, "interrupt", models, [4])
    out = tmp_path / "out"
    # SIGINT at its default, as under a terminal: a shell's background job (a CI script
    # started with `&`) inherits it ignored, and Python then keeps it ignored.
    proc = subprocess.Popen([sys.executable, "-m", "suites", "run", str(suite), "--framework",
                             framework, "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(out.rglob("*.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the suite finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to the group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr
    partial = rows_of(out)  # every line is whole JSON
    expected = len(models) * 3
    assert 2 <= len(partial) < expected
    result = run(suite, framework, out, "--resume")
    assert result.returncode == 0, result.stderr
    rows = rows_of(out)
    ids = [row["case_id"] for row in rows]
    assert len(ids) == len(set(ids)) == expected
    assert rows[: len(partial)] == partial  # nothing finished was rewritten
