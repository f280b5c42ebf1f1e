"""Host memory: the process's peak resident set size, resettable on Linux.

Writing "5" to /proc/self/clear_refs resets the kernel's high-water mark (VmHWM)
(Documentation/filesystems/proc.rst), so each measurement gets its own peak.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from adapters.base import Memory


def reset_peak_rss() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> Memory:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return Memory(int(line.split()[1]) * 1024, "rss")
    except OSError:
        pass
    return Memory(None, "rss")
