"""Suite files: parsing, validation and expansion into jobs.

A suite is TOML::

    name = "default-cpu"
    description = "..."
    case_timeout_s = 1800   # optional: a case (build + one measure) running longer becomes
                            # a "timeout" row and its worker is killed; --case-timeout overrides
    [timer]                 # optional overrides of suites.stats.timer.TimerSettings
    budget_s = 3.0
    [[cases]]               # each table is a cross product
    models = ["lenet", "resnet50"]
    batches = [16]
    measures = ["forward", "gradient"]
    devices = ["cpu"]       # optional, default both
    threads = ["all"]       # ints, "all" (usable logical CPUs) or "physical"
    interop_threads = 1     # optional
    precisions = ["fp32"]   # optional
    variants = ["default"]  # optional; "default" is each framework's standard fast path
    frameworks = ["torch"]  # optional filter
    epoch_batches = 124     # optional: batches per epoch for epoch_forward/epoch_gradient
    profile_iterations = 10 # optional: profiled iterations for the "profile" measure
    compile_cache = ["cold", "warm"]  # optional: first calls with an empty persistent
                            # compilation cache, then with the one the cold run filled;
                            # each such job runs in a fresh process
    timer = { min_samples = 3 }  # optional: this group's overrides of the suite's [timer]

Everything is checked before anything runs: unknown keys (with a suggestion), wrong
types, unknown models, impossible shapes and batches all raise ``SuiteError`` with one
line naming the file and the problem.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from adapters.registry import FrameworkEntry
from models.analysis import ModelError, analyse
from models.measures import MEASURES, PRECISIONS
from models.zoo import UnknownModel, get_model
from suites.stats.timer import TimerSettings

SUITES_DIR = Path(__file__).resolve().parents[1]
DEVICES = ("cpu", "gpu")
COMPILE_CACHES = ("cold", "warm")
MAX_BATCH = 1 << 20
# Long enough for the slowest seed case on a CPU (an epoch of 124 batches of a large
# network, after its first call and warm-up), short enough that a hung kernel or compile
# costs half an hour rather than the rest of the run.
DEFAULT_CASE_TIMEOUT_S = 1800.0


class SuiteError(ValueError):
    """A suite file or argument that cannot run; the message is one line."""


@dataclass(frozen=True)
class CaseGroup:
    models: tuple[str, ...]
    batches: tuple[int, ...]
    measures: tuple[str, ...]
    devices: tuple[str, ...] = DEVICES
    threads: tuple[int | str, ...] = ("all",)
    interop_threads: int = 1
    precisions: tuple[str, ...] = ("fp32",)
    variants: tuple[str, ...] = ("default",)
    frameworks: tuple[str, ...] = ()
    # Bahrampour et al. 2016, 4.4: "124 iterations, one entire epoch".
    epoch_batches: int = 124
    # Li et al. 2016, 4.A: per-layer runtime "averaged over 10 training iterations".
    profile_iterations: int = 10
    compile_cache: tuple[str, ...] = ("",)
    timer: TimerSettings = TimerSettings()   # the suite's [timer], with this group's overrides


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: Path
    timer: TimerSettings
    groups: tuple[CaseGroup, ...]
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S


@dataclass(frozen=True)
class Job:
    """One build of one model: its measures are timed back to back on that build."""

    model: str
    batch: int
    device: str
    threads: int
    interop_threads: int
    precision: str
    variant: str
    measures: tuple[str, ...]
    epoch_batches: int = 124
    profile_iterations: int = 10
    compile_cache: str = ""     # "", "cold" or "warm"
    timer: TimerSettings = TimerSettings()
    fingerprint: bool = True    # False where another job of the same case takes it


def suggest(word: str, options) -> str:
    """" (did you mean ...?)" for the closest option, or nothing."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_keys(where: str, table: dict[str, Any], allowed: list[str]) -> None:
    for key in table:
        if key not in allowed:
            raise SuiteError(f"{where}: unknown key '{key}'{suggest(key, allowed)}")


def _list_of(where: str, key: str, value: Any, kind: type | tuple[type, ...]) -> tuple:
    if not isinstance(value, list) or not value:
        raise SuiteError(f"{where}: '{key}' must be a non-empty list, got {value!r}")
    for item in value:
        if not isinstance(item, kind) or isinstance(item, bool):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise SuiteError(f"{where}: '{key}' holds {item!r}, which is not {names}")
    return tuple(value)


