"""PyTorch's profiler (torch.profiler, Kineto) over a few iterations of one measure.

Operations are ATen operators with their *self* time — on a GPU the device time of the
kernels each operator launched itself, on a CPU its own CPU time — so nested operators
(aten::conv2d → aten::convolution → aten::mkldnn_convolution) are not counted twice.
On a GPU the device kernels are listed too (Li et al. 2016, Fig. 4's top kernels)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from adapters.base import Profile
from suites.instruments.profiling import summarise

US_PER_MS = 1e3


def profile_steps(run: Callable[[], Any], sync: Callable[[Any], None], measure: str,
                  iterations: int, on_gpu: bool) -> Profile:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    sync(None)
    with profile(activities=activities) as trace:
        for _ in range(iterations):
            sync(run())
    averages = trace.key_averages()
    ops, kernels = [], []
    for event in averages:
        if event.device_type == DeviceType.CUDA:
            # A kernel: its own row, with its device time.
            kernels.append((event.key, event.device_time_total / US_PER_MS, event.count))
        elif event.key.startswith("aten::"):
            self_us = event.self_device_time_total if on_gpu else event.self_cpu_time_total
            if self_us > 0:
                ops.append((event.key, self_us / US_PER_MS, event.count))
    tool = f"torch.profiler ({'CUDA kernels' if on_gpu else 'CPU'})"
    return summarise(tool, measure, iterations, ops, kernels if on_gpu else None)
