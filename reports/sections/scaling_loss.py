"""Where a data-parallel step loses its time: the measured reason a case scales below 90%.

The ideal step at N devices is the one-device step t₁ (weak scaling: the same work per
device) or t₁/N (strong scaling: the same global batch split N ways). What a step takes
beyond it splits two ways, each measured in the rank's own process (``parallel/rank.py``):

* timed: the gradient all-reduce's exposed time, t_N − (the same step without the
  all-reduce), and the per-device step above the ideal, (step without the all-reduce) −
  ideal: work that does not shrink with the shard (a launch-bound step at a small batch);
* from CUPTI's kernel records of the traced steps (``parallel/communication.py``): how
  much more time no kernel ran (launch gaps, host work), how much longer the compute
  kernels ran, and the NCCL kernel time no compute kernel hid, each against the
  one-device step's own figures scaled like the ideal. The three add up to the traced
  step minus the ideal traced step.

A trace of several processes written before ``parallel/communication.py`` left the first
traced step out is not used: a rank that attached CUPTI late made its peers' NCCL kernels
spin, counted as communication (9.8 to 43 ms per step in steps of 11.6 to 70 ms, PyTorch on
4× H200). Nor is a trace whose kernels were busier than the steps they ran in, nor one
whose steps lost a different time than the timed ones: the CUPTI split adds up to the
traced loss, so it names the cause of the timed loss only where the two agree. Such a row
keeps its timed split and says why the CUPTI one is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suites.rows.scaling import implausible

# Efficiency below which a case's lost time is explained (the and Horovod's 90%).
EXPLAIN_BELOW = 0.90
# What a trace needs for the split (rows traced with torch.profiler before CUPTI's window
# carry the NCCL total only).
SPLIT_KEYS = ("all_kernel_ms_per_step", "compute_kernel_ms_per_step",
              "exposed_nccl_ms_per_step")
# How far the traced loss may stray from the timed loss, as a share of the timed loss.
# CUPTI's per-kernel records slow a step that launches many small kernels: on 4× H200 the
# LSTM at 16 per GPU traced 1.4 to 2.2 times its timed step, and its traced losses were up
# to ten times the timed ones (JAX and TensorFlow, h200x4-2026-11d (at 2efa0ce)), while the fp32
# ResNet-50 and VGG-16 steps traced within 4% of their timed steps.
TRACED_LOSS_TOLERANCE = 0.5


@dataclass(frozen=True)
class StepLoss:
    """One case's step against its ideal, in ms per step."""

    efficiency: float
    step_ms: float
    ideal_ms: float
    allreduce_ms: float            # timed: step − step without the all-reduce
    per_device_ms: float           # timed: step without the all-reduce − ideal
    idle_ms: float | None          # CUPTI: more time with no kernel running
    compute_ms: float | None       # CUPTI: more compute-kernel time
    exposed_nccl_ms: float | None  # CUPTI: NCCL kernel time no compute kernel hid
    trace_note: str                # why the CUPTI split is missing, or ""

    @property
    def lost_ms(self) -> float:
        return self.step_ms - self.ideal_ms

    @property
    def cause(self) -> str:
        """The largest measured part: the CUPTI split where there is one, else the timed."""
        if self.idle_ms is not None:
            parts = {"GPU idle (launch gaps, host work)": self.idle_ms,
                     "compute kernels": self.compute_ms,
                     "exposed all-reduce": self.exposed_nccl_ms}
        else:
            parts = {"exposed all-reduce": self.allreduce_ms,
                     "per-device step": self.per_device_ms}
        return max(parts, key=lambda name: parts[name] or 0.0)


