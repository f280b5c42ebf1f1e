"""The matrix command's parts that need no framework: cross-suite reuse, estimates from
earlier rows, the cost log, the plan, and bad input (suites/matrix*.py, reuse.py,
estimate.py). The end-to-end runs (a real worker killed and resumed, a budget) are in
tests/matrix/test_matrix_runs.py."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.registry import load_registry
from suites.harness.reuse import ReuseIndex, Source, covers, reused_row, signature
from suites.harness.runner import device_measures
from suites.harness.spec import SUITES_DIR, Job, expand, load_suite
from suites.matrix import log as matrix_log
from suites.matrix import plan as matrix_plan
from suites.matrix.estimate import (
    CacheView,
    History,
    Machine,
    case_key,
    estimate_cases,
    load_history,
    row_costs,
)
from suites.stats.timer import TimerSettings

ROOT = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def gpu_jobs(suite: str, framework: str = "torch") -> list[Job]:
    registry = load_registry()
    return expand(load_suite(SUITES_DIR / f"{suite}.toml", registry), registry[framework],
                  "gpu", 16, 16)


# --- reuse ----------------------------------------------------------------------------------

def test_a_more_thorough_timer_covers_a_lighter_one_and_not_the_reverse():
    light = TimerSettings(warmup=2, min_samples=5, max_samples=50, rel_ci=0.02, budget_s=0.5)
    thorough = replace(light, warmup=3, min_samples=10, max_samples=200, rel_ci=0.01,
                       budget_s=2.0, max_repetitions=8)
    assert covers(thorough, light)
    assert covers(light, light)
    assert not covers(light, thorough)
    assert not covers(replace(thorough, rel_spread=0.05), light)   # a looser target


def test_compile_cache_cases_are_never_reused_and_profiles_key_on_their_iterations():
    job = Job("lenet", 64, "gpu", 16, 1, "fp32", "jit", ("forward",))
    assert signature("jax", replace(job, compile_cache="cold"), "forward") is None
    three = signature("torch", replace(job, profile_iterations=3), "profile")
    ten = signature("torch", replace(job, profile_iterations=10), "profile")
    assert three != ten
    # The timed measures ignore the profile setting.
    assert signature("torch", replace(job, profile_iterations=3), "forward") == \
        signature("torch", replace(job, profile_iterations=10), "forward")


def _index_of(suites: list[str], framework: str = "torch") -> tuple[ReuseIndex, dict]:
    index = ReuseIndex()
    for suite in suites:
        for job in gpu_jobs(suite, framework):
            for measure in (*job.measures, *(("fingerprint",) if job.fingerprint else ())):
                index.add(framework, job, measure, Source(suite, f"{suite}:{job.model}:{measure}",
                                                          job.timer, Path()))
    return index, {}


def test_float64_gpu_fp32_cases_come_from_default_gpu_and_tf32_ones_do_not():
    index, _ = _index_of(["default-gpu"])
    default_models = {j.model for j in gpu_jobs("default-gpu")}
    reusable, measured = [], []
    for job in gpu_jobs("float64-gpu"):
        for measure in (*job.measures, "fingerprint"):
            found = index.candidates("torch", job, measure, job.timer, "float64-gpu")
            (reusable if found else measured).append((job.model, job.precision, measure))
    assert reusable and all(p == "fp32" and m in default_models for m, p, _ in reusable)
    assert all(p == "tf32" or m not in default_models for m, p, _ in measured)
    # Every fp32 case of a default-gpu model (forward, gradient, fingerprint) is covered.
    expected = {(j.model, "fp32", m) for j in gpu_jobs("float64-gpu") if j.precision == "fp32"
                and j.model in default_models for m in ("forward", "gradient", "fingerprint")}
    assert set(reusable) == expected


def test_kernels_gpu_reuses_li2016_and_convnet_but_not_profiles_of_other_lengths():
    index, _ = _index_of(["convnet-benchmarks", "li2016"])
    left = [(j.model, m) for j in gpu_jobs("kernels-gpu") for m in j.measures
            if not index.candidates("torch", j, m, j.timer, "kernels-gpu")]
    # li2016 profiles Table I's layers over 10 iterations, kernels-gpu over 3.
    assert sorted(left) == sorted((f"li_conv{i}", "profile") for i in range(1, 6))


def test_a_device_time_row_is_copied_only_from_one_that_timed_every_measure_it_needs():
    # default-gpu's LSTM at batch 16 takes device time for forward and gradient;
    # bahrampour2016 times the same case over an epoch as well, so it measures its own.
    job = Job("lstm", 16, "gpu", 16, 1, "fp32", "jit", ("forward", "gradient"))
    index = ReuseIndex()
    index.add("jax", job, "device_time", Source("default-gpu", "d", job.timer, Path(),
                                                ("forward", "gradient", "transfer")))
    def found(needed):
        return index.candidates("jax", job, "device_time", job.timer, "other", needed)
    assert [s.suite for s in found(("forward", "gradient"))] == ["default-gpu"]
    assert found(("forward", "gradient", "epoch_forward", "epoch_gradient")) == []
    # What bahrampour2016 needs of that case: the epoch measures.
    timed = device_measures(gpu_jobs("bahrampour2016", "jax"))
    lstm = [case for case in timed if case[:2] == ("lstm", 16)]
    assert lstm and {"epoch_forward", "epoch_gradient"} <= set(timed[lstm[0]])


def test_a_reused_row_keeps_its_measurement_and_names_its_source():
    row = {"case_id": "a/torch/gpu/lenet/b64/forward/fp32/eager/t16", "suite": "a",
           "timing": {"median_ms": 1.0}, "env": {"host": "h"}}
    copy = reused_row(row, "b", "b/torch/gpu/lenet/b64/forward/fp32/eager/t16")
    assert copy["suite"] == "b" and copy["case_id"].startswith("b/")
    assert copy["reused_from"] == row["case_id"] and copy["timing"] == row["timing"]


# --- estimates ------------------------------------------------------------------------------

def _row(case_id: str, started_at: str, elapsed: float | None = None, gpu: str = H100,
         **extra) -> dict:
    suite, framework, device, model, batch, measure, precision, variant, threads = \
        case_id.split("/")
    row = {"case_id": case_id, "suite": suite, "model": model, "batch": int(batch[1:]),
           "measure": measure, "started_at": started_at,
           "settings": {"framework": framework, "device": device, "precision": precision,
                        "variant": variant, "threads": int(threads[1:]), "compile_cache": ""},
           "env": {"gpu_model": gpu}, **extra}
    if elapsed is not None:
        row["elapsed_s"] = elapsed
    return row


def test_row_costs_use_elapsed_seconds_and_fall_back_to_the_gaps_between_stamps():
    rows = [_row("s/torch/gpu/m/b1/forward/fp32/eager/t16", "2026-11-23T09:00:00+00:00"),
            _row("s/torch/gpu/m/b1/gradient/fp32/eager/t16", "2026-11-23T09:00:04+00:00"),
            _row("s/torch/gpu/m/b1/fingerprint/fp32/eager/t16", "2026-11-23T09:00:05+00:00", 0.7),
            _row("s/torch/gpu/n/b1/forward/fp32/eager/t16", "2026-11-23T10:00:05+00:00"),
            _row("s/torch/gpu/n/b1/gradient/fp32/eager/t16", "2026-11-23T10:00:06+00:00", 2.0,
                 reused_from="x")]
    costs = [cost for _, cost in row_costs(rows)]
    # No stamp before the first row; a gap of an hour is a pause, not a cost; a reused row
    # cost nothing.
    assert costs == [None, 4.0, 0.7, None, None]


def test_history_counts_only_this_device_model_and_matches_cases_across_thread_counts(tmp_path):
    rows = [_row("s/torch/gpu/m/b1/forward/fp32/eager/t16", "2026-11-23T09:00:00+00:00", 3.0),
            _row("s/torch/gpu/m/b1/gradient/fp32/eager/t16", "2026-11-23T09:00:05+00:00", 5.0,
                 gpu="NVIDIA H200")]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    history = load_history([tmp_path], Machine("gpu", H100, 16))
    assert history.rows == 1
    # The same case on a host with 32 cores (t32) is the same GPU case.
    seconds, how = history.case_seconds("s/torch/gpu/m/b1/forward/fp32/eager/t32",
                                        ("torch", "gpu", "m", 1, "forward", "fp32", "eager",
                                         None, ""), "gpu")
    assert (seconds, how) == (3.0, "case")
    assert case_key("s/torch/cpu/m/b1/forward/fp32/eager/t2", "cpu").endswith("/t2")


def test_a_gpu_model_without_rows_of_a_case_falls_back_on_another_models_and_says_so(
        tmp_path):
    # An H200 plan: the H200 has timed m's forward itself, m's gradient only on an H100.
    rows = [_row("s/torch/gpu/m/b1/forward/fp32/eager/t16", "2026-11-23T09:00:00+00:00", 3.0),
            _row("s/torch/gpu/m/b1/forward/fp32/eager/t16", "2026-11-24T09:00:00+00:00", 2.0,
                 gpu="NVIDIA H200"),
            _row("s/torch/gpu/m/b1/gradient/fp32/eager/t16", "2026-11-23T09:00:05+00:00", 5.0)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    history = load_history([tmp_path], Machine("gpu", "NVIDIA H200", 16))
    assert history.rows == 1 and history.fallback.models == (H100,)

    def seconds(measure):
        return history.case_seconds(f"s/torch/gpu/m/b1/{measure}/fp32/eager/t16",
                                    ("torch", "gpu", "m", 1, measure, "fp32", "eager", None, ""),
                                    "gpu")
    assert seconds("forward") == (2.0, "case")            # its own row, not the H100's
    assert seconds("gradient") == (5.0, "other device")
    assert seconds("transfer") == (None, "")
    total = estimate_cases(history, [(f"s/torch/gpu/m/b1/{m}/fp32/eager/t16",
                                      ("torch", "gpu", "m", 1, m, "fp32", "eager", None, ""))
                                     for m in ("forward", "gradient", "transfer")], "gpu")
    assert (total.seconds, total.from_other_device, total.unknown) == (7.0, 1, 1)
    assert "1 from another GPU model" in total.text()
    # A CPU plan never borrows another machine's rows.
    assert load_history([tmp_path], Machine("cpu", "AMD EPYC", 2)).fallback is None


def test_a_cpu_that_knows_its_vector_extension_counts_only_rows_of_the_same():
    """One model name, "AMD EPYC", has run the CPU suites with and without AVX-512, 2 to 3
    times apart: a CPU that knows its extension takes no row of another, nor one that did
    not record its own; named by hand (--device-name), the model and cores decide."""
    env = {"cpu_model": "AMD EPYC", "logical_cores": 2}
    avx512 = Machine("cpu", "AMD EPYC", 2, "AVX-512")
    assert avx512.matches({**env, "cpu_isa": "AVX-512"}, "cpu")
    assert not avx512.matches({**env, "cpu_isa": "AVX2"}, "cpu")
    assert not avx512.matches(env, "cpu")
    assert not avx512.matches({**env, "cpu_isa": "AVX-512", "logical_cores": 4}, "cpu")
    named = Machine("cpu", "AMD EPYC", 2)
    assert named.matches(env, "cpu") and named.matches({**env, "cpu_isa": "AVX2"}, "cpu")
    assert (avx512.label, named.label) == ("AMD EPYC (AVX-512)", "AMD EPYC")


def test_a_framework_that_keeps_its_jobs_is_estimated_from_device_rows_of_kept_jobs(tmp_path):
    # An H100 plan: the H100's device_time row of the case rebuilt the job (8 s); an
    # H200's was measured on a kept job (0.3 s), as the run will measure it.
    from suites.harness.device_pass import method
    case = "s/tf/gpu/m/b1/device_time/fp32/graph/t16"
    timer = TimerSettings()
    rows = [_row(case, "2026-11-25T09:00:00+00:00", 8.0,
                 device_times={"method": method(timer, after_wall=True)}),
            _row(case, "2026-11-27T09:00:00+00:00", 0.3, gpu="NVIDIA H200",
                 device_times={"method": method(timer, after_wall=True, kept=True)})]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    history = load_history([tmp_path], Machine("gpu", H100, 16))
    computation = ("tf", "gpu", "m", 1, "device_time", "fp32", "graph", None, "")
    assert history.case_seconds(case, computation, "gpu", kept=True) == (0.3, "other device")
    assert history.case_seconds(case, computation, "gpu") == (8.0, "case")
    # The H200's own plan: its kept row is its own case.
    h200 = load_history([tmp_path], Machine("gpu", "NVIDIA H200", 16))
    assert h200.case_seconds(case, computation, "gpu", kept=True) == (0.3, "case")
    assert matrix_plan.keeps_jobs("tf", "gpu") and matrix_plan.keeps_jobs("ort", "gpu")
    assert not matrix_plan.keeps_jobs("torch", "gpu") and not matrix_plan.keeps_jobs("tf", "cpu")


def test_another_suites_row_estimates_a_case_and_the_plan_says_so():
    history = History({}, {("torch", "gpu", "m", 1, "forward", "fp32", "eager", None, ""): 2.5}, 1)
    seconds, how = history.case_seconds("other/torch/gpu/m/b1/forward/fp32/eager/t16",
                                        ("torch", "gpu", "m", 1, "forward", "fp32", "eager",
                                         None, ""), "gpu")
    assert (seconds, how) == (2.5, "other suite")


def test_a_host_that_kept_its_compilation_cache_is_estimated_from_warm_rows(tmp_path):
    # JAX's default-gpu on one H100: 334 s cold, 180 s re-run with the cache kept.
    def row(host, when, elapsed, hits, misses, compile_s):
        return _row("s/jax/gpu/m/b1/forward/fp32/jit/t16", when, elapsed,
                    timing={"compile_events": {"persistent_cache_hits": hits,
                                               "persistent_cache_misses": misses,
                                               "compile_s": compile_s}}) | \
            {"env": {"gpu_model": H100, "host": host}}
    (tmp_path / "r.jsonl").write_text(json.dumps(row("a", "2026-11-23T09:00:00+00:00",
                                                     10.0, 0, 1, 7.0)) + "\n")
    history = load_history([tmp_path], Machine("gpu", H100, 16))
    computation = ("jax", "gpu", "m", 1, "forward", "fp32", "jit", None, "")

    def seconds(cache):
        return history.case_seconds("s/jax/gpu/m/b1/forward/fp32/jit/t16", computation,
                                    "gpu", cache)[0]
    # Cold: another host, or this one with an empty cache folder; no view: any row.
    assert seconds(CacheView("b", True)) == seconds(CacheView("a", False)) == 10.0
    assert seconds(None) == 10.0
    # Warm with no warm row yet: the cold cost without its compilation.
    assert seconds(CacheView("a", True)) == 3.0
    with (tmp_path / "r.jsonl").open("a") as out:
        out.write(json.dumps(row("a", "2026-11-23T10:00:00+00:00", 4.5, 1, 0, 0.0)) + "\n")
    history = load_history([tmp_path], Machine("gpu", H100, 16))
    assert seconds(CacheView("a", True)) == 4.5
    assert seconds(CacheView("b", True)) == 10.0    # the newest cold row, not the warm one
    # Host b with the cache folder that host a's runs filled (carried, or on a volume).
    assert seconds(CacheView("b", True, frozenset({"a"}))) == 4.5
    assert seconds(CacheView("b", False, frozenset({"a"}))) == 10.0   # the folder is empty
    assert seconds(CacheView("b", True, frozenset({"c"}))) == 10.0


def test_a_compile_cache_jobs_cost_is_its_rows_whatever_the_hosts_cache_holds(tmp_path):
    # bahrampour2016's cold-cache first call compiles into a folder of its own, empty each
    # time: a host whose own cache is warm does not make it cheaper.
    case_id = "s/jax/gpu/m/b1/forward/fp32/jit/t16"
    row = _row(case_id, "2026-11-23T09:00:00+00:00", 10.0,
               timing={"compile_events": {"persistent_cache_hits": 0,
                                          "persistent_cache_misses": 1, "compile_s": 7.0}})
    row["case_id"] += "/cache-cold"
    row["settings"]["compile_cache"] = "cold"
    row["env"]["host"] = "a"
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    history = load_history([tmp_path], Machine("gpu", H100, 16))
    computation = ("jax", "gpu", "m", 1, "forward", "fp32", "jit", None, "cold")
    seconds, how = history.case_seconds(row["case_id"], computation, "gpu",
                                        CacheView("a", True))
    assert (seconds, how) == (10.0, "case")


def test_the_cache_view_reads_the_folders_a_framework_keeps_its_cache_in(tmp_path):
    from suites.matrix.run import cache_view
    root = str(tmp_path)
    env = {"JAX_COMPILATION_CACHE_DIR": f"{root}/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS":
           "0", "DLBENCH_PERSISTENT_CACHE": root}
    assert cache_view(env, "h", "jax") == CacheView("h", False)
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "entry").write_bytes(b"x")
    assert cache_view(env, "h", "jax") == CacheView("h", True)
    tf = {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={root}/xla",
          "DLBENCH_PERSISTENT_CACHE": root}
    assert cache_view(tf, "h", "tf") == CacheView("h", False)
    assert cache_view({}, "h", "jax") is None


def test_a_cache_folder_records_the_hosts_whose_runs_wrote_into_it(tmp_path):
    from suites.matrix.compile_cache import HOSTS_FILE, filled_by, record_host
    from suites.matrix.run import cache_view
    root = tmp_path / "gpu"
    env = {"JAX_COMPILATION_CACHE_DIR": f"{root}/jax", "DLBENCH_PERSISTENT_CACHE": str(root)}
    assert filled_by(root, "jax") == frozenset()
    record_host(env, "a", "jax")
    record_host(env, "a", "jax")
    record_host(env, "b", "jax")
    record_host(env, "d", "torch")      # another framework's processes: not JAX's programs
    assert (root / HOSTS_FILE.format(framework="jax")).read_text() == "a\nb\n"
    (root / "jax").mkdir()
    (root / "jax" / "entry").write_bytes(b"x")
    # The folder carried to host c: it holds what a's and b's runs of JAX compiled.
    assert cache_view(env, "c", "jax") == CacheView("c", True, frozenset({"a", "b"}))
    record_host({}, "e", "jax")                          # no cache: nothing to record
    (tmp_path / "file").write_text("")
    unwritable = {"DLBENCH_PERSISTENT_CACHE": str(tmp_path / "file" / "gpu")}
    record_host(unwritable, "e", "jax")
    assert filled_by(tmp_path / "file" / "gpu", "jax") == frozenset()


# --- the cost log ---------------------------------------------------------------------------

def _item(suite: str, framework: str, wall: float, starts: int = 1, start_s: float = 4.0,
          phase: str = "wall") -> dict:
    return matrix_log.ItemCost(suite, framework, "gpu", H100, "c", "t", wall, starts, start_s,
                               10, 0, 1.0, 0.0, 0.0, 0.5, "done", phase=phase).record()


def test_minutes_table_adds_invocations_and_passes_and_the_truth(tmp_path):
    log = tmp_path / "costs-gpu.ndjson"
    # default-gpu's torch: a wall pass, its device pass, and a second invocation's wall pass.
    for record in (_item("default-gpu", "torch", 50.0), _item("default-gpu", "torch", 10.0,
                                                               phase="device"),
                   _item("default-gpu", "torch", 30.0),
                   _item("default-gpu", "jax", 120.0), _item("li2016", "jax", 60.0),
                   _item("li2016", "jax", 0.5, starts=0, start_s=0.0, phase="device"),
                   {"kind": "truth", "suite": "default-gpu", "pairs": 3, "gflop": 100.0,
                    "seconds": 30.0, "device_name": H100}):
        matrix_log.append(log, record)
    records = matrix_log.load([tmp_path])
    header, rows = matrix_log.minutes_table(records)
    assert header == ["suite", "torch", "jax", "all"]
    assert rows[0] == ["default-gpu", "1.5", "2.0", "3.5"]
    assert rows[1] == ["li2016", "—", "1.0", "1.0"]
    assert rows[-1] == ["total", "1.5", "3.0", "5.0"]
    # The mean start of a worker: a pass that started none does not dilute it.
    assert matrix_log.worker_start_s(records, "torch", H100) == 4.0
    assert matrix_log.worker_start_s(records, "jax", H100) == 4.0
    assert matrix_log.truth_rate(records, H100) == pytest.approx(100 / 30)


def _written_row(measure: str, written: str, elapsed: float, first_call_ms: float = 0.0) -> dict:
    return {"case_id": f"li2016/jax/gpu/lenet/b1/{measure}/{written}", "measure": measure,
            "started_at": written, "elapsed_s": elapsed,
            "timing": {"first_call_ms": first_call_ms}, "env": {"dlbench_commit": "abc"}}


def test_rows_no_logged_invocation_covers_are_logged_once_with_their_own_span():
    logged = {**_item("li2016", "jax", 60.0), "started_at": "2026-11-27T10:00:00+00:00"}
    covered = [_written_row("forward", "2026-11-27T10:00:30+00:00", 5.0),
               _written_row("gradient", "2026-11-27T10:01:00+00:00", 5.0)]   # the span's last second
    # An invocation killed at 10:05:00: its rows, the first built and compiled in 20 s.
    killed = [_written_row("forward", "2026-11-27T10:02:20+00:00", 20.0, first_call_ms=9000.0),
              _written_row("gradient", "2026-11-27T10:02:50+00:00", 30.0, first_call_ms=3000.0),
              _written_row("fingerprint", "2026-11-27T10:03:10+00:00", 20.0)]
    record = matrix_log.unlogged_item([logged], covered + killed, "li2016", "jax", "gpu",
                                      H100, "wall")
    assert record is not None
    assert (record.started_at, record.wall_s) == ("2026-11-27T10:02:00+00:00", 70.0)
    assert (record.measured, record.stopped, record.commit) == (3, "unlogged", "abc")
    assert (record.first_calls_s, record.fingerprint_s) == (12.0, 20.0)
    # Once logged, the same rows are covered: a later invocation logs nothing more.
    assert matrix_log.unlogged_item([logged, record.record()], covered + killed, "li2016",
                                    "jax", "gpu", H100, "wall") is None
    # Another pass's or suite's records cover none of them.
    assert matrix_log.unlogged_item([logged], covered, "li2016", "jax", "gpu", H100,
                                    "device").measured == 2
    assert matrix_log.unlogged_item([logged], covered, "li2016", "torch", "gpu", H100,
                                    "wall").measured == 2


# --- the plan -------------------------------------------------------------------------------

@pytest.fixture
def every_framework_installed(monkeypatch):
    monkeypatch.setattr(matrix_plan, "availability",
                        lambda frameworks, device, pythons: dict.fromkeys(frameworks, ""))


def test_plan_counts_reused_cases_and_estimates_the_rest(tmp_path, every_framework_installed):
    history = History({case_key("default-gpu/torch/gpu/lenet/b64/forward/fp32/eager/t16",
                                "gpu"): 2.0}, {}, 1)
    plan = matrix_plan.make_plan("gpu", ["torch", "jax"], ["default-gpu", "float64-gpu"],
                                 tmp_path, 0, {"torch": sys.executable, "jax": sys.executable},
                                 history, Machine("gpu", H100, 16), True, {}, None)
    items = {(i.suite, i.framework, i.phase): i for i in plan.items}
    assert set(items) == {(s, f, p) for s in ("default-gpu", "float64-gpu")
                          for f in ("torch", "jax") for p in ("wall", "device")}
    default, device = items[("default-gpu", "torch", "wall")], \
        items[("default-gpu", "torch", "device")]
    f64 = [items[("float64-gpu", "torch", phase)] for phase in ("wall", "device")]
    # 88 measurements and fingerprints in the wall pass, and in the device pass one
    # device_time row for each of the 20 jobs; float64-gpu: 126 and 42.
    assert default.done == 0 and not default.reusable and len(default.to_run) == 88
    assert [c.measure for c in device.to_run] == ["device_time"] * 20
    assert all(len(i.reusable) > 0 for i in f64)
    assert sum(len(i.reusable) + len(i.to_run) for i in f64) == 168
    assert default.estimate.seconds == 2.0 and default.estimate.unknown == 87
    # Without reuse every case is measured.
    plain = matrix_plan.make_plan("gpu", ["torch"], ["default-gpu", "float64-gpu"], tmp_path, 0,
                                  {"torch": sys.executable}, history, Machine("gpu", H100, 16),
                                  False, {}, None)
    assert all(not i.reusable for i in plain.items)
    assert "2 s (87 without estimate)" in "\n".join(matrix_plan.describe(plan))


def test_a_framework_the_interpreter_lacks_is_listed_as_not_run(tmp_path):
    plan = matrix_plan.make_plan("cpu", ["torch"], ["default-cpu"], tmp_path, 0,
                                 {"torch": sys.executable}, History({}, {}, 0),
                                 Machine("cpu", "x", 2), True, {}, None)
    missing = matrix_plan.missing_packages(sys.executable, ["torch"])["torch"]
    text = "\n".join(matrix_plan.describe(plan))
    assert ("not run: torch" in text) == missing


def test_plan_ordering_is_the_first_suite_for_every_framework_then_framework_by_framework(
        tmp_path, every_framework_installed, monkeypatch):
    suites = ["kernels-gpu", "default-gpu", "cnn-benchmarks"]
    plan = matrix_plan.make_plan("gpu", ["jax", "torch"], suites,
                                 tmp_path, 0, {"jax": "p", "torch": "p"}, History({}, {}, 0),
                                 Machine("gpu", H100, 16), True, {}, None)
    # The first suite given for every framework, then each framework's others; each
    # framework's wall pass over a stage's suites before its device pass.
    assert [(i.framework, i.suite, i.phase) for i in plan.items] == [
        (framework, suite, phase) for stage in (suites[:1], suites[1:])
        for framework in ("jax", "torch") for phase in ("wall", "device") for suite in stage]
    # Each framework's pooled worker starts once a stage: its wall worker, which then
    # serves the device pass.
    assert plan.worker_starts() == ["jax", "torch", "jax", "torch"]
    # One framework: one stage, framework by framework as before.
    alone = matrix_plan.make_plan("gpu", ["jax"], suites, tmp_path, 0, {"jax": "p"},
                                  History({}, {}, 0), Machine("gpu", H100, 16), True, {}, None)
    assert [(i.suite, i.phase) for i in alone.items] == [
        (suite, phase) for phase in ("wall", "device") for suite in suites]
    assert alone.worker_starts() == ["jax"]
    # A framework whose registry entry keeps its device phase apart (own_device_process)
    # starts a second worker for its device pass.
    def tf_plan():
        return matrix_plan.make_plan("gpu", ["tf"], ["kernels-gpu", "default-gpu"], tmp_path,
                                     0, {"tf": "p"}, History({}, {}, 0),
                                     Machine("gpu", H100, 16), True, {}, None)
    assert tf_plan().worker_starts() == ["tf"]
    shared_entry = matrix_plan.framework_entry

    def entry_apart(name, device):
        return replace(shared_entry(name, device), own_device_process=True)
    monkeypatch.setattr(matrix_plan, "framework_entry", entry_apart)
    assert tf_plan().worker_starts() == ["tf", "tf"]
    cpu = matrix_plan.make_plan("cpu", ["jax", "torch"], ["default-cpu", "li2016-quick"],
                                tmp_path, 0, {"jax": "p", "torch": "p"}, History({}, {}, 0),
                                Machine("cpu", "x", 2), True, {}, None)
    assert [(i.framework, i.suite, i.phase) for i in cpu.items] == [
        (framework, suite, "all") for suite in ("default-cpu", "li2016-quick")
        for framework in ("jax", "torch")]


def test_planned_worker_starts_count_a_gpu_worker_again_after_a_compile_cache_process(
        tmp_path, every_framework_installed):
    """bahrampour2016's compile-cache jobs run in processes of their own, before which the
    pool closes the idle wall worker: li2016's wall pass starts another."""
    history = History({case_key("default-gpu/torch/gpu/lenet/b64/forward/fp32/eager/t16",
                                "gpu"): 2.0}, {}, 1)
    plan = matrix_plan.make_plan("gpu", ["torch"], ["default-gpu", "bahrampour2016", "li2016"],
                                 tmp_path, 0, {"torch": "p"}, history,
                                 Machine("gpu", H100, 16), False, {"torch": 10.0}, None)
    cache_jobs = sum(1 for job in gpu_jobs("bahrampour2016") if job.compile_cache)
    assert cache_jobs > 0
    # The wall worker, bahrampour2016's compile-cache processes, the wall worker again,
    # which goes on with the device pass.
    assert plan.worker_starts() == ["torch"] * (cache_jobs + 2)
    assert plan.seconds() == 2.0 + 10.0 * (cache_jobs + 2)
    assert f"{cache_jobs + 2} worker starts measured" in "\n".join(matrix_plan.describe(plan))


