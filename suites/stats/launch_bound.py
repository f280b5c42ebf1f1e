"""Host overhead and the launch-bound flag, from a row's wall and device medians.

The device's own time reproduces between runs and hosts (on H100s the device medians of
two runs were 0.5% apart) while the wall time of a case whose device idles between
launches follows the host CPU: its clock, its load, a VM's steal time. A row whose device
was busy for less than half its wall time is launch-bound: its wall figure measures the
host as much as the framework, and says so.
"""

from __future__ import annotations

from typing import Any

LAUNCH_BOUND_SHARE = 0.5     # device time below this share of the wall time: launch-bound
FIELDS = ("host_overhead_ms", "launch_bound", "launch_bound_reason")


def overhead_fields(median_ms: float | None, device_median_ms: float | None) -> dict[str, Any]:
    """``host_overhead_ms`` (wall median − device median: launches, framework and Python
    time the device did not overlap), ``launch_bound`` and its reason; None where the row
    has no device time."""
    if median_ms is None or device_median_ms is None or median_ms <= 0:
        return {"host_overhead_ms": None, "launch_bound": None, "launch_bound_reason": ""}
    share = device_median_ms / median_ms
    bound = share < LAUNCH_BOUND_SHARE
    reason = (f"the device was busy {share:.0%} of the wall time (< {LAUNCH_BOUND_SHARE:.0%}): "
              f"the wall median is mostly launch and host overhead and depends on the host "
              f"CPU; compare device_median_ms across hosts") if bound else ""
    return {"host_overhead_ms": median_ms - device_median_ms, "launch_bound": bound,
            "launch_bound_reason": reason}
