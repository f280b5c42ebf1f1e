"""The process Nsight Compute profiles for a ``counters`` row (``python -m suites.instruments.counted``)
runs with this session's framework: it builds the job as the worker does, warms up, and
opens and closes the measured NVTX range once. A stand-in ``nvtx`` module records the
range (the real one is a GPU-session dependency); the GPU itself is not needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVTX = """
import os
def start_range(message=None, domain=None, **kw):
    with open(os.environ["NVTX_RECORD"], "a") as handle:
        handle.write(f"start {domain}@{message}\\n")
    return (1, 0)
def end_range(range_id):
    with open(os.environ["NVTX_RECORD"], "a") as handle:
        handle.write(f"end {range_id[0]}\\n")
"""


def test_the_counted_child_runs_inside_one_range(tmp_path, framework, entry):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "nvtx.py").write_text(FAKE_NVTX)
    job = tmp_path / "job.json"
    measure = "gradient" if "gradient" in entry.measures else "forward"
    job.write_text(json.dumps({
        "framework": framework, "device": "cpu", "threads": 1, "interop_threads": 1,
        "seed": 0, "model": "conv:c=3,i=8,f=4,k=3,s=1", "batch": 2, "precision": "fp32",
        "variant": "default", "measure": measure, "iterations": 2}))
    record = tmp_path / "nvtx.txt"
    env = {**os.environ, "NVTX_RECORD": str(record),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "suites.instruments.counted", str(job)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert record.read_text().splitlines() == ["start dlbench@measured", "end 1"]
