"""Where a data-parallel step loses its time (reports/sections/scaling_loss.py): the timed and the
CUPTI split of a case below 90%, and the traces that must not be used."""

from __future__ import annotations

import json

import pytest

from reports.sections.scaling_loss import below_target, step_loss, trace_problem


def _row(devices: int, median: float, local: float, kernels: dict | None, mode="strong",
         baseline: float = 30.0, processes: int | None = None) -> dict:
    efficiency = baseline / median if mode == "weak" else baseline / (devices * median)
    return {"schema": 1, "batch": 64,
            "case_id": f"s/torch/gpu/resnet50/{mode}-b64/n{devices}/data_parallel/bf16",
            "suite": "scaling", "model": "resnet50", "measure": "data_parallel", "status": "ok",
            "settings": {"framework": "torch", "device": "gpu", "precision": "bf16",
                         "variant": f"data_parallel-n{devices}-{mode}", "threads": 0},
            "timing": {"median_ms": median, "local_median_ms": local, "ci_low_ms": median,
                       "ci_high_ms": median},
            "env": {"host": "h", "gpu_model": "NVIDIA H200"},
            "scaling": {"model": "resnet50", "mode": mode, "devices": devices,
                        "per_device_batch": 64 // devices if mode == "strong" else 64,
                        "base_batch": 64, "global_batch": 64, "baseline_ms": baseline,
                        "efficiency": efficiency, "processes": processes or devices,
                        "communication_kernels": kernels,
                        "communication_kernels_reason": "" if kernels else "no CUPTI"}}


def _kernels(busy: float, compute: float, exposed: float, wall: float | None) -> dict:
    out = {"nccl_kernel_ms_per_step": exposed * 2, "overlapped_ms_per_step": exposed,
           "exposed_nccl_ms_per_step": exposed, "overlap_share": 0.5,
           "compute_kernel_ms_per_step": compute, "all_kernel_ms_per_step": busy}
    if wall is not None:
        out["traced_wall_ms_per_step"] = wall
    return out


# One-device step: 30 ms, 27.6 ms of it compute kernels, no NCCL. Two devices at half the
# batch each (strong): 24.6 ms, 19.9 ms without the all-reduce; traced: 23 ms per step,
# kernels busy 14.7 ms (compute 14.4, exposed NCCL 0.3). Figures of the shape a 2× H200
# PyTorch bf16 ResNet-50 run gave.
BASELINE = _row(1, 30.0, 29.5, _kernels(27.6, 27.6, 0.0, 30.0))
TWO = _row(2, 24.6, 19.9, _kernels(14.7, 14.4, 0.3, 23.0))


def test_the_cupti_split_adds_up_to_the_traced_step_over_its_ideal():
    loss = step_loss(TWO, BASELINE)
    assert loss.ideal_ms == pytest.approx(15.0) and loss.lost_ms == pytest.approx(9.6)
    # Timed: 4.7 ms of exposed all-reduce, 4.9 ms of per-device step above the ideal.
    assert loss.allreduce_ms == pytest.approx(4.7)
    assert loss.per_device_ms == pytest.approx(4.9)
    # CUPTI: idle (23 − 14.7) − (30 − 27.6)/2, compute 14.4 − 27.6/2, exposed 0.3.
    assert loss.idle_ms == pytest.approx(8.3 - 1.2)
    assert loss.compute_ms == pytest.approx(0.6)
    assert loss.exposed_nccl_ms == pytest.approx(0.3)
    assert loss.idle_ms + loss.compute_ms + loss.exposed_nccl_ms == pytest.approx(23.0 - 15.0)
    assert loss.cause.startswith("GPU idle") and loss.trace_note == ""


def test_weak_scaling_compares_with_the_whole_one_device_step():
    weak = _row(2, 36.0, 31.0, _kernels(29.0, 27.8, 1.2, 35.0), mode="weak")
    loss = step_loss(weak, BASELINE)
    assert loss.ideal_ms == pytest.approx(30.0)
    assert loss.exposed_nccl_ms == pytest.approx(1.2)
    assert loss.idle_ms == pytest.approx((35.0 - 29.0) - (30.0 - 27.6))
    assert loss.cause.startswith("GPU idle")


