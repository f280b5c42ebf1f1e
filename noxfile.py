"""dlbench sessions. Framework sessions are generated from adapters/registry.toml.

    nox -s torch_cpu report          # default CPU suites with PyTorch, then the report
    nox -s torch_cpu -- bahrampour --resume   # another suite, passing runner flags
    nox -s tests                     # core tests and every framework's conformance kit
    nox --no-venv -s torch_gpu       # use the frameworks already installed (offline GPU hosts)
    nox -s matrix -- --device gpu --budget 20   # every framework × suite (suites/matrix/run.py)

Each framework session has its own virtualenv with that framework's pinned packages.
``--no-venv`` runs a session on the current interpreter and installs nothing, for
machines with preinstalled CUDA builds and no package index.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CORE = PROJECT["dependencies"]
EXTRAS = PROJECT["optional-dependencies"]
REGISTRY = tomllib.loads((ROOT / "adapters" / "registry.toml").read_text())
DEFAULT_SUITE = {"cpu": "default-cpu", "gpu": "default-gpu"}
# Run after the default suite when a session is given none: serving under LoadGen on CPU
# threads (about a minute per framework on 2 idle cores; suites/serving/serving-cpu.toml).
# It takes only --out of the session's runner flags (a serving suite refuses the others).
AFTER_DEFAULT = {"cpu": "serving-cpu"}

nox.options.sessions = ["torch_cpu", "report"]
nox.options.reuse_existing_virtualenvs = True


def install(session: nox.Session, *requirements: str,
            without_dependencies: list[str] | tuple[str, ...] = ()) -> None:
    """Install unless the session runs without a virtualenv (``--no-venv``); then the
    ``without_dependencies`` packages with pip's --no-deps (registry.toml says why)."""
    if session.venv_backend == "none":
        session.log("no virtualenv: using the packages already installed")
        return
    session.install(*requirements)
    if without_dependencies:
        session.install("--no-deps", *without_dependencies)


def requirements_without_dependencies(framework: str, device: str) -> list[str]:
    """The framework's packages for ``device`` that pip installs without their
    requirements (adapters/registry.toml)."""
    return REGISTRY[framework].get("requirements_without_dependencies", {}).get(device, [])


def python(session: nox.Session) -> str:
    """The venv's interpreter, or with ``--no-venv`` the one running nox (a host may have
    no plain ``python`` on its PATH)."""
    return sys.executable if session.venv_backend == "none" else "python"


def make_framework_session(framework: str, device: str, requirements: list[str],
                           description: str) -> None:
    def run(session: nox.Session) -> None:
        install(session, *CORE, *requirements,
                without_dependencies=requirements_without_dependencies(framework, device))
        args = list(session.posargs)
        given = bool(args) and not args[0].startswith("-")
        suite = args.pop(0) if given else DEFAULT_SUITE[device]
        session.run(python(session), "-m", "suites", "run", suite, "--framework", framework,
                    "--device", device, *args)
        if not given and device in AFTER_DEFAULT:
            out = _option(args, "--out", [])[:1]
            session.run(python(session), "-m", "suites", "run", AFTER_DEFAULT[device],
                        "--framework", framework, "--device", device,
                        *(["--out", *out] if out else []))

    after = f", then {AFTER_DEFAULT[device]}" if device in AFTER_DEFAULT else ""
    run.__doc__ = (f"{description} — {device.upper()}, default suite "
                   f"{DEFAULT_SUITE[device]}{after}.")
    nox.session(name=f"{framework}_{device}")(run)


for _name, _entry in REGISTRY.items():
    for _device in _entry["devices"]:
        make_framework_session(_name, _device, _entry["requirements"][_device],
                               _entry.get("description", _name))


def _option(args: list[str], name: str, default: list[str]) -> list[str]:
    """The values after ``name`` in a command line (up to the next option)."""
    if name not in args:
        return default
    values = []
    for arg in args[args.index(name) + 1:]:
        if arg.startswith("-"):
            break
        values.append(arg)
    return values or default


