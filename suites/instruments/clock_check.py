"""What the CUPTI device clock costs, measured in one process on a GPU:

    python -m suites.instruments.clock_check --framework torch --model sae_ae1 --batch 64

A launch-bound case (small kernels, host time between them) shows any per-launch cost
best. The check times, in order:

1. wall blocks with CUPTI never imported or enabled: the baseline wall median;
2. ``--rounds`` times: CUPTI-traced device blocks (``suites/instruments/cupti_clock.py``, timing
   their host wall time too), then, where the framework has its own device clock
   (PyTorch's CUDA events), device blocks on that clock, then plain wall blocks again.

It prints the wall median before and after each round, the traced blocks' wall median
(the tracer's overhead while enabled: traced ÷ baseline) and the device times from both
clocks, so a GPU run can state whether enabling CUPTI leaves launch overhead behind once
it is disabled (the worker's wall samples follow its device blocks) and how CUPTI's busy
time compares with CUDA events. Without ``cupti`` (a CPU host, CI) it times the wall
blocks and prints why the rest cannot run; ``--device cpu`` runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from suites.stats.timer import time_on_device

MIN_BLOCK_S = 0.002


@dataclass(frozen=True)
class ClockCheck:
    """Medians in ms per iteration; one entry per round where a list."""

    inner_loops: int
    blocks: int
    wall_before_ms: float
    wall_after_ms: tuple[float, ...] = ()
    traced_wall_ms: tuple[float, ...] = ()       # host time of the CUPTI-traced blocks
    cupti_busy_ms: tuple[float, ...] = ()
    cupti_span_ms: tuple[float, ...] = ()
    event_ms: tuple[float, ...] = ()             # the framework's own clock (CUDA events)
    event_kind: str = ""
    cupti_reason: str = ""                       # why CUPTI was not used, or failed
    event_reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def wall_blocks(run: Callable[[], Any], sync: Callable[[Any], None], inner: int, blocks: int,
                clock: Callable[[], float]) -> list[float]:
    """Seconds per iteration of ``blocks`` synced blocks of ``inner`` iterations."""
    samples = []
    for _ in range(blocks):
        sync(None)
        started = clock()
        handle = None
        for _ in range(inner):
            handle = run()
        sync(handle)
        samples.append((clock() - started) / inner)
    return samples


def traced_blocks(run: Callable[[], Any], sync: Callable[[Any], None], device_clock: Any,
                  inner: int, blocks: int, clock: Callable[[], float]
                  ) -> tuple[list[float], list[float], list[float]]:
    """(host wall, device busy, device span) seconds per iteration of ``blocks`` blocks
    under the CUPTI clock; the host time is taken after the window opened and before it
    closes, so it holds the launches under tracing, not the window's own flushes."""
    walls, busy, spans = [], [], []
    for _ in range(blocks):
        sync(None)
        device_clock.start()
        started = clock()
        handle = None
        for _ in range(inner):
            handle = run()
        device_clock.end()
        sync(handle)
        walls.append((clock() - started) / inner)
        elapsed = device_clock.elapsed()
        if elapsed is None:
            break
        busy.append(elapsed / inner)
        span = device_clock.span()
        if span is not None:
            spans.append(span / inner)
    return walls, busy, spans


def inner_loops(run: Callable[[], Any], sync: Callable[[Any], None],
                clock: Callable[[], float], warmup: int) -> int:
    """Iterations per block, as the timer chooses them (blocks of at least 2 ms)."""
    times = []
    for _ in range(max(1, warmup)):
        started = clock()
        sync(run())
        times.append(clock() - started)
    return max(1, math.ceil(MIN_BLOCK_S / max(statistics.median(times), 1e-9)))


def _median_ms(samples: list[float]) -> float | None:
    return statistics.median(samples) * 1e3 if samples else None


