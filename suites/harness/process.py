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
