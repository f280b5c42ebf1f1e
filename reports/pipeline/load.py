"""Reading result files: every ``*.jsonl`` and ``*.jsonl.gz`` under the given paths, one
JSON object a line, through ``suites.rows.results`` (the one reader of rows).

Rows are written by ``suites/rows/results.py`` (append + fsync per row), so the one expected
damage is a torn last line after a crash; it is skipped with a warning. A crash followed by
``--resume`` can glue the next row onto the torn one (the writer appends after the partial
line), so an invalid line that contains a later ``{"schema"`` start is recovered from there.
A row of an unknown schema version is refused: its fields may mean something else, and so
is a torn or corrupt gzip file (published/ stores rows gzipped): none of its rows is sure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports import SUPPORTED_SCHEMA
from suites.rows.results import RowsFileError, read_text, rows_files

REQUIRED = ("model", "batch", "measure", "settings", "status")
SETTINGS_REQUIRED = ("framework", "device", "precision", "variant", "threads")


class InputError(Exception):
    """Bad input the user must fix; the CLI prints it as one line and exits with 2."""


@dataclass(frozen=True)
class RawRow:
    path: str          # file the row came from, as given (for messages)
    line: int          # 1-based line number
    order: int         # global read order: the tie-breaker for "latest"
    data: Mapping[str, Any]


def under_roots(path: str, roots: tuple[Path, ...]) -> bool:
    """Whether a row's file lies under one of ``roots`` (resolved folders): the reference
    side of a comparison."""
    return any(Path(path).resolve().is_relative_to(root) for root in roots)


@dataclass(frozen=True)
class Loaded:
    rows: tuple[RawRow, ...]
    files: tuple[str, ...]
    warnings: tuple[str, ...]


def find_files(paths: Sequence[Path]) -> tuple[Path, ...]:
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise InputError(f"{path}: no such directory")
        if path.is_file():
            files.append(path)
        else:
            files.extend(rows_files(path))
    return tuple(dict.fromkeys(files))


def check_row(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a JSON object")
    schema = data.get("schema")
    if schema != SUPPORTED_SCHEMA:
        raise InputError(f"{where}: unknown schema version {schema!r} "
                         f"(this report reads schema {SUPPORTED_SCHEMA})")
    missing = [k for k in REQUIRED if k not in data]
    settings = data.get("settings")
    if not missing and not isinstance(settings, dict):
        missing.append("settings")
    elif not missing:
        missing = [f"settings.{k}" for k in SETTINGS_REQUIRED if k not in settings]
    if missing:
        raise InputError(f"{where}: row lacks {', '.join(missing)}")
    if not isinstance(data["batch"], int) or not isinstance(settings["threads"], int):
        raise InputError(f"{where}: batch and settings.threads must be integers")
    for key in ("timing", "memory", "model_info", "env", "fingerprint"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise InputError(f"{where}: '{key}' must be an object or null")
    return data


def _recover(line: str) -> Any | None:
    """The last parseable ``{"schema"`` object glued onto a torn line, if any."""
    start = line.rfind('{"schema"')
    while start > 0:
        try:
            return json.loads(line[start:])
        except json.JSONDecodeError:
            start = line.rfind('{"schema"', 0, start)
    return None


def read_file(path: Path, first_order: int) -> tuple[list[RawRow], list[str]]:
    rows: list[RawRow] = []
    warnings: list[str] = []
    try:
        text = read_text(path)
    except RowsFileError as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            last = number == len(lines)
            data = _recover(line)
            if data is None:
                kind = "truncated" if last else "invalid"
                warnings.append(f"warning: {where}: {kind} JSON line skipped")
                continue
            warnings.append(f"warning: {where}: torn line; recovered the row appended to it")
        rows.append(RawRow(str(path), number, first_order + len(rows), check_row(data, where)))
    return rows, warnings


def load(paths: Sequence[Path]) -> Loaded:
    files = find_files(paths)
    shown = ", ".join(str(p) for p in paths)
    if not files:
        raise InputError(f"no *.jsonl result files under {shown} (plain or .gz)")
    rows: list[RawRow] = []
    warnings: list[str] = []
    for path in files:
        got, warned = read_file(path, len(rows))
        rows.extend(got)
        warnings.extend(warned)
    if not rows:
        raise InputError(f"no result rows in {len(files)} file(s) under {shown}")
    return Loaded(tuple(rows), tuple(str(f) for f in files), tuple(warnings))
