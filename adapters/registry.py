"""Reads adapters/registry.toml (data only: importing this module imports no framework)
and loads an adapter class on demand."""

from __future__ import annotations

import importlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from models.measures import MEASURES, unknown_measures

REGISTRY_FILE = Path(__file__).with_name("registry.toml")
# A registry file read in place of REGISTRY_FILE, by the runner and its workers alike (the
# tests run the harness on a stand-in framework: tests/data/fake_registry.toml).
REGISTRY_ENV = "DLBENCH_REGISTRY"


class RegistryError(ValueError):
    """The registry file names something that does not exist (a one-line message)."""


@dataclass(frozen=True)
class FrameworkEntry:
    name: str
    module: str
    class_name: str
    devices: tuple[str, ...]
    variants: tuple[str, ...]       # the first is the default
    measures: tuple[str, ...]       # declared measures (models/measures.py) it supports
    requirements: dict[str, tuple[str, ...]]   # device -> pinned pip requirements
    description: str
    package: str = ""               # the framework's top-level module ("torch", "jax", ...)
    # Variants whose compiled code a persistent on-disk cache keeps between processes,
    # and the environment that points that cache at a directory ("{dir}" is replaced).
    compile_cache_variants: tuple[str, ...] = ()
    compile_cache_env: dict[str, str] = field(default_factory=dict)
    # Precisions whose jobs run in worker processes of their own, never sharing one with
    # jobs of another precision (suites/harness/runner.py process_group; registry.toml says why).
    own_process_precisions: tuple[str, ...] = ()
    # Whether its device phase starts a process of its own rather than going on in the
    # wall phase's worker (suites/harness/pool.py; registry.toml says why).
    own_device_process: bool = False
    # Whether the wall phase's worker keeps the jobs built for the device phase
    # (suites/harness/kept_jobs.py; registry.toml says for which frameworks and why).
    keeps_jobs_for_device_phase: bool = False

    def load(self):
        return getattr(importlib.import_module(self.module), self.class_name)


def load_registry(path: Path | None = None) -> dict[str, FrameworkEntry]:
    path = path or Path(os.environ.get(REGISTRY_ENV) or REGISTRY_FILE)
    data = tomllib.loads(path.read_text())
    for name, entry in data.items():
        if unknown := unknown_measures(entry["measures"]):
            raise RegistryError(f"{path}: [{name}] measures: unknown measure "
                                f"{', '.join(map(repr, unknown))} (declared in models/measures.py: "
                                f"{', '.join(MEASURES)})")
    return {
        name: FrameworkEntry(
            name=name, module=entry["module"], class_name=entry["class"],
            devices=tuple(entry["devices"]), variants=tuple(entry["variants"]),
            measures=tuple(entry["measures"]),
            requirements={d: tuple(r) for d, r in entry["requirements"].items()},
            description=entry.get("description", ""), package=entry.get("package", ""),
            compile_cache_variants=tuple(entry.get("compile_cache", {}).get("variants", ())),
            compile_cache_env=dict(entry.get("compile_cache", {}).get("env", {})),
            own_process_precisions=tuple(entry.get("own_process_precisions", ())),
            own_device_process=bool(entry.get("own_device_process", False)),
            keeps_jobs_for_device_phase=bool(entry.get("keeps_jobs_for_device_phase", False)))
        for name, entry in data.items()
    }
