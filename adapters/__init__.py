"""One package per framework (torch, tf, jax, ort) that builds the IR and times its steps;
``base`` is the contract, ``registry.toml`` the list. Importing ``adapters`` imports no framework."""

import importlib
from collections.abc import Callable


def lazy_adapter(package: str, name: str) -> Callable[[str], type]:
    """A framework package's module ``__getattr__`` (PEP 562) that imports its adapter
    class from ``<package>.adapter`` on first use, so that importing the package's
    framework-free modules (launch.py, read by parallel/engines.py) imports no framework."""
    def __getattr__(attr: str) -> type:
        if attr == name:
            return getattr(importlib.import_module(f"{package}.adapter"), name)
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")
    return __getattr__
