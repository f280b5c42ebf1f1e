"""Jobs a GPU worker keeps built from its wall phase for its device phase.

Why: the device phase (suites/harness/device_pass.py) follows a suite's wall samples in the same
worker, and built every job again. In the whole four-framework matrix
(``h200x4-2026-11-all (at 2efa0ce)``) the device_time rows took 574 s (9.6 of its 66.1
minutes of GPU work) for about 44 s of device blocks; the rest was building the jobs and
their first calls made again. TensorFlow tuned each convolution once more (its 138 rows
took 280 s: for the 11x11 convolution of ``li2016`` with 512 filters at batch 64, 6.3 s
against the 6.8 s of its gradient's first call in the wall phase); ONNX Runtime built
each session again. A second tuning can also pick other
kernels than the first: TensorFlow once made a rebuilt convolution slower than the one
its wall samples ran, so the device time no longer described them (README, "What a run
costs"). A kept job's device time is taken on the programs and kernels its wall samples
timed.

Which frameworks: those whose registry entry says ``keeps_jobs_for_device_phase``
(adapters/registry.toml): TensorFlow and ONNX Runtime, whose rebuilds cost 229 and 98 s of
the 352 s kept jobs saved in that matrix (at 182e8df, on the same host model). PyTorch's
and JAX's rebuilds cost little (their device_time rows took 72 and 84 s kept against 86
and 95 s built again), and kept jobs changed their rows' memory figures: JAX's peak is the
allocator's only where a measure sets a new high for the process, which memory held by
kept jobs made more common (ResNet-50's gradient at batch 16 then counted its first
call's autotuning scratch: 4987 MB against 1727), and PyTorch's no longer counted what
an earlier job had left allocated (the autoencoders at batch 64: 2 MB against 70).

What is kept: a job the runner marks (``keep``: its framework keeps jobs and its case has
device time or a profile still to measure, suites/harness/runner.py), built for the wall phase,
whose measures all ran without an error escaping. It stays until the device phase of the same worker takes it
(``take``) or the worker's process ends. The device phase of a job nobody kept builds it as before.

Memory: a kept job holds device memory while later jobs are timed. The rule keeps one
only while the memory that live arrays hold (the framework allocator's bytes in use; NVML's
figure for the whole device, the framework's pool of freed blocks included, where the
framework reports none) is below ``KEEP_BELOW`` of the device's, so the kept jobs leave
every later job most of the device; a job that still runs out of memory after others goes
to a fresh process, as before (suites/harness/worker.py), where nothing is kept. Where the memory
in use is unknown nothing is kept. The rows' peak memory leaves out what was in use when
the job was built while others were kept (suites/harness/worker.py ``own_memory``), so a figure
does not grow with the jobs kept before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The share of the GPU's memory in use (as the rule reads it) above which no further job
# is kept: the kept jobs leave the later ones most of the device (practice-gpu's batch
# sweep looks for the largest batch that fits; li2016's batch-512 layers need several GB).
KEEP_BELOW = 0.35


@dataclass(frozen=True)
class KeptKey:
    """A job's identity across the phases: its results file and its case (a suite may
    split one case over jobs with other timer settings; the device phase needs one)."""

    results: str
    case: tuple


@dataclass(frozen=True)
class KeptJob:
    prepared: Any           # adapters.base.Prepared
    info: dict[str, Any]    # the rows' model_info as the build found it (an LSTM's length)


class KeptJobs:
    """The worker's kept jobs, by key, in the order they were kept."""

    def __init__(self, used_fraction: Callable[[], float | None]):
        self.used_fraction = used_fraction
        self.jobs: dict[KeptKey, KeptJob] = {}
        self.declined = ""      # why the last job offered was not kept ("" if it was)

    def __len__(self) -> int:
        return len(self.jobs)

    def offer(self, key: KeptKey, job: KeptJob) -> bool:
        """Keep ``job`` if the memory rule allows; False: the caller closes it."""
        if key in self.jobs:
            self.declined = "this case is kept already"
            return False
        used = self.used_fraction()
        if used is None:
            self.declined = "the GPU's memory in use is unknown"
            return False
        if used >= KEEP_BELOW:
            self.declined = f"{used:.0%} of the GPU's memory in use"
            return False
        self.jobs[key] = job
        self.declined = ""
        return True

    def take(self, key: KeptKey) -> KeptJob | None:
        """The kept job of ``key``, no longer kept (the caller closes it), or None."""
        return self.jobs.pop(key, None)
