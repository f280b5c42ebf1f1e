"""``python -m suites run`` of a serving suite (suites/__main__.py run_serving): dispatched to
the serving harness with the stand-in framework (tests/fake_framework.py, whose ``serve``
answers with the float64 reference in float32) under the real LoadGen, its rows and logs
where every suite's go and where the report reads them; bad input is one line and exit 2.
One SingleStream run of LoadGen's minimum of 100 ms and 64 queries (the fewest LoadGen's
early stopping accepts for a p90, 5.0.18): under a second."""

from __future__ import annotations

import json
import os
import re

import pytest

from reports.pipeline.load import load
from reports.pipeline.tidy import tidy as tidy_rows
from reports.sections.serving import serve_rows, serving_tables
from suites.__main__ import is_serving_suite, main
from suites.instruments.environment import host_id
from tests.fake_framework import REGISTRY

SUITE = """name = "serving-fake"
description = "one quick SingleStream case and an unknown scenario"
[[cases]]
models = ["lenet_tiny"]
scenarios = ["SingleStream", "Bursty"]
[cases.serving]
samples = 8
min_duration_ms = 100
max_duration_ms = 5000
min_query_count = 64
warmup = 1

[[cold_start]]
models = ["lenet_tiny"]
repeats = 1
"""


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("DLBENCH_REGISTRY", str(REGISTRY))


def test_a_serving_suite_runs_into_the_results_folder_the_report_reads(tmp_path, fake, capsys):
    suite = tmp_path / "serving-fake.toml"
    suite.write_text(SUITE)
    assert is_serving_suite(str(suite)) and is_serving_suite("serving-cpu")
    assert not is_serving_suite("default-cpu")
    out = tmp_path / "results"
    assert main(["run", str(suite), "--framework", "fake", "--out", str(out)]) == 0
    folder = out / "serving-fake" / host_id()
    rows = [json.loads(line) for line in (folder / "fake_cpu.jsonl").read_text().splitlines()]
    assert [(r["scenario"], r["status"]) for r in rows] == [("SingleStream", "ok"),
                                                           ("Bursty", "failed"),
                                                           ("ColdStart", "ok")]
    served = rows[0]["serving"]
    assert served["result"]["valid"] and served["check"]["passed"]
    # The host's probes, taken before the run (suites/instruments/host_probe.py).
    assert served["host_probe"]["core_ms"] > 0 and served["host_probe"]["readings"] == 5
    # The worker was pinned to the suite's 2 threads' CPUs before the framework started.
    assert rows[0]["env"]["cpu_affinity"] == sorted(os.sched_getaffinity(0))[:2]
    assert "unknown scenario 'Bursty'" in rows[1]["reason"]
    logs = folder / "loadgen" / "fake"
    assert any(p.name == "mlperf_log_summary.txt" for p in logs.rglob("*"))
    assert served["logs"].startswith(str(logs))
    cold = rows[2]["serving"]
    assert cold["cold_start"]["repeats"] == cold["cold_start"]["ok"] == 1
    phases = cold["repeats"][0]["phases_s"]
    assert list(phases) == ["interpreter", "imported", "adapter", "weights", "prepared", "answered"]
    assert all(seconds >= 0 for seconds in phases.values())
    assert cold["repeats"][0]["error"] <= cold["repeats"][0]["bound"]
    loaded = load([out])
    assert sorted(raw.data["scenario"] for raw in loaded.rows) == ["Bursty", "ColdStart",
                                                                  "SingleStream"]
    tables = serving_tables(serve_rows(tidy_rows(load([out])).frame))
    assert [t.title.split(" — ")[0] for t in tables] == [
        "lenet_tiny", "lenet_tiny", "Cold start: a fresh process to its first checked answer"]
    [[framework, model, *_, status]] = [[c.text for c in cells] for cells in tables[-1].rows]
    assert (framework, model, status) == ("fake", "lenet_tiny", "ok")
    # Resumed, every case and the cold start are already recorded: nothing runs again
    # (their ids known before they run, the default variant resolved as the worker does).
    capsys.readouterr()
    assert main(["run", str(suite), "--framework", "fake", "--out", str(out), "--resume"]) == 0
    assert "resuming: 2 cases already recorded" in capsys.readouterr().out
    assert len((folder / "fake_cpu.jsonl").read_text().splitlines()) == 3


