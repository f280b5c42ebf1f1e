"""One worker process (``python -m suites.harness.worker``) as the runner drives it: started with
its stderr on a log, its stdout read line by line onto a queue by a thread of its own (the
runner waits on the queue with a deadline: a case's time limit, a budget's end), and
stopped the way each ending needs.

A one-shot worker runs the plan file named on its command line and exits; a serving
worker (``--serve``) reads plan-file paths on its stdin, one a line, and runs each in the
same process (suites/harness/pool.py keeps it between suites). The queue lives as long as
the process, so a serving worker's later plans are read from the same one.
"""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

import psutil

ROOT = Path(__file__).resolve().parents[2]
# Seconds a serving worker gets to exit after its stdin closes (the framework's own
# teardown), and a worker to stop after a forwarded Ctrl-C, before it is killed.
EXIT_GRACE_S = 10.0


class WorkerProcess:
    def __init__(self, command: list[str], env: dict[str, str], stderr: IO[bytes],
                 serve: bool):
        self.serve = serve
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE if serve else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                                     cwd=ROOT)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(self.proc.stdout, self.lines), daemon=True).start()

    def send(self, plan_file: Path) -> bool:
        """Hand a serving worker its next plan; False where the process is gone."""
        try:
            self.proc.stdin.write(f"{plan_file}\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):   # a broken pipe, or stdin already closed
            return False
        return True

    def next_line(self, timeout: float | None) -> str | None:
        """The next line of its stdout (None once it is closed: the process ended);
        ``queue.Empty`` after ``timeout`` seconds without one."""
        return self.lines.get(timeout=timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self) -> int:
        return self.proc.wait()

    def kill(self) -> None:
        kill_tree(self.proc)

    def interrupt(self) -> None:
        """Stop it as Ctrl-C does (a terminal's Ctrl-C reached it already; SIGTERM, a
        job slot's end, did not), killing it if it does not stop."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def close(self) -> None:
        """End a serving worker between plans: its stdin at EOF, then SIGKILL if it lingers."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()


def _pump(stream, lines: queue.Queue) -> None:
    """The worker's stdout, line by line, onto its queue; None at the end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the worker and every process it started (compiler jobs, a framework's
    helpers), children first so none is re-parented and left running."""
    try:
        parent = psutil.Process(proc.pid)
        children = parent.children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    proc.kill()
    proc.wait()
    psutil.wait_procs(children, timeout=10)


# The line in which a dying native runtime names its cause, on the stderr that the log
# holds: absl's or glog's FATAL (TensorFlow and XLA; seen on an H200: "F0000 00:00:1795916234.2
# 6530 conv_2d_gpu.h:1028] Check failed: ... is OK (INTERNAL: an illegal memory access was
# encountered)"), a C++ exception that reached std::terminate ("terminate called after
# throwing an instance of 'c10::Error'", then "  what():  ..."), CPython's "Fatal Python
# error: ...". A stack trace follows each, so the log's last line is a frame, not the cause.
# Most telling first.
_FATAL_LINES = (re.compile(r"^F\d{4} [\d:.]+\s+\d+ (?P<where>[^\s\]]+)\] (?P<what>.+)$"),
                re.compile(r"^\s*what\(\):\s*(?P<what>\S.*)$"),
                re.compile(r"^(?P<what>Fatal Python error: .+)$"))
# Never the cause: a stack trace's lines and header, absl's INFO lines and its note on
# logging before initialisation (each TensorFlow process writes both).
_NOT_CAUSE = re.compile(r"^\s*(@\s+0x|#\d+\s+0x|\*\*\* |File \"|Current thread|Thread 0x)"
                        r"|^I\d{4} |^WARNING: All log messages before absl")
# How much of the log's end is read, and of the cause is kept (its start and end: a
# CHECK's condition is long, its status comes last).
_TAIL_BYTES = 1 << 20
_WORDS = 300


def ended(code: int) -> str:
    """How a process whose exit code is ``code`` ended, for a row's reason: "was killed by
    SIGABRT" (a negative code: the signal), "exited with code 1"."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def log_size(path: Path) -> int:
    """The log's size now, where a worker's last words will start (0 before it exists)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def last_words(path: Path, since: int = 0) -> str:
    """The cause a worker that died left on its log after byte ``since`` (``cause_in``)."""
    try:
        with path.open("rb") as log:
            log.seek(max(since, log.seek(0, 2) - _TAIL_BYTES))
            return cause_in(log.read().decode("utf-8", "replace"))
    except OSError:
        return ""


def cause_in(stderr: str) -> str:
    """The cause a process that died left on its stderr: the last fatal line of the most
    telling form found (a FATAL line before ``what()``, both before CPython's fatal error,
    which with faulthandler on follows an abort as "Fatal Python error: Aborted"), else the
    last line that is not a stack frame or noise; "" for none."""
    lines = stderr.splitlines()
    for pattern in _FATAL_LINES:
        for line in reversed(lines):
            found = pattern.match(line)
            if found:
                where = found.groupdict().get("where")
                return _shorten(f"{where}: {found['what']}" if where else found["what"])
    return _shorten(next((line for line in reversed(lines)
                          if line.strip() and not _NOT_CAUSE.match(line)), ""))


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _WORDS:
        return text
    half = (_WORDS - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"
