"""The data-parallel harness without a framework: launcher deadlines and process-group
kills, suite expansion, efficiency, the interconnect parser and the report section.
(Each framework's engine is tested in tests/conformance/test_data_parallel.py.)"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import pytest

from parallel.launch import launch
from parallel.runner import efficiency
from parallel.spec import ScalingCase, ScalingSuiteError, is_scaling_suite, load
from parallel.topology import parse_topology

PY = sys.executable


def run(tmp_path: Path, *scripts: str, timeout_s: float = 30.0):
    return launch([[PY, "-c", s] for s in scripts], [{}] * len(scripts), timeout_s,
                  tmp_path / "logs")


def test_all_processes_ok(tmp_path):
    outcome = run(tmp_path, "pass", "pass")
    assert outcome.status == "ok" and outcome.exit_codes == (0, 0)


def test_a_crashed_process_fails_the_case_and_its_hung_peer_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr("parallel.launch.GRACE_S", 0.5)
    pid_file = tmp_path / "child.pid"
    # The peer starts a child of its own (as torchrun does) and then blocks forever.
    peer = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    outcome = run(tmp_path, "import os, signal, time; time.sleep(0.5); "
                            "os.kill(os.getpid(), signal.SIGKILL)", peer)
    assert outcome.status == "failed"
    assert "process 0 killed by signal 9" in outcome.reason
    assert "[1] still running were killed" in outcome.reason
    assert outcome.wall_s < 30   # not the deadline: the crash ended the case
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_a_hung_case_times_out(tmp_path):
    outcome = run(tmp_path, "import time; time.sleep(600)", "pass", timeout_s=1.0)
    assert outcome.status == "timeout"
    assert outcome.exit_codes[1] == 0 and outcome.exit_codes[0] is None


def test_failure_reason_quotes_the_log(tmp_path):
    outcome = run(tmp_path, "raise SystemExit('no NCCL here')")
    assert outcome.status == "failed" and "no NCCL here" in outcome.reason


def test_failure_reason_names_the_workers_error_above_torchruns_summary(tmp_path):
    # torchrun's log: the worker's C++ abort, then a long summary ending in its table.
    script = ("import sys; print(\"terminate called after throwing an instance of "
              "'gloo::IoException'\"); print('  what():  Connection closed by peer'); "
              "[print(f'summary line {i}') for i in range(30)]; "
              "print('ChildFailedError:'); print('exitcode  : -6'); sys.exit(1)")
    outcome = run(tmp_path, script)
    assert outcome.status == "failed"
    assert "gloo::IoException" in outcome.reason and "Connection closed" in outcome.reason
    assert "exitcode  : -6" in outcome.reason and "summary line 3 " not in outcome.reason


def test_a_crashed_gradient_launch_is_tried_once_more_with_a_warning(monkeypatch):
    from parallel import correctness
    from parallel.launch import Outcome

    attempts = []

    def crash_then_succeed(*args):
        attempts.append(args)
        if len(attempts) == 1:
            raise correctness.LaunchFailed(Outcome("failed", "Signal 6", (1,), 1.0))
        return 1.0, {}

    monkeypatch.setattr(correctness, "_launch_gradients", crash_then_succeed)
    with pytest.warns(RuntimeWarning, match="Signal 6"):
        assert correctness.distributed_gradients("torch", "alexnet_tiny", 2, 4) == (1.0, {})
    assert len(attempts) == 2


@pytest.mark.parametrize("first_status", ["timeout", "failed"])
def test_a_timeout_or_a_second_crash_still_fails_the_gradient_launch(monkeypatch,
                                                                     first_status):
    from parallel import correctness
    from parallel.launch import Outcome

    calls = []

    def fail(*args):
        calls.append(first_status)
        status = first_status if len(calls) == 1 else "failed"
        raise correctness.LaunchFailed(Outcome(status, "no", (None,), 1.0))

    monkeypatch.setattr(correctness, "_launch_gradients", fail)
    with pytest.raises(correctness.LaunchFailed), pytest.warns() if first_status == "failed" \
            else contextlib.nullcontext():
        correctness.distributed_gradients("torch", "alexnet_tiny", 2, 4)
    assert len(calls) == (1 if first_status == "timeout" else 2)


def test_suite_expansion():
    suite = load("scaling")
    cases = suite.cases(2)
    assert [c.devices for c in cases] == sorted(c.devices for c in cases)
    assert ScalingCase("resnet50", "weak", 2, 64, 64) in cases
    assert ScalingCase("resnet50", "strong", 2, 32, 64) in cases
    assert ScalingCase("resnet50", "strong", 2, 32, 64, "bf16") in cases
    # One device at batch 64 is the baseline of both modes: it runs once per precision.
    baselines = [c.precision for c in cases if c.model == "resnet50" and c.devices == 1
                 and c.base_batch == 64]
    assert sorted(baselines) == ["bf16", "fp32"]
    assert {c.devices for c in suite.cases(1)} == {1}
    assert max(c.devices for c in suite.cases(8)) == 8


def test_suite_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "scaling"\n[[cases]]\nmodels = ["no_such_net"]\nbatches = [4]\n')
    with pytest.raises(ScalingSuiteError, match="no_such_net"):
        load(str(bad))
    bad.write_text('kind = "scaling"\n[[cases]]\nmodels = ["lenet"]\nbatches = [4]\n'
                   'modes = ["sideways"]\n')
    with pytest.raises(ScalingSuiteError, match="sideways"):
        load(str(bad))
    bad.write_text('kind = "scaling"\n[[cases]]\nmodels = ["lenet"]\nbatches = [4]\n'
                   'precisions = ["fp16"]\n')
    with pytest.raises(ScalingSuiteError, match="precision 'fp16'"):
        load(str(bad))
    assert is_scaling_suite(str(bad)) and is_scaling_suite("scaling-quick")
    assert not is_scaling_suite("default-cpu")


def test_every_launch_keeps_nvlink_multicast_off(monkeypatch):
    from parallel.engines import MULTICAST_OFF, base_env, collective_settings

    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")   # a caller's environment asking for it
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    for framework in ("torch", "jax", "tf", "ort"):
        env = base_env("gpu", 2, framework)
        assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF
    assert collective_settings(base_env("gpu", 2, "torch")) == {**MULTICAST_OFF,
                                                              "NCCL_DEBUG": "WARN"}


def test_jax_gpu_launches_schedule_collectives_beside_compute(monkeypatch):
    from adapters.jax.launch import LATENCY_HIDING
    from parallel.engines import base_env, collective_settings

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    env = base_env("gpu", 4, "jax")
    assert env["XLA_FLAGS"] == f"{LATENCY_HIDING}=true"
    assert collective_settings(env)["XLA_FLAGS"] == env["XLA_FLAGS"]   # the rows say so
    # Only JAX on GPUs: the other engines and JAX's CPU stand-in devices get no such flag.
    assert "XLA_FLAGS" not in base_env("gpu", 4, "torch")
    assert LATENCY_HIDING not in base_env("cpu", 2, "jax")["XLA_FLAGS"]
    # A caller's flags are kept, and a caller naming the flag decides its value.
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=4")
    assert base_env("gpu", 2, "jax")["XLA_FLAGS"] == \
        f"--xla_gpu_autotune_level=4 {LATENCY_HIDING}=true"
    monkeypatch.setenv("XLA_FLAGS", f"{LATENCY_HIDING}=false")
    assert base_env("gpu", 2, "jax")["XLA_FLAGS"] == f"{LATENCY_HIDING}=false"


def test_efficiency():
    weak = ScalingCase("m", "weak", 2, 64, 64)
    assert efficiency(weak, 110.0, 100.0) == pytest.approx(100 / 110)
    strong = ScalingCase("m", "strong", 2, 32, 64)
    assert efficiency(strong, 55.0, 100.0) == pytest.approx(100 / 110)
    assert efficiency(weak, 10.0, None) is None


TOPO = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tSYS\t0-63\t0\t\tN/A
GPU1\tNV18\t X \tSYS\t0-63\t0\t\tN/A
NIC0\tSYS\tSYS\t X
"""


