"""Cold start: the time from a new process to its first correct answer (issue 61).

    python -m suites.serving.cold_start --framework torch --model resnet_tiny --batch 1 \\
        [--device cpu] [--threads 2] [--repeats 3] [--out cold_start.jsonl]

Run it in the framework's virtualenv. For one (framework, device, model, batch, precision,
variant, threads) the parent writes the model's canonical weights (``models/weights.py``)
and a seeded batch (``models/inputs.py``) with its float64 output (``models.reference``) to
``.npz`` files, so that the child *loads* its weights from disk as a deployment loads a
checkpoint and no data generation is timed; then, ``repeats`` times, it takes
``time.monotonic()`` and at once starts ``python -m suites.serving.cold_start --child`` in a
process group of its own. The child takes ``time.monotonic()`` after each phase:

* ``interpreter``: this module's first statement runs (Python started, ``suites`` and
  ``suites.serving`` imported: two docstrings);
* ``imported``: the adapter's module imported (``adapters/registry.py`` ``load``), which
  imports the framework, numpy and dlbench's ``models``;
* ``adapter``: the ``Adapter`` made, its threads and device set (``adapters/base.py``);
* ``weights``: the model's IR built (``models.zoo``) and its weights and the batch read
  whole from the npz files;
* ``prepared``: the adapter's ``prepare``: the network built, its weights placed, and
  compiled where the framework compiles there (ONNX Runtime's session, ``torch.compile``'s
  wrapper, which compiles at the first call);
* ``answered``: the first ``serve`` (``Prepared.serve``) returned its outputs on the host.
  JAX's ``jit`` and TensorFlow's ``tf.function`` trace and compile at the first call, so
  their compilation lies in this phase.

Only then does it compare the answer with float64 (``suites/truth/check.py``
``output_error`` against ``models/error_bounds.py`` ``bounds(...).output``): a wrong first
answer makes the cold start ``failed``, however fast. It prints one JSON line per phase as
it passes it and one with the result, each behind ``PREFIX``; the parent reads them from a
file once the child has exited, or has been killed at the time limit (with its whole
process group), so a child that hangs or crashes still says how far it got.

The two processes' timestamps compare because ``time.monotonic()`` reads one system-wide
clock: Python's documentation of ``time.monotonic`` ("Changed in version 3.5: The function
is now always available and always system-wide"; ``time.get_clock_info("monotonic")`` names
``clock_gettime(CLOCK_MONOTONIC)`` on Linux, recorded in each record), and clock_gettime(2):
"CLOCK_MONOTONIC: A nonsettable system-wide clock".

What the figures include and leave out (``NOTE``, in every record): the weights file was
just written by the parent, so the child reads it from the page cache; the framework's own
libraries may come from disk on the first repeat and from the page cache after (dropping
the page cache needs root, ``/proc/sys/vm/drop_caches``, and is not done), so the first
repeat may be the slowest: each repeat's figures are kept beside the median. Each child's
compile caches (the registry's ``compile_cache`` environment, ``adapters/registry.toml``)
point at an empty folder of its own, so nothing compiled by an earlier repeat is reused
(JAX, whose cache that environment turns on, also writes its compiled program there, in
its first answer's time, as a replica that keeps a cache would).

Failures are records: a framework not installed in this interpreter, a variant or precision
it lacks, a device it cannot see are ``unsupported``; a child that crashes, hangs past
``--timeout`` or prints no result, and a wrong first answer, are ``failed``, each with a
one-line reason.
"""

from __future__ import annotations

import time

INTERPRETER_READY = time.monotonic()   # the child's first timestamp: nothing else before it

import argparse  # noqa: E402 - after the first timestamp, by design
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

PHASES = ("interpreter", "imported", "adapter", "weights", "prepared", "answered")
PREFIX = "DLBENCH_COLD_START "
NOTE = ("seconds from the parent's time.monotonic() just before it started the child; the "
        "weights file, just written, is read from the page cache; the framework's libraries may "
        "come from disk on the first repeat only (the page cache was not dropped: that needs "
        "root); compile caches empty for every repeat")
