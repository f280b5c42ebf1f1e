"""Data-parallel scaling rows (``parallel/runner.py``): the computation a row measured, and
whether its communication summary (``parallel/communication.py``) can be right. Read by
the scaling planner and by the report, which imports nothing of ``parallel/``."""

from __future__ import annotations

from typing import Any

# (framework, device, model, mode, per-device batch, global batch, devices, precision)
Key = tuple[str, str, str, str, int, int, int, str]
# Kernel busy time may exceed the host's time for the same steps by this much (the two
# clocks are read at slightly different points) before the records are taken as wrong.
WALL_TOLERANCE = 0.05


def row_key(row: dict[str, Any]) -> Key | None:
    s, settings = row.get("scaling") or {}, row.get("settings") or {}
    try:
        return (settings["framework"], settings["device"], row["model"], s["mode"],
                int(s["per_device_batch"]), int(s["global_batch"]), int(s["devices"]),
                settings.get("precision", "fp32"))
    except (KeyError, TypeError, ValueError):
        return None


def implausible(summary: dict[str, Any]) -> str:
    """Why a summary cannot be right, or "": one device's kernels, overlaps merged, cannot
    be busy longer than the steps they ran in took on the host's clock."""
    wall = summary.get("traced_wall_ms_per_step")
    busy = summary["all_kernel_ms_per_step"]
    if wall and busy > wall * (1 + WALL_TOLERANCE):
        return (f"kernel busy time {busy:.2f} ms per step exceeds the traced steps' wall time "
                f"{wall:.2f} ms: the records are not these steps'")
    return ""