def trace_problem(row: dict[str, Any]) -> str:
    """Why a row's CUPTI summary cannot be its steps', or ""."""
    s = row["scaling"]
    kernels, step_ms = s.get("communication_kernels"), (row.get("timing") or {}).get("median_ms")
    if not kernels or not step_ms:
        return ""
    if (s.get("processes") or 1) > 1 and "traced_wall_ms_per_step" not in kernels:
        # Written before the first traced step was left out: each rank's NCCL kernels
        # may hold its peers' CUPTI attach time.
        return "trace refused: its ranks were not aligned before it"
    # The tracer's own check (rows that predate it: against the timed median).
    wrong = implausible({"all_kernel_ms_per_step": kernels.get("all_kernel_ms_per_step") or 0.0,
                         "traced_wall_ms_per_step": kernels.get("traced_wall_ms_per_step")
                         or step_ms})
    return f"trace refused: {wrong}" if wrong else ""


def loss_disagreement(traced_lost_ms: float, timed_lost_ms: float) -> str:
    """Why a trace's loss cannot explain the timed loss, or ""."""
    if abs(traced_lost_ms - timed_lost_ms) <= TRACED_LOSS_TOLERANCE * abs(timed_lost_ms):
        return ""
    return (f"trace refused: tracing changed the step, which lost {traced_lost_ms:+.2f} ms "
            f"traced against {timed_lost_ms:+.2f} ms timed")


def _traced(row: dict[str, Any]) -> tuple[float, float, float, float] | None:
    """(wall, busy, compute, exposed NCCL) per traced step, or None."""
    timing = row.get("timing") or {}
    kernels = row["scaling"].get("communication_kernels")
    if not kernels or trace_problem(row) or not all(key in kernels for key in SPLIT_KEYS):
        return None
    wall = kernels.get("traced_wall_ms_per_step") or timing["median_ms"]
    return (wall, kernels["all_kernel_ms_per_step"], kernels["compute_kernel_ms_per_step"],
            kernels["exposed_nccl_ms_per_step"])


def _baseline_key(row: dict[str, Any]) -> tuple:
    s = row["scaling"]
    return (row["settings"]["framework"], row["settings"]["device"],
            (row.get("env") or {}).get("host"), row["model"], s["base_batch"],
            row["settings"]["precision"])


def step_loss(row: dict[str, Any], baseline: dict[str, Any] | None) -> StepLoss | None:
    """The split of one ok N > 1 row against its one-device row; None where the row lacks
    the figures (no efficiency, no step without the all-reduce)."""
    s, timing = row["scaling"], row.get("timing") or {}
    if row.get("status") != "ok" or s.get("devices", 1) < 2 or s.get("efficiency") is None \
            or timing.get("local_median_ms") is None or not s.get("baseline_ms"):
        return None
    scale = 1.0 if s["mode"] == "weak" else 1.0 / s["devices"]
    step, local = timing["median_ms"], timing["local_median_ms"]
    ideal = s["baseline_ms"] * scale
    mine = _traced(row)
    theirs = _traced(baseline) if baseline else None
    idle = compute = exposed = None
    if mine and theirs:
        wall_n, busy_n, compute_n, exposed_n = mine
        wall_1, busy_1, compute_1, exposed_1 = theirs
        note = loss_disagreement(wall_n - scale * wall_1, step - ideal)
        if not note:
            idle = (wall_n - busy_n) - scale * (wall_1 - busy_1)
            compute = compute_n - scale * compute_1
            exposed = exposed_n - scale * exposed_1
    elif s.get("communication_kernels") is None:
        note = s.get("communication_kernels_reason") or "no CUPTI trace"
    elif not mine:
        note = trace_problem(row) or "the trace has no compute split"
    else:
        note = "the one-device row has no usable trace"
    return StepLoss(s["efficiency"], step, ideal, step - local, local - ideal, idle, compute,
                    exposed, note)


def below_target(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], StepLoss]]:
    """Every ok N > 1 row under ``EXPLAIN_BELOW``, with its split, in the rows' order."""
    baselines = {_baseline_key(r): r for r in rows
                 if r.get("status") == "ok" and r["scaling"].get("devices") == 1}
    out = []
    for row in rows:
        loss = step_loss(row, baselines.get(_baseline_key(row))) \
            if row["scaling"].get("devices", 1) > 1 else None
        if loss is not None and loss.efficiency < EXPLAIN_BELOW:
            out.append((row, loss))
    return out
