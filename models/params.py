"""The parameter record every op declares (``models.ops``), with canonical shapes.

A ``ParamSpec`` names one array; ``trainable`` is False for batch-norm running statistics
(buffers). Tied decoders own only their bias: their weight belongs to the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Init = Literal["he", "glorot", "bias", "gamma", "beta", "mean", "var", "lstm", "embedding", "normal"]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    init: Init
    fan_in: int
    trainable: bool = True

    @property
    def size(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count