@nox.session
def matrix(session: nox.Session) -> None:
    """Every framework × suite on one device in one command, with a plan up front,
    resumable, within a budget: nox -s matrix -- --device gpu --budget 20. Each framework
    runs in its own session's virtualenv (installed here first), or with --no-venv on the
    frameworks this interpreter has."""
    args = list(session.posargs)
    device = _option(args, "--device", ["cpu"])[0]
    frameworks = _option(args, "--frameworks",
                         [name for name, entry in REGISTRY.items() if device in entry["devices"]])
    if session.venv_backend == "none":
        pythons = [f"{name}={sys.executable}" for name in frameworks]
    else:
        install(session, *CORE)
        names = [f"{name}_{device}" for name in frameworks]
        session.run(sys.executable, "-m", "nox", "--install-only", "-s", *names, external=True)
        pythons = [f"{name}={ROOT / '.nox' / f'{name}_{device}' / 'bin' / 'python'}"
                   for name in frameworks]
    session.run(python(session), "-m", "suites", "matrix", *args,
                *(arg for spec in pythons for arg in ("--python", spec)))


@nox.session
def report(session: nox.Session) -> None:
    """Merge every results file under results/ (or the given directories) into report/."""
    install(session, *CORE, *EXTRAS["report"])
    session.run(python(session), "-m", "reports", *(session.posargs or ["results"]))


@nox.session
def publish(session: nox.Session) -> None:
    """Regenerate every published folder's README block and checked-in report pages
    (report.md, headlines.md, plots/), or only the folders given; then the project README's
    results at a glance, from the canonical folders (reports/glance.py)."""
    install(session, *CORE, *EXTRAS["report"])
    folders = session.posargs or sorted(str(p) for p in (ROOT / "published").glob("*/")
                                        if p.is_dir())
    for folder in folders:
        session.run(python(session), "-m", "reports.publish", "--to", folder)
        session.run(python(session), "-m", "reports", folder, "--out", f"{folder}/report",
                    "--pages", "--quiet")
    session.run(python(session), "-m", "reports.glance")


TEST_TARGETS = ["core", *REGISTRY]
# Core tests that need a framework: the numpy reference is checked against
# torch.nn.functional and FLOPs against torch's flop counter (they skip without torch).
# The fault-injection tests (SIGKILL, full disk, hangs) and the matrix's end-to-end runs
# are core tests: they run the stand-in framework (tests/fake_framework.py).
FRAMEWORK_CORE_TESTS = {"torch": ["tests/models/test_reference.py", "tests/models/test_models.py"]}
# What comparisons/ compares with, for their CPU smoke runs (tests/conformance/
# test_comparisons.py); keras and tf_keras are already among TensorFlow's packages.
# No torchvision: the only torchvision 0.28 (the release built against torch 2.13) that
# pip finds is built against CUDA torch, and beside the CPU torch of the test session it
# installs but does not load ("operator torchvision::nms does not exist"), which also
# stops transformers from importing its models; its twin's smoke run then skips, as it
# did when it was installed. flax 0.12.8 is the newest
# that accepts jax 0.10.2 (pip's resolver on the pin). transformers 5.17.0 (the GPU test
# host's) is PyTorch's transformer twin and builds the Hugging Face models whose parameter
# counts tests/adapters/test_torch.py checks; it adds about 175 MB and 40 s to the torch
# venv (tokenizers, safetensors, huggingface-hub, pydantic, regex, pyyaml ...).
# keras-hub 0.32.0 is JAX's and TensorFlow's transformer twin
# (comparisons/keras_hub_vs_dlbench.py): Keras 3 (TensorFlow's pin; JAX's venv has none)
# and what importing keras_hub.models needs, regex and tokenizers (its BPE tokenizers import
# them at module level); keras-hub itself and tokenizers are installed without their
# requirements: keras-hub's list names tensorflow-text (which requires the 572 MB
# tensorflow wheel, in JAX's venv too), kagglehub, kagglesdk and sentencepiece, none of
# which a backbone built from its constructor imports, and tokenizers' huggingface-hub.
# Measured on a 2-core host from a warm pip cache, beyond the sessions' installs without
# them: 12.6 s in JAX's venv (Keras and its h5py, optree, namex), 6.2 s in TensorFlow's.
# ONNX Runtime's transformer twin (comparisons/ort_hf_vs_dlbench.py) exports Hugging Face's
# models with torch and runs them in onnxruntime; its CPU test runs in PyTorch's session, so
# that venv also gets ONNX Runtime's CPU packages, at the ort session's pins (registry.toml:
# onnx, onnxruntime and sympy, which torch's venv has at the same version). Measured on a
# 2-core host from a warm pip cache: 9.4 s (onnx, onnxruntime, protobuf, ml_dtypes,
# flatbuffers). The TorchScript exporter that test uses needs no onnxscript; the GPU
# comparison's default exporter, torch.export's, does (docs/user-guide.md, twins).
ORT_TWIN = REGISTRY["ort"]["requirements"]["cpu"]
COMPARISON_REQUIREMENTS = {"torch": ["transformers==5.17.0", *ORT_TWIN],
                           "jax": ["flax==0.12.8", "keras==3.15.1", "regex==2026.11.19"],
                           "tf": ["regex==2026.11.19"]}