# Test-only: "crash" kills the child (SIGKILL, as a segfault or the OOM killer would) once its
# weights are loaded; "hang" makes it wait forever after its first timestamp, in a grandchild
# process of the same group (the time limit kills the group); "wrong" perturbs the first
# answer before the check; "silent" exits 0 without printing a result.
INJECT = "DLBENCH_INJECT_COLD_START"
# The settings that name a cold start, in every record and summary (``Setting.identity``).
IDENTITY = ("framework", "device", "model", "batch", "precision", "variant", "threads")
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ColdStart:
    """One cold start. Each ``*_s`` is the seconds from the parent's timestamp just before
    the spawn to the end of that phase (``PHASES``), None where the child never got there;
    ``total_s`` is ``answered_s``. ``error`` / ``bound``: the first answer's
    max |y - y64| / max |y64| and the precision's bound."""

    framework: str
    device: str
    model: str
    batch: int
    precision: str
    variant: str
    threads: int
    repeat: int                      # 1-based
    status: str                      # ok, failed or unsupported
    reason: str = ""
    interpreter_s: float | None = None
    imported_s: float | None = None
    adapter_s: float | None = None
    weights_s: float | None = None
    prepared_s: float | None = None
    answered_s: float | None = None
    error: float | None = None
    bound: float | None = None
    execution: str = ""              # the variant in words (Adapter.describe)
    framework_version: str = ""
    clock: str = ""                  # time.get_clock_info("monotonic").implementation
    compile_cache: dict[str, str] = field(default_factory=dict)
    note: str = NOTE
    kind: str = "cold_start"

    @property
    def total_s(self) -> float | None:
        return self.answered_s

    def reached(self) -> str:
        """The last phase the child finished ("" for none)."""
        done = [p for p in PHASES if getattr(self, f"{p}_s") is not None]
        return done[-1] if done else ""

    def durations(self) -> dict[str, float]:
        """Each finished phase's own seconds (its end minus the previous phase's end)."""
        found, previous = {}, 0.0
        for phase in PHASES:
            at = getattr(self, f"{phase}_s")
            if at is None:
                break
            found[phase] = at - previous
            previous = at
        return found

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_s": self.total_s, "phases_s": self.durations()}


@dataclass(frozen=True)
class ColdStartSummary:
    """N cold starts of one setting: the median of each phase's own seconds and of the
    total over the ``ok`` repeats (the phases' medians need not add up to the total's),
    the first repeat's total beside it. ``status`` is ok only if every repeat was."""

    framework: str
    device: str
    model: str
    batch: int
    precision: str
    variant: str
    threads: int
    repeats: int
    ok: int
    status: str
    reason: str
    phases_median_s: dict[str, float]
    total_median_s: float | None
    totals_s: tuple[float | None, ...]
    first_total_s: float | None
    note: str = NOTE
    kind: str = "cold_start_summary"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _emit(kind: str, **values: Any) -> None:
    print(PREFIX + json.dumps({"kind": kind, **values}), flush=True)


# -- the child --------------------------------------------------------------------------


def _child(args: argparse.Namespace) -> int:
    """One cold start; every outcome is a result line (the module's docstring)."""
    inject = os.environ.get(INJECT, "")

    def mark(phase: str) -> None:
        _emit("mark", phase=phase, at=time.monotonic())

    _emit("mark", phase="interpreter", at=INTERPRETER_READY)
    if inject == "hang":
        # A grandchild in the same process group, waited on: the time limit must end both.
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        _emit("hang", pid=sleeper.pid)
        sleeper.wait()
    unsupported: tuple[type[BaseException], ...] = (ImportError,)
    try:
        from adapters.base import CaseConfig, DeviceUnavailable, RunConfig, Unsupported
        from adapters.registry import load_registry
        unsupported = (ImportError, Unsupported, DeviceUnavailable)
        entry = load_registry()[args.framework]
        adapter_class = entry.load()
        mark("imported")
        adapter = adapter_class(RunConfig(args.device, args.threads, 1))
        mark("adapter")

        import numpy as np

        from models import zoo
        from models.inputs import Batch
        model = zoo.get_model(args.model)
        with np.load(Path(args.data) / "weights.npz") as saved:
            names = [str(n) for n in saved["names"]]
            weights = {name: saved[f"w{i}"] for i, name in enumerate(names)}
        with np.load(Path(args.data) / "batch.npz") as saved:
            x = saved["x"]
            lengths = saved["lengths"] if "lengths" in saved.files else None
        served = Batch(x.copy(), None, None if lengths is None else lengths.copy())
        mark("weights")
        if inject == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        case = CaseConfig(args.precision, args.variant)
        adapter.check_precision(case)
        prepared = adapter.prepare(model, weights, Batch(x, None, lengths), case)
        mark("prepared")
        output = np.asarray(prepared.serve(served))
        mark("answered")
        if inject == "silent":
            return 0
        if inject == "wrong":
            output = output + np.float32(1.0)
        return _check(args, adapter, case, model, output)
    except unsupported as error:
        from suites.serving.sut import one_line  # here: off the timed path of an answer
        _emit("result", status="unsupported", reason=one_line(error))
    except Exception as error:   # noqa: BLE001 - a failure is a record, never a traceback
        from suites.serving.sut import one_line
        _emit("result", status="failed", reason=one_line(error))
    return 0


