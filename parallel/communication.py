"""Communication against compute on each GPU, from CUPTI's kernel records: how long NCCL's
kernels ran per step, how much of that ran while a compute kernel was running on the same
device (overlapped: the all-reduce hidden behind backward), and how much ran alone
(exposed: the step waits for it). Framework-neutral: the same CUPTI window
(``suites/instruments/cupti_window.py``) the device clock uses, in every engine's rank process.

A kernel is communication when its name holds ``nccl`` (NCCL's ``ncclDevKernel_*`` and
``ncclKernel_*``, whether PyTorch, XLA or TensorFlow launched them). An NCCL kernel's
interval includes the time it spins waiting for its peers, so "NCCL kernel time" is an
upper bound on transfer time; its exposed part is what the step pays for communication
plus waiting on the slowest device, which is what a scaling loss is made of.

This module is plain arithmetic over records (tested without a GPU); ``trace`` runs it on a
live engine.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from suites.instruments.cupti_window import CuptiWindow, busy_and_span_ns, detach, load_cupti
from suites.rows.scaling import implausible

NCCL_MARK = "nccl"
TOOL = "CUPTI activity records (concurrent kernels), names holding 'nccl' against the rest"
NS_PER_MS = 1e6
# The host clock the traced steps are timed on (tests replace it with a simulated one).
host_clock = time.perf_counter
# Why CUPTI is still attached to this process after the last trace, or "".
DETACH_PROBLEM = ""


def is_communication(name: str) -> bool:
    return NCCL_MARK in name.lower()


def per_device(records: Iterable[Any]) -> dict[int, dict[str, int]]:
    """For each device: NCCL kernel time, compute kernel time, the two overlapped, and the
    device's busy time (any kernel), in ns. Each is a union of intervals
    (``busy_and_span_ns``, the device clock's), so kernels on several streams count once;
    the overlap is |NCCL| + |compute| − |NCCL ∪ compute|."""
    nccl: dict[int, list[Any]] = defaultdict(list)
    compute: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        (nccl if is_communication(record.name) else compute)[record.device_id].append(record)
    out = {}
    for device in sorted(set(nccl) | set(compute)):
        nccl_ns = busy_and_span_ns(nccl[device])[0]
        compute_ns = busy_and_span_ns(compute[device])[0]
        busy_ns = busy_and_span_ns(nccl[device] + compute[device])[0]
        out[device] = {"nccl_ns": nccl_ns, "compute_ns": compute_ns,
                       "overlapped_ns": nccl_ns + compute_ns - busy_ns, "busy_ns": busy_ns}
    return out


def summarise(records: Iterable[Any], steps: int,
              wall_ms_per_step: float | None = None) -> dict[str, Any] | None:
    """Per step, averaged over the traced devices: NCCL kernel time, the part of it that
    overlapped compute and the part that ran alone. None without kernel records.
    ``wall_ms_per_step``: the host's time per traced step, recorded beside the kernels so a
    reader sees how much of the step no kernel ran (launch gaps, host work)."""
    devices = per_device(records)
    if not devices or steps < 1:
        return None

    def mean_ms(key: str) -> float:
        return sum(d[key] for d in devices.values()) / len(devices) / steps / NS_PER_MS

    nccl, overlapped = mean_ms("nccl_ns"), mean_ms("overlapped_ns")
    return {"tool": TOOL, "iterations": steps, "devices": len(devices),
            "nccl_kernel_ms_per_step": nccl,
            "overlapped_ms_per_step": overlapped,
            "exposed_nccl_ms_per_step": nccl - overlapped,
            "overlap_share": overlapped / nccl if nccl else None,
            "compute_kernel_ms_per_step": mean_ms("compute_ns"),
            "all_kernel_ms_per_step": mean_ms("busy_ns"),
            "traced_wall_ms_per_step": wall_ms_per_step}


def trace(engine: Any, steps: int) -> tuple[dict[str, Any] | None, str]:
    """``steps`` synchronised steps of ``engine`` under a CUPTI window; (summary, "") or
    (None, why not). Every rank calls it: the traced steps all-reduce too.

    The window opens with one step that is not counted. Opening a window attaches CUPTI,
    which takes each process a different time; the first all-reduce after it waits for
    the last rank to attach, and the NCCL kernels of the ranks that came first spin all
    that while. Counted in, that wait showed as NCCL kernel time of 9.8 to 43 ms per step
    in steps of 11.6 to 70 ms (PyTorch, one process per GPU, 4× H200), more than the steps
    themselves. The uncounted step is a barrier: the counted ones start aligned."""
    from suites.instruments.kernel_trace import unavailable_reason

    reason = unavailable_reason()
    if reason:
        return None, reason
    run = engine.step()
    cupti = load_cupti()
    window = CuptiWindow(cupti, ("CONCURRENT_KERNEL",), "communication")
    window.open()
    try:
        engine.sync(run())
        counted_from = int(cupti.get_timestamp())
        started = host_clock()
        for _ in range(steps):
            engine.sync(run())
        wall_ms = (host_clock() - started) * 1e3 / steps
    finally:
        closed = window.close()
        # Attached, CUPTI slows every later launch of the process (suites/instruments/cupti_window.py,
        # detach): the next case of a shared launch must not be timed under it.
        global DETACH_PROBLEM
        DETACH_PROBLEM = detach(cupti)
    origin = closed.start_ns + round((counted_from - closed.start_ns) * closed.ns_per_tick)
    counted = [record for record in closed.kept if record.start_ns >= origin]
    summary = summarise(counted, steps, wall_ms)
    if summary is None:
        return None, (f"CUPTI recorded no kernel in {steps} steps "
                      f"({closed.received} records received)")
    wrong = implausible(summary)
    return (None, wrong) if wrong else (summary, "")
