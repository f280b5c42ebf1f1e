"""Settings: the identity of a table row (everything but model, batch and measure), its
display label, and the lookup "setting → measure → result row" that every table uses."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields

import pandas as pd

from reports.pipeline.tidy import SETTING_KEY


@dataclass(frozen=True, order=True)
class Setting:
    device: str
    hardware: str
    framework: str
    variant: str
    precision: str
    threads: int
    interop_threads: int
    layout: str
    execution: str
    host: str
    cpu_model: str
    gpu_model: str
    framework_version: str
    compile_cache: str = ""     # "", "cold" or "warm" (Bahrampour Table 8)

    @property
    def fw_variant(self) -> str:
        return f"{self.framework} {self.variant}".strip()


# compile_cache is shown with the variant wherever a setting is named (variant_text).
SHOWN = ("device", "hardware", "framework", "variant", "precision", "threads", "compile_cache")
HIDDEN = ("layout", "interop_threads", "framework_version", "host", "execution")
assert set(SETTING_KEY) | {"hardware"} == {f.name for f in fields(Setting)}


def setting_of(row) -> Setting:
    return Setting(**{f.name: row[f.name] for f in fields(Setting)})


def records(frame: pd.DataFrame) -> list[dict]:
    return frame.to_dict("records")


def by_setting(rows: list[dict]) -> dict[Setting, dict[str, dict]]:
    """setting → measure → row (identities are unique after ``tidy``)."""
    out: dict[Setting, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        out[setting_of(row)][row["measure"]] = row
    return dict(out)


def extras(settings: list[Setting]) -> dict[Setting, str]:
    """Hidden fields that tell apart settings whose shown fields are equal, e.g. two hosts
    with the same CPU, or one framework at two versions: never shown as one row."""
    groups: dict[tuple, list[Setting]] = defaultdict(list)
    for s in settings:
        groups[tuple(getattr(s, k) for k in SHOWN)].append(s)
    out = {s: "" for s in settings}
    for members in groups.values():
        if len(members) < 2:
            continue
        differing = [k for k in HIDDEN if len({getattr(m, k) for m in members}) > 1]
        for m in members:
            out[m] = ", ".join(f"{k} {getattr(m, k)}" for k in differing)
    return out


def variant_name(variant: str, compile_cache: str, extra: str = "") -> str:
    """``compile [cache cold]``: a cold and a warm run of one variant never read alike."""
    tags = [f"cache {compile_cache}"] if compile_cache else []
    tags += [extra] if extra else []
    return f"{variant} [{', '.join(tags)}]" if tags else variant


def variant_text(setting: Setting, extra: str) -> str:
    return variant_name(setting.variant, setting.compile_cache, extra)


def label(setting: Setting, extra: str = "", hardware: bool = True) -> str:
    """One-line name: ``torch eager fp32 · cpu 8 threads · <CPU model>``."""
    where = (f"cpu {setting.threads} threads" if setting.device == "cpu" else setting.device)
    parts = [f"{setting.framework} {variant_text(setting, extra)} {setting.precision}", where]
    if hardware:
        parts.append(setting.hardware)
    return " · ".join(parts)