def _check(args: argparse.Namespace, adapter: Any, case: Any, model: Any, output: Any) -> int:
    """After the last timestamp: the first answer against float64, and what the record
    says of the setting."""
    import numpy as np

    from models.error_bounds import bounds
    from suites.truth.check import output_error
    with np.load(Path(args.data) / "batch.npz") as saved:
        reference = saved["reference"]
    bound = bounds(model, args.batch, args.precision).output
    found: dict[str, Any] = {"bound": bound, "execution": adapter.describe(case),
                             "variant": adapter.resolve_variant(case.variant),
                             "framework_version": str(adapter.environment().get("framework_version", ""))}
    if output.shape != reference.shape:
        _emit("result", status="failed", error=None, **found,
              reason=f"first answer's shape {output.shape} != float64 {reference.shape}")
        return 0
    error = output_error(output, reference)
    if not error <= bound:    # NaN fails too
        _emit("result", status="failed", error=error, **found,
              reason=f"first answer is {error:.3g} from float64, above the {args.precision} "
                     f"bound {bound:.3g}")
        return 0
    _emit("result", status="ok", error=error, **found)
    return 0


# -- the parent -------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    framework: str
    model: str
    batch: int
    device: str = "cpu"
    precision: str = "fp32"
    variant: str = "default"
    threads: int = 2
    seed: int = 0

    def identity(self) -> dict[str, Any]:
        """The settings every record of this setting carries (``IDENTITY``)."""
        return {name: getattr(self, name) for name in IDENTITY}


def write_inputs(setting: Setting, folder: Path) -> None:
    """The canonical weights (``weights.npz``: ``names`` and ``w<i>``, uncompressed, as a
    checkpoint) and the seeded batch with its float64 output (``batch.npz``)."""
    import numpy as np

    from models import reference, zoo
    from models.inputs import Batch, make_batch
    from models.weights import canonical_weights
    model = zoo.get_model(setting.model)
    weights = canonical_weights(model, setting.seed)
    names = list(weights)
    np.savez(folder / "weights.npz", names=np.array(names),
             **{f"w{i}": weights[name] for i, name in enumerate(names)})
    batch = make_batch(model, setting.batch, setting.seed)
    batch = Batch(batch.x, None, batch.lengths)
    extra = {} if batch.lengths is None else {"lengths": batch.lengths}
    np.savez(folder / "batch.npz", x=batch.x,
             reference=reference.forward(model, weights, batch, train=False), **extra)


def run_child(setting: Setting, data: Path, repeat: int, timeout_s: float,
              python: str = sys.executable) -> ColdStart:
    """One cold start of ``setting`` on the files in ``data`` (``write_inputs``)."""
    base = {**setting.identity(), "repeat": repeat,
            "clock": time.get_clock_info("monotonic").implementation}
    from adapters.registry import load_registry
    entry = load_registry()[setting.framework]
    folder = Path(tempfile.mkdtemp(prefix=f"repeat{repeat}-", dir=data))
    caches = {name: value.replace("{dir}", str(folder / "compile-cache"))
              for name, value in entry.compile_cache_env.items()}
    env = {**os.environ, **caches}
    command = [python, "-m", "suites.serving.cold_start", "--child",
               "--framework", setting.framework, "--device", setting.device,
               "--model", setting.model, "--batch", str(setting.batch),
               "--precision", setting.precision, "--variant", setting.variant,
               "--threads", str(setting.threads), "--data", str(data)]
    root = Path(__file__).resolve().parents[2]
    with open(folder / "stdout", "w+") as out, open(folder / "stderr", "w+") as err:
        spawned = time.monotonic()
        child = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                 cwd=root, env=env, start_new_session=True)
        killed = False
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            killed = True
        # The group, whether or not the child is done: a grandchild outlives nothing.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    marks: dict[str, float] = {}
    result: dict[str, Any] | None = None
    for line in stdout.splitlines():
        if not line.startswith(PREFIX):
            continue
        try:
            found = json.loads(line[len(PREFIX):])
        except json.JSONDecodeError:
            continue
        if found.get("kind") == "mark" and found.get("phase") in PHASES:
            marks[f"{found['phase']}_s"] = float(found["at"]) - spawned
        elif found.get("kind") == "result":
            result = found
    record = {**base, **marks, "compile_cache": caches}
    reached = [p for p in PHASES if f"{p}_s" in marks]
    after = f"after phase '{reached[-1]}'" if reached else "before its first timestamp"
    if killed:
        return ColdStart(**record, status="failed",
                         reason=f"no answer within the time limit of {timeout_s:g} s: killed "
                                f"{after} with its process group")
    if result is None:
        from suites.harness.process import cause_in, ended  # the parent's side only
        words = cause_in(stderr)
        return ColdStart(**record, status="failed",
                         reason=f"the child {ended(child.returncode)} {after} and printed no result"
                                + (f"; its last words: {words}" if words else ""))
    if result.get("variant"):
        record["variant"] = result["variant"]    # "default" resolved to the framework's first
    return ColdStart(**record, status=result["status"], reason=result.get("reason", ""),
                     error=result.get("error"), bound=result.get("bound"),
                     execution=result.get("execution", ""),
                     framework_version=result.get("framework_version", ""))


