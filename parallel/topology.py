"""The GPU interconnect as the host reports it: ``nvidia-smi topo -m`` (the link between
each pair of GPUs: NV# for NVLink, PIX/PXB/PHB/NODE/SYS for PCIe paths). None on a host
without nvidia-smi (a CPU run)."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from typing import Any

GPU = re.compile(r"GPU\d+")


def parse_topology(text: str) -> dict[str, str]:
    """GPU pair → link, e.g. {"GPU0-GPU1": "NV18"}, from the matrix ``topo -m`` prints."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    header = next((row for row in rows if row and GPU.fullmatch(row[0])), None)
    if header is None:
        return {}
    columns = [name for name in header if GPU.fullmatch(name)]
    links: dict[str, str] = {}
    for row in rows:
        if not row or not GPU.fullmatch(row[0]) or row is header:
            continue
        for column, link in zip(columns, row[1:1 + len(columns)]):
            if column != row[0] and f"{column}-{row[0]}" not in links:
                links[f"{row[0]}-{column}"] = link
    return links


@cache
def interconnect() -> dict[str, Any] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"source": "nvidia-smi topo -m", "links": parse_topology(text),
            "matrix": text.strip()}


@cache
def gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        text = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in text.splitlines() if line.startswith("GPU "))
