"""``python -m suites.instruments.clock_check`` runs with this session's framework: on a CPU it times
the wall blocks and says why it measures no device clock (CUPTI needs a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_clock_check_runs_on_a_cpu(framework):
    done = subprocess.run([sys.executable, "-m", "suites.instruments.clock_check", "--framework", framework,
                           "--device", "cpu", "--model", "sae_tiny_ae2", "--batch", "2",
                           "--threads", "1", "--blocks", "2", "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "CUPTI clock not measured: a CPU run has no device clock" in done.stdout
    summary = json.loads(done.stdout.split("@@clock_check ", 1)[1])
    assert summary["wall_before_ms"] > 0 and summary["cupti_busy_ms"] == []
