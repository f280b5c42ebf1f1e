"""Which device clock times a case's kernels beside the host's wall time.

An adapter offers one through ``Prepared.device_clock()`` (PyTorch: CUDA events behind a
spin kernel). A kernel tracer can register a factory here for frameworks that offer none
(``register``: a callable taking the prepared case and returning a
``suites.timer.DeviceClock`` or None), so the harness does not depend on any tracer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FACTORIES: list[Callable[[Any], Any]] = []


def register(factory: Callable[[Any], Any]) -> None:
    FACTORIES.append(factory)


def device_clock_for(prepared: Any, device: str) -> tuple[Any, str]:
    """(clock, "") or (None, the reason there is none)."""
    if device != "gpu":
        return None, "cpu run: host and device time are one"
    clock = prepared.device_clock()
    for factory in FACTORIES:
        if clock is not None:
            break
        clock = factory(prepared)
    if clock is None:
        return None, "this framework offers no device clock and no kernel tracer is registered"
    return clock, ""