COMPARISON_REQUIREMENTS_WITHOUT_DEPENDENCIES = {
    "jax": ["keras-hub==0.32.0", "tokenizers==0.23.3"],
    "tf": ["keras-hub==0.32.0", "tokenizers==0.23.3"]}


# JAX's kit compiles hundreds of tiny programs, and on the CPU most of its time went to
# LLVM optimising their machine code (three GoogLeNet tests: 154 s, 59 s at -O0, on 2
# cores); TensorFlow's XLA variants likewise (the Keras twin's bf16 XLA test: 164 s, 50 s).
# The tests check what is computed, within bounds derived from fp32 arithmetic,
# and XLA decides the computation before LLVM runs: its HLO passes are the same at every
# backend level (and fast math is off, XLA's CPU default). Benchmark sessions keep XLA's
# default level.
TEST_ENV = {name: {"XLA_FLAGS": "--xla_backend_optimization_level=0"} for name in ("jax", "tf")}
# Keras 3 (the keras-hub twin's) on JAX in JAX's session; its default is TensorFlow.
TEST_ENV["jax"]["KERAS_BACKEND"] = "jax"

# Two pytest workers (pytest-xdist): most tests hold one core (tiny models' dispatch,
# compilation, suites run in a subprocess), so one worker leaves half of a 2-core machine
# idle. ``nox -s tests -- -n 0`` runs them in one process.
PYTEST_WORKERS = ["-n", "2"]


@nox.session
@nox.parametrize("target", TEST_TARGETS, ids=TEST_TARGETS)
def tests(session: nox.Session, target: str) -> None:
    """Core tests, or one framework's conformance kit and adapter tests in its own venv."""
    if target == "core":
        install(session, *CORE, *EXTRAS["report"], *EXTRAS["test"])
        session.run(python(session), "-m", "pytest", "-q", *PYTEST_WORKERS, "tests",
                    "--ignore=tests/conformance", "--ignore=tests/adapters", *session.posargs)
        return
    install(session, *CORE, *REGISTRY[target]["requirements"]["cpu"], *EXTRAS["test"],
            *COMPARISON_REQUIREMENTS.get(target, []),
            without_dependencies=[*requirements_without_dependencies(target, "cpu"),
                                  *COMPARISON_REQUIREMENTS_WITHOUT_DEPENDENCIES.get(target, [])])
    session.env.update(TEST_ENV.get(target, {}))
    session.run(python(session), "-m", "pytest", "-q", *PYTEST_WORKERS, "tests/conformance",
                f"tests/adapters/test_{target}.py", *FRAMEWORK_CORE_TESTS.get(target, []),
                f"--framework={target}", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    install(session, *EXTRAS["lint"])
    session.run("ruff", "check", ".")
