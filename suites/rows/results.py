"""Result rows: one JSON line per (case, measure), appended and flushed as each ends.

A row is self-describing: the case key and settings, the environment, the raw samples
with their statistics, parameter and FLOP counts, the equivalence fingerprint, and a
status with its reason. The report stage reads nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
# Test-only: once the file would pass this many bytes, an append writes part of its line
# and fails with ENOSPC, as a full disk does (tests/harness/test_faults.py, where no small
# filesystem can be mounted).
INJECT_ENOSPC = "DLBENCH_INJECT_ENOSPC_AT"

# "timeout": the case ran past the suite's per-case time limit and its worker was killed.
Status = Literal["ok", "failed", "unsupported", "oom", "timeout"]
# Every job also writes a "fingerprint" row: outputs, loss and gradient norms for the
# cross-framework equivalence check, taken after the timings so first calls stay cold.
FINGERPRINT = "fingerprint"
# On a GPU every job also writes a "device_time" row: the GPU's own time of each of the
# job's timed measures, taken in a process of its own (the runner's device phase), because
# CUPTI slows every later launch in a process that loaded it (suites/harness/device_pass.py).
DEVICE_TIME = "device_time"
# What the device phase runs on a GPU: everything that needs CUPTI or Nsight Compute.
DEVICE_PHASE = (DEVICE_TIME, "profile", "counters")


def is_timed(measure: str) -> bool:
    """A measure whose row carries a timed median (not a device-phase or fingerprint row)."""
    return measure not in DEVICE_PHASE and measure != FINGERPRINT


@dataclass(frozen=True)
class Settings:
    """Everything that must be equal for two timings to be compared or averaged."""

    framework: str
    device: str                 # "cpu" or "gpu"
    precision: str              # "fp32" (strict, TF32 off), "tf32", "bf16" or "fp16" (ORT)
    variant: str                # the framework's execution mode, e.g. "eager", "compile"
    threads: int                # CPU intra-op threads (host threads for a GPU run)
    interop_threads: int
    execution: str = ""         # what the variant means for this framework, in words
    # "cold": a fresh process with an empty persistent compilation cache; "warm": a fresh
    # process with the cache the cold run filled (Bahrampour et al. Table 8); "": not managed.
    compile_cache: str = ""


@dataclass(frozen=True)
class CaseKey:
    suite: str
    model: str
    batch: int
    measure: str
    settings: Settings
    # The "serve" measure's MLPerf LoadGen scenario (suites/serving/); "" for every other
    # measure, whose ids and rows are then as they were before the field existed.
    scenario: str = ""

    def id(self) -> str:
        s = self.settings
        cache = f"/cache-{s.compile_cache}" if s.compile_cache else ""
        scenario = f"/{self.scenario}" if self.scenario else ""
        return (f"{self.suite}/{s.framework}/{s.device}/{self.model}/b{self.batch}/"
                f"{self.measure}{scenario}/{s.precision}/{s.variant}/t{s.threads}{cache}")


@dataclass(frozen=True)
class Row:
    key: CaseKey
    status: Status
    reason: str = ""
    timing: dict[str, Any] | None = None        # suites.rows.records.Timing.to_dict()
    memory: dict[str, Any] | None = None        # {"peak_bytes": int, "kind": "allocator"|"rss"}
    model_info: dict[str, Any] = field(default_factory=dict)  # params, flops, input shape
    fingerprint: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None       # adapters.base.Profile, for "profile" rows
    # "profile" rows on a GPU: the framework's own profiler beside the kernel tracer's
    # ``profile`` (suites/instruments/kernel_profile.py); "counters" rows: Nsight Compute's metrics
    # reduced as Li et al. did (suites/instruments/counters.py).
    framework_profile: dict[str, Any] | None = None
    counters: dict[str, Any] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_s: float = 0.0
    time_limit_s: float | None = None           # the per-case limit a "timeout" row ran into
    # The worker's seconds since its previous row (a job's first row includes its build):
    # a job's rows sum to what the job cost; None where no worker wrote the row.
    elapsed_s: float | None = None
    # "device_time" rows: per timed measure of the job, its device time (median and span
    # per iteration in ms, the blocks' samples, which clock) or why there is none.
    device_times: dict[str, Any] | None = None
    # "serve" rows (suites/serving/): LoadGen's scenario settings, its result (validity,
    # latency percentiles or throughput), the batching and the float64 check of the
    # served outputs; the logs' folder.
    serving: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        key = data.pop("key")
        settings = key.pop("settings")
        if not key["scenario"]:
            del key["scenario"]
        if data["serving"] is None:
            del data["serving"]
        return {"schema": SCHEMA_VERSION, "case_id": self.key.id(), **key,
                "settings": settings, **data}


def finite_only(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` with every NaN or infinite float replaced by None, and the dotted paths of
    those floats."""
    if isinstance(value, float):
        return (value, []) if math.isfinite(value) else (None, [path or "value"])
    if isinstance(value, dict):
        found: list[str] = []
        out = {}
        for key, item in value.items():
            out[key], bad = finite_only(item, f"{path}.{key}" if path else str(key))
            found += bad
        return out, found
    if isinstance(value, (list, tuple)):
        found, out_list = [], []
        for index, item in enumerate(value):
            clean, bad = finite_only(item, f"{path}[{index}]")
            out_list.append(clean)
            found += bad
        return out_list, found
    return value, []