def test_models_cuts_a_suite_to_the_models_named():
    from suites.serving.__main__ import SuiteError, load, only_models
    suite = load("serving-gpu")
    cut = only_models(suite, ["resnet50"])
    assert {m for g in [*cut["groups"], *cut["cold_start"]] for m in g.models} == {"resnet50"}
    assert len(cut["cold_start"]) == 1 and only_models(suite, []) is suite
    with pytest.raises(SuiteError, match=r"--models: suite serving-gpu serves no vgg16 \(it "
                                         r"serves bert_base_qa:s=384, gpt2, resnet50\)"):
        only_models(suite, ["resnet50", "vgg16"])


def test_bad_input_is_one_line_and_exit_2(tmp_path, fake, capsys, monkeypatch):
    assert main(["run", "serving-cpu", "--framework", "nosuch"]) == 2
    assert main(["run", "serving-cpu", "--framework", "fake", "--rounds", "2"]) == 2
    cpu_only = tmp_path / "registry.toml"
    cpu_only.write_text(REGISTRY.read_text().replace('devices = ["cpu", "gpu"]', 'devices = ["cpu"]'))
    monkeypatch.setenv("DLBENCH_REGISTRY", str(cpu_only))
    assert main(["run", "serving-cpu", "--framework", "fake", "--device", "gpu"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text(SUITE.replace('"lenet_tiny"', '"lenet_tinyy"'))
    assert main(["validate", str(bad)]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 4 and all(line.startswith("error: ") for line in errors)
    assert "unknown framework 'nosuch'" in errors[0]
    assert "takes no --rounds" in errors[1]
    assert "fake has no 'gpu' device" in errors[2]
    assert "unknown model 'lenet_tinyy'" in errors[3] and "unknown scenario 'Bursty'" in errors[3]
    assert not (tmp_path / "results").exists()


def test_validate_knows_the_bundled_serving_suite(capsys):
    assert main(["validate", "serving-cpu"]) == 0
    assert "serving-cpu: ok, serving suite serving-cpu" in capsys.readouterr().out


def test_a_generation_group_runs_as_one_generate_row_per_model(tmp_path, fake, capsys):
    suite = tmp_path / "generate-fake.toml"
    suite.write_text('name = "generate-fake"\n[[cases]]\nmodels = ["gpt2_tiny", "lenet_tiny"]\n'
                     "[cases.generate]\nprompt = 8\nnew_tokens = 8\nprompts = 2\nwarmup = 1\n")
    assert is_serving_suite(str(suite))
    out = tmp_path / "results"
    assert main(["run", str(suite), "--framework", "fake", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in
            (out / "generate-fake" / host_id() / "fake_cpu.jsonl").read_text().splitlines()]
    assert [(r["model"], r["measure"], r["status"]) for r in rows] == [
        ("gpt2_tiny", "generate", "ok"), ("lenet_tiny", "generate", "unsupported")]
    assert rows[0]["serving"]["check"]["greedy_matches"] == 8
    assert rows[0]["serving"]["generation"]["tokens_per_second"] > 0
    assert rows[0]["serving"]["host_probe"]["core_ms"] > 0
    # Validating says first what running makes rows of.
    suite.write_text(suite.read_text().replace("prompt = 8", "prompt = 10"))
    assert main(["validate", str(suite)]) == 2
    error = capsys.readouterr().err
    assert "lenet_tiny is not a language model over tokens" in error
    assert "gpt2_tiny: prompt 10 + 8 new tokens exceed its context of 16" in error


HANGING = """name = "serving-hang"
[[cases]]
models = ["lenet_tiny", "resnet_tiny", "bert_tiny"]
scenarios = ["SingleStream"]
[cases.serving]
samples = 8
min_duration_ms = 100
max_duration_ms = 1000
min_query_count = 64
warmup = 1
watchdog_margin_s = 1.0

[[cases]]
models = ["gpt2_tiny"]
scenarios = ["Offline"]
[cases.serving]
samples = 8
offline_batch = 4
min_duration_ms = 100
max_duration_ms = 200
min_query_count = 1
warmup = 1
watchdog_margin_s = 1.0
"""


def test_a_serve_that_never_returns_is_a_failed_row_and_the_next_case_runs(tmp_path, fake,
                                                                         monkeypatch):
    # lenet_tiny's serve sleeps forever after its 2 warm-up serves, inside LoadGen's run:
    # the watchdog gives that run max_duration (1 s) plus the margin (1 s), kills the
    # worker, and a fresh worker goes on. resnet_tiny's preparation kills its worker
    # (SIGKILL, as a segfault would), and a third serves bert_tiny (token ids and lengths).
    monkeypatch.setenv("FAKE_SERVE_HANG", "lenet_tiny:2")
    monkeypatch.setenv("FAKE_CRASH", "resnet_tiny")
    # gpt2_tiny's Offline query, sized from its warm-up to last about 4.4 x 0.1 s, is served
    # 9 times slower: its run outlasts its deadline (0.2 s + 1 s) while serving (about 4 s;
    # a loaded host's warm-up sizes a smaller query, about 2 s) and is left to finish.
    monkeypatch.setenv("FAKE_SERVE_SLOW", "gpt2_tiny:2:8")
    # On the stand-in's "gpu": the worker is started for the device the run names.
    suite = tmp_path / "serving-hang.toml"
    suite.write_text(HANGING)
    out = tmp_path / "results"
    assert main(["run", str(suite), "--framework", "fake", "--device", "gpu", "--out", str(out)]) == 0
    folder = out / "serving-hang" / host_id()
    rows = [json.loads(line) for line in (folder / "fake_gpu.jsonl").read_text().splitlines()]
    assert [(r["model"], r["status"]) for r in rows] == [("lenet_tiny", "failed"),
                                                        ("resnet_tiny", "failed"),
                                                        ("bert_tiny", "ok"),
                                                        ("gpt2_tiny", "ok")]
    hung = rows[0]
    # No serve returned in the run: it ends at its deadline, 2 s after it began.
    assert re.fullmatch(r"serve \(LoadGen's SingleStream run\) did not return within 2\.\d s, "
                        r"past its deadline of 2 s: the watchdog killed the case's process",
                        hung["reason"]), hung["reason"]
    assert hung["time_limit_s"] == 2.0 and hung["wall_s"] >= 2.0
    assert hung["serving"]["settings"]["loadgen_run_deadline_s"] == 2.0
    # On a GPU the threads are the CPUs the run may use.
    threads = len(os.sched_getaffinity(0))
    assert hung["case_id"] == f"serving-hang/fake/gpu/lenet_tiny/b1/serve/SingleStream/fp32/eager/t{threads}"
    crashed = rows[1]
    assert crashed["reason"].startswith("the serving worker was killed by SIGKILL during "
                                        "preparing the model and its warm-up serves; its last "
                                        "words: fake: preparing resnet_tiny b1")
    assert rows[2]["serving"]["check"]["passed"] and rows[2]["serving"]["result"]["valid"]
    # A GPU row says where it served (no NVML here: no UUID).
    assert rows[2]["env"]["cuda_visible_devices"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert "gpu_uuid" in rows[2]["env"]
    slow = rows[3]
    assert slow["serving"]["settings"]["loadgen_run_deadline_s"] == 1.2
    assert slow["serving"]["result"]["valid"] and slow["wall_s"] > 1.2


def test_serving_gpu_asks_each_framework_only_for_variants_and_precisions_it_has():
    from adapters.registry import load_registry
    from models.zoo import get_model
    from suites.serving.__main__ import load as load_serving
    suite = load_serving("serving-gpu")
    registry = load_registry()
    for framework in ("torch", "jax", "tf", "ort"):
        cases = [c for group in suite["groups"] for c in group.cases(framework)]
        assert {c.config.variant for c in cases} - {"default"} <= set(registry[framework].variants)
        assert {c.model for c in cases if c.kind == "serve"} == {"resnet50", "bert_base_qa:s=384"}
        assert {c.scenario for c in cases if c.model == "resnet50"} == {
            "SingleStream", "MultiStream", "Offline", "Server"}
        # GPT-2 small generates 128 tokens after a 128-token prompt in every framework.
        assert {(c.model, c.config.prompt, c.config.new_tokens) for c in cases
                if c.kind == "generate"} == {("gpt2", 128, 128)}
    torch = {(c.config.variant, c.config.precision)
             for group in suite["groups"] for c in group.cases("torch") if c.kind == "serve"}
    assert torch == {(v, p) for v in ("eager", "compile", "compile_reduce_overhead")
                     for p in ("fp32", "bf16")}
    assert get_model("bert_base_qa:s=384").input.shape == (384,)
    assert [g.models for g in suite["cold_start"]] == [("resnet50",)]
