"""Where a gap between dlbench and a twin comes from, measured on the GPU: both sides'
steps traced by CUPTI (``suites/instruments/kernel_trace.py``, the tracer of the
``profile`` measure) after their timing, reduced per side and iteration to the traced wall
time, the kernel busy time, the time outside kernels (host work and launch gaps), kernel
time by kind, the top kernels, and ``suites/instruments/kernel_check.py``'s check of the
kernel total. A trace slows launches: it says where the time goes, never how much there is.

Used by ``comparisons/keras_vs_dlbench.py --trace`` (the CNNs: kernel time by layer type,
convolution kernel families) and by the transformer twins' ``--kernels``
(``hf_transformers_vs_dlbench``, ``keras_hub_vs_dlbench``: kernel time by what a
transformer step computes, ``TRANSFORMER_KINDS``, and dlbench's side minus the twin's).
Framework-free: the steps and their sync come from the caller."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

TRACE_TOP = 5          # top kernels kept per side in the JSON
TRACE_PRINTED_TOP = 3  # and printed


def tracer_unavailable(device: str) -> str | None:
    """Why ``--trace`` cannot run here, or None."""
    if device != "gpu":
        return "kernel trace skipped: --trace needs --device gpu (CUPTI traces CUDA kernels)"
    from suites.instruments.kernel_trace import unavailable_reason

    return unavailable_reason()


def trace_summary(kernels, measure: str, timed_ms: float | None = None,
                  by_kind: Callable[[Any], dict[str, float]] | None = None) -> dict:
    """One side's traced iterations (a ``KernelTrace``), per iteration: the traced wall
    time, the kernel busy time (overlapping kernels once) and what lies outside it (host
    work, launches and syncs the GPU waited for), the kernel sum by layer type
    (``suites.instruments.profiling``'s patterns on kernel names), the layout transposes' share,
    the top kernels, the convolution kernel families and ``suites.instruments.kernel_check``'s check
    of the kernel total against the traced wall time and the timed median; ``by_kind``
    adds another split of the kernel time (``by_transformer_kind``). Raises
    ``KernelTotalError`` for a kernel total no GPU can produce."""
    from suites.instruments.kernel_check import TimedReference, kernel_check
    from suites.instruments.kernel_trace import kernel_profile

    profile = kernel_profile(kernels, measure)
    check = kernel_check(profile, kernels, TimedReference(median_ms=timed_ms))
    timeline = profile.timeline or {}
    busy = float(timeline.get("busy_ms", profile.total_ms))
    wall = float(profile.wall_ms or 0.0)
    split = {"by_kind": by_kind(kernels)} if by_kind is not None else {}
    return {"iterations": profile.iterations, "wall_ms": wall, "kernel_busy_ms": busy,
            "outside_kernels_ms": wall - busy, "kernel_sum_ms": profile.total_ms,
            "transpose_ms": float(timeline.get("transpose_ms", 0.0)),
            "kernels": float(timeline.get("kernels", 0.0)),
            "by_layer_type": dict(profile.by_layer_type),
            "top_kernels": [{"name": k.name, "ms": k.ms, "calls": k.calls}
                            for k in profile.top_kernels[:TRACE_TOP]],
            "conv_families": dict(profile.conv_families), "kernel_check": check, **split}


def trace_side(run, sync, iterations: int, label: str, measure: str,
               timed_ms: float | None = None,
               by_kind: Callable[[Any], dict[str, float]] | None = None) -> dict:
    """Warm-up, then ``iterations`` traced runs of one side's step; a tracer that fails
    (CUPTI refused, an impossible kernel total) is recorded, not raised, so the timings
    stand."""
    from suites.instruments.kernel_trace import trace
    from suites.instruments.profiling import WARMUP_RUNS

    try:
        for _ in range(WARMUP_RUNS):
            sync(run())
        return trace_summary(trace(run, sync, iterations, label), measure, timed_ms, by_kind)
    except Exception as error:
        return {"failed": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}


def short_kernel_name(name: str, width: int = 44) -> str:
    """A kernel name without ``void``, template arguments and parameters, cut to width."""
    text = name.removeprefix("void ")
    for mark in ("<", "("):
        text = text.split(mark, 1)[0] or text
    return text if len(text) <= width else text[:width - 3] + "..."


def format_trace(measure: str, summaries: dict[str, dict]) -> list[str]:
    """The compact table of one pair's traces: a row of ms per iteration per side, then
    each side's top kernels."""
    from suites.instruments.kernel_trace import dominant_family
    from suites.instruments.profiling import LAYER_TYPES

    iterations = next((s["iterations"] for s in summaries.values() if "iterations" in s), 0)
    head = f"trace {measure}, ms/it. ({iterations} it.)"
    lines = [f"  {head:<32} {'wall':>7} {'busy':>7} {'outside':>7} {'transp':>6} "
             + " ".join(f"{kind:>6}" for kind in LAYER_TYPES) + "  conv family"]
    tops = []
    for side, summary in summaries.items():
        if "failed" in summary:
            lines.append(f"    {side:<30} trace failed: {summary['failed']}")
            continue
        families = summary["conv_families"]
        family = dominant_family(families)
        share = families.get(family, 0.0) / (sum(families.values()) or 1.0)
        lines.append(f"    {side:<30} {summary['wall_ms']:7.3f} {summary['kernel_busy_ms']:7.3f} "
                     f"{summary['outside_kernels_ms']:7.3f} {summary['transpose_ms']:6.3f} "
                     + " ".join(f"{summary['by_layer_type'].get(kind, 0.0):6.3f}"
                                for kind in LAYER_TYPES)
                     + (f"  {family} {share:.0%}" if family else ""))
        tops.append(f"    top {side}: " + " | ".join(
            f"{k['ms']:.3f} {short_kernel_name(k['name'])}"
            for k in summary["top_kernels"][:TRACE_PRINTED_TOP]))
    return lines + tops


# --- transformers: kernel time by what the step computes ----------------------------------
# Read from CUDA kernel names, first match wins, case-insensitive. The names as the
# libraries give them: cuDNN's fused attention (cudnn_generated_fort_native_sdpa_*, with
# flash_fprop / flash_bprop), PyTorch's flash and memory-efficient kernels (flash_fwd_*,
# fmha_cutlassF_*); XLA's own attention is GEMMs and fusions, counted as those. cuBLAS's
# GEMMs (nvjet_* on Hopper since cuBLAS 12.8, sm90_xmma_gemm_*, cutlass *gemm*), Inductor's
# template GEMMs (triton_tem_fused_mm / addmm / bmm), XLA's GEMM fusions (gemm_fusion_dot).
# LayerNorm (PyTorch's vectorized_layer_norm_kernel, Inductor's *native_layer_norm*), the
# optimizer (PyTorch's multi_tensor_apply_kernel, fused AdamW), copies and layout changes;
# every other kernel is elementwise work, a reduction or a fusion of them.
TRANSFORMER_KINDS = (
    ("attention", re.compile(r"sdpa|fmha|flash|attention|_mha_")),
    ("gemm", re.compile(r"nvjet|gemm|gemv|xmma|cutlass|matmul|cublas|splitkreduce|"
                        r"triton_tem_fused_(addmm|mm|bmm)|\bdot\b")),
    ("layer norm", re.compile(r"layer_?norm|layernorm|welford")),
    ("softmax", re.compile(r"softmax")),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach")),
    ("copy/transpose", re.compile(r"copy|transpose|memcpy|memset|\bcat\b|concat|gather|"
                                  r"scatter|index|pad")),
)
OTHER_KIND = "elementwise/fused/other"
OUTSIDE = "outside kernels"


def transformer_kind(name: str) -> str:
    text = name.lower()
    for label, pattern in TRANSFORMER_KINDS:
        if pattern.search(text):
            return label
    return OTHER_KIND


def by_transformer_kind(kernels) -> dict[str, float]:
    """ms per iteration by ``TRANSFORMER_KINDS`` over a ``KernelTrace``, largest first."""
    totals: dict[str, float] = defaultdict(float)
    for record in kernels.records:
        totals[transformer_kind(record.name)] += record.ms / kernels.iterations
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def gap_cause(ours: dict[str, Any], theirs: dict[str, Any], twin: str) -> dict[str, Any]:
    """dlbench's step minus the twin's, per iteration: each kind's kernel time and the time
    outside kernels, largest first, as numbers and as one sentence."""
    kinds = set(ours["by_kind"]) | set(theirs["by_kind"])
    delta = {kind: ours["by_kind"].get(kind, 0.0) - theirs["by_kind"].get(kind, 0.0)
             for kind in kinds}
    delta[OUTSIDE] = ours["outside_kernels_ms"] - theirs["outside_kernels_ms"]
    ranked = dict(sorted(delta.items(), key=lambda item: -abs(item[1])))
    said = ", ".join(f"{kind} {ms:+.2f} ms" for kind, ms in list(ranked.items())[:3])
    return {"delta_ms": ranked,
            "cause": f"per step, dlbench minus {twin}: {said} (traced wall "
                     f"{ours['wall_ms']:.2f} against {theirs['wall_ms']:.2f} ms; "
                     f"{ours['kernels']:.0f} against {theirs['kernels']:.0f} kernels)"}


def kernel_pair(steps: dict[str, Callable[[], Any]], sync: Callable[[Any], None],
                iterations: int, twin: str, measure: str,
                timed_ms: dict[str, float]) -> dict[str, Any]:
    """A transformer twin's pair: each side traced (``trace_side``, with its kernel time by
    ``TRANSFORMER_KINDS``), then where dlbench's step differs from the twin's. Where CUPTI
    cannot run (a CPU, no cupti-python), the reason instead; a side whose trace failed
    keeps its reason and no cause is given."""
    from suites.instruments.kernel_trace import unavailable_reason
    if reason := unavailable_reason():
        return {"unavailable": reason}
    sides = {label: trace_side(step, sync, iterations, f"twin-{measure}-{label}", measure,
                               timed_ms.get(label), by_kind=by_transformer_kind)
             for label, step in steps.items()}
    traced = {"iterations": iterations, "sides": sides}
    if all("failed" not in side for side in sides.values()):
        traced |= gap_cause(sides["dlbench"], sides[twin], twin)
    return traced


def kernel_said(traced: dict[str, Any]) -> str:
    """``kernel_pair``'s result in one line: the cause, or why there is none."""
    if "cause" in traced:
        return traced["cause"]
    if "unavailable" in traced:
        return traced["unavailable"]
    return "; ".join(f"{label}: trace failed: {side['failed']}"
                     for label, side in traced["sides"].items() if "failed" in side)


def kernel_iterations(text: str) -> int:
    """``--kernels N``: steps of each side to trace (0: none)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: a number of steps, 0 or more")
    return value
