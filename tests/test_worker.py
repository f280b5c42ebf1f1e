"""The worker's interrupt handling, without any framework."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, os, signal, sys
from suites import worker
if sys.argv[1] == "handler":
    worker.install_interrupt_handler()
fired = []
def callback(phase, info):
    if not fired:
        fired.append(phase)
        os.kill(os.getpid(), signal.SIGINT)   # a Ctrl-C that lands inside the callback
        sum(range(10000))                     # give the handler a bytecode boundary to run
gc.callbacks.append(callback)
gc.collect()            # Python ignores the KeyboardInterrupt raised in the callback
gc.callbacks.remove(callback)
try:
    worker.check_interrupt()
    print("went on")
except KeyboardInterrupt:
    print("stopped")
"""


def run(mode: str) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_an_interrupt_swallowed_by_a_callback_still_stops_the_worker():
    assert run("handler") == "stopped"
    assert run("default") == "went on"  # the failure the handler exists for
