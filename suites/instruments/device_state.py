"""The GPU's state around a measurement, read through NVML (``nvidia-ml-py``, imported as
``pynvml``): whether it has reached its working clocks before the first sample, and its SM
and memory clocks, power and temperature while samples are taken, so a reader sees when a
clock dropped (issue: GPU clocks ramp and drop between cases).

dlbench only reads: it never changes an accelerator's settings (application clocks, power
limits, persistence mode). Users who may lock clocks do so themselves before a run
(README, "Reproducible GPU timings"); the rows then show the locked clocks.

Energy: NVML's total energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules
since the driver loaded; Volta and later) is read with every reading, and over each
sampling window (the case running: steady-clock wait, warm-up and timed samples) it gives
the GPU's average power; times the row's median that is the energy of one iteration
(``energy_fields``). Where the counter is missing, the median of the power readings
stands in, and ``energy_source`` says so.

Without NVML (no ``pynvml``, no driver, a CPU run) every field is None and
``gpu_state_reason`` says why.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Field names in the row's ``timing`` object.
STATE_FIELDS = ("gpu_sm_clock_mhz_min", "gpu_sm_clock_mhz_median", "gpu_sm_clock_mhz_max",
                "gpu_sm_clock_max_mhz", "gpu_mem_clock_mhz_median", "gpu_power_w_median",
                "gpu_temperature_c_max", "gpu_readings")


@dataclass(frozen=True)
class Reading:
    at_s: float
    sm_mhz: float
    mem_mhz: float
    power_w: float | None
    temperature_c: float | None
    energy_mj: float | None = None      # NVML's total energy counter, if the GPU has one


def empty_state(reason: str) -> dict[str, Any]:
    return {**{name: None for name in STATE_FIELDS}, "gpu_state_reason": reason}


def summarise_readings(readings: list[Reading], sm_max_mhz: float | None) -> dict[str, Any]:
    """The row's GPU-state fields from the readings taken while sampling."""
    if not readings:
        return empty_state("no NVML reading was taken while sampling")
    sm = [r.sm_mhz for r in readings]
    power = [r.power_w for r in readings if r.power_w is not None]
    temperature = [r.temperature_c for r in readings if r.temperature_c is not None]
    return {
        "gpu_sm_clock_mhz_min": min(sm), "gpu_sm_clock_mhz_median": statistics.median(sm),
        "gpu_sm_clock_mhz_max": max(sm), "gpu_sm_clock_max_mhz": sm_max_mhz,
        "gpu_mem_clock_mhz_median": statistics.median(r.mem_mhz for r in readings),
        "gpu_power_w_median": statistics.median(power) if power else None,
        "gpu_temperature_c_max": max(temperature) if temperature else None,
        "gpu_readings": len(readings), "gpu_state_reason": "",
    }


ENERGY_FIELDS = ("gpu_energy_power_w", "energy_per_iteration_j", "energy_window_s",
                 "energy_source")


def energy_fields(windows: list[list[Reading]], median_s: float | None) -> dict[str, Any]:
    """Average power over the sampling windows and the energy of one iteration (the
    module's docstring). Windows of one reading, or a counter that did not advance (it
    updates every few tens of ms), contribute nothing."""
    energy_j = seconds = 0.0
    for window in windows:
        if len(window) > 1 and window[0].energy_mj is not None \
                and window[-1].energy_mj is not None:
            gained = (window[-1].energy_mj - window[0].energy_mj) / 1000.0
            if gained > 0:
                energy_j += gained
                seconds += window[-1].at_s - window[0].at_s
    if seconds > 0:
        power, source = energy_j / seconds, (f"NVML total energy counter over {seconds:.2f} s "
                                             f"of the case running")
    else:
        power_readings = [r.power_w for w in windows for r in w if r.power_w is not None]
        if not power_readings:
            return {**{name: None for name in ENERGY_FIELDS},
                    "energy_source": "no energy counter and no power reading"}
        power, source = (statistics.median(power_readings),
                         "median NVML power reading × time (this GPU has no energy counter)")
    return {"gpu_energy_power_w": power,
            "energy_per_iteration_j": power * median_s if median_s else None,
            "energy_window_s": seconds or None, "energy_source": source}