def test_topology_pairs():
    assert parse_topology(TOPO) == {"GPU0-GPU1": "NV18"}
    assert parse_topology("No devices were found") == {}


def _row(framework, devices, median, efficiency_, status="ok"):
    return {"schema": 1, "case_id": f"s/{framework}/gpu/resnet50/weak-b64/n{devices}",
            "suite": "s", "model": "resnet50", "batch": 64 * devices, "measure": "data_parallel",
            "settings": {"framework": framework, "device": "gpu", "precision": "fp32",
                         "variant": f"data_parallel-n{devices}-weak", "threads": 0},
            "status": status, "reason": "" if status == "ok" else "process 1 killed",
            "timing": {"median_ms": median, "ci_low_ms": median, "ci_high_ms": median}
            if status == "ok" else None,
            "env": {"host": "h", "gpu_model": "NVIDIA H200",
                    "interconnect": {"source": "nvidia-smi topo -m",
                                     "links": {"GPU0-GPU1": "NV18"}}},
            "scaling": {"model": "resnet50", "mode": "weak", "devices": devices,
                        "per_device_batch": 64, "base_batch": 64, "global_batch": 64 * devices,
                        "engine": "DDP", "backend": "nccl",
                        "images_per_s": 64 * devices / median * 1e3 if median else None,
                        "efficiency": efficiency_, "communication_share": 0.05}}


