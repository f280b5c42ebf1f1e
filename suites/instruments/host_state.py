"""The host CPU's state while a case is sampled, beside the GPU's (``device_state.py``):
the share of CPU time the hypervisor took (steal), the load average, the CPU clock, and
two probes' times.

A launch-bound GPU case's wall time follows the host (``suites/stats/launch_bound.py``): on two
H100 hosts the device medians agreed within 0.5% while the wall medians did not. These
fields let a reader tell a slow host from a slow framework: steal time on a shared VM,
other work on the machine, a CPU clocked down.

Readings are cheap (``/proc/stat``, ``/proc/loadavg`` and the cpufreq files, through
psutil): on a GPU run one every ``PERIOD_S`` from a background thread plus one at each
end; on a CPU run only one before and one after sampling, so no thread competes with the
framework for the cores being measured. Steal is the share of all CPU time between two
readings (psutil's ``cpu_times``, summed over CPUs, guest time not counted twice as the
kernel already counts it in user time: proc(5)). Where a figure is unreadable (steal
outside Linux, no cpufreq in a VM) it is None and ``host_state_reason`` says which.

Two probes (``host_probe.py``) are timed before each repetition's sampling, outside the
timed blocks: the single-core speed and the cross-core wake-up, which the readings above
can miss.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import psutil

from suites.instruments.host_probe import ProbeReading, run_probes

HOST_FIELDS = ("host_steal_pct_median", "host_steal_pct_max", "host_load_1m",
               "host_cpu_mhz_median", "host_core_probe_ms", "host_wakeup_us", "host_readings")
PERIOD_S = 0.5
# Fields of psutil.cpu_times() that are already inside user and nice (proc(5): guest time
# is accounted to user time as well).
_COUNTED_TWICE = ("guest", "guest_nice")


@dataclass(frozen=True)
class HostReading:
    at_s: float
    cpu_total_s: float | None      # all CPUs' time since boot
    steal_s: float | None          # all CPUs' steal time since boot (None: not reported)
    load_1m: float | None
    cpu_mhz: float | None
    probe: ProbeReading | None = None  # only the reading that starts a repetition's sampling


def _call(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:   # not on this OS, or a file the VM does not provide
        return None


def read_host(clock: Callable[[], float] = time.perf_counter, source: Any = psutil) -> HostReading:
    times = _call(source.cpu_times)
    total = steal = None
    if times is not None:
        fields = times._asdict()
        total = sum(v for k, v in fields.items() if k not in _COUNTED_TWICE)
        steal = fields.get("steal")
    load = _call(os.getloadavg)
    freq = _call(source.cpu_freq)
    mhz = float(freq.current) if freq is not None and getattr(freq, "current", 0) else None
    return HostReading(clock(), total, steal, None if load is None else float(load[0]), mhz)


def steal_shares(readings: list[HostReading]) -> list[float]:
    """Steal time as a percentage of all CPU time, between consecutive readings."""
    shares = []
    for before, after in zip(readings, readings[1:], strict=False):
        if None in (before.steal_s, after.steal_s, before.cpu_total_s, after.cpu_total_s):
            continue
        elapsed = after.cpu_total_s - before.cpu_total_s
        if elapsed > 0:
            shares.append(100.0 * (after.steal_s - before.steal_s) / elapsed)
    return shares


def empty_host_state(reason: str) -> dict[str, Any]:
    return {**{name: None for name in HOST_FIELDS}, "host_state_reason": reason}


def summarise_host(runs: list[list[HostReading]]) -> dict[str, Any]:
    """The row's host fields from the readings of each repetition (steal shares are taken
    within a repetition, never across the gap between two)."""
    readings = [r for run in runs for r in run]
    if not readings:
        return empty_host_state("no host reading was taken while sampling")
    steal = [share for run in runs for share in steal_shares(run)]
    load = [r.load_1m for r in readings if r.load_1m is not None]
    mhz = [r.cpu_mhz for r in readings if r.cpu_mhz is not None]
    cores = [r.probe.core_ms for r in readings if r.probe is not None]
    wakeups = [r.probe.wakeup_us for r in readings
               if r.probe is not None and r.probe.wakeup_us is not None]
    missing = [what for what, values in (("steal time", steal), ("load average", load),
                                         ("CPU frequency", mhz)) if not values]
    if not steal and any(r.steal_s is not None for r in readings):
        # Reported, but the kernel's CPU times (1/100 s ticks) did not move between readings.
        missing[0] = "steal time (readings too close together)"
    return {
        "host_steal_pct_median": statistics.median(steal) if steal else None,
        "host_steal_pct_max": max(steal) if steal else None,
        "host_load_1m": statistics.median(load) if load else None,
        "host_cpu_mhz_median": statistics.median(mhz) if mhz else None,
        "host_core_probe_ms": statistics.median(cores) if cores else None,
        "host_wakeup_us": statistics.median(wakeups) if wakeups else None,
        "host_readings": len(readings),
        "host_state_reason": (f"not readable here: {', '.join(missing)}" if missing else ""),
    }


def merge_host_fields(timings: list[dict[str, Any]]) -> dict[str, Any]:
    """Host fields of one case's rows from several processes (``suites/harness/rounds.py``)."""
    def pick(name):
        return [t[name] for t in timings if t.get(name) is not None]
    steal_max = pick("host_steal_pct_max")
    return {
        "host_steal_pct_median": _median(pick("host_steal_pct_median")),
        "host_steal_pct_max": max(steal_max) if steal_max else None,
        "host_load_1m": _median(pick("host_load_1m")),
        "host_cpu_mhz_median": _median(pick("host_cpu_mhz_median")),
        "host_core_probe_ms": _median(pick("host_core_probe_ms")),
        "host_wakeup_us": _median(pick("host_wakeup_us")),
        "host_readings": sum(pick("host_readings")),
        "host_state_reason": "; ".join(dict.fromkeys(
            t.get("host_state_reason") for t in timings if t.get("host_state_reason"))),
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class HostMonitor:
    """Readings around each repetition's sampling, the first with the probes' times;
    ``periodic`` adds one per ``PERIOD_S`` from a background thread (GPU runs, where the
    host's cores are not the ones measured)."""

    def __init__(self, periodic: bool, read: Callable[[], HostReading] = read_host,
                 period_s: float = PERIOD_S,
                 probe: Callable[[], ProbeReading] = run_probes):
        self.periodic = periodic
        self.read = read
        self.probe = probe
        self.period_s = period_s
        self.readings: list[HostReading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_sampling(self) -> None:
        # The probes first, so that they run before the sampling thread starts.
        self.readings = [replace(self.read(), probe=self.probe())]
        if self.periodic:
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.period_s):
            self.readings.append(self.read())

    def stop_sampling(self) -> list[HostReading]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.readings.append(self.read())
        return self.readings