def clocks_settled(readings: list[Reading], window_s: float = 0.015,
                   tolerance: float = 0.02) -> bool:
    """True once the last three SM clock readings, spanning at least ``window_s``, stay
    within ``tolerance`` of their highest: the clock has ramped up and stopped moving.
    NVML's clock reading is instantaneous and boost ramps take tens of milliseconds, so
    readings closer together could catch a pause in a ramp still in progress."""
    if len(readings) < 3:
        return False
    last = readings[-3:]
    if last[-1].at_s - last[0].at_s < window_s:
        return False
    clocks = [r.sm_mhz for r in last]
    return min(clocks) >= (1 - tolerance) * max(clocks)


def near_maximum(readings: list[Reading], sm_max_mhz: float | None,
                 share: float = 0.9) -> bool:
    """True when the last two SM clock readings are both within ``share`` of the GPU's
    maximum: the clock is up, whatever small steps a power limit makes it take (steps
    that could keep ``clocks_settled`` waiting until ``steady_max_s`` on every case)."""
    if not sm_max_mhz or len(readings) < 2:
        return False
    return min(r.sm_mhz for r in readings[-2:]) >= share * sm_max_mhz


class GpuMonitor:
    """One GPU seen through NVML."""

    POLL_S = 0.01       # steadiness check: at most one reading per 10 ms
    SAMPLE_S = 0.05     # while sampling: one reading per 50 ms, from a background thread

    def __init__(self, nvml, handle, clock: Callable[[], float] = time.perf_counter):
        self.nvml = nvml
        self.handle = handle
        self.clock = clock
        self.sm_max_mhz = self._call(nvml.nvmlDeviceGetMaxClockInfo, handle,
                                     nvml.NVML_CLOCK_SM)
        self.steady_readings: list[Reading] = []
        self.readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _call(function, *args):
        try:
            return function(*args)
        except Exception:   # a field this GPU or driver does not report
            return None

    def uuid(self) -> str | None:
        found = self._call(self.nvml.nvmlDeviceGetUUID, self.handle)
        return found.decode() if isinstance(found, bytes) else found

    def memory(self) -> tuple[int, int] | None:
        """(bytes in use by every process on the GPU, the GPU's bytes), from NVML."""
        info = self._call(self.nvml.nvmlDeviceGetMemoryInfo, self.handle)
        if info is None or not getattr(info, "total", 0):
            return None
        return int(info.used), int(info.total)

    def read(self) -> Reading:
        nvml, handle = self.nvml, self.handle
        power_mw = self._call(nvml.nvmlDeviceGetPowerUsage, handle)
        # Missing from older bindings; unsupported before Volta (then _call gives None).
        energy = getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None)
        return Reading(self.clock(),
                       float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                       float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
                       None if power_mw is None else power_mw / 1000.0,
                       self._call(nvml.nvmlDeviceGetTemperature, handle,
                                  nvml.NVML_TEMPERATURE_GPU),
                       self._call(energy, handle) if energy is not None else None)

    # --- before the first sample -----------------------------------------------------
    def begin_steady(self) -> None:
        self.steady_readings = []

    def steady(self) -> bool:
        """Called between untimed runs of the case: True once the clocks have settled."""
        now = self.clock()
        if not self.steady_readings or now - self.steady_readings[-1].at_s >= self.POLL_S:
            self.steady_readings.append(self.read())
        return (clocks_settled(self.steady_readings)
                or near_maximum(self.steady_readings, self.sm_max_mhz))

    # --- while sampling ----------------------------------------------------------------
    def start_sampling(self) -> None:
        self.readings = [self.read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            self.readings.append(self.read())

    def stop_sampling(self) -> list[Reading]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.readings.append(self.read())
        return self.readings


def nvml_index() -> tuple[str, str]:
    """Which NVML device is the framework's first GPU: the first entry of
    CUDA_VISIBLE_DEVICES (an index or a GPU-UUID), else index 0. ("index", "0") form."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return "uuid", visible
    return "index", visible if visible.isdigit() else "0"


def open_monitor(device: str) -> tuple[GpuMonitor | None, str]:
    """A monitor for a GPU run, or None with the reason there is none."""
    if device != "gpu":
        return None, "cpu run: no GPU state"
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
        kind, value = nvml_index()
        handle = (pynvml.nvmlDeviceGetHandleByUUID(value) if kind == "uuid"
                  else pynvml.nvmlDeviceGetHandleByIndex(int(value)))
        monitor = GpuMonitor(pynvml, handle)
        monitor.read()
    except Exception as error:  # no driver, no permission, a MIG slice NVML hides
        return None, f"NVML unavailable: {type(error).__name__}: {error}"[:300]
    return monitor, ""
