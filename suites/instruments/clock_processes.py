"""Does a CUPTI device block change the wall samples that follow it? Measured across
processes, so that one process's own drift is not taken for CUPTI's effect:

    python -m suites.instruments.clock_processes --framework torch --model sae_ae1 --processes 4

A worker times each repetition's wall samples and then, on a GPU, one device block under
CUPTI (``suites/instruments/cupti_clock.py``); the next repetition's wall samples follow that block.
This check starts processes of three roles in rotating order (plain, traced, detached,
then traced, detached, plain, ...): each builds the case, then runs ``--cycles`` cycles
of wall blocks, and after each cycle a "traced" process times one CUPTI device block and a
"detached" one does the same and then detaches CUPTI (``cuptiFinalize``). The wall
medians of every cycle after the first (those that follow a device block) are compared
between roles: launch overhead CUPTI leaves behind shows as traced ÷ plain above 1, with
the spread over processes beside it. ``suites/instruments/clock_check.py`` measures the same within
one process, where drift between its phases (seen on an H100: the untraced baseline of
one launch-bound forward was 0.069 ms in one process and 0.157 ms in another) can hide or
fake the effect.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from suites.instruments.clock_check import build_case, case_arguments, inner_loops, wall_blocks

ROLES = ("plain", "traced", "detached")
MARK = "@@clock_processes "


def run_role(args: argparse.Namespace) -> dict:
    """One process of one role: the wall median of each cycle (ms)."""
    prepared = build_case(args)
    run, sync = prepared.step(args.measure), prepared.sync
    clock = time.perf_counter
    inner = inner_loops(run, sync, clock, warmup=10)
    medians, problem = [], ""
    device_clock = None
    if args.role != "plain":
        from suites.instruments.cupti_clock import cupti_clock
        device_clock, problem = cupti_clock()
        if device_clock is not None:
            device_clock.detach_after_block = args.role == "detached"
    for _ in range(args.cycles):
        medians.append(statistics.median(wall_blocks(run, sync, inner, args.blocks, clock)) * 1e3)
        if device_clock is not None:
            sync(None)
            device_clock.start()
            handle = None
            for _ in range(inner):
                handle = run()
            device_clock.end()
            sync(handle)
            if device_clock.elapsed() is None:
                problem = device_clock.reason
                device_clock = None
    prepared.close()
    return {"role": args.role, "inner": inner, "wall_ms": medians, "problem": problem}


def order(processes: int) -> list[str]:
    """Roles in rotating order, so that drift over the check falls on every role alike."""
    return [ROLES[(i + j) % len(ROLES)] for i in range(processes) for j in range(len(ROLES))]


def summarise(results: list[dict]) -> list[str]:
    """Per role: the median over processes of the post-first-cycle wall medians, the
    range over processes, and the ratio to the plain role."""
    after = {role: [statistics.median(r["wall_ms"][1:]) for r in results
                    if r["role"] == role and len(r["wall_ms"]) > 1] for role in ROLES}
    lines = []
    plain = statistics.median(after["plain"]) if after["plain"] else None
    for role in ROLES:
        values = after[role]
        if not values:
            continue
        centre = statistics.median(values)
        ratio = f", {centre / plain:.3f} x plain" if plain else ""
        lines.append(f"{role:<9} wall median {centre:.4f} ms (processes: "
                     f"{', '.join(f'{v:.4f}' for v in values)}){ratio}")
    for result in results:
        if result.get("problem"):
            lines.append(f"{result['role']}: {result['problem']}")
    return lines


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m suites.instruments.clock_processes",
                                     description=__doc__.split("\n\n")[0])
    case_arguments(parser)
    parser.add_argument("--blocks", type=int, default=40, help="wall blocks per cycle")
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--processes", type=int, default=3, help="processes per role")
    parser.add_argument("--role", choices=ROLES, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.role:
        print(MARK + json.dumps(run_role(args)), flush=True)
        return 0
    results = []
    for role in order(args.processes):
        done = subprocess.run([sys.executable, "-m", "suites.instruments.clock_processes", *argv,
                               "--role", role], capture_output=True, text=True, timeout=600)
        lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
        if not lines:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{role} process failed (exit {done.returncode}): {tail}")
            continue
        results.append(json.loads(lines[-1][len(MARK):]))
    print(f"{args.framework} {args.model} b{args.batch} {args.measure} on {args.device}: "
          f"{args.processes} processes per role, {args.cycles} cycles of {args.blocks} blocks")
    print("\n".join(summarise(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
