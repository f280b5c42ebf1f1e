"""Device time from CUPTI's activity records, for every framework alike: a
``adapters.base.DeviceClock`` whose block is one ``suites.instruments.cupti_window.CuptiWindow``.

Per block it gives the device's *busy* time (the union of the block's kernel, memcpy and
memset intervals: overlapping work on several streams counts once, and the gaps between
launches are not in it by construction) and the *span* (first start to last end: busy
time plus the device's idle gaps, which a launch-bound case fills with waiting). It needs
no hold: unlike CUDA events, whose interval includes every launch gap unless the launches
are queued behind a spin kernel (nvbench's blocking kernel), CUPTI times each kernel
itself. Copies and sets are counted beside kernels so that a ``transfer`` row (a copy, no
kernel) and a gradient's zero-fills are device time too, as CUDA events count them.

CUPTI is enabled only for the window of a device block (``suites/timer.time_on_device``
runs those after a repetition's wall samples), so the wall samples are never traced.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from adapters.base import DeviceClock
from suites.instruments.cupti_window import CuptiWindow, busy_and_span_ns, detach

DEVICE_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")
DETACH_ENV = "DLBENCH_CUPTI_DETACH"
NS_PER_S = 1e9


class CuptiClock(DeviceClock):
    kind = ("CUPTI activity records (kernels, memcpy, memset) of the block, overlaps merged: "
            "device busy time")

    def __init__(self, cupti: Any, detach_after_block: bool | None = None):
        self.cupti = cupti
        # CUPTI detached after each block (suites.instruments.cupti_window.detach), so that no launch
        # overhead it leaves behind reaches the next wall samples; DLBENCH_CUPTI_DETACH=1.
        self.detach_after_block = os.environ.get(DETACH_ENV, "0") == "1" \
            if detach_after_block is None else detach_after_block
        self.window: CuptiWindow | None = None
        self.last_span_s: float | None = None
        self.reason = ""          # why the last block gave no time ("" when it did)
        # The last block's window received no record at all: the step did nothing on the
        # device there, or CUPTI saw nothing of this process (suites/harness/device_pass.py tells
        # the two apart by the job's other measures).
        self.recorded_nothing = False

    def hold(self, seconds: float) -> None:
        """Nothing to hold: busy time leaves the launch gaps out by construction."""

    def start(self) -> None:
        self.last_span_s = None
        self.recorded_nothing = False   # this block's, not an earlier one's
        self.window = CuptiWindow(self.cupti, DEVICE_KINDS, "device-clock")
        try:
            self.window.open()
        except Exception as error:   # CUPTI refused: another subscriber, no permission
            self.window = None
            self.reason = f"CUPTI device clock failed: {type(error).__name__}: {error}"[:300]

    def end(self) -> None:
        """The window closes in ``elapsed``, after the caller's sync: a kernel still
        running at ``end`` must still count."""

    def elapsed(self) -> float | None:
        if self.window is None:
            return None
        window, self.window = self.window, None
        try:
            closed = window.close()
        except Exception as error:
            self.reason = f"CUPTI device clock failed: {type(error).__name__}: {error}"[:300]
            return None
        self.recorded_nothing = closed.received == 0
        if not closed.kept:
            self.reason = (f"CUPTI recorded no kernel, copy or set in the device block "
                           f"({closed.received} records received, {closed.outside} outside "
                           f"the window)")
            return None
        if self.detach_after_block:
            problem = detach(self.cupti)
            if problem:
                self.detach_after_block = False
                self.reason = problem
                return None
        busy, span = busy_and_span_ns(closed.kept)
        self.reason = ""
        self.last_span_s = span / NS_PER_S
        return busy / NS_PER_S

    def span(self) -> float | None:
        return self.last_span_s

    def abort(self) -> None:
        if self.window is not None:
            window, self.window = self.window, None
            with contextlib.suppress(Exception):
                window.close()


def cupti_clock() -> tuple[CuptiClock | None, str]:
    """A CUPTI clock, or None with the reason there is none (cupti-python missing)."""
    from suites.instruments.cupti_window import load_cupti
    from suites.instruments.kernel_trace import unavailable_reason

    reason = unavailable_reason()
    if reason:
        return None, reason.replace("kernel tracer", "device clock")
    return CuptiClock(load_cupti()), ""