def _one_of(where: str, key: str, values: tuple, allowed) -> None:
    for value in values:
        if value not in allowed:
            raise SuiteError(f"{where}: {key} '{value}' is not one of "
                             f"{', '.join(map(str, allowed))}{suggest(str(value), allowed)}")


def check_batch(where: str, batch: Any) -> int:
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
        raise SuiteError(f"{where}: impossible batch {batch!r} (need an integer "
                         f"from 1 to {MAX_BATCH})")
    return batch


def check_model(where: str, name: str) -> None:
    try:
        analyse(get_model(name))
    except (UnknownModel, ModelError) as error:
        raise SuiteError(f"{where}: {error}") from None


def _group(where: str, table: dict[str, Any], registry: dict[str, FrameworkEntry],
           suite_timer: TimerSettings) -> CaseGroup:
    allowed = [f.name for f in fields(CaseGroup)]
    _check_keys(where, table, allowed)
    for key in ("models", "batches", "measures"):
        if key not in table:
            raise SuiteError(f"{where}: missing key '{key}'")
    models = _list_of(where, "models", table["models"], str)
    for model in models:
        check_model(where, model)
    batches = tuple(check_batch(where, b) for b in _list_of(where, "batches", table["batches"], int))
    measures = _list_of(where, "measures", table["measures"], str)
    _one_of(where, "measure", measures, MEASURES)
    devices = _list_of(where, "devices", table.get("devices", list(DEVICES)), str)
    _one_of(where, "device", devices, DEVICES)
    threads = _list_of(where, "threads", table.get("threads", ["all"]), (int, str))
    for value in threads:
        if isinstance(value, str) and value not in ("all", "physical") or \
                isinstance(value, int) and value < 1:
            raise SuiteError(f"{where}: threads {value!r} must be a positive integer, "
                             f"'all' or 'physical'")
    interop = _positive_int(where, table, "interop_threads", 1)
    epoch_batches = _positive_int(where, table, "epoch_batches", 124)
    profile_iterations = _positive_int(where, table, "profile_iterations", 10)
    caches = ("",)
    if "compile_cache" in table:
        caches = _list_of(where, "compile_cache", table["compile_cache"], str)
        _one_of(where, "compile_cache", caches, COMPILE_CACHES)
        if "warm" in caches and "cold" not in caches:
            raise SuiteError(f"{where}: compile_cache 'warm' needs 'cold' in the same group "
                             f"(the cold run fills the cache the warm run reads)")
        caches = tuple(sorted(caches, key=COMPILE_CACHES.index))
    precisions = _list_of(where, "precisions", table.get("precisions", ["fp32"]), str)
    _one_of(where, "precision", precisions, PRECISIONS)
    frameworks = _list_of(where, "frameworks", table["frameworks"], str) \
        if "frameworks" in table else ()
    _one_of(where, "framework", frameworks, registry)
    variants = _list_of(where, "variants", table.get("variants", ["default"]), str)
    known = {"default"} | {v for entry in registry.values() for v in entry.variants}
    _one_of(where, "variant", variants, sorted(known))
    timer = _timer(f"{where} timer", table.get("timer", {}), suite_timer)
    return CaseGroup(models, batches, measures, devices, threads, interop, precisions,
                     variants, frameworks, epoch_batches, profile_iterations, caches, timer)


def _positive_int(where: str, table: dict[str, Any], key: str, default: int) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SuiteError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def load_suite(path: Path, registry: dict[str, FrameworkEntry]) -> Suite:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"{where}: no such suite file") from None
    except tomllib.TOMLDecodeError as error:
        raise SuiteError(f"{where}: malformed TOML: {error}") from None
    _check_keys(where, data, ["name", "description", "timer", "cases", "case_timeout_s"])
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise SuiteError(f"{where}: 'name' must be letters, digits, '-' or '_', got {name!r}")
    timer = _timer(f"{where} [timer]", data.get("timer", {}), TimerSettings())
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
        raise SuiteError(f"{where}: needs at least one [[cases]] table")
    groups = tuple(_group(f"{where} cases[{i}]", table, registry, timer)
                   for i, table in enumerate(cases))
    case_timeout = check_case_timeout(where, data.get("case_timeout_s", DEFAULT_CASE_TIMEOUT_S))
    return Suite(name, str(data.get("description", "")), path, timer, groups, case_timeout)


