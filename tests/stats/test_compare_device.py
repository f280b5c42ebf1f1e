"""``python -m suites compare`` on device medians: joined from the device phase's
``device_time`` rows, transfers apart from the target, one line for CPU runs. Small
synthetic results files, no device."""

from __future__ import annotations

import json

import pytest

from suites.stats import compare

SUITE = "default-gpu/torch/gpu"
TAIL = "fp32/eager/t16"


def wall_row(model: str, measure: str, median: float, device: float | None = None) -> dict:
    """An ok wall row; ``device``: a device median of its own (PyTorch's CUDA events)."""
    timing = {"median_ms": median, "ci_low_ms": median * 0.95, "ci_high_ms": median * 1.05,
              "repetitions": 3, "unstable": False}
    if device is not None:
        timing["device_median_ms"] = device
    return {"case_id": f"{SUITE}/{model}/b16/{measure}/{TAIL}", "measure": measure,
            "model": model, "status": "ok", "timing": timing}


def device_row(model: str, medians: dict[str, float | None], status: str = "ok") -> dict:
    """A device phase row: the device median of each of the job's measures (None: the
    measure has a reason instead, as when the clock gave no time)."""
    measures = {measure: ({"device_median_ms": ms, "device_span_median_ms": ms * 1.1,
                           "device_time_kind": "CUPTI"} if ms is not None else
                          {"reason": "the device clock gave no time"})
                for measure, ms in medians.items()}
    return {"case_id": f"{SUITE}/{model}/b16/device_time/{TAIL}", "measure": "device_time",
            "model": model, "status": status,
            "device_times": {"method": "3 device blocks", "measures": measures}}


def write_rows(path, rows: list[dict]):
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def device_run(path, medians: list[float], transfers: tuple[float, float] = (0.2, 0.2)):
    """One job per median (model m<i>: forward, wall and device median alike) and one job
    whose transfers have the given device medians."""
    rows = []
    for i, ms in enumerate(medians):
        rows += [wall_row(f"m{i}", "forward", ms), device_row(f"m{i}", {"forward": ms})]
    rows += [wall_row("net", "transfer", 0.5), wall_row("net", "transfer_pinned", 0.5),
             device_row("net", {"transfer": transfers[0], "transfer_pinned": transfers[1]})]
    return write_rows(path, rows)


def test_device_medians_are_joined_from_device_time_rows(tmp_path):
    run = compare.load_run(write_rows(tmp_path / "torch_gpu.jsonl", [
        wall_row("resnet50", "forward", 7.0, device=6.8),      # CUDA events: replaced
        wall_row("resnet50", "gradient", 20.0, device=19.5),   # no device phase figure: kept
        wall_row("lenet", "forward", 0.1),
        device_row("resnet50", {"forward": 6.5, "gradient": None, "gone": 1.0}),
        device_row("lenet", {"forward": 0.05}, status="failed"),
    ]))
    assert set(run) == {f"{SUITE}/resnet50/b16/forward/{TAIL}",
                        f"{SUITE}/resnet50/b16/gradient/{TAIL}", f"{SUITE}/lenet/b16/forward/{TAIL}"}
    assert run[f"{SUITE}/resnet50/b16/forward/{TAIL}"].device_median_ms == 6.5
    assert run[f"{SUITE}/resnet50/b16/forward/{TAIL}"].median_ms == 7.0
    assert run[f"{SUITE}/resnet50/b16/gradient/{TAIL}"].device_median_ms == 19.5
    assert run[f"{SUITE}/lenet/b16/forward/{TAIL}"].device_median_ms is None


def test_transfers_are_kept_out_of_the_device_target(tmp_path):
    first = compare.load_run(device_run(tmp_path / "a.jsonl", [2.0] * 20, (0.2, 0.2)))
    later = compare.load_run(device_run(tmp_path / "b.jsonl", [2.0] * 20, (0.4, 0.3)))
    pairs = compare.device_pairs(first, later)
    assert len(pairs) == 22 and sum(p.transfer for p in pairs) == 2
    assert compare.device_figures(pairs)["all"]["cases"] == 20
    assert compare.device_target(pairs)[1] == 1.0          # transfers 50% and 100% off
    moved = compare.transfer_figures(pairs)
    assert moved["cases"] == 2 and moved["median_difference"] == pytest.approx(0.75)
    assert moved["max_difference"] == pytest.approx(1.0)
    text = compare.render([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], [first, later])
    transfers = next(line for line in text.splitlines() if line.startswith("  transfers"))
    assert "2 cases" in transfers and "75.0%" in transfers and "100.0%" in transfers
    assert "net/b16/transfer/" in transfers
    assert "transfer" not in text.split("largest device differences")[1]


