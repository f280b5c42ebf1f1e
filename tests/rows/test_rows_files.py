"""Result rows plain (``*.jsonl``, as the runner appends them) and gzipped (``*.jsonl.gz``, as
published/ stores them) read alike through the one reader, ``suites.rows.results``; a torn or
corrupt gzip file is a one-line error naming it, exit status 2 from the commands."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from suites.instruments import environment
from suites.rows.results import (
    RowsFileError,
    files_under,
    gz_bytes,
    json_lines,
    read_text,
    results_files,
    rows_files,
    write_gz,
)
from tests import report_fixtures as fx


def lines(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def mixed_folder(root: Path) -> tuple[Path, list[dict], list[dict]]:
    """A folder with one plain and one gzipped results file (the CPU rows, the GPU rows)."""
    cpu, gpu = fx.cpu_rows(), fx.gpu_rows()
    (root / "default-cpu" / "cpubox").mkdir(parents=True)
    (root / "default-cpu" / "cpubox" / "torch_cpu.jsonl").write_bytes(lines(cpu))
    write_gz(root / "default-gpu" / "gpubox" / "torch_gpu.jsonl.gz", lines(gpu))
    return root, cpu, gpu


def torn(path: Path) -> Path:
    """A gzipped results file cut short, as an interrupted copy leaves it."""
    data = gz_bytes(lines(fx.cpu_rows()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[:len(data) // 2])
    return path


def test_a_gzipped_file_reads_back_the_rows_written_and_its_bytes_repeat(tmp_path):
    rows = fx.gpu_rows()
    path = tmp_path / "r.jsonl.gz"
    write_gz(path, lines(rows))
    assert json_lines(path) == rows
    assert read_text(path).encode() == lines(rows)
    assert gzip.decompress(path.read_bytes()) == lines(rows)
    first = path.read_bytes()
    write_gz(path, lines(rows))                # the same rows, the same bytes
    assert path.read_bytes() == first
    assert first[3] == 0 and first[4:8] == bytes(4)   # no file name, time stamp 0 (RFC 1952)


def test_a_folder_mixing_plain_and_gzipped_files_is_read_whole(tmp_path):
    from reports.pipeline.load import load
    from suites.matrix import log as matrix_log
    from suites.matrix.estimate import costed_rows

    root, cpu, gpu = mixed_folder(tmp_path / "results")
    assert [p.name for p in rows_files(root)] == ["torch_cpu.jsonl", "torch_gpu.jsonl.gz"]
    assert results_files([root]) == rows_files(root)
    loaded = load([root])
    assert len(loaded.rows) == len(cpu) + len(gpu) and not loaded.warnings
    assert {raw.data["case_id"] for raw in loaded.rows} == {r["case_id"] for r in cpu + gpu}
    # The estimates read both too: every costed row of either file.
    costed = {row["case_id"] for row, _ in costed_rows([root])}
    assert costed and costed <= {r["case_id"] for r in cpu + gpu}
    assert any(r["case_id"] in costed for r in gpu)
    # The matrix's cost logs, plain or gzipped.
    record = {"kind": "item", "suite": "s", "commit": "0" * 40}
    write_gz(root / "matrix" / "h" / "costs-gpu.ndjson.gz", lines([record]))
    matrix_log.append(root / "matrix" / "h2" / "costs-cpu.ndjson", {**record, "suite": "t"})
    assert [r["suite"] for r in matrix_log.load([root])] == ["s", "t"]


def test_scaling_history_reads_gzipped_published_rows(tmp_path):
    from parallel.plan import history

    row = {"measure": "data_parallel", "model": "resnet50", "wall_s": 12.5,
           "started_at": "2026-11-26T10:00:00+00:00",
           "settings": {"framework": "torch", "device": "gpu", "precision": "fp32"},
           "scaling": {"mode": "weak", "per_device_batch": 64, "global_batch": 128,
                       "devices": 2},
           "env": {"gpu_model": "NVIDIA H200"}}
    write_gz(tmp_path / "scaling" / "h" / "torch_gpu.jsonl.gz", lines([row]))
    same, other = history([tmp_path], "NVIDIA H200")
    assert list(same.values()) == [12.5] and not other


@pytest.mark.parametrize("damage", ["torn", "corrupt"])
def test_a_damaged_gzip_file_is_an_error_naming_it(tmp_path, damage):
    path = tmp_path / "s" / "h" / "torch_cpu.jsonl.gz"
    if damage == "torn":
        torn(path)
    else:
        data = bytearray(gz_bytes(lines(fx.cpu_rows())))
        data[len(data) // 2] ^= 0xFF
        path.parent.mkdir(parents=True)
        path.write_bytes(bytes(data))
    with pytest.raises(RowsFileError) as error:
        json_lines(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert ("torn" if damage == "torn" else "corrupt") in message


def test_the_commands_refuse_a_torn_gzip_file_in_one_line(tmp_path, capsys):
    from reports.__main__ import main as report
    from reports.publish import main as publish
    from reports.readme_tables import main as readme_tables
    from suites.stats.compare import main as compare

    root, _, _ = mixed_folder(tmp_path / "results")
    bad = torn(root / "default-cpu" / "cpubox" / "jax_cpu.jsonl.gz")
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- headline tables: generated by python -m reports.readme_tables; do "
                      "not edit -->\n<!-- end of headline tables -->\n")
    calls = {"reports": lambda: report([str(root), "--out", str(tmp_path / "out"), "--quiet"]),
             "publish": lambda: publish([str(root), "--to", str(tmp_path / "pub")]),
             "readme_tables": lambda: readme_tables(["--readme", str(readme), str(root)]),
             "compare": lambda: compare([root, root])}
    for name, call in calls.items():
        assert call() == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and "torn gzip" in err, name
    assert not (tmp_path / "pub").exists()


def test_the_runner_names_its_commit_by_the_full_hash(monkeypatch):
    monkeypatch.delenv("DLBENCH_COMMIT", raising=False)
    environment.dlbench_commit.cache_clear()
    try:
        commit = environment.dlbench_commit()
    finally:
        environment.dlbench_commit.cache_clear()
    if commit == "unknown":
        pytest.skip("no git checkout here")
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit), commit


def test_every_published_row_names_its_commit_by_the_full_hash():
    published = Path(__file__).resolve().parents[2] / "published"
    files = rows_files(published)
    assert files and all(p.name.endswith(".jsonl.gz") for p in files)
    full = re.compile(r"[0-9a-f]{40}")
    rows = 0
    for path in files:
        for row in json_lines(path):
            rows += 1
            commit = (row.get("env") or {}).get("dlbench_commit")
            assert commit and full.fullmatch(commit), (path, commit)
    assert rows > 7000
    # The matrix's cost logs name the same commits.
    for path in files_under(published, "costs-*.ndjson"):
        for record in json_lines(path):
            assert full.fullmatch(record.get("commit") or ""), (path, record.get("commit"))
