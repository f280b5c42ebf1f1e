"""JAX's profiler (jax.profiler) over a few iterations of one measure, reduced to
operations (XLA:CPU thunks, or on a GPU the HLO operations of CUDA kernels) and kernels.

jax.profiler.trace writes an XSpace (<host>.xplane.pb), from which TensorBoard's and
Perfetto's JSON traces are converted; jax.profiler.ProfileData reads it with typed
statistics, so nothing is parsed from JSON. XLA names each operation by its HLO
instruction ("convolution.4", "ynn_fusion.6", "loop_broadcast_fusion.1"), and a fusion's
name need not say what it computes. So each operation is labelled with what the optimised
HLO of the profiled step says of it: a fusion's most telling instruction, and the JAX
operation it came from (its metadata op_name), which names the layer through the scopes
of network.py ("jit(_loss)/transpose(jvp(relu))/select_n" is a ReLU's backward).
Where neither names a layer (XLA's own copies and index arithmetic), profiling.layer_type
says "other", which is all the trace can honestly tell."""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax

from adapters.base import Profile, Unsupported
from suites.instruments.profiling import summarise

# A fusion's kind is the first of these that it contains, otherwise its root's opcode
# ("maximum", "select", "reduce": element-wise and reduction work).
TELLING_OPCODES = ("convolution", "dot", "reduce-window", "select-and-scatter", "concatenate")

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s+\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s+=\s+(?P<rest>.*)$")
_OPCODE = re.compile(r"(?:^|\s)(?P<opcode>[a-z][\w\-]*)\(")
_CALLS = re.compile(r"calls=%?(?P<name>[\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')
_OP_NAME = re.compile(r'op_name="(?P<op_name>[^"]*)"')

# XLA:CPU's thread-pool markers: a pool task runs between a StartRegion and a StopRegion.
POOL_MARKER = "ThreadpoolListener::"
START_REGION, STOP_REGION = f"{POOL_MARKER}StartRegion", f"{POOL_MARKER}StopRegion"
NS_PER_MS = 1e6


class HloOp(NamedTuple):
    kind: str       # opcode; a fusion's most telling opcode inside; a custom call's target
    op_name: str    # the JAX operation it came from (HLO metadata), or ""


def hlo_ops(text: str) -> dict[str, HloOp]:
    """Every instruction of an optimised HLO module (``Compiled.as_text()``), by name."""
    contents: dict[str, set[str]] = {}   # computation -> the opcodes in it
    roots: dict[str, str] = {}           # computation -> its root's opcode
    instructions: list[tuple[str, str, str]] = []   # (name, opcode, the rest of the line)
    computation = ""
    for line in text.splitlines():
        if header := _COMPUTATION.match(line):
            computation = header["name"]
            contents[computation] = set()
        elif (found := _INSTRUCTION.match(line)) and (opcode := _OPCODE.search(found["rest"])):
            contents.setdefault(computation, set()).add(opcode["opcode"])
            if found["root"]:
                roots[computation] = opcode["opcode"]
            instructions.append((found["name"], opcode["opcode"], found["rest"]))

    def kind(opcode: str, rest: str) -> str:
        if opcode == "fusion" and (called := _CALLS.search(rest)):
            inside = contents.get(called["name"], set())
            root = roots.get(called["name"], "")
            # A multi-output fusion's root is a tuple, which tells nothing.
            return next((op for op in TELLING_OPCODES if op in inside),
                        "" if root == "tuple" else root)
        if opcode == "custom-call" and (target := _TARGET.search(rest)):
            return target["target"]
        return opcode

    def op_name(rest: str) -> str:
        found = _OP_NAME.search(rest)
        return found["op_name"] if found else ""

    return {name: HloOp(kind(opcode, rest), op_name(rest)) for name, opcode, rest in instructions}


def operation_label(op: str, stats: dict[str, Any], hlo: dict[str, HloOp]) -> str:
    """``op`` with what is known of it, e.g. "ynn_fusion.6 (dot; jit(_loss)/jvp(dense)/dot_general)".
    Without the HLO (the eager variant, whose every primitive is a module of its own) the
    trace's own note: the GPU trace gives each kernel's op_name, the CPU trace the module's
    name, which is then the primitive's ("jit_conv_general_dilated")."""
    info = hlo.get(op) if hlo else HloOp("", str(stats.get("name") or stats.get("hlo_module") or ""))
    if info is None:
        return op
    parts = [part for part in (info.kind if info.kind not in op else "", info.op_name) if part]
    return f"{op} ({'; '.join(parts)})" if parts else op


class Event(NamedTuple):
    name: str
    start: float    # ns
    end: float
    stats: dict[str, Any]


def line_events(line: Any) -> list[Event]:
    """A trace line's events, outer before inner where they start together."""
    events = (Event(e.name, e.start_ns, e.end_ns, dict(e.stats)) for e in line.events)
    return sorted(events, key=lambda event: (event.start, -event.end))


def trace_steps(run: Callable[[], Any], sync: Callable[[Any], None],
                iterations: int) -> jax.profiler.ProfileData:
    """``iterations`` runs under jax.profiler, read back from the XSpace it wrote."""
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0   # Python frames are not read, and tracing them slows dispatch
    options.raise_error_on_start_failure = True
    with tempfile.TemporaryDirectory(prefix="dlbench-jax-profile-") as directory:
        with jax.profiler.trace(directory, profiler_options=options):
            for _ in range(iterations):
                sync(run())
        (path,) = Path(directory).glob("plugins/profile/*/*.xplane.pb")
        return jax.profiler.ProfileData.from_file(str(path))


def completion(line: list[Event], end_event: int, issued: float) -> float:
    """When an asynchronous XLA:CPU thunk (a convolution or matrix product handed to the
    thread pool) finished. Its "end: <op>" event is recorded by a callback on the thread
    that finished it, but the executor's callback that goes on to run the next thunks can
    run first, inside the same pool task and ahead of that event (seen in jax 0.10.2's
    traces). So the finish is the first event of that task after the thunk was issued."""
    finished = line[end_event].start
    for event in reversed(line[:end_event]):
        if event.name == START_REGION:
            return finished
        if event.name == STOP_REGION or event.start < issued:
            break    # not inside a pool task that began after the thunk: no continuation
        if not event.name.startswith(POOL_MARKER):
            finished = event.start
    return line[end_event].start


def contains_others(thunks: list[Event]) -> list[bool]:
    """For each thunk of one thread (in start order), whether other thunks run inside its
    event: a while loop's or a conditional's thunk runs its body's thunks from its own."""
    containers = [False] * len(thunks)
    open_thunks: list[int] = []
    for index, thunk in enumerate(thunks):
        while open_thunks and thunks[open_thunks[-1]].end <= thunk.start:
            open_thunks.pop()
        if open_thunks:
            containers[open_thunks[-1]] = True
        open_thunks.append(index)
    return containers


class Run(NamedTuple):
    """One execution of a thunk: from its start until it finished."""

    start: float
    finish: float
    op: str
    stats: dict[str, Any]
    control_flow: bool


def covered(later: list[Run], start: float, finish: float) -> float:
    """How much of [start, finish] the runs that began in it (sorted by start) cover."""
    total, reached = 0.0, start
    for run in later:
        if run.start >= finish:
            break
        end = min(run.finish, finish)
        if end > reached:
            total += end - max(run.start, reached)
            reached = end
    return total


def cpu_runs(space: jax.profiler.ProfileData) -> list[Run]:
    """Every thunk execution on the host plane, in start order. A thunk's event carries an
    ``hlo_op`` statistic; one handed to the thread pool finishes after its event ends."""
    plane = space.find_plane_with_name("/host:CPU")
    lines = [line_events(line) for line in plane.lines] if plane is not None else []
    end_events = {event.stats["_c"]: (line, position)
                  for line in lines for position, event in enumerate(line)
                  if event.name.startswith("end: ") and "_c" in event.stats}
    runs = []
    for line in lines:
        thunks = [event for event in line if "hlo_op" in event.stats]
        for thunk, control_flow in zip(thunks, contains_others(thunks), strict=True):
            ending = end_events.get(thunk.stats.get("_p"))
            finish = thunk.end if control_flow or ending is None else \
                max(thunk.end, completion(*ending, thunk.end))
            runs.append(Run(thunk.start, finish, str(thunk.stats["hlo_op"]), thunk.stats,
                            control_flow))
    return sorted(runs, key=lambda run: (run.start, -run.finish))


def cpu_operation_times(space: jax.profiler.ProfileData,
                        hlo: dict[str, HloOp]) -> list[tuple[str, float, float]]:
    """(label, total ms, executions) of each XLA:CPU operation, from its start to its
    finish. A control-flow thunk (a while loop) keeps only the time when none of the
    thunks begun inside it ran: its body's operations count as themselves. XLA:CPU runs
    independent thunks concurrently, so operation times can overlap and add up to more
    than the step's wall time."""
    runs = cpu_runs(space)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for index, run in enumerate(runs):
        elapsed = run.finish - run.start
        if run.control_flow:
            elapsed -= covered(runs[index + 1:], run.start, run.finish)
        label = operation_label(run.op, run.stats, hlo)
        totals[label][0] += elapsed / NS_PER_MS
        totals[label][1] += 1
    return [(label, ms, calls) for label, (ms, calls) in totals.items()]


def gpu_operation(kernel: Event, hlo: dict[str, HloOp]) -> tuple[str, Any]:
    """The HLO instruction that launched a kernel, and the execution it belongs to (XLA
    annotates each execution of an operation once, as ``scope_range_id``). Inside a command
    buffer (a CUDA graph of several thunks) kernels carry the buffer's annotation instead;
    XLA names the kernels it generates after their fusion ("loop_add_fusion_2" for
    loop_add_fusion.2), so each such kernel is one execution of that fusion, and a library
    kernel's own name ("sm90_xmma_gemm_...") is the best left."""
    op = str(kernel.stats.get("hlo_op", ""))
    if op and not op.startswith("command_buffer"):
        return op, kernel.stats.get("scope_range_id")
    for candidate in (kernel.name, re.sub(r"_(\d+)$", r".\1", kernel.name)):
        if candidate in hlo:
            return candidate, None
    return kernel.name, None


def gpu_times(space: jax.profiler.ProfileData, hlo: dict[str, HloOp]
              ) -> tuple[list[tuple[str, float, float]], list[tuple[str, float, float]]]:
    """(operations, kernels) as (name, total ms, calls) from the device planes' stream lines,
    where CUPTI records every kernel and copy with its device time. Kernels on a stream do
    not nest, so nothing is counted twice; an operation's time is its kernels' (a cuDNN
    convolution's layout transforms included)."""
    operations: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    executions: set[tuple[str, Any]] = set()
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        for line in plane.lines:
            if not line.name.startswith("Stream #"):
                continue
            for kernel in line_events(line):
                ms = (kernel.end - kernel.start) / NS_PER_MS
                kernels[kernel.name][0] += ms
                kernels[kernel.name][1] += 1
                op, execution = gpu_operation(kernel, hlo)
                label = operation_label(op, kernel.stats, hlo)
                operations[label][0] += ms
                if execution is None or (label, execution) not in executions:
                    operations[label][1] += 1
                    executions.add((label, execution))
    return ([(name, ms, calls) for name, (ms, calls) in operations.items()],
            [(name, ms, calls) for name, (ms, calls) in kernels.items()])



def profile_steps(run: Callable[[], Any], sync: Callable[[Any], None], measure: str,
                  iterations: int, on_gpu: bool, hlo_text: str | None) -> Profile:
    """``iterations`` runs of a warmed-up step under jax.profiler, as a Profile. ``hlo_text``
    is the step's optimised HLO module (``Compiled.as_text()``), which names its operations;
    None in the eager variant, whose every primitive is a module of its own."""
    hlo = hlo_ops(hlo_text) if hlo_text is not None else {}
    space = trace_steps(run, sync, iterations)
    if on_gpu:
        operations, kernels = gpu_times(space, hlo)
        if not kernels:
            raise Unsupported("jax.profiler recorded no GPU kernels (is CUPTI available?)")
        return summarise("jax.profiler (CUDA kernels)", measure, iterations, operations,
                         kernels)
    operations = cpu_operation_times(space, hlo)
    if not operations:
        raise Unsupported(f"jax.profiler recorded no XLA operations for {measure}")
    return summarise("jax.profiler (XLA:CPU thunks)", measure, iterations, operations)
