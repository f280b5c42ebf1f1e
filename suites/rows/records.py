"""The row's ``timing`` object as a typed, frozen record, serialised in one place.

Three producers build it: one worker's repetitions (``suites/stats/repetitions.py``), a
case's rounds in separate processes merged (``suites/harness/rounds.py``), and one timer run
of a data-parallel rank (``Timing.of_run``); the instruments add
their readings to it (``dataclasses.replace``). ``to_dict`` writes the JSON object the rows
carry, every key in the order the rows have always had it; ``from_dict`` reads one back.

Fields come in groups, each written whole or not at all, so a row says "not measured"
(null) apart from "not part of this kind of row" (absent):

* one timed run: always;
* repetitions: the between-run figures and the device time; the device span and the
  launch-bound verdict (suites/stats/launch_bound.py);
* ``adapter``: the framework's own settings and notes for the case (an adapter's
  ``Prepared.extra``), open-ended because each framework has its own;
* the GPU's state, its energy, the host's state: each group written whole where any of
  its fields is set;
* every other field (the epoch measures' per-batch figures, which device clock was used or
  why none was, why the case ran in a fresh process, rounds in separate processes, earlier
  runs, a data-parallel rank's local step) written where set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

# Groups written whole where any field of theirs is set (the module's docstring): null
# inside a group means "not measured".
REPEATED = ("repetitions", "interval", "repetition_medians_ms", "repetition_inner_loops",
            "within_run_ci_ms", "steady_ms", "device_median_ms")
# Rows of earlier versions have the device span and launch-bound verdict nowhere.
LAUNCH_BOUND = ("device_span_median_ms", "host_overhead_ms", "launch_bound",
                "launch_bound_reason")
GPU_STATE = ("gpu_sm_clock_mhz_min", "gpu_sm_clock_mhz_median", "gpu_sm_clock_mhz_max",
             "gpu_sm_clock_max_mhz", "gpu_mem_clock_mhz_median", "gpu_power_w_median",
             "gpu_temperature_c_max", "gpu_readings", "gpu_state_reason")
ENERGY = ("gpu_energy_power_w", "energy_per_iteration_j", "energy_window_s", "energy_source")
HOST_STATE = ("host_steal_pct_median", "host_steal_pct_max", "host_load_1m",
              "host_cpu_mhz_median", "host_core_probe_ms", "host_wakeup_us", "host_readings",
              "host_state_reason")
GROUP_OF = {name: group for group in (REPEATED, LAUNCH_BOUND, GPU_STATE, ENERGY, HOST_STATE)
            for name in group}


@dataclass(frozen=True)
class Timing:
    """A row's ``timing`` (milliseconds): see the module's docstring for the groups."""

    # One timed run, or the samples of every repetition pooled.
    first_call_ms: float
    median_ms: float
    iqr_ms: float
    ci_low_ms: float
    ci_high_ms: float
    mean_ms: float
    min_ms: float
    samples: int
    samples_ms: tuple[float, ...]
    inner_loops: int
    unstable: bool
    unstable_reason: str
    # Repetitions (suites/stats/repetitions.py) and the device time beside the wall time.
    repetitions: int | None = None
    interval: str | None = None
    repetition_medians_ms: tuple[float, ...] | None = None
    repetition_inner_loops: tuple[int, ...] | None = None
    within_run_ci_ms: tuple[tuple[float, float], ...] | None = None
    steady_ms: float | None = None
    device_median_ms: float | None = None
    device_span_median_ms: float | None = None
    host_overhead_ms: float | None = None
    launch_bound: bool | None = None
    launch_bound_reason: str | None = None
    # The framework's own settings and notes (Prepared.extra), in its order.
    adapter: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Epoch measures (Bahrampour et al. Table 6: time per batch of an epoch).
    epoch_batches: int | None = None
    per_batch_median_ms: float | None = None
    mean_padded_length: float | None = None
    # The GPU's state while sampling (suites/instruments/device_state.py).
    gpu_sm_clock_mhz_min: float | None = None
    gpu_sm_clock_mhz_median: float | None = None
    gpu_sm_clock_mhz_max: float | None = None
    gpu_sm_clock_max_mhz: float | None = None
    gpu_mem_clock_mhz_median: float | None = None
    gpu_power_w_median: float | None = None
    gpu_temperature_c_max: float | None = None
    gpu_readings: int | None = None
    gpu_state_reason: str | None = None
    gpu_energy_power_w: float | None = None
    energy_per_iteration_j: float | None = None
    energy_window_s: float | None = None
    energy_source: str | None = None
    # The host's state while sampling (suites/instruments/host_state.py).
    host_steal_pct_median: float | None = None
    host_steal_pct_max: float | None = None
    host_load_1m: float | None = None
    host_cpu_mhz_median: float | None = None
    host_core_probe_ms: float | None = None
    host_wakeup_us: float | None = None
    host_readings: int | None = None
    host_state_reason: str | None = None
    # Which device clock gave device_median_ms, or why there is none
    # (suites/instruments/device_time.py).
    device_time_reason: str | None = None
    device_time_kind: str | None = None
    device_time_method: str | None = None
    device_time_note: str | None = None
    # The out-of-memory error that sent the case to a fresh process (suites/harness/worker.py).
    fresh_process_after: str | None = None
    # Rounds in separate processes merged (suites/harness/rounds.py).
    rounds: int | None = None
    round_medians_ms: tuple[float, ...] | None = None
    between_process: Mapping[str, Any] | None = None
    # The interval widened over earlier runs of the machine model (suites/stats/between_runs.py).
    between_runs: Mapping[str, Any] | None = None
    # A data-parallel rank's own step without communication (parallel/rank.py).
    local_median_ms: float | None = None
    local_ci_low_ms: float | None = None
    local_ci_high_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("samples_ms", "repetition_medians_ms", "repetition_inner_loops",
                     "round_medians_ms"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.within_run_ci_ms is not None:
            object.__setattr__(self, "within_run_ci_ms",
                               tuple(tuple(pair) for pair in self.within_run_ci_ms))
        if not isinstance(self.adapter, MappingProxyType):
            object.__setattr__(self, "adapter", MappingProxyType(dict(self.adapter)))

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON ``timing`` object."""
        out: dict[str, Any] = {}
        for item in fields(self):
            name = item.name
            if name == "adapter":
                out.update(self.adapter)
                continue
            value = getattr(self, name)
            group = GROUP_OF.get(name)
            if any(getattr(self, other) is not None for other in group or (name,)):
                out[name] = _plain(value)
        return out

    @staticmethod
    def of_run(run: Any) -> Timing:
        """One ``suites.stats.timer.Timing`` (seconds) as a row's timing: a data-parallel
        rank's, timed once without repetitions (parallel/rank.py)."""
        ms = 1e3
        return Timing(first_call_ms=run.first_call_s * ms, median_ms=run.median_s * ms,
                      iqr_ms=run.iqr_s * ms, ci_low_ms=run.ci_low_s * ms,
                      ci_high_ms=run.ci_high_s * ms, mean_ms=run.mean_s * ms,
                      min_ms=run.min_s * ms, samples=len(run.samples_s),
                      samples_ms=tuple(s * ms for s in run.samples_s),
                      inner_loops=run.inner_loops, unstable=run.unstable,
                      unstable_reason=run.unstable_reason, adapter=run.extra)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Timing:
        """A row's ``timing`` object read back; keys no field names are the adapter's."""
        known = {item.name for item in fields(Timing)} - {"adapter"}
        return Timing(**{name: value for name, value in data.items() if name in known},
                      adapter={name: value for name, value in data.items() if name not in known})


def _plain(value: Any) -> Any:
    """JSON's shapes: tuples as lists, read-only mappings as dicts."""
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
