"""Which device clock times a case's kernels beside the host's wall time.

One framework-neutral clock comes first: CUPTI's activity records
(``suites/instruments/cupti_clock.py``), wherever ``cupti-python`` imports, so JAX, ONNX Runtime and
TensorFlow rows get device time as PyTorch's do, measured the same way. Then the adapter's
own (``Prepared.device_clock()``; PyTorch: CUDA events behind a spin kernel), then any
factory registered here (``register``: a callable taking the prepared case and returning
an ``adapters.base.DeviceClock`` or None), and failing all of them the row's
``device_time_reason`` says why. When the CUPTI clock fails in a block (CUPTI refused),
the next clock takes over for the blocks after it.

``DLBENCH_DEVICE_CLOCK`` chooses: ``auto`` (the order above, the default), ``cupti`` (CUPTI
only), ``adapter`` (the adapter's or a registered clock, never CUPTI), ``off``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from adapters.base import DeviceClock
from suites.stats.timer import TimerSettings

FACTORIES: list[Callable[[Any], Any]] = []
CLOCK_ENV = "DLBENCH_DEVICE_CLOCK"
CHOICES = ("auto", "cupti", "adapter", "off")


def register(factory: Callable[[Any], Any]) -> None:
    FACTORIES.append(factory)


class FirstWorkingClock(DeviceClock):
    """Delegates to the first clock; a block it cannot time (``elapsed`` None) hands the
    next blocks to the next clock. ``kind`` names the clocks that timed blocks."""

    def __init__(self, clocks: list[DeviceClock]):
        self.clocks = clocks
        self.failures: list[str] = []
        self.timed_by: list[str] = []

    @property
    def current(self) -> DeviceClock:
        return self.clocks[0]

    @property
    def kind(self) -> str:  # type: ignore[override]
        return " then ".join(self.timed_by) or self.current.kind

    @property
    def reason(self) -> str:  # type: ignore[override]
        return "; ".join(self.failures)

    def hold(self, seconds: float) -> None:
        self.current.hold(seconds)

    def start(self) -> None:
        self.current.start()

    def end(self) -> None:
        self.current.end()

    def elapsed(self) -> float | None:
        elapsed = self.current.elapsed()
        kind = self.current.kind
        if elapsed is not None and kind not in self.timed_by:
            self.timed_by.append(kind)
        if elapsed is None:
            failure = self.current.reason or f"{kind}: no time for the block"
            if failure not in self.failures:
                self.failures.append(failure)
            if len(self.clocks) > 1:
                self.clocks = self.clocks[1:]
        return elapsed

    def span(self) -> float | None:
        return self.current.span()

    def abort(self) -> None:
        self.current.abort()


def clock_choice() -> str:
    choice = os.environ.get(CLOCK_ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{CLOCK_ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


# Why a wall-phase process never loads CUPTI, as its rows say where no other clock is left.
WALL_PHASE = ("the job's device_time row has the CUPTI device time, taken after this "
              "process's last wall sample or in another process (CUPTI slows later "
              "launches where it is loaded)")
COMPILE_CACHE_JOB = ("a compile-cache job: its first call is the figure, and it gets no "
                     "device phase")


def device_clock_for(prepared: Any, device: str,
                     cupti_clock: Callable[[], tuple[Any, str]] | None = None,
                     without_cupti: str = "") -> tuple[Any, str]:
    """(clock, "") or (None, the reason there is none). ``cupti_clock`` is
    ``suites.instruments.cupti_clock.cupti_clock`` unless a test passes a stand-in; a process given
    ``without_cupti`` (why: ``WALL_PHASE``, ``COMPILE_CACHE_JOB``) never loads CUPTI."""
    if device != "gpu":
        return None, "cpu run: host and device time are one"
    choice = clock_choice()
    if choice == "off":
        return None, f"{CLOCK_ENV}=off"
    clocks: list[Any] = []
    reasons: list[str] = []
    if without_cupti:
        reasons.append(without_cupti)
    if choice in ("auto", "cupti") and not without_cupti:
        if cupti_clock is None:
            from suites.instruments.cupti_clock import cupti_clock
        clock, reason = cupti_clock()
        if clock is not None:
            clocks.append(clock)
        else:
            reasons.append(reason)
    if choice in ("auto", "adapter"):
        adapter_clock = prepared.device_clock()
        for factory in FACTORIES:
            if adapter_clock is not None:
                break
            adapter_clock = factory(prepared)
        if adapter_clock is not None:
            clocks.append(adapter_clock)
        else:
            reasons.append("this framework offers no device clock of its own")
    if not clocks:
        return None, "; ".join(reasons)
    return (clocks[0] if len(clocks) == 1 else FirstWorkingClock(clocks)), ""


def device_time_method(settings: TimerSettings) -> str:
    """How the row's device time was taken, for ``device_time_method``."""
    blocks = settings.device_blocks
    return (f"{blocks} device block{'s' if blocks != 1 else ''} after the wall samples of "
            f"each of the first {settings.repetitions} repetitions, never among them: "
            f"tracing or holding the device cannot change the wall time beside it")
