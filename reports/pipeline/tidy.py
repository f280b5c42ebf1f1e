"""The merged tidy table: one row per result row, flat columns, reruns resolved.

Rule (DESIGN.md "Fairness rules"): rows whose settings differ are never averaged or merged
— the suite that measured a row, every field of ``settings`` plus the hardware and the
framework version is part of the identity (``IDENTITY``). Rows with identical identity
(reruns) are reduced to the latest one (by ``started_at``, then read order); how many were
superseded is reported.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import pandas as pd

from models.analysis import analyse
from models.measures import (
    GENERATE,
    MEASURE_TIMING_FIELDS,
    NO_DEVICE_WORK,
    SERVE,
    device_above_wall_reason,
    device_exceeds_wall,
)
from models.zoo import UnknownModel, get_model
from reports.pipeline.load import Loaded
from suites.instruments.kernel_trace import dominant_family  # plain data: no framework, no cupti
from suites.rows.keys import cpu_label
from suites.stats.intervals import relabel, relabel_unstable

# compile_cache ("", "cold", "warm"; Bahrampour Table 8) is part of the identity: a cold and a
# warm run of one case are two measurements, never one.
SETTING_FIELDS = ("framework", "device", "precision", "variant", "threads", "interop_threads",
                  "layout", "execution", "compile_cache")
ENV_FIELDS = ("host", "os", "python", "cpu_model", "cpu_isa", "physical_cores", "logical_cores",
              "gpu_model", "gpu_driver", "cuda", "cudnn", "framework_version", "dlbench_commit")
TIMING_FIELDS = ("first_call_ms", "median_ms", "iqr_ms", "ci_low_ms", "ci_high_ms", "mean_ms",
                 "min_ms", "samples", "inner_loops")
# Beside these, the extra timing fields some measures declare (models/measures.py
# MEASURE_TIMING_FIELDS): the epoch measures' (Bahrampour Table 6), where median_ms is the
# whole epoch and they say how it divides into batches.
# How the timing was taken (suites/stats/repetitions.py, device_state.py, device_time.py): the
# independent repetitions behind the median and interval, the device's own time (kernel busy
# time per iteration; the span from the first kernel's start to the last one's end), and the
# GPU's clocks, power and temperature while sampling. NaN for rows written before them: a
# field a row lacks is absent, never zero.
CONDITION_FIELDS = ("repetitions", "device_median_ms", "device_span_median_ms",
                    "gpu_sm_clock_mhz_min",
                    "gpu_sm_clock_mhz_median", "gpu_sm_clock_mhz_max", "gpu_sm_clock_max_mhz",
                    "gpu_mem_clock_mhz_median", "gpu_power_w_median", "gpu_temperature_c_max")
CONDITION_TEXT = ("interval", "host_buffer", "gpu_state_reason", "device_time_reason",
                  "device_time_kind")
# The GPU's energy while the case ran (suites/instruments/device_state.py energy_fields): average power,
# the energy of one iteration and where it came from (NVML's energy counter, or the median
# power reading where the GPU has none). NaN / "" on CPU rows and rows written before them.
ENERGY_FIELDS = ("gpu_energy_power_w", "energy_per_iteration_j", "energy_window_s")
ENERGY_TEXT = ("energy_source",)
# The practice suites (bf16 / TF32 / fp32 at large batches, the training step:
# reports/sections/practice.py; transformers-gpu too, whose rows the Transformers section
# shows) have a section of their own: their rows stay out of every other table. (Which
# rows are kept apart is the identity's business, below, not this list's.)
PRACTICE_SUITES = ("practice-gpu", "practice-cpu", "transformers-gpu")
# Device time under this share of the wall time: the wall time is mostly the host's
# (launches, framework overhead), so it depends on the host CPU more than on the GPU.
LAUNCH_BOUND_SHARE = 0.5
# Li et al. Fig. 2's layer types (and norm, other): suites.instruments.profiling.LAYER_TYPES. A type this
# report does not know is counted as "other", so the shares still sum to the whole.
LAYER_TYPES = ("conv", "pool", "relu", "fc", "concat", "norm", "other")
# What makes two rows "the same measurement": a table row (a "setting") is this minus suite,
# measure, model and batch.
SETTING_KEY = (*SETTING_FIELDS, "host", "cpu_model", "gpu_model", "framework_version")
# The suite a row was measured in is part of it. A suite fixes how its cases are timed (its
# [timer] table and its groups' overrides: warm-up, samples, repetitions, budget: the timer
# mode) and what they are for (a seed's forward at batch 1 beside a latency suite's), and a
# suite times each case's measure once (suites/harness/spec.py _merge_duplicates), so two
# rows of one suite and identical settings are a rerun, and two suites' rows are two
# measurements, neither of which replaces the other. A matrix run's copy of a case measured
# for an earlier suite (suites/harness/reuse.py, ``reused_from``) is that suite's
# measurement: ``measured_in`` names the suite that took it.
# A "serve" row's LoadGen scenario (suites/serving/) is part of it too: MultiStream and
# Server both serve batches of 8, and neither is a rerun of the other.
IDENTITY = ("measured_in", "model", "batch", "measure", "scenario", *SETTING_KEY)
# A table cell: one setting's measure of one model and batch. Where two suites measured it
# (default-gpu's timer and float64-gpu's shorter one), a table shows the latest of those
# measurements and the overview says how many it left out; every one stays in the tidy CSV.
# The practice suites' rows are never shown in a strict cell, nor the other way round.
CELL = ("model", "batch", "measure", "scenario", *SETTING_KEY, "practice")
STRING_COLUMNS = ("suite", "measured_in", "model", "measure", "status", "reason", "framework", "device",
                  "precision", "variant", "layout", "execution", "unstable_reason",
                  "memory_kind", "family", "host", "os", "python", "cpu_model", "cpu_isa",
                  "gpu_model", "gpu_driver", "cuda", "cudnn", "framework_version", "dlbench_commit",
                  "started_at", "case_id", "source", "hardware", "compile_cache",
                  "profile_tool", "profile_measure", "profile_top_kernels", "profile_timeline",
                  "profile_conv_family", "profile_conv_families", "framework_profile_tool",
                  "counters_tool", "counters_measure", "counters_top_kernels", "device_times",
                  "attention", "optimizer", "scenario", "serving",
                  *CONDITION_TEXT, *ENERGY_TEXT)
# The counters measure's values (suites/instruments/ncu_metrics.py keys: Li et al.'s nvprof names).
COUNTER_KEYS = ("achieved_occupancy", "ipc", "warp_execution_efficiency", "gld_efficiency",
                "gst_efficiency", "shared_efficiency", "registers_per_thread",
                "shared_memory_per_block_kb")


@dataclass(frozen=True)
class Tidy:
    frame: pd.DataFrame       # what tables read: one row per CELL; see flatten() for the columns
    superseded: int           # older reruns dropped
    superseded_ids: tuple[str, ...]
    # Every measurement, one row per IDENTITY: ``frame`` and the rows other suites took of
    # its cells earlier.
    measurements: pd.DataFrame

    @property
    def not_shown(self) -> int:
        """Measurements a table leaves out for a later one of the same cell (another suite's)."""
        return len(self.measurements) - len(self.frame)


def _text(value) -> str:
    return "" if value is None else str(value)


def _number(value) -> float:
    return float(value) if value is not None else float("nan")


def flatten_profile(profile: dict | None) -> dict:
    """A "profile" row's profile (adapters.base.Profile) as flat columns: per-iteration ms
    per layer type, the top kernels as JSON. NaN / empty for every other row."""
    profile = profile or {}
    layers = {kind: 0.0 for kind in LAYER_TYPES} if profile else {}
    for kind, ms in (profile.get("by_layer_type") or {}).items():
        kind = kind if kind in LAYER_TYPES else "other"
        layers[kind] = layers.get(kind, 0.0) + float(ms)
    busy = (profile.get("timeline") or {}).get("busy_ms")
    return {
        "profile_tool": _text(profile.get("tool")),
        "profile_measure": _text(profile.get("measure")),
        "profile_iterations": _number(profile.get("iterations")),
        "profile_total_ms": _number(profile.get("total_ms")),
        # The kernels' busy time per iteration (overlaps merged: kernels on concurrent
        # streams count once), from the device timeline; the kernel sum where a profile
        # has none. What a profile's kernel time is set against a timed median as.
        "profile_busy_ms": _number(busy if busy is not None else profile.get("total_ms")),
        **{f"profile_{kind}_ms": layers.get(kind, float("nan")) for kind in LAYER_TYPES},
        "profile_top_kernels": json.dumps(profile.get("top_kernels") or []),
        "profile_kernel_level": bool(profile.get("kernel_level", False)),
        # Kernel-tracer profiles (GPU): host ms per traced iteration and the convolution
        # kernel families, of the forward pass where it was traced apart.
        "profile_wall_ms": _number(profile.get("wall_ms")),
        "profile_conv_family": dominant_family(profile.get("forward_conv_families")
                                               or profile.get("conv_families") or {}),
        "profile_conv_families": json.dumps(profile.get("forward_conv_families")
                                            or profile.get("conv_families") or {}),
        # suites.instruments.profiling.device_timeline's per-iteration figures, where recorded.
        "profile_timeline": json.dumps(profile.get("timeline")) if profile.get("timeline")
        else "",
    }


def flatten_counters(counters: dict | None) -> dict:
    """A "counters" row's reduced Nsight Compute metrics as flat columns."""
    counters = counters or {}
    metrics = counters.get("metrics") or {}
    return {
        "counters_tool": _text(counters.get("tool")),
        "counters_measure": _text(counters.get("measure")),
        "counters_top_kernels": json.dumps(counters.get("top_kernels") or []),
        **{f"counter_{key}": _number((metrics.get(key) or {}).get("value"))
           for key in COUNTER_KEYS},
    }


def compile_event_columns(events: dict | None) -> dict:
    """A row's first-call compile events (JAX: adapters/jax/adapter.py CompileLog) as two
    columns: seconds of backend compilation, and persistent-cache hits (a first call that
    hit loaded its executable instead of compiling it). NaN where not recorded."""
    events = events or {}
    return {"first_call_compile_s": _number(events.get("compile_s")),
            "first_call_cache_hits": _number(events.get("persistent_cache_hits"))}


def host_columns(timing: dict) -> dict:
    """``host_overhead_ms`` (wall − device) and ``launch_bound`` (device < ½ wall) as the
    row states them, else computed from the two medians; NaN / None where either median is
    absent (a row without device time is not launch-bound, nor the opposite: unknown)."""
    wall, device = _number(timing.get("median_ms")), _number(timing.get("device_median_ms"))
    both = wall == wall and device == device
    overhead = timing.get("host_overhead_ms")
    bound = timing.get("launch_bound")
    return {"host_overhead_ms": (_number(overhead) if overhead is not None
                                 else wall - device if both else float("nan")),
            "launch_bound": (bool(bound) if bound is not None
                             else bool(device < LAUNCH_BOUND_SHARE * wall) if both else None)}


@functools.cache
def zoo_info(model: str) -> dict:
    """``model_info`` as the runner writes it, from the zoo's definition ({} where the zoo
    no longer has the model), for a row written without it: a case whose worker died
    before it built the model (the runner's row), which belongs in its family's section and
    tables all the same. Serve and generate rows have none, and their own section. Cached
    per model: read it, never change it."""
    try:
        found = get_model(model)
        stats = analyse(found)
    except (UnknownModel, ValueError):
        return {}
    return {"family": found.family, "params": stats.params, "flops_per_example": stats.flops,
            "input_shape": list(stats.input_shape)}


def flatten(raw) -> dict:
    data = raw.data
    settings = data.get("settings") or {}
    timing = data.get("timing") or {}
    memory = data.get("memory") or {}
    info = data.get("model_info") or ({} if data.get("measure") in (SERVE, GENERATE)
                                      else zoo_info(_text(data.get("model"))))
    env = data.get("env") or {}
    row = {
        "case_id": _text(data.get("case_id")), "suite": _text(data.get("suite")),
        "measured_in": measured_in(data),
        "practice": _text(data.get("suite")) in PRACTICE_SUITES,
        "model": _text(data.get("model")), "batch": int(data.get("batch") or 0),
        "measure": _text(data.get("measure")),
        # The serve measure's LoadGen scenario and its whole ``serving`` block (settings,
        # LoadGen's result, a Server search's probes, the float64 check) as JSON, which the
        # Serving section reads (reports/sections/serving.py); "" on every other row.
        "scenario": _text(data.get("scenario")),
        "serving": json.dumps(data["serving"]) if data.get("serving") else "",
        **{k: _text(settings.get(k)) for k in ("framework", "device", "precision", "variant",
                                               "layout", "execution", "compile_cache")},
        "threads": int(settings.get("threads") or 0),
        "interop_threads": int(settings.get("interop_threads") or 0),
        "status": _text(data.get("status")), "reason": _text(data.get("reason")),
        **{k: _number(timing.get(k))
           for k in TIMING_FIELDS + MEASURE_TIMING_FIELDS + CONDITION_FIELDS},
        **{k: _text(timing.get(k)) for k in CONDITION_TEXT},
        **{k: _number(timing.get(k)) for k in ENERGY_FIELDS},
        **{k: _text(timing.get(k)) for k in ENERGY_TEXT},
        **host_columns(timing),
        # Earlier runs of the machine model whose spread the interval covers (--earlier,
        # suites/stats/between_runs.py widen): where a GPU's wall time may rank
        # (reports/pipeline/ranking.py). NaN where none did.
        "earlier_runs": _number((timing.get("between_runs") or {}).get("earlier_runs")),
        **compile_event_columns(timing.get("compile_events")),
        "unstable": bool(timing.get("unstable", False)),
        "unstable_reason": _text(timing.get("unstable_reason")),
        # The attention implementation that ran, as the adapter recorded it for a model
        # with self-attention (Prepared.extra "attention": PyTorch's SDPA backend found by
        # a profiled forward, JAX's implementation argument, TensorFlow's and ONNX
        # Runtime's graphs); "" elsewhere and on rows written before it.
        "attention": _text(timing.get("attention")),
        # train_step's optimizer as the adapter built it (Prepared.extra "optimizer":
        # models/optimizers.py's declaration and the framework's class); "" elsewhere and
        # on rows written before it.
        "optimizer": _text(timing.get("optimizer")),
        "samples_ms": json.dumps(timing.get("samples_ms") or []),
        "peak_bytes": (float(memory["peak_bytes"]) if memory.get("peak_bytes") is not None
                       else float("nan")),
        "memory_kind": _text(memory.get("kind")),
        "family": _text(info.get("family")),
        "params": float(info.get("params") or "nan"),
        "flops_per_example": float(info.get("flops_per_example") or "nan"),
        "input_shape": json.dumps(info.get("input_shape") or []),
        "seq_len": float(info.get("seq_len") or "nan"),
        **{k: _text(env.get(k)) for k in ENV_FIELDS},
        "fingerprint": json.dumps(data.get("fingerprint")),
        "device_times": json.dumps(data.get("device_times")) if data.get("device_times") else "",
        **flatten_profile(data.get("profile")),
        "framework_profile_tool": _text((data.get("framework_profile") or {}).get("tool")),
        **flatten_counters(data.get("counters")),
        "started_at": _text(data.get("started_at")),
        "wall_s": float(data.get("wall_s") or 0.0),
        "source": f"{raw.path}:{raw.line}", "order": raw.order,
    }
    # Labels in today's words (suites/stats/intervals.py): rows written before them called
    # the interval a re-run's, which GPU wall time did not bear out.
    row["interval"] = relabel(row["interval"])
    row["unstable_reason"] = relabel_unstable(row["unstable_reason"])
    row["hardware"] = hardware(row)
    return row


def measured_in(data) -> str:
    """The suite that measured a row: its own, or for a copy of a case measured for an
    earlier suite (suites/harness/reuse.py) the suite of the case id it copies
    (suites/rows/results.py CaseKey.id starts with the suite)."""
    origin = _text(data.get("reused_from"))
    return origin.split("/", 1)[0] if origin else _text(data.get("suite"))


def hardware(row) -> str:
    """The device a timing belongs to: the GPU's name on GPU, the CPU's on CPU with its
    widest vector extension where the row recorded it (one model name, "AMD EPYC", has
    come with and without AVX-512: suites/instruments/environment.py ``cpu_isa``)."""
    if row["device"] == "gpu":
        return row["gpu_model"] or "unknown GPU"
    return cpu_label(row["cpu_model"] or "unknown CPU", row.get("cpu_isa"))


def tidy(loaded: Loaded) -> Tidy:
    frame = pd.DataFrame([flatten(r) for r in loaded.rows])
    for column in STRING_COLUMNS:
        frame[column] = frame[column].astype(object)
    frame = frame.sort_values(["started_at", "order"], kind="stable").reset_index(drop=True)
    # Joined before reruns are dropped: each wall row takes the device time of its own
    # suite's job, measured beside it.
    frame = join_device_times(frame)
    dup = frame.duplicated(list(IDENTITY), keep="last")
    superseded = tuple(frame.loc[dup, "case_id"])
    measurements = frame.loc[~dup]
    shown = measurements.loc[~measurements.duplicated(list(CELL), keep="last")]
    return Tidy(_in_read_order(shown), len(superseded), superseded,
                _in_read_order(measurements))


def _in_read_order(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("order", kind="stable").reset_index(drop=True)


def join_device_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Each ok ``device_time`` row's figures (suites/harness/device_pass.py: the GPU's own time of
    each timed measure, taken in a process of its own) on the wall rows of its measures,
    with host overhead and the launch-bound mark recomputed; the consumed rows leave the
    frame (a failed one stays: failures are data). Where a wall row carries a device time
    of its own (PyTorch's CUDA events) the device phase's replaces it, so that every
    framework's device time is one clock's, measured alike. A wall row takes the device
    time of its own suite's job (``measured_in``); rows come in time order, so where two
    device_time rows (a rerun) time one measure, the later one's stands."""
    if "device_times" not in frame or not (frame["measure"] == "device_time").any():
        return frame
    case = ["measured_in", "model", "batch", *SETTING_KEY]
    index: dict[tuple, list[int]] = {}
    for i, row in frame.iterrows():
        if row["measure"] != "device_time":
            index.setdefault(tuple(row[k] for k in case) + (row["measure"],), []).append(i)
    consumed = []
    for i, row in frame[frame["measure"] == "device_time"].iterrows():
        if row["status"] != "ok" or not row["device_times"]:
            continue
        consumed.append(i)
        method = json.loads(row["device_times"])
        measures = method.get("measures") or {}
        for measure, figures in measures.items():
            targets = index.get(tuple(row[k] for k in case) + (measure,), ())
            if did_no_device_work(figures, measures):
                for target in targets:
                    frame.at[target, "status"] = "error"
                    frame.at[target, "reason"] = figures["reason"] if figures.get(
                        "no_device_work") else f"{NO_DEVICE_WORK} ({figures['reason']})"
                continue
            if figures.get("device_median_ms") is None:
                continue
            for target in targets:
                wall_ms = _number(frame.at[target, "median_ms"])
                if device_exceeds_wall(measure, figures["device_median_ms"], wall_ms):
                    _withhold_device_figures(frame, target, figures["device_median_ms"], wall_ms)
                else:
                    _set_device_figures(frame, target, figures)
    return frame.drop(index=consumed).reset_index(drop=True)


# Rows recorded before the device phase marked such steps itself (suites/harness/device_pass.py
# mark_idle_steps) say only what CUPTI received: TensorFlow's pageable transfers in
# published/h100 and published/h200.
_RECEIVED_NOTHING = "CUPTI recorded no kernel, copy or set in the device block (0 records received"


def did_no_device_work(figures: dict, measures: dict) -> bool:
    """A measure whose device blocks recorded nothing while the job's other measures were
    recorded: its wall figure timed no device work."""
    if figures.get("no_device_work"):
        return True
    recorded = any(other.get("device_median_ms") is not None for other in measures.values())
    return recorded and str(figures.get("reason") or "").startswith(_RECEIVED_NOTHING)


def _withhold_device_figures(frame: pd.DataFrame, target: int, device_ms: float,
                             wall_ms: float) -> None:
    """A device phase figure above its wall row's median (models/measures.py) is not that
    row's work: the row keeps a device time of its own (PyTorch's CUDA events, from the
    wall samples) where it has one, else says why it has none."""
    if not pd.isna(frame.at[target, "device_median_ms"]):
        return
    frame.at[target, "device_time_reason"] = device_above_wall_reason(device_ms, wall_ms)


def _set_device_figures(frame: pd.DataFrame, target: int, figures: dict) -> None:
    frame.at[target, "device_median_ms"] = float(figures["device_median_ms"])
    frame.at[target, "device_span_median_ms"] = _number(figures.get("device_span_median_ms"))
    frame.at[target, "device_time_kind"] = _text(figures.get("device_time_kind"))
    frame.at[target, "device_time_reason"] = ""
    computed = host_columns({"median_ms": frame.at[target, "median_ms"],
                             "device_median_ms": figures["device_median_ms"]})
    frame.at[target, "host_overhead_ms"] = computed["host_overhead_ms"]
    frame.at[target, "launch_bound"] = computed["launch_bound"]


def setting_key(row) -> tuple:
    return tuple(row[k] for k in SETTING_KEY)