def check_case_timeout(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SuiteError(f"{where}: 'case_timeout_s' must be a positive number of seconds, "
                         f"got {value!r}")
    return float(value)


def _timer(where: str, table: Any, base: TimerSettings) -> TimerSettings:
    """``base`` with the overrides of a [timer] table."""
    if not isinstance(table, dict):
        raise SuiteError(f"{where}: must be a table")
    timer_fields = {f.name: f.type for f in fields(TimerSettings)}
    _check_keys(where, table, list(timer_fields))
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
                timer_fields[key] == "int" and not isinstance(value, int):
            raise SuiteError(f"{where}: '{key}' must be a non-negative "
                             f"{timer_fields[key]}, got {value!r}")
    timer = replace(base, **table)
    check_timer(where, timer)
    return timer


def check_timer(where: str, timer: TimerSettings) -> None:
    """Settings the timer cannot work with (no sample to take, no time to take it in)."""
    if not 1 <= timer.min_samples <= timer.max_samples:
        raise SuiteError(f"{where}: need 1 <= min_samples <= max_samples, got min_samples = "
                         f"{timer.min_samples}, max_samples = {timer.max_samples}")
    for name in ("budget_s", "rel_ci"):
        if not getattr(timer, name) > 0:
            raise SuiteError(f"{where}: '{name}' must be positive, got {getattr(timer, name)!r}")


def resolve_suite_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    candidate = SUITES_DIR / f"{name_or_path}.toml"
    if candidate.exists():
        return candidate
    known = sorted(p.stem for p in SUITES_DIR.glob("*.toml"))
    raise SuiteError(f"unknown suite '{name_or_path}'{suggest(name_or_path, known)}; "
                     f"suites: {', '.join(known)}")


def resolve_threads(value: int | str, usable: int, physical: int) -> int:
    if value == "all":
        return usable
    if value == "physical":
        return min(physical, usable)
    return int(value)


def expand(suite: Suite, framework: FrameworkEntry, device: str, usable_cpus: int,
           physical_cores: int) -> list[Job]:
    """The jobs this framework runs on this device, in suite order; a job two groups
    share (Li et al.'s sweeps all pass through their base configuration) runs once."""
    jobs: list[Job] = []
    for group in suite.groups:
        if device not in group.devices or group.frameworks and framework.name not in group.frameworks:
            continue
        thread_counts = [resolve_threads(t, usable_cpus, physical_cores) for t in group.threads] \
            if device == "cpu" else [usable_cpus]
        for threads in dict.fromkeys(thread_counts):
            for model in group.models:
                for batch in group.batches:
                    for precision in group.precisions:
                        for variant in group.variants:
                            for cache in group.compile_cache:
                                jobs.append(Job(model, batch, device, threads,
                                                group.interop_threads, precision, variant,
                                                group.measures, group.epoch_batches,
                                                group.profile_iterations, cache, group.timer))
    return _merge_duplicates(jobs)


def _merge_duplicates(jobs: list[Job]) -> list[Job]:
    """A case is one (model, batch, settings, measure): it runs once. Jobs of one case
    that differ only in measures merge; a job whose timer or epoch/profile settings
    differ stays apart with only the measures not yet covered, and without a second
    fingerprint."""
    def case(job: Job) -> tuple:
        return (job.model, job.batch, job.device, job.threads, job.interop_threads,
                job.precision, job.variant, job.compile_cache)

    merged: dict[Job, Job] = {}
    covered: dict[tuple, set[str]] = {}
    for job in jobs:
        seen = covered.setdefault(case(job), set())
        fresh = tuple(m for m in job.measures if m not in seen)
        if not fresh:
            continue
        key = replace(job, measures=())
        if key in merged:
            merged[key] = replace(merged[key], measures=merged[key].measures + fresh)
        else:
            merged[key] = replace(job, measures=fresh, fingerprint=not seen)
        seen.update(fresh)
    return list(merged.values())
