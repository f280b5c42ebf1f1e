"""What one rank process is asked to do (``RankSpec``) and how a scaling suite expands
into cases (``ScalingCase``). Plain data: this module imports no framework."""

from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUITES_DIR = Path(__file__).resolve().parent / "suites"
MODES = ("weak", "strong")
# fp32 strict (the default everywhere) and bf16 mixed precision (the practice suite's);
# TF32 stays with the single-device suites.
PRECISIONS = ("fp32", "bf16")


class ScalingSuiteError(ValueError):
    """A malformed scaling suite: the message names the problem."""


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank needs; written to a JSON file the launcher passes on."""

    framework: str
    device: str                 # "cpu" or "gpu"
    model: str
    per_device_batch: int
    devices: int                # N: devices taking part in the step
    mode: str                   # "weak" or "strong" (only recorded: the batches say it)
    warmup: int
    samples: int
    seed: int = 0
    precision: str = "fp32"
    result: str = ""            # where rank 0 writes its JSON result
    task: str = "time"          # "time" or "gradients" (correctness: rank 0 saves an .npz)
    processes: int = 1          # processes the launcher starts (JAX/TF: 1 drives all devices)
    fault_step: int = -1        # tests: the last rank SIGKILLs itself at this timed step
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.devices

    def to_file(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def from_file(path: Path) -> RankSpec:
        return RankSpec(**json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class ScalingCase:
    model: str
    mode: str
    devices: int
    per_device_batch: int
    base_batch: int             # weak: the per-device batch; strong: the global batch
    precision: str = "fp32"

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.devices

    def case_id(self, suite: str, framework: str, device: str) -> str:
        return (f"{suite}/{framework}/{device}/{self.model}/{self.mode}-b{self.base_batch}/"
                f"n{self.devices}/data_parallel/{self.precision}")


@dataclass(frozen=True)
class ScalingSuite:
    name: str
    description: str
    warmup: int
    samples: int
    timeout_s: float
    groups: tuple[dict[str, Any], ...]
    path: Path

    def cases(self, available_devices: int,
              device_counts: tuple[int, ...] | None = None) -> list[ScalingCase]:
        """Every case, at the group's device counts (N = 1, 2, … when it lists none), or at
        ``device_counts`` and N = 1 (the baseline) where given, up to the devices present
        (and the group's limit), in order of N so each N = 1 baseline runs before the
        cases it is compared with."""
        out: list[ScalingCase] = []
        seen: set[tuple] = set()
        for group in self.groups:
            limit = min(available_devices, int(group.get("max_devices", available_devices)))
            listed = sorted({1, *device_counts}) if device_counts else \
                group.get("devices", range(1, limit + 1))
            counts = [n for n in listed if n <= limit]
            for model, batch, mode, precision, n in itertools.product(
                    group["models"], group["batches"], group.get("modes", ["weak"]),
                    group.get("precisions", ["fp32"]), counts):
                if mode == "strong" and batch % n:
                    continue  # the global batch does not split evenly
                per_device = batch if mode == "weak" else batch // n
                case = ScalingCase(model, mode, n, per_device, batch, precision)
                # One device at batch b is the baseline of both modes.
                key = (model, "any", 1, batch, precision) if n == 1 else \
                    (model, mode, n, batch, precision)
                if key not in seen:
                    seen.add(key)
                    out.append(case)
        return sorted(out, key=lambda c: c.devices)


def resolve(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        return path
    bundled = SUITES_DIR / f"{name_or_path}.toml"
    if bundled.exists():
        return bundled
    known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.toml")))
    raise ScalingSuiteError(f"unknown scaling suite '{name_or_path}' (known: {known})")


def is_scaling_suite(name_or_path: str) -> bool:
    """A bundled scaling suite's name, or a suite file that says ``kind = "scaling"``."""
    if (SUITES_DIR / f"{name_or_path}.toml").exists():
        return True
    path = Path(name_or_path)
    try:
        return path.suffix == ".toml" and tomllib.loads(path.read_text()).get("kind") == "scaling"
    except (OSError, tomllib.TOMLDecodeError):
        return False


def load(name_or_path: str) -> ScalingSuite:
    path = resolve(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ScalingSuiteError(f"{path}: {error}") from None
    from models.zoo import get_model

    groups = data.get("cases")
    if not groups:
        raise ScalingSuiteError(f"{path}: no [[cases]]")
    for index, group in enumerate(groups):
        where = f"{path}: cases[{index}]"
        for key in ("models", "batches"):
            if not group.get(key):
                raise ScalingSuiteError(f"{where}: '{key}' is missing or empty")
        for model in group["models"]:
            try:
                get_model(model)
            except KeyError as error:
                raise ScalingSuiteError(f"{where}: {error}") from None
        for mode in group.get("modes", ["weak"]):
            if mode not in MODES:
                raise ScalingSuiteError(f"{where}: mode '{mode}' is not one of {MODES}")
        for precision in group.get("precisions", ["fp32"]):
            if precision not in PRECISIONS:
                raise ScalingSuiteError(f"{where}: precision '{precision}' is not one of "
                                        f"{PRECISIONS}")
        if any(not isinstance(b, int) or b < 1 for b in group["batches"]):
            raise ScalingSuiteError(f"{where}: batches must be positive integers")
        counts = group.get("devices", [1])
        if not isinstance(counts, list) or not counts or \
                any(not isinstance(n, int) or n < 1 for n in counts):
            raise ScalingSuiteError(f"{where}: devices must be a list of positive integers")
    timer = data.get("timer", {})
    return ScalingSuite(data.get("name", path.stem), data.get("description", ""),
                        int(timer.get("warmup", 5)), int(timer.get("samples", 30)),
                        float(data.get("timeout_s", 600)), tuple(groups), path)
