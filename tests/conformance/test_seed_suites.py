"""The seed suites' quick variants, end to end with this session's framework: every case
the suite expands to leaves a row, nothing fails, and each kind of row (timed, epoch,
profile, compile cache) carries what the report reads. Every full seed suite is
checked against the quick one so that neither drifts from the other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.registry import load_registry
from suites.harness.spec import SUITES_DIR, expand, load_suite
from suites.instruments.environment import physical_cores, usable_cpus
from suites.rows.results import FINGERPRINT

ROOT = Path(__file__).resolve().parents[2]
SEED_SUITES = ("convnet-benchmarks", "cnn-benchmarks", "bahrampour2016", "li2016")


def measures_of(name: str) -> set[str]:
    suite = load_suite(SUITES_DIR / f"{name}.toml", load_registry())
    return {m for group in suite.groups for m in group.measures}


@pytest.mark.parametrize("name", SEED_SUITES)
def test_quick_variant_covers_the_kinds_of_cpu_cases_of_its_suite(name):
    full, quick = measures_of(name), measures_of(f"{name}-quick")
    assert full - {"transfer", "transfer_pinned"} <= quick, "transfers exist on GPU only"


@pytest.mark.parametrize("name", SEED_SUITES)
def test_quick_suite_runs_end_to_end(tmp_path, framework, entry, name):
    suite_name = f"{name}-quick"
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "suites", "run", suite_name, "--framework",
                             framework, "--device", "cpu", "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = out.rglob("*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]

    suite = load_suite(SUITES_DIR / f"{suite_name}.toml", load_registry())
    jobs = expand(suite, entry, "cpu", usable_cpus(), physical_cores())
    assert len(rows) == sum(len(job.measures) + job.fingerprint for job in jobs)
    assert len({row["case_id"] for row in rows}) == len(rows)

    failed = [(row["case_id"], row["reason"]) for row in rows if row["status"] == "failed"]
    assert not failed
    for row in rows:
        measure = row["measure"]
        if row["status"] != "ok":
            assert row["status"] == "unsupported" and row["reason"], row["case_id"]
            continue
        if measure == "profile":
            assert row["profile"]["total_ms"] > 0 and row["profile"]["top_kernels"]
        elif measure.startswith("epoch_"):
            assert row["timing"]["epoch_batches"] > 1
            assert row["timing"]["per_batch_median_ms"] > 0
        elif measure != FINGERPRINT:
            assert row["timing"]["median_ms"] > 0
    # What the framework declares it measures is measured, not refused.
    ok = {row["measure"] for row in rows if row["status"] == "ok"}
    wanted = {m for job in jobs for m in job.measures if m in entry.measures}
    cached = [row for row in rows if row["settings"]["compile_cache"]]
    if any(job.compile_cache for job in jobs) and entry.compile_cache_variants:
        assert all(row["status"] == "ok" for row in cached)
        assert {row["settings"]["compile_cache"] for row in cached} == {"cold", "warm"}
    elif cached:
        assert all(row["status"] == "unsupported" for row in cached)
    assert wanted <= ok


def test_a_warm_run_without_a_filled_cache_is_a_failed_row(tmp_path, framework, entry):
    if not entry.compile_cache_variants:
        pytest.skip(f"{framework} keeps no persistent compilation cache")
    suite = tmp_path / "warm.toml"
    suite.write_text(f"""
name = "warm"
[timer]
warmup = 0
min_samples = 1
budget_s = 0.001
[[cases]]
models = ["lenet_tiny"]
batches = [2]
measures = ["forward"]
devices = ["cpu"]
variants = ["{entry.compile_cache_variants[0]}"]
compile_cache = ["cold", "warm"]
""")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "suites", "run", str(suite), "--framework", framework,
               "--device", "cpu", "--out", str(out)]
    assert subprocess.run(command, cwd=ROOT, capture_output=True, timeout=900).returncode == 0
    (path,) = out.rglob("*.jsonl")
    for cache in (out / "warm").rglob("compile-cache"):
        for item in sorted(cache.rglob("*"), reverse=True):   # empty it: as if never filled
            item.unlink() if item.is_file() else item.rmdir()
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if "/cache-warm" not in line))
    assert subprocess.run([*command, "--resume"], cwd=ROOT, capture_output=True,
                          timeout=900).returncode == 0
    warm = [json.loads(line) for line in path.read_text().splitlines() if "/cache-warm" in line]
    assert warm and all(row["status"] == "failed" and "no compilation cache" in row["reason"]
                        for row in warm)
