"""Why one framework is slower than another on one GPU case, in numbers from their
profiles:

    python -m reports.gap results/ --model resnet50 --batch 16 --measure forward \
        --slow tf --fast torch

For each framework's profile of ``measure`` (a suite such as gpu-forward-profile times and
profiles the same measure in one job) beside its timed median, the gap between the two
medians splits into

* kernels: the difference of the profiles' device busy time per iteration (kernel records
  with overlaps merged, from the device timeline; the kernel sum where a profile has no
  timeline), itself split by layer type (conv, norm, ...: summed kernel time, which
  exceeds the busy time where kernels ran at once on concurrent streams) and, where the
  slower one has a device timeline, the layout transposes it ran;
* outside kernels: the rest, time in which the GPU computed nothing (host work: op
  dispatch, launches, framework bookkeeping).

Then each side's top kernels. Profiled times carry the profiler's overhead; the split uses
the timed medians, and kernel times are read as device time, which a profiler barely
changes. Exit status 2 with one line where the rows needed are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports.pipeline.load import InputError, load
from reports.pipeline.tidy import LAYER_TYPES, tidy

TOP = 5
# Summed kernel time above busy time by more than this share is reported as overlap (the
# timeline's busy time and the sum of the same records differ by rounding otherwise).
OVERLAPPED = 1.02


@dataclass(frozen=True)
class Side:
    """One framework's case: its timed median and its profile of the same measure."""

    label: str
    hardware: str
    median_ms: float
    kernel_ms: float               # kernel records summed per iteration
    busy_ms: float                 # the same with overlaps merged (the kernel sum without a timeline)
    by_layer_type: dict[str, float]
    transpose_ms: float | None
    idle_share: float | None
    top_kernels: list[dict]

    @property
    def outside_ms(self) -> float:
        return self.median_ms - self.busy_ms

    @property
    def overlap(self) -> float:
        """Summed kernel time ÷ busy time: above 1 where kernels ran concurrently."""
        return self.kernel_ms / self.busy_ms if self.busy_ms > 0 else 1.0


def side(frame: pd.DataFrame, framework: str, model: str, batch: int, measure: str,
         variant: str | None = None) -> Side:
    """The framework's GPU rows for the case (the last of several settings, by start)."""
    rows = frame[(frame.framework == framework) & (frame.model == model)
                 & (frame.batch == batch) & (frame.device == "gpu") & (frame.status == "ok")
                 & (frame.compile_cache == "")]
    if variant:
        rows = rows[rows.variant == variant]
    profiles = rows[(rows.measure == "profile") & (rows.profile_measure == measure)
                    & rows.profile_kernel_level.astype(bool)]
    if profiles.empty:
        raise InputError(f"no GPU kernel profile of {measure} for {framework} {model} "
                         f"b{batch}{' ' + variant if variant else ''} (run a suite that "
                         f"profiles it, e.g. gpu-forward-profile)")
    profile = profiles.iloc[-1]
    timed = rows[(rows.measure == measure) & (rows.variant == profile.variant)
                 & (rows.execution == profile.execution) & (rows.hardware == profile.hardware)]
    if timed.empty:
        raise InputError(f"no timed {measure} row for {framework} {model} b{batch} "
                         f"{profile.variant} beside its profile")
    timeline = json.loads(profile.profile_timeline) if profile.profile_timeline else None
    return Side(
        label=f"{framework} {profile.variant}", hardware=profile.hardware,
        median_ms=float(timed.iloc[-1].median_ms), kernel_ms=float(profile.profile_total_ms),
        busy_ms=float(profile.profile_busy_ms),
        by_layer_type={kind: float(profile[f"profile_{kind}_ms"]) for kind in LAYER_TYPES},
        transpose_ms=timeline["transpose_ms"] if timeline else None,
        idle_share=timeline["idle_ms"] / timeline["span_ms"] if timeline else None,
        top_kernels=json.loads(profile.profile_top_kernels or "[]"))


def explain(slow: Side, fast: Side) -> str:
    """The gap in words and numbers (ms per iteration)."""
    gap = slow.median_ms - fast.median_ms
    kernels = slow.busy_ms - fast.busy_ms
    outside = slow.outside_ms - fast.outside_ms
    lines = [f"{slow.label} vs {fast.label} on {slow.hardware}",
             f"timed medians: {slow.median_ms:.3f} vs {fast.median_ms:.3f} ms: gap "
             f"{gap:+.3f} ms ({gap / fast.median_ms:+.0%})",
             f"  kernels (device busy time, overlaps merged): {slow.busy_ms:.3f} vs "
             f"{fast.busy_ms:.3f} ms: {kernels:+.3f} ms of the gap",
             f"  outside kernels (median - kernels): {slow.outside_ms:.3f} vs "
             f"{fast.outside_ms:.3f} ms: {outside:+.3f} ms of the gap"]
    by_type = sorted(LAYER_TYPES, key=lambda k: -abs(slow.by_layer_type[k]
                                                      - fast.by_layer_type[k]))
    for who in (slow, fast):
        if who.overlap > OVERLAPPED:
            lines.append(f"  {who.label}: kernels summed {who.kernel_ms:.3f} ms, "
                         f"{who.overlap:.2f}x its busy time: kernels ran at once on "
                         f"concurrent streams, so the summed figures below exceed the time")
    lines.append("  summed kernel time by layer type (slow vs fast, difference): " + "; ".join(
        f"{kind} {slow.by_layer_type[kind]:.3f} vs {fast.by_layer_type[kind]:.3f} "
        f"({slow.by_layer_type[kind] - fast.by_layer_type[kind]:+.3f})" for kind in by_type))
    for who in (slow, fast):
        if who.transpose_ms is not None:
            lines.append(f"  {who.label}: layout transposes {who.transpose_ms:.3f} ms "
                         f"({who.transpose_ms / who.kernel_ms:.1%} of its kernel time); GPU "
                         f"idle {who.idle_share:.1%} of the profiled span")
    for who in (slow, fast):
        lines.append(f"  {who.label} top kernels:")
        for kernel in who.top_kernels[:TOP]:
            lines.append(f"    {kernel['ms']:8.3f} ms {kernel['calls']:6.1f} calls "
                         f"{kernel['ms'] / who.kernel_ms:6.1%}  {kernel['name'][:110]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.gap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", type=Path, default=[Path("results")])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--measure", default="forward", choices=("forward", "gradient"))
    parser.add_argument("--slow", default="tf", help="framework[:variant]")
    parser.add_argument("--fast", default="torch", help="framework[:variant]")
    args = parser.parse_args(argv)
    try:
        frame = tidy(load(args.inputs)).frame
        sides = []
        for text in (args.slow, args.fast):
            framework, _, variant = text.partition(":")
            sides.append(side(frame, framework, args.model, args.batch, args.measure,
                              variant or None))
    except InputError as exc:
        print(f"reports.gap: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(explain(*sides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
