"""Suite files and the command line: bad input gets one line naming the problem and
exit code 2, before anything runs (no framework is needed for any of this)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adapters.registry import load_registry
from suites.harness.spec import SUITES_DIR, SuiteError, expand, load_suite

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name = "t"
[timer]
budget_s = 1.0
[[cases]]
models = ["lenet"]
batches = [8]
measures = ["forward"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suites", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", sorted(SUITES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_bundled_suites_validate(path):
    suite = load_suite(path, load_registry())
    assert suite.groups


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("batches", "batchs"), "unknown key 'batchs' (did you mean 'batches'?)"),
    (GOOD.replace('"lenet"', '"resnet5"'), "unknown model 'resnet5' (did you mean resnet50"),
    (GOOD.replace("[8]", "[0]"), "impossible batch 0"),
    (GOOD.replace("[8]", "[-3]"), "impossible batch -3"),
    (GOOD.replace("[8]", '["8"]'), "'batches' holds '8', which is not int"),
    (GOOD.replace("[8]", "[2.5]"), "'batches' holds 2.5, which is not int"),
    (GOOD.replace('["forward"]', '["forwards"]'), "measure 'forwards' is not one of"),
    (GOOD.replace("budget_s = 1.0", "budget = 1.0"), "unknown key 'budget'"),
    (GOOD.replace("budget_s = 1.0", 'budget_s = "x"'), "'budget_s' must be a non-negative"),
    (GOOD + 'frameworks = ["pytorch"]\n', "framework 'pytorch' is not one of"),
    (GOOD.replace('"lenet"', '"conv:c=3,i=4,f=8,k=11"'), "empty output"),
    (GOOD + "[[cases\n", "malformed TOML"),
    ('name = "t"\n', "needs at least one [[cases]] table"),
    (GOOD + 'compile_cache = ["warm"]\n', "compile_cache 'warm' needs 'cold'"),
    (GOOD + 'compile_cache = ["hot"]\n', "compile_cache 'hot' is not one of cold, warm"),
    (GOOD + "epoch_batches = 0\n", "'epoch_batches' must be a positive integer"),
    (GOOD + "profile_iterations = 1.5\n", "'profile_iterations' must be a positive integer"),
    (GOOD + "timer = { min_sample = 3 }\n", "cases[0] timer: unknown key 'min_sample' (did you mean"),
    (GOOD + "timer = 3\n", "cases[0] timer: must be a table"),
])
def test_bad_suites_name_the_problem(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as raised:
        load_suite(path, load_registry())
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("args, message", [
    (["run", "SUITE", "--framework", "pytorch"], "unknown framework 'pytorch'"),
    (["run", "default-cpux", "--framework", "torch"], "unknown suite 'default-cpux'"),
    (["run", "SUITE", "--framework", "torch", "--device", "gpu"], "has no cases for torch on gpu"),
    (["validate", "BADSUITE"], "unknown key 'batchs'"),
    (["run", "SUITE", "--framework", "torch", "--models", "lenet", "vgg16"],
     "--models: suite t runs no vgg16 here (it runs lenet)"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, args, message):
    good = write(tmp_path, GOOD.replace("[[cases]]", "[[cases]]\ndevices = [\"cpu\"]"))
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("batches", "batchs"))
    args = [str(good) if a == "SUITE" else str(bad) if a == "BADSUITE" else a for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_models_cut_a_suite_to_the_networks_named():
    from suites.harness.runner import RunRequest, plan_jobs
    request = RunRequest("transformers-gpu", "jax", "gpu", Path("results"))
    _, _, every = plan_jobs(request)
    _, _, cut = plan_jobs(RunRequest(**{**request.__dict__, "models": ("vit_b16",)}))
    assert {j.model for j in every} > {"vit_b16"} == {j.model for j in cut}
    assert cut == [j for j in every if j.model == "vit_b16"]


def test_expansion_is_a_cross_product_filtered_by_device():
    suite = load_suite(SUITES_DIR / "default-cpu.toml", load_registry())
    torch_entry = load_registry()["torch"]
    jobs = expand(suite, torch_entry, "cpu", usable_cpus=2, physical_cores=2)
    expected = sum(len(g.models) * len(g.batches) * len(g.precisions) * len(g.variants)
                   for g in suite.groups if "cpu" in g.devices)
    assert len(jobs) == expected
    assert expand(suite, torch_entry, "gpu", 2, 2) == []


def test_thread_keywords_resolve_per_machine(tmp_path):
    path = write(tmp_path, GOOD + 'threads = [1, "physical", "all"]\n')
    suite = load_suite(path, load_registry())
    jobs = expand(suite, load_registry()["torch"], "cpu", usable_cpus=8, physical_cores=4)
    assert [j.threads for j in jobs] == [1, 4, 8]


def test_cli_list_names_the_bundled_suites():
    result = run_cli("list")
    assert result.returncode == 0
    assert "default-cpu" in result.stdout and "default-gpu" in result.stdout


def test_group_timer_overrides_the_suite_timer(tmp_path):
    path = write(tmp_path, GOOD + "timer = { min_samples = 1 }\n")
    suite = load_suite(path, load_registry())
    (job,) = expand(suite, load_registry()["torch"], "cpu", 2, 2)
    assert job.timer.min_samples == 1 and job.timer.budget_s == 1.0


def test_a_case_two_groups_share_runs_once(tmp_path):
    text = GOOD + GOOD[GOOD.index("[[cases]]"):].replace('["forward"]', '["forward", "gradient"]')
    text += GOOD[GOOD.index("[[cases]]"):].replace('["forward"]', '["profile"]') + \
        "profile_iterations = 2\n"
    suite = load_suite(write(tmp_path, text), load_registry())
    jobs = expand(suite, load_registry()["torch"], "cpu", 2, 2)
    assert [(j.measures, j.fingerprint) for j in jobs] == [
        (("forward", "gradient"), True), (("profile",), False)]


def test_cold_and_warm_compile_cache_jobs_come_in_that_order(tmp_path):
    path = write(tmp_path, GOOD + 'compile_cache = ["warm", "cold"]\n')
    jobs = expand(load_suite(path, load_registry()), load_registry()["torch"], "cpu", 2, 2)
    assert [j.compile_cache for j in jobs] == ["cold", "warm"]