def test_report_has_the_scaling_section(tmp_path):
    from reports.render.build import build

    rows = [_row("torch", 1, 100.0, 1.0), _row("torch", 2, 105.0, 100 / 105),
            _row("jax", 1, 90.0, 1.0), _row("jax", 2, 0.0, None, status="failed")]
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report, written = build([folder], tmp_path / "report")
    section = next(s for s in report.sections if s.key == "scaling")
    table = section.tables[0]
    assert len(table.rows) == 4
    texts = [[c.text for c in row] for row in table.rows]
    assert [texts[1][0], texts[1][2], texts[1][5]] == ["jax", "fp32", "2"]
    assert texts[1][10] == "failed"
    assert any(r[12] == "95.2%" for r in texts)
    assert any("NV18" in line for line in section.paragraphs)
    assert section.plots and section.plots[0].png.startswith(b"\x89PNG")
    assert (tmp_path / "report" / "plots" / "scaling-efficiency.png") in written


def test_a_published_scaling_folder_says_which_gpu_counts_were_not_run(tmp_path):
    from reports.publish import inventory

    rows = [_row("torch", 1, 100.0, 1.0), _row("torch", 2, 105.0, 100 / 105),
            _row("jax", 1, 90.0, 1.0), _row("jax", 2, 0.0, None, status="failed")]
    rows[1]["scaling"]["communication_kernels"] = {"nccl_kernel_ms_per_step": 4.0,
                                                   "overlap_share": 0.75}
    for row in rows:
        row["suite"] = "scaling"
    folder = tmp_path / "scaling" / "h"
    folder.mkdir(parents=True)
    (folder / "torch_gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (folder / "jax_gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    text = inventory(tmp_path)
    lines = text.splitlines()
    # One line per case, one column per framework (jax, torch), a cell per GPU count run.
    assert "| resnet50 | weak | 64/GPU | fp32 | failed | 95.2% |" in lines
    assert "Each cell: N = 2. Not run: N = 4, 8 (no row of this folder has it)." in lines
    assert "report/plots/scaling-efficiency.png" in text
    # A scaling suite runs through python -m parallel, not a framework's nox session.
    assert "    for fw in jax torch; do python -m parallel run scaling --framework $fw " \
        "--device gpu; done" in lines
    # The runs a scaling folder lacks are its own suite's, not the default suites'.
    missing = next(line for line in lines if line.startswith("Not in this folder"))
    assert "scaling ort gpu" in missing and "default-gpu" not in missing


def test_a_model_the_suite_lacks_is_a_one_line_error(capsys):
    from parallel.__main__ import main

    assert main(["run", "scaling-short", "--framework", "torch", "--models", "vgg16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "vgg16" in err and "scaling-short" in err


def test_a_case_no_rank_reported_still_names_its_host_and_commit(tmp_path, monkeypatch):
    # A launch whose processes all fail writes no result: the row's environment is the
    # host's, not empty (a published folder lists every row's machine and commit).
    from parallel import runner
    from parallel.launch import Outcome
    from parallel.runner import ScalingRequest, ScalingRunner

    monkeypatch.setattr(runner, "launch", lambda *a, **k: Outcome(
        "failed", "process 0 exit code 1: boom", (1,), 0.1))
    suite = load("scaling-quick")
    request = ScalingRequest(suite, "torch", "cpu", tmp_path, max_devices=1)
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    rows = [json.loads(line) for line in next(tmp_path.rglob("*.jsonl")).read_text().splitlines()]
    assert rows and all(r["status"] == "failed" for r in rows)
    for row in rows:
        assert row["env"]["dlbench_commit"] and row["env"]["cpu_model"]
        assert row["env"]["host"] == rows[0]["env"]["host"] and "boom" in row["reason"]


def test_device_counts_come_from_the_suite_or_the_command_line(tmp_path, capsys):
    suite = load("scaling")
    # The bundled suite lists powers of two: a 4-GPU host runs N = 1, 2 and 4, not 3.
    assert sorted({c.devices for c in suite.cases(4)}) == [1, 2, 4]
    assert sorted({c.devices for c in suite.cases(8)}) == [1, 2, 4, 8]
    # --devices replaces them, N = 1 (the baseline) kept, capped at the devices present.
    assert sorted({c.devices for c in suite.cases(4, (3,))}) == [1, 3]
    assert sorted({c.devices for c in suite.cases(2, (2, 4))}) == [1, 2]
    cases = suite.cases(8, (4,))
    # Strong at N = 4 splits the 64 four ways; its baseline is the one-device b64 case.
    assert {c.per_device_batch for c in cases if c.mode == "strong"} == {16}
    assert any(c.model == "resnet50" and c.devices == 1 and c.per_device_batch == 64
               for c in cases)
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "scaling"\n[[cases]]\nmodels = ["lenet"]\nbatches = [4]\n'
                   'devices = [0, 2]\n')
    with pytest.raises(ScalingSuiteError, match="devices must be"):
        load(str(bad))
    from parallel.__main__ import main

    assert main(["run", "scaling-quick", "--framework", "torch", "--devices", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--devices 0" in err


class FakeLaunches:
    """Stands in for parallel.launch.launch: acts as rank 0 of every case in the launch's
    spec files, in turn, writing each result and calling the runner's watch; a case whose
    model is ``crash_model`` kills the launch (the rest of it never runs). ``fill_cache``:
    each launch leaves a file in JAX's compilation cache, as compiling there would."""

    def __init__(self, crash_model: str = "", fill_cache: bool = False):
        self.crash_model = crash_model
        self.fill_cache = fill_cache
        self.launches: list[list[tuple[str, int]]] = []
        self.envs: list[dict[str, str]] = []

    def __call__(self, commands, envs, timeout_s, log_dir, cwd=None, watch=None):
        from parallel.launch import Outcome
        from parallel.spec import RankSpec

        paths = commands[0][commands[0].index("parallel.rank") + 1:]
        specs = [RankSpec.from_file(Path(p)) for p in paths]
        self.launches.append([(s.model, s.devices) for s in specs])
        self.envs.append(envs[0])
        cache = envs[0].get("JAX_COMPILATION_CACHE_DIR")
        if self.fill_cache and cache:
            Path(cache).mkdir(parents=True, exist_ok=True)
            (Path(cache) / f"executable-n{specs[0].devices}").write_text("compiled")
        for spec in specs:
            if spec.model == self.crash_model:
                return Outcome("failed", "process 0 killed by signal 9: boom", (-9,), 1.0)
            Path(spec.result).write_text(json.dumps({
                "timing": {"median_ms": 10.0 * spec.devices, "ci_low_ms": 1.0,
                           "ci_high_ms": 1.0, "samples": spec.samples},
                "engine": "fake", "backend": "none", "step": "gradient"}))
            Path(spec.result).with_name("rank0.done").touch()
            if watch is not None:
                watch()
        return Outcome("ok", "", (0,), 1.0)


def _suite_of(tmp_path, models):
    path = tmp_path / "suite.toml"
    path.write_text('kind = "scaling"\nname = "s"\ntimeout_s = 5\n[timer]\nwarmup = 1\n'
                    'samples = 2\n[[cases]]\nmodels = ' + json.dumps(models) +
                    '\nbatches = [4]\nmodes = ["weak"]\n')
    return load(str(path))


def test_the_cases_of_one_n_share_a_launch(tmp_path, monkeypatch):
    from parallel import runner
    from parallel.runner import ScalingRequest, ScalingRunner

    fake = FakeLaunches()
    monkeypatch.setattr(runner, "launch", fake)
    suite = _suite_of(tmp_path, ["alexnet_tiny", "lenet"])
    request = ScalingRequest(suite, "jax", "cpu", tmp_path / "out", history=())
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    # One launch per N, both models in it.
    assert fake.launches == [[("alexnet_tiny", 1), ("lenet", 1)],
                             [("alexnet_tiny", 2), ("lenet", 2)]]
    rows = [json.loads(line) for line in
            next((tmp_path / "out").rglob("*.jsonl")).read_text().splitlines()]
    assert [(r["model"], r["scaling"]["devices"], r["status"]) for r in rows] == [
        ("alexnet_tiny", 1, "ok"), ("lenet", 1, "ok"), ("alexnet_tiny", 2, "ok"),
        ("lenet", 2, "ok")]
    assert all(r["wall_s"] >= 0 for r in rows)
    assert rows[2]["scaling"]["efficiency"] == pytest.approx(0.5)   # 10 ms against 20


def test_a_crash_in_a_shared_launch_is_the_row_of_its_case(tmp_path, monkeypatch):
    from parallel import runner
    from parallel.runner import ScalingRequest, ScalingRunner

    fake = FakeLaunches(crash_model="lenet")
    monkeypatch.setattr(runner, "launch", fake)
    suite = _suite_of(tmp_path, ["alexnet_tiny", "lenet", "sae_ae1"])
    request = ScalingRequest(suite, "jax", "cpu", tmp_path / "out", max_devices=1,
                             history=())
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    # The shared launch died in lenet: alexnet_tiny's row stands, lenet and sae_ae1 get
    # launches of their own, and only lenet's row is a failure.
    assert fake.launches == [[("alexnet_tiny", 1), ("lenet", 1), ("sae_ae1", 1)],
                             [("lenet", 1)], [("sae_ae1", 1)]]
    rows = [json.loads(line) for line in
            next((tmp_path / "out").rglob("*.jsonl")).read_text().splitlines()]
    assert [(r["model"], r["status"]) for r in rows] == [
        ("alexnet_tiny", "ok"), ("lenet", "failed"), ("sae_ae1", "ok")]
    assert "boom" in rows[1]["reason"]


def test_launches_share_the_persistent_compilation_cache_and_rows_say_its_state(tmp_path,
                                                                               monkeypatch):
    """The scaling runner points every process at the frameworks' compilation cache, as the
    matrix does (suites/matrix/compile_cache.py); a row says whether the cache held files when its
    launch started, so a first call that loaded an executable is not read as a compile."""
    from parallel import runner
    from parallel.runner import ScalingRequest, ScalingRunner

    fake = FakeLaunches(fill_cache=True)
    monkeypatch.setattr(runner, "launch", fake)
    suite = _suite_of(tmp_path, ["lenet"])
    cache = tmp_path / "cache"
    request = ScalingRequest(suite, "jax", "cpu", tmp_path / "out", history=(),
                             compile_cache=str(cache))
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    assert [env["JAX_COMPILATION_CACHE_DIR"] for env in fake.envs] == \
        [str(cache.resolve() / "cpu" / "jax")] * 2
    rows = [json.loads(line) for line in
            next((tmp_path / "out").rglob("*.jsonl")).read_text().splitlines()]
    assert [r["env"]["compile_cache"] for r in rows] == [
        {"dir": str(cache.resolve() / "cpu"), "kept_at_launch": False},   # N = 1: empty
        {"dir": str(cache.resolve() / "cpu"), "kept_at_launch": True}]    # N = 2: N = 1's

    off = FakeLaunches()
    monkeypatch.setattr(runner, "launch", off)
    request = ScalingRequest(suite, "jax", "cpu", tmp_path / "off", history=(),
                             compile_cache="off")
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    assert all(env.get("JAX_COMPILATION_CACHE_DIR") != str(cache.resolve() / "cpu" / "jax")
               for env in off.envs)
    rows = [json.loads(line) for line in
            next((tmp_path / "off").rglob("*.jsonl")).read_text().splitlines()]
    assert [r["env"]["compile_cache"] for r in rows] == [None, None]

    # DDP's eager step compiles nothing to keep: no cache for its processes.
    eager = FakeLaunches()
    monkeypatch.setattr(runner, "launch", eager)
    request = ScalingRequest(suite, "torch", "cpu", tmp_path / "torch", history=(),
                             compile_cache=str(cache))
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    assert all(str(cache.resolve()) not in json.dumps(env) for env in eager.envs)