@pytest.mark.parametrize("off, verdict", [(1, "met"), (2, "MISSED")])
def test_device_target_verdict(tmp_path, off, verdict):
    """20 cases >= 1 ms, ``off`` of them 5% apart: 19/20 = 95% within 3% meets the
    target, 18/20 misses it."""
    first = compare.load_run(device_run(tmp_path / "a.jsonl", [2.0] * 20))
    later = compare.load_run(device_run(tmp_path / "b.jsonl", [2.1] * off + [2.0] * (20 - off)))
    text = compare.render([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], [first, later])
    line = next(line for line in text.splitlines() if "device medians >= 1 ms" in line)
    assert line.endswith(f"(target >= 95%) {verdict}")
    assert f"{(20 - off) / 20:.1%}" in line
    assert "1-5 ms          20" in text.split("device band")[1]
    assert "5.0%  2 -> 2.1" in text.split("largest device differences")[1]


def test_cpu_runs_print_one_device_line(tmp_path):
    rows = [wall_row(f"m{i}", "forward", 2.0) for i in range(3)]
    paths = [write_rows(tmp_path / name, rows) for name in ("a.jsonl", "b.jsonl", "c.jsonl")]
    text = compare.render(paths, [compare.load_run(path) for path in paths])
    device = [line for line in text.splitlines() if line.startswith("device")]
    assert len(device) == 2 and all("neither run has device times" in line for line in device)
    assert "targets:" in text and "device band" not in text


def test_one_run_without_device_times_says_which(tmp_path):
    first = compare.load_run(device_run(tmp_path / "a.jsonl", [2.0] * 3))
    later = compare.load_run(write_rows(tmp_path / "b.jsonl",
                                        [wall_row(f"m{i}", "forward", 2.0) for i in range(3)]))
    lines = compare.device_lines(first, later, 1)
    assert lines == ["device medians: no case has a device time in both runs "
                     "(run 1: 5, run 2: 0)"]


def test_a_device_figure_above_its_wall_median_is_left_out(tmp_path):
    """TensorFlow's conv_l1 forward on an H200: 7.79 ms of device busy time against a
    wall median of 3.12 ms. Such a figure is not the wall samples' work: the case leaves
    the device comparison (a CUDA-event figure of its own stays), and the runs say so."""
    def run(path, device_ms):
        return compare.load_run(write_rows(path, [
            wall_row("conv_l1", "forward", 3.12), device_row("conv_l1", {"forward": device_ms}),
            wall_row("alexnet", "forward", 2.0, device=1.9),
            device_row("alexnet", {"forward": 2.2}),         # 1.10x: withheld, events stay
            wall_row("net", "transfer", 0.5), device_row("net", {"transfer": 1.0}),
            *[row for i in range(3) for row in (wall_row(f"m{i}", "forward", 2.0),
                                                device_row(f"m{i}", {"forward": 1.9}))]]))
    first, later = run(tmp_path / "a.jsonl", 2.73), run(tmp_path / "b.jsonl", 7.79)
    conv = f"{SUITE}/conv_l1/b16/forward/{TAIL}"
    assert first[conv].device_median_ms == 2.73 and first[conv].device_withheld_ms is None
    assert later[conv].device_median_ms is None and later[conv].device_withheld_ms == 7.79
    alexnet = later[f"{SUITE}/alexnet/b16/forward/{TAIL}"]
    assert alexnet.device_median_ms == 1.9 and alexnet.device_withheld_ms == 2.2
    assert later[f"{SUITE}/net/b16/transfer/{TAIL}"].device_median_ms == 1.0   # transfers apart
    pairs = compare.device_pairs(first, later)
    assert conv not in {p.case_id for p in pairs} and len(pairs) == 5
    text = compare.render([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], [first, later])
    assert "run 2: 2 device figures left out, each above its wall median" in text
    assert f"7.79 ms device > 3.12 ms wall  {conv}" in text
    assert "run 1: 1 device figures left out" in text      # alexnet's 2.2 > 1.05 x 2.0