def _unsupported(setting: Setting) -> str:
    """Why this interpreter cannot run ``setting``'s framework at all, or ""."""
    import importlib.util

    from adapters.registry import load_registry
    registry = load_registry()
    entry = registry.get(setting.framework)
    if entry is None:
        return f"unknown framework {setting.framework!r} (known: {', '.join(registry)})"
    if setting.device not in entry.devices:
        return f"{setting.framework} runs on {', '.join(entry.devices)}, not {setting.device}"
    if entry.package and importlib.util.find_spec(entry.package) is None:
        return (f"{setting.framework} is not installed in this interpreter ({sys.executable}: "
                f"no module {entry.package!r})")
    return ""


def cold_starts(setting: Setting, repeats: int = 3, timeout_s: float = DEFAULT_TIMEOUT_S,
                python: str = sys.executable) -> list[ColdStart]:
    """``repeats`` cold starts of ``setting``, one fresh child each, on one set of files."""
    base = setting.identity()
    reason = _unsupported(setting)
    if reason:
        return [ColdStart(**base, repeat=1, status="unsupported", reason=reason)]
    with tempfile.TemporaryDirectory(prefix="dlbench-cold-start-") as folder:
        try:
            write_inputs(setting, Path(folder))
        except Exception as error:   # noqa: BLE001 - an unknown model is a record too
            from suites.serving.sut import one_line
            return [ColdStart(**base, repeat=1, status="failed", reason=one_line(error))]
        return [run_child(setting, Path(folder), repeat, timeout_s, python)
                for repeat in range(1, repeats + 1)]


def summarise(records: list[ColdStart]) -> ColdStartSummary:
    first = records[0]
    ok = [r for r in records if r.status == "ok"]
    medians = {phase: statistics.median(r.durations()[phase] for r in ok) for phase in PHASES} if ok else {}
    bad = next((r for r in records if r.status != "ok"), None)
    status = "ok" if bad is None else ("unsupported" if bad.status == "unsupported" else "failed")
    reason = "" if bad is None else f"repeat {bad.repeat}: {bad.reason}"
    identity = {name: getattr(first, name) for name in IDENTITY}
    identity["variant"] = ok[0].variant if ok else first.variant
    return ColdStartSummary(**identity, repeats=len(records), ok=len(ok), status=status,
                            reason=reason, phases_median_s=medians,
                            total_median_s=statistics.median(r.answered_s for r in ok) if ok else None,
                            totals_s=tuple(r.total_s for r in records), first_total_s=first.total_s)


def table(summary: ColdStartSummary, records: list[ColdStart]) -> str:
    """The phases' medians and each repeat's phases, in seconds."""
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"
    head = ["", *PHASES, "total"]
    rows = [[f"repeat {r.repeat}", *(cell(r.durations().get(p)) for p in PHASES), cell(r.total_s)]
            for r in records]
    rows.append(["median", *(cell(summary.phases_median_s.get(p)) for p in PHASES),
                 cell(summary.total_median_s)])
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = [f"cold start: {summary.framework} {summary.device} {summary.model} b{summary.batch} "
             f"{summary.precision} {summary.variant} threads={summary.threads}: {summary.status}"
             + (f" ({summary.reason})" if summary.reason else ""),
             "  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.append("(seconds per phase; the total runs from the spawn to the first answer)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.serving.cold_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--threads", type=int, default=2,
                        help="intra-op threads (default 2, the serving suite's budget)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds a child may take before it is killed (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--out", type=Path, help="append one JSON line per repeat and a summary")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    if args.repeats < 1 or args.batch < 1 or args.threads < 1:
        print("--repeats, --batch and --threads must be at least 1", file=sys.stderr)
        return 2
    setting = Setting(args.framework, args.model, args.batch, args.device, args.precision,
                      args.variant, args.threads)
    records = cold_starts(setting, args.repeats, args.timeout)
    summary = summarise(records)
    print(table(summary, records))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as out:
            for record in records:
                out.write(json.dumps(record.to_dict()) + "\n")
            out.write(json.dumps(summary.to_dict()) + "\n")
    return 0 if summary.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
