"""Starts the processes of one data-parallel case and guarantees they end.

Every process starts in its own session (so its process group holds it and whatever it
starts: torch.distributed.run's workers, for one). The launcher waits for all of them
under one deadline. A rank that exits with an error leaves its peers blocked in a
collective that can never complete, so once one process fails the others get a short
grace period and then every group is SIGKILLed; at the deadline likewise. The outcome
says which: ``ok``, ``failed`` (with the exit codes and the tail of stderr) or ``timeout``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GRACE_S = 10.0     # peers of a failed rank get this long to exit on their own
POLL_S = 0.1


@dataclass(frozen=True)
class Outcome:
    status: str                 # "ok", "failed" or "timeout"
    reason: str
    exit_codes: tuple[int | None, ...]
    wall_s: float


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)   # the group id is the leader's pid
    process.wait()


# Lines that name why a process died. torchrun ends its log with a summary table
# ("exitcode: -6 ... Signal 6 received"); the worker's own message (a Python traceback's
# last line, a C++ "terminate called ... what(): ...") sits above it.
_CAUSE_MARKERS = ("Error", "Exception", "terminate called", "what():", "Aborted",
                  "enforce fail")


def _tail(path: Path, chars: int = 300) -> str:
    """The first two lines in the log that name a cause (not torchrun's own
    ChildFailedError summary), then the log's last lines; each part at most ``chars``
    characters."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-4:]
    cause = " ".join([line for line in lines
                      if any(marker in line for marker in _CAUSE_MARKERS)
                      and "ChildFailedError" not in line
                      and line not in last][:2])
    tail = " | ".join(last)[-chars:]
    return f"{cause[:chars]} | {tail}" if cause else tail


def launch(commands: list[list[str]], envs: list[dict[str, str]], timeout_s: float,
           log_dir: Path, cwd: Path | None = None,
           watch: Callable[[], None] | None = None) -> Outcome:
    """Run ``commands[i]`` with environment ``envs[i]`` until all exit or ``timeout_s``;
    ``watch`` is called at every poll (the runner collects finished cases' results)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    processes: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        for index, (command, env) in enumerate(zip(commands, envs)):
            log = log_dir / f"process{index}.log"
            logs.append(log)
            with log.open("w") as handle:
                processes.append(subprocess.Popen(
                    command, env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = started + timeout_s
        failed_at: float | None = None
        while True:
            codes = [p.poll() for p in processes]
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if failed_at is None and any(code not in (None, 0) for code in codes):
                failed_at = now
            if now > deadline or (failed_at is not None and now - failed_at > GRACE_S):
                break
            if watch is not None:
                watch()
            time.sleep(POLL_S)
    finally:
        codes_before_kill = [p.poll() for p in processes]
        for process in processes:
            if process.poll() is None:
                _kill(process)
            else:
                # The leader exited; anything it left in its group goes too.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
    wall = time.monotonic() - started
    codes = tuple(codes_before_kill)
    bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
    if bad:
        index, code = bad[0]
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        hung = [i for i, c in enumerate(codes) if c is None]
        others = f"; process(es) {hung} still running were killed" if hung else ""
        return Outcome("failed", f"process {index} {how}{others}: {_tail(logs[index])}",
                       codes, wall)
    if any(code is None for code in codes):
        return Outcome("timeout", f"no result within {timeout_s:.0f} s; all processes killed",
                       codes, wall)
    return Outcome("ok", "", codes, wall)
