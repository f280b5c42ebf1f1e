"""The ``profile`` measure as the worker runs it: on a GPU, the framework-neutral CUPTI
kernel tracer (``suites/instruments/kernel_trace.py``) gives the row's kernel times, layer-type
shares, top kernels and convolution kernel families for every framework alike; the
framework's own profiler still runs (op names, layer attribution) and goes into the row
as ``framework_profile``. On a CPU, or where the tracer cannot run, the framework's
profiler alone gives the row, which then says why the tracer did not.

The tracer runs before the framework's profiler, never inside it: both use CUPTI's
activity API, whose buffer callbacks are one per process (the later registration wins).
Each traced profile carries ``kernel_check`` (``suites/instruments/kernel_check.py``): its kernel total
against the traced wall time and the job's timed median; a total no GPU could produce
fails the row instead of passing as a profile.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from adapters.base import Unsupported
from suites.instruments.kernel_check import TimedReference, kernel_check
from suites.instruments.profiling import WARMUP_RUNS


def profile_fields(prepared: Any, device: str, measure: str, iterations: int,
                   timed: TimedReference | None = None) -> dict[str, Any]:
    """The row fields of one ``profile`` measurement; raises ``Unsupported`` when neither
    the tracer nor the framework's profiler can give one, and ``KernelTotalError`` when the
    tracer's kernel total is impossible. ``timed``: the job's timed figures of ``measure``."""
    kernel_fields: dict[str, Any] = {}
    tracer_reason = ""
    if device == "gpu":
        try:
            profile, check = traced_profile(prepared, measure, iterations, timed)
            kernel_fields = {"profile": {**asdict(profile), "kernel_check": check}}
        except Unsupported as error:
            tracer_reason = str(error)
    try:
        framework = prepared.profile(measure, iterations)
    except Unsupported as error:
        if not kernel_fields:
            raise Unsupported("; ".join(filter(None, (str(error), tracer_reason)))) from error
        return {**kernel_fields, "framework_profile": {"unsupported": str(error)}}
    except Exception as error:
        # The tracer's profile stands on its own: a framework profiler that fails after it
        # (two CUPTI clients in one process) costs only the op names.
        if not kernel_fields:
            raise
        text = " ".join(str(error).split())[:300]
        return {**kernel_fields, "framework_profile": {"failed": f"{type(error).__name__}: {text}"}}
    if kernel_fields:
        return {**kernel_fields, "framework_profile": asdict(framework)}
    extra = {"framework_profile": {"kernel_tracer": tracer_reason}} if tracer_reason else {}
    return {"profile": asdict(framework), **extra}


def traced_profile(prepared: Any, measure: str, iterations: int,
                   timed: TimedReference | None = None):
    """Warm-up, then ``iterations`` runs of ``measure`` under the CUPTI tracer: the
    profile and its ``kernel_check`` (each trace is checked; the measure's is kept)."""
    from suites.instruments.kernel_trace import kernel_profile, trace, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise Unsupported(reason)
    traced, checks = {}, {}
    # The forward pass alone too: which algorithm a layer's forward convolution ran
    # (convnet-benchmarks' layer table), which a gradient trace mixes with backward kernels.
    for name in dict.fromkeys((measure, "forward")):
        step = prepared.step(name)
        for _ in range(WARMUP_RUNS):
            prepared.sync(step())
        try:
            kernels = trace(step, prepared.sync, iterations, label=f"profile-{name}")
        except Exception as error:  # CUPTI refused (another subscriber, no permission)
            raise Unsupported(f"CUPTI kernel tracer failed: {type(error).__name__}: "
                              f"{error}") from error
        traced[name] = kernel_profile(kernels, name)
        # Not turned into Unsupported: an impossible kernel total fails the row.
        checks[name] = kernel_check(traced[name], kernels, timed if name == measure else None)
    profile = replace(traced[measure], forward_conv_families=traced["forward"].conv_families)
    return profile, checks[measure]

