"""Which rows describe one case on one machine, whatever run or suite wrote them: the
matrix's estimates and the between-run comparison (``suites/stats/between_runs.py``) read
earlier rows through these keys."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A case id's thread count (suites/rows/results.py CaseKey.id: ".../t16/...").
_THREADS = re.compile(r"/t\d+(?=/|$)")


def cpu_label(model: str, isa: str | None) -> str:
    """A CPU as plans and reports name it: its model with its widest vector extension
    where known ("AMD EPYC (AVX-512)"), since one model name has come with and without it."""
    return f"{model} ({isa})" if isa else model


@dataclass(frozen=True)
class Machine:
    """Which rows describe this machine: a GPU by its model name; a CPU by its model,
    logical core count and, where known, its widest vector extension (``isa``: one model
    name has come with and without AVX-512, and a 2-core "AMD EPYC" ran the CPU suites
    2 to 3 times faster with it), so a row that did not record one does not stand for a
    machine that knows its own."""

    device: str
    name: str
    logical_cores: int
    isa: str = ""

    @property
    def label(self) -> str:
        """The machine as a plan names it: "AMD EPYC (AVX-512)", "NVIDIA H200"."""
        return cpu_label(self.name, self.isa)

    def matches(self, env: dict[str, Any], device: str) -> bool:
        if device != self.device:
            return False
        if device == "gpu":
            return env.get("gpu_model") == self.name
        return (env.get("cpu_model") == self.name
                and env.get("logical_cores") == self.logical_cores
                and (not self.isa or env.get("cpu_isa") == self.isa))


def case_key(case_id: str, device: str) -> str:
    """A case id without its thread count on a GPU (``t16`` is the host's cores there)."""
    return _THREADS.sub("", case_id) if device == "gpu" else case_id