def run_check(run: Callable[[], Any], sync: Callable[[Any], None], *, blocks: int, rounds: int,
              cupti_clock: Callable[[], tuple[Any, str]], event_clock: Any,
              event_reason: str = "the framework offers no device clock",
              clock: Callable[[], float] = time.perf_counter, warmup: int = 5,
              detach: Callable[[], str] | None = None) -> ClockCheck:
    """The check on one prepared step. ``cupti_clock`` is called only after the baseline,
    so CUPTI is neither loaded nor enabled while it is timed; ``event_reason`` says why
    ``event_clock`` is None where it is."""
    inner = inner_loops(run, sync, clock, warmup)
    before = _median_ms(wall_blocks(run, sync, inner, blocks, clock))
    cupti, cupti_reason = cupti_clock()
    event_reason = "" if event_clock is not None else event_reason
    after, traced, busy, spans, events = [], [], [], [], []
    notes_detach: list[str] = []
    for _ in range(rounds if (cupti is not None or event_clock is not None) else 0):
        if cupti is not None:
            walls, round_busy, round_spans = traced_blocks(run, sync, cupti, inner, blocks, clock)
            traced.append(_median_ms(walls))
            if not round_busy:
                cupti_reason = cupti.reason or "CUPTI gave no device time"
                cupti = None
            busy.append(_median_ms(round_busy))
            spans.append(_median_ms(round_spans))
            if detach is not None:
                problem = detach()
                if problem:
                    notes_detach.append(problem)
        if event_clock is not None:
            # As the timer runs it: launches queued behind the clock's hold.
            device, _ = time_on_device(run, sync, event_clock, inner, before / 1e3 * inner,
                                       blocks)
            events.append(_median_ms(device))
        after.append(_median_ms(wall_blocks(run, sync, inner, blocks, clock)))
    notes = [f"detach after each traced round: {problem}" for problem in notes_detach]
    if detach is not None and not notes_detach:
        notes.append("CUPTI detached (cuptiFinalize) after each traced round")
    if after and before:
        notes.append(f"wall median after the last round is {after[-1] / before - 1:+.1%} "
                     f"from before CUPTI")
    if traced and before and traced[0] is not None:
        notes.append(f"traced blocks' wall median is {traced[0] / before - 1:+.1%} from the "
                     f"untraced baseline (the tracer's overhead while enabled)")
    return ClockCheck(inner, blocks, before, tuple(after), tuple(traced),
                      tuple(busy), tuple(spans), tuple(events),
                      event_clock.kind if event_clock is not None else "", cupti_reason,
                      event_reason, tuple(notes))


def render(check: ClockCheck) -> str:
    def ms(values) -> str:
        return ", ".join("-" if v is None else f"{v:.4f}" for v in values) or "-"
    lines = [f"blocks of {check.inner_loops} iterations, {check.blocks} blocks per phase",
             f"wall median before CUPTI (ms):       {check.wall_before_ms:.4f}",
             f"wall median after each round (ms):   {ms(check.wall_after_ms)}",
             f"CUPTI-traced blocks' wall (ms):      {ms(check.traced_wall_ms)}",
             f"CUPTI device busy (ms):              {ms(check.cupti_busy_ms)}",
             f"CUPTI device span (ms):              {ms(check.cupti_span_ms)}",
             f"framework device clock (ms):         {ms(check.event_ms)}"
             + (f"  [{check.event_kind}]" if check.event_kind else "")]
    if check.cupti_reason:
        lines.append(f"CUPTI clock not measured: {check.cupti_reason}")
    if check.event_reason:
        lines.append(f"framework device clock not measured: {check.event_reason}")
    lines += list(check.notes)
    return "\n".join(lines)


def build_case(args: argparse.Namespace):
    """The prepared case, built as the worker builds it (affinity first on a CPU)."""
    from suites.instruments.environment import limit_cpus, usable_cpus

    threads = args.threads or usable_cpus()
    if args.device == "cpu":
        limit_cpus(threads)
    from adapters.base import CaseConfig, RunConfig
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.weights import canonical_weights
    from models.zoo import get_model

    adapter = load_registry()[args.framework].load()(RunConfig(args.device, threads, 1))
    model = get_model(args.model)
    return adapter.prepare(model, canonical_weights(model, args.seed),
                           make_batch(model, args.batch, args.seed),
                           CaseConfig(args.precision, args.variant))


def case_arguments(parser: argparse.ArgumentParser) -> None:
    """The case a clock check builds (``build_case``): a launch-bound one by default."""
    parser.add_argument("--framework", required=True)
    parser.add_argument("--model", default="sae_ae1")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--measure", default="forward")
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--threads", type=int, default=0, help="0: every usable CPU")
    parser.add_argument("--seed", type=int, default=0)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m suites.instruments.clock_check",
                                     description=__doc__.split("\n\n")[0])
    case_arguments(parser)
    parser.add_argument("--blocks", type=int, default=30, help="blocks per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--detach", action="store_true",
                        help="detach CUPTI (cuptiFinalize) after each traced round")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        prepared = build_case(args)
    except Exception as error:   # no GPU, no framework: say why, as the worker does
        print(f"cannot prepare {args.framework} {args.model} b{args.batch} on {args.device}: "
              f"{type(error).__name__}: {error}")
        return 2
    from suites.instruments.cupti_clock import cupti_clock

    def cupti_or_reason():
        if args.device != "gpu":
            return None, "a CPU run has no device clock"
        return cupti_clock()

    def detach_cupti() -> str:
        from suites.instruments.cupti_window import detach, load_cupti
        return detach(load_cupti())

    on_gpu = args.device == "gpu"
    try:
        check = run_check(prepared.step(args.measure), prepared.sync, blocks=args.blocks,
                          rounds=args.rounds, cupti_clock=cupti_or_reason,
                          event_clock=prepared.device_clock() if on_gpu else None,
                          event_reason=("the framework offers no device clock" if on_gpu
                                        else "a CPU run has no device clock"),
                          detach=detach_cupti if args.detach else None)
    finally:
        prepared.close()
    print(f"{args.framework} {args.model} b{args.batch} {args.measure} on {args.device}")
    print(render(check))
    print("@@clock_check " + json.dumps(asdict(check)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