class OutputError(OSError):
    """The results location cannot be created or written; the message is one line that
    names the path and the problem."""


def output_error(path: Path, error: OSError) -> OutputError:
    problem = error.strerror or type(error).__name__
    where = error.filename or path
    return OutputError(f"cannot write results to {where}: {problem}; finished rows are kept, "
                       f"run again with --resume once the location is usable")


class ResultsFile:
    """Appends rows to a JSONL file so that a crash, a kill or a full disk loses only the
    case in flight and never damages a finished row:

    * before each append a torn last line (a write cut off by a kill or a full disk) is
      cut off the file and kept, with its offset, in ``<name>.torn`` so nothing is glued
      onto it;
    * each row is one ``os.write`` of the whole line on an ``O_APPEND`` descriptor, then
      fsynced; if the write fails or is short (``ENOSPC``) the file is truncated back to
      its previous length, so a row is on disk whole or not at all.
    """

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise output_error(path.parent, error) from None

    @property
    def torn_path(self) -> Path:
        return self.path.with_name(self.path.name + ".torn")

    def check_writable(self) -> None:
        """Open the file for appending (creating it) and repair a torn tail, so that an
        unusable location is reported before anything runs."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                self._repair_tail(fd)
            finally:
                os.close(fd)
        except OutputError:
            raise
        except OSError as error:
            raise output_error(self.path, error) from None

    def _repair_tail(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == 0:
            return
        with self.path.open("rb") as reader:
            reader.seek(size - 1)
            if reader.read(1) == b"\n":
                return
            # Find the last newline: everything after it is a torn row.
            start = size - 1
            block = 1 << 16
            cut = 0
            while start > 0:
                begin = max(0, start - block)
                reader.seek(begin)
                chunk = reader.read(start - begin)
                at = chunk.rfind(b"\n")
                if at >= 0:
                    cut = begin + at + 1
                    break
                start = begin
            reader.seek(cut)
            torn = reader.read(size - cut)
        try:
            with self.torn_path.open("ab") as keep:
                keep.write(f"# {len(torn)} bytes cut from offset {cut} of {self.path.name}\n"
                           .encode() + torn + b"\n")
                keep.flush()
                os.fsync(keep.fileno())
        except OSError as error:
            raise output_error(self.torn_path, error) from None
        os.ftruncate(fd, cut)
        os.fsync(fd)

    def append(self, row: Row) -> None:
        self.append_json(row.to_json())

    def append_json(self, row: dict[str, Any]) -> None:
        """Append a row in its JSON form (a worker's, or a merged or a reused row)."""
        data, non_finite = finite_only(row)
        if non_finite:
            # JSON has no NaN: such a value is written as null, and a measurement that
            # produced one failed (a framework's NaN output, or a figure divided by zero).
            named = ", ".join(non_finite[:6]) + (" …" if len(non_finite) > 6 else "")
            data["reason"] = "; ".join(filter(None, (
                f"non-finite values (NaN or infinity), written as null: {named}",
                data.get("reason", ""))))
            if data.get("status") == "ok":
                data["status"] = "failed"
        line = (json.dumps(data, sort_keys=False, allow_nan=False, default=str)
                + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise output_error(self.path, error) from None
        try:
            self._repair_tail(fd)
            before = os.fstat(fd).st_size
            try:
                written = os.write(fd, _injected_full_disk(before, line))
                if written != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                os.fsync(fd)
            except OSError as error:
                # If even this fails, the torn tail is cut off before the next append.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, before)
                raise output_error(self.path, error) from None
        finally:
            os.close(fd)


# Result rows are JSON Lines: ``*.jsonl`` as the runner appends them, ``*.jsonl.gz`` as
# published/ stores them (compressed, deterministic: ``gz_bytes``). Every reader of rows
# finds them with ``rows_files`` and reads them with ``json_lines``/``read_text``, so both
# forms read alike; the matrix's cost logs (``costs-*.ndjson``) likewise.
ROWS = "*.jsonl"
GZ = ".gz"


class RowsFileError(ValueError):
    """A results file (or cost log) that cannot be read whole: a torn or corrupt gzip file.
    The message is one line that names the file; the CLIs print it and exit with 2."""


def files_under(folder: Path, pattern: str) -> list[Path]:
    """The files under ``folder`` whose names match ``pattern`` (``*.jsonl``), plain or
    gzipped (``pattern`` + ``.gz``), sorted by path."""
    return sorted({p for glob in (pattern, pattern + GZ) for p in folder.rglob(glob)
                   if p.is_file()})


def rows_files(folder: Path) -> list[Path]:
    """The results files under ``folder``: ``*.jsonl`` and ``*.jsonl.gz``."""
    return files_under(folder, ROWS)


def results_files(folders: Iterable[Path]) -> list[Path]:
    """The results files under ``folders`` (each a folder searched for ``*.jsonl`` and
    ``*.jsonl.gz``, or one file), those missing left out; a ``--rounds`` run's round files
    are its parts, not runs of their own (suites/harness/rounds.py), and are left out too."""
    found = []
    for folder in folders:
        if not folder.exists():
            continue
        files = [folder] if folder.is_file() else rows_files(folder)
        found += [path for path in files if ".round" not in path.name]
    return found


def stamped_at(record: dict[str, Any]) -> float | None:
    """A row's or a cost-log record's ``started_at`` (ISO 8601, to the second) as a POSIX
    time, or None where it has none that reads."""
    try:
        return datetime.fromisoformat(record["started_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def read_bytes(path: Path) -> bytes:
    """A JSON Lines file's bytes, decompressed where its name ends in ``.gz``. A gzip file
    that is torn (cut short) or corrupt raises ``RowsFileError``: unlike a plain file's torn
    last line, no row of it can be trusted to be whole."""
    data = path.read_bytes()
    if not path.name.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except EOFError:
        raise RowsFileError(f"{path}: torn gzip file (it ends before its end marker); "
                            "restore it from git or from the run's results") from None
    except (OSError, zlib.error) as error:
        raise RowsFileError(f"{path}: corrupt gzip file ({error}); restore it from git or "
                            "from the run's results") from None


def read_text(path: Path) -> str:
    """A JSON Lines file's text (``read_bytes``), undecodable bytes replaced."""
    return read_bytes(path).decode("utf-8", errors="replace")


def gz_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed so that the same data give the same bytes: no file name and
    a zero time stamp in the header (RFC 1952 2.3.1), the best compression."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_gz(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as ``gz_bytes`` (a published ``*.jsonl.gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gz_bytes(data))


def json_lines(path: Path) -> list[Any]:
    """Every readable JSON value of a JSON Lines file, plain or gzipped (results, the
    matrix's cost log), in order; a torn or unreadable line is skipped, a missing file has
    none, a torn or corrupt gzip file raises ``RowsFileError``."""
    if not path.exists():
        return []
    values = []
    for line in read_text(path).splitlines():
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return values


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of a results file by case id (the last row of a case); a torn or
    unreadable line is skipped."""
    return {row["case_id"]: row for row in json_lines(path)
            if isinstance(row, dict) and "case_id" in row}


def _injected_full_disk(size: int, line: bytes) -> bytes:
    limit = os.environ.get(INJECT_ENOSPC)
    if limit is None or size + len(line) <= int(limit):
        return line
    return line[:max(0, int(limit) - size)]
