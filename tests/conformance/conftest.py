"""The adapter conformance kit runs against the framework named by ``--framework``,
inside that framework's own nox session (``nox -s tests``)."""

from __future__ import annotations

import pytest

from adapters.base import CaseConfig, RunConfig
from adapters.registry import load_registry


@pytest.fixture(scope="session")
def framework(request) -> str:
    return request.config.getoption("--framework")


@pytest.fixture(scope="session")
def entry(framework):
    registry = load_registry()
    if framework not in registry:
        pytest.fail(f"unknown framework {framework!r}")
    return registry[framework]


@pytest.fixture(scope="session")
def adapter(entry):
    adapter_class = entry.load()
    return adapter_class(RunConfig("cpu", threads=2, interop_threads=1))


@pytest.fixture
def default_case() -> CaseConfig:
    return CaseConfig("fp32", "default")