def test_tensorflow_tf32_jobs_plan_workers_of_their_own(tmp_path, every_framework_installed):
    """TensorFlow's TF32 jobs run in processes of their own (adapters/registry.toml says
    why): practice-gpu's wall pass starts a worker for the other jobs and one for the TF32
    job, and so does the device pass; PyTorch's one worker serves every precision."""
    def starts(framework):
        return matrix_plan.make_plan("gpu", [framework], ["practice-gpu"], tmp_path, 0,
                                     {framework: "p"}, History({}, {}, 0),
                                     Machine("gpu", H100, 16), False, {}, None).worker_starts()
    assert starts("tf") == ["tf"] * 4
    assert starts("torch") == ["torch"]
    from suites.harness.runner import framework_entry, process_group
    assert process_group(framework_entry("tf", "gpu"), "tf32") == "tf32"
    assert process_group(framework_entry("tf", "gpu"), "fp32") == ""
    assert process_group(framework_entry("torch", "gpu"), "tf32") == ""


def test_a_compile_cache_job_the_framework_cannot_run_plans_no_process(
        tmp_path, every_framework_installed):
    """ONNX Runtime keeps no compilation cache: the runner records bahrampour2016's
    compile-cache jobs unsupported without starting a process, so the plan counts none."""
    plan = matrix_plan.make_plan("gpu", ["ort"], ["bahrampour2016"], tmp_path, 0,
                                 {"ort": "p"}, History({}, {}, 0), Machine("gpu", H100, 16),
                                 False, {"ort": 10.0}, None)
    assert any(c.job.compile_cache for item in plan.items for c in item.to_run)
    assert plan.worker_starts() == ["ort"]
    # The runner's rule, which the plan shares (suites/harness/runner.py own_process).
    from suites.harness.runner import framework_entry, own_process
    job = next(c.job for item in plan.items for c in item.to_run if c.job.compile_cache)
    assert not own_process(framework_entry("ort", "gpu"), job)
    torch_job = replace(job, variant="compile")
    assert own_process(framework_entry("torch", "gpu"), torch_job)
    assert not own_process(framework_entry("torch", "gpu"), replace(torch_job, compile_cache=""))


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--frameworks", "pytorch"], "unknown framework 'pytorch' (did you mean 'torch'?)"),
    (["--suites", "defualt-cpu"], "unknown suite 'defualt-cpu' (did you mean 'default-cpu'?)"),
    (["--suites", "serving-cpu"], "serving-cpu is a serving suite (MLPerf LoadGen), which the "
                                  "matrix does not schedule: run it once per framework, e.g. "
                                  "nox -s torch_cpu -- serving-cpu"),
    (["--device", "gpu", "--suites", "default-gpu", "scaling-quick"],
     "scaling-quick is a data-parallel scaling suite"),
    (["--python", "torch"], "--python takes FRAMEWORK=INTERPRETER"),
    (["--python", "torch=/no/such/python"], "no interpreter at /no/such/python"),
    (["--budget", "0"], "--budget must be a positive number of minutes"),
    (["--case-timeout", "-1"], "'case_timeout_s' must be a positive number"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "suites", "matrix", "--plan", "--out",
                           str(tmp_path), *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_plan_prints_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "suites", "matrix", "--device", "gpu", "--plan",
                           "--device-name", H100, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "estimated:" in done.stderr
    assert "default-gpu" in done.stderr or "not run: torch" in done.stderr
    assert not out.exists()


def test_the_float64_truth_of_every_suite_is_one_pool_before_any_framework(tmp_path, monkeypatch):
    # One pool for all suites (suites/truth/pool.py): a pool per suite waited for each
    # suite's largest job while the CPUs idled.
    import suites.harness.runner as runner_module
    import suites.matrix.run as matrix_module
    from suites.matrix.run import Matrix, MatrixRequest
    from tests.fake_framework import REGISTRY
    from tests.tiny_suites import cases, tiny_suite

    monkeypatch.setenv("DLBENCH_REGISTRY", str(REGISTRY))
    monkeypatch.setenv("DLBENCH_TRUTH_CACHE", str(tmp_path / "truth"))
    monkeypatch.delenv("DLBENCH_TRUTH", raising=False)
    calls: list[tuple[str, list]] = []

    def recorder(name):
        def fill(pairs, seed, say, cpus=None):
            calls.append((name, sorted(pairs)))
            return {}
        return fill
    monkeypatch.setattr(matrix_module, "fill_cache", recorder("matrix"))
    monkeypatch.setattr(runner_module, "fill_cache", recorder("runner"))
    paths = []
    for name, models in (("truth-a", ["lenet_tiny"]), ("truth-b", ["conv_tiny", "lenet_tiny"])):
        paths.append(tmp_path / f"{name}.toml")
        paths[-1].write_text(tiny_suite(name, cases(models, [2])))
    request = MatrixRequest("cpu", ("fake", "fake2"), tuple(map(str, paths)), tmp_path / "out",
                            pythons=(f"fake={sys.executable}", f"fake2={sys.executable}"),
                            reuse=False, compile_cache="off", history=(tmp_path / "out",))
    assert Matrix(request).run() == 0
    assert calls[0] == ("matrix", [("conv_tiny", 2), ("lenet_tiny", 2)])
    assert [name for name, _ in calls].count("matrix") == 1
    log = next((tmp_path / "out").glob("matrix/*/costs-cpu.ndjson"))
    truth = [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "truth"]
    assert len(truth) == 1 and truth[0]["suite"] == "truth-a truth-b" and truth[0]["pairs"] == 2
