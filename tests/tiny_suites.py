"""Suite files for the harness's tests: tiny models (models/zoo.py's ``*_tiny``), a timer
that takes two samples in each of two repetitions, forward and gradient."""

from __future__ import annotations

import json

TIMER = """
[timer]
warmup = 0
min_samples = 1
max_samples = 2
budget_s = 0.01
repetitions = 2
max_repetitions = 2
"""


def cases(models: list[str], batches: list[int], device: str = "cpu",
          measures: tuple[str, ...] = ("forward", "gradient"), extra: str = "") -> str:
    """One ``[[cases]]`` table; on the CPU at one thread (a GPU case has no thread list)."""
    threads = "threads = [1]\n" if device == "cpu" else ""
    return (f"[[cases]]\nmodels = {json.dumps(models)}\nbatches = {json.dumps(batches)}\n"
            f"measures = {json.dumps(list(measures))}\ndevices = [\"{device}\"]\n"
            f"{threads}{extra}")


def tiny_suite(name: str, *tables: str, case_timeout_s: int = 60) -> str:
    return f'name = "{name}"\ncase_timeout_s = {case_timeout_s}\n{TIMER}\n' + "\n".join(tables)