def test_a_multi_process_trace_from_before_the_aligned_window_is_refused():
    # No traced wall time: written before the first traced step was left out.
    old = _row(2, 24.6, 19.9, _kernels(37.6, 14.9, 22.8, None))
    assert "not aligned" in trace_problem(old)
    loss = step_loss(old, BASELINE)
    assert loss.idle_ms is None and "not aligned" in loss.trace_note
    assert loss.allreduce_ms == pytest.approx(4.7)        # the timed split stays
    assert loss.cause == "per-device step"
    # One process driving every device (JAX) has no ranks to align: its old trace stands.
    assert trace_problem(_row(2, 24.6, 19.9, _kernels(14.7, 14.4, 0.3, None),
                              processes=1)) == ""


def test_kernels_busier_than_their_steps_are_refused():
    busy = _row(2, 24.6, 19.9, _kernels(26.0, 14.4, 11.6, 23.0))
    assert trace_problem(busy).startswith("trace refused: kernel busy time 26.00 ms per step "
                                          "exceeds the traced steps' wall time 23.00 ms")
    assert step_loss(busy, BASELINE).idle_ms is None


def test_only_cases_below_ninety_percent_are_explained():
    fine = _row(2, 15.5, 15.0, _kernels(14.7, 14.4, 0.3, 15.4))   # 96.8%
    explained = below_target([BASELINE, fine, TWO])
    assert [row for row, _ in explained] == [TWO]


def test_a_published_folder_counts_the_cases_below_target(tmp_path):
    from reports.publish import inventory

    folder = tmp_path / "scaling" / "h"
    folder.mkdir(parents=True)
    (folder / "torch_gpu.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in (BASELINE, TWO)))
    lines = inventory(tmp_path).splitlines()
    efficiency = next(line for line in lines if line.startswith("| resnet50 | strong"))
    assert efficiency.split(" | ")[4:] == ["61.0% |"]
    # The README counts them; their split is the report's table.
    assert "1 case below 90%: where their step time goes is the report's 'Below 90%' " \
        "table." in lines


def test_a_trace_with_the_nccl_total_only_keeps_the_timed_split():
    # Rows traced with torch.profiler before the CUPTI window: no compute or busy time.
    old = _row(2, 24.6, 19.9, {"nccl_kernel_ms_per_step": 4.0}, processes=1)
    loss = step_loss(old, BASELINE)
    assert loss.idle_ms is None and loss.trace_note == "the trace has no compute split"
    assert loss.per_device_ms == pytest.approx(4.9)


def test_a_trace_that_lost_another_time_than_the_timed_steps_is_refused():
    # A launch-bound step slowed by tracing: timed 4.5 ms against the ideal 4.0 (lost 0.5),
    # traced 7.1 ms against the one-device trace's 5.65 (lost 1.45, the shape of JAX's LSTM
    # at 16 per GPU on 4× H200). Its CUPTI split would explain 1.45 ms, not the 0.5 lost.
    one = _row(1, 4.0, 4.0, _kernels(2.9, 2.9, 0.0, 5.65), mode="weak", baseline=4.0)
    two = _row(2, 4.5, 4.2, _kernels(3.0, 2.7, 0.3, 7.1), mode="weak", baseline=4.0)
    loss = step_loss(two, one)
    assert loss.idle_ms is None and loss.compute_ms is None and loss.exposed_nccl_ms is None
    assert loss.trace_note == ("trace refused: tracing changed the step, which lost +1.45 ms "
                               "traced against +0.50 ms timed")
    assert loss.cause == "exposed all-reduce"          # timed: 0.3 all-reduce, 0.2 per-device
    # Within half the timed loss the split stands: traced 6.0 − 5.65 = 0.35 against 0.5.
    near = _row(2, 4.5, 4.2, _kernels(3.0, 2.7, 0.3, 6.0), mode="weak", baseline=4.0)
    assert step_loss(near, one).idle_ms == pytest.approx((6.0 - 3.0) - (5.65 - 2.9))
