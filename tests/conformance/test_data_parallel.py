"""Data parallelism on each framework's own engine, on the CPU: after the all-reduce,
the gradient of a 2-device step equals the one-device gradient of the concatenated
global batch (torch: DDP over gloo in 2 processes; JAX: 2 host devices; TensorFlow:
MirroredStrategy over 2 logical CPUs). A launch that loses a rank ends, recorded as a
failed row, and the suite goes on.

Tolerance: the two runs differ only in how the batch sum of the gradient is associated
(two partial sums of B/2 examples, then their mean, against one sum of B). fp32
reassociation error grows at most with the summed length (≤ n·ε relative, ε = 6e-8);
the longest sums in these tiny networks (batch × spatial positions, ≤ 1e3 terms) bound
it near 1e-4 of the largest entry — the conformance kit's rtol 1e-4.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from adapters.base import CaseConfig
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from parallel.correctness import distributed_gradients
from parallel.shards import shard

RTOL = 1e-4
PER_DEVICE = 4
DATA_PARALLEL = {"torch", "jax", "tf"}


@pytest.fixture
def data_parallel(entry):
    if entry.name not in DATA_PARALLEL:
        pytest.skip(f"{entry.name} has no training step to distribute")
    return entry.name


def one_device(adapter, name: str, batch) -> tuple[float, dict[str, np.ndarray]]:
    model = get_model(name)
    prepared = adapter.prepare(model, canonical_weights(model), batch, CaseConfig())
    try:
        return prepared.loss_and_gradients()
    finally:
        prepared.close()


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str):
    assert set(got) == set(expected), what
    for name, reference in expected.items():
        scale = float(np.abs(reference).max()) or 1.0
        np.testing.assert_allclose(got[name], reference, rtol=RTOL, atol=RTOL * scale,
                                   err_msg=f"{what}: gradient of {name}")


# Image and token models without batch norm: the global batch's gradient exactly.
@pytest.mark.parametrize("name", ["alexnet_tiny", "lstm_tiny"])
def test_all_reduced_gradient_is_the_global_batch_gradient(adapter, data_parallel, name):
    loss, grads = distributed_gradients(data_parallel, name, devices=2,
                                        per_device_batch=PER_DEVICE)
    model = get_model(name)
    expected_loss, expected = one_device(adapter, name, make_batch(model, 2 * PER_DEVICE))
    assert np.isclose(loss, expected_loss, rtol=RTOL), (loss, expected_loss)
    assert_same(grads, expected, f"{data_parallel} {name}, 2 devices")


def test_batch_norm_uses_per_device_statistics(adapter, data_parallel):
    name = "resnet_tiny"
    _, grads = distributed_gradients(data_parallel, name, devices=2,
                                     per_device_batch=PER_DEVICE)
    batch = make_batch(get_model(name), 2 * PER_DEVICE)
    shards = [one_device(adapter, name, shard(batch, i, 2))[1] for i in range(2)]
    expected = {key: (shards[0][key] + shards[1][key]) / 2 for key in shards[0]}
    assert_same(grads, expected, f"{data_parallel} {name}, 2 devices")
    # And it is not the global-statistics gradient: the check can tell the two apart.
    _, global_stats = one_device(adapter, name, batch)
    assert any(not np.allclose(grads[k], global_stats[k], rtol=1e-3, atol=1e-6)
               for k in grads)


def test_two_processes_standing_in_for_two_hosts(adapter, data_parallel):
    """The multi-host launch (torchrun's c10d rendezvous; jax.distributed.initialize;
    TensorFlow's TF_CONFIG) with two processes on this host."""
    name = "alexnet_tiny"
    loss, grads = distributed_gradients(data_parallel, name, devices=2,
                                        per_device_batch=PER_DEVICE, hosts=2)
    _, expected = one_device(adapter, name, make_batch(get_model(name), 2 * PER_DEVICE))
    assert_same(grads, expected, f"{data_parallel} {name}, 2 hosts")


def test_scaling_quick_with_a_killed_rank(framework, tmp_path):
    """The CI suite end to end, every framework (ONNX Runtime's independent inference
    processes included), fp32 and bf16, with the last rank of the first N = 2 case SIGKILLed
    at its third timed step: that case is a failed row, every other case still runs."""
    from parallel.runner import ScalingRequest, ScalingRunner
    from parallel.spec import load

    suite = load("scaling-quick")
    cases = suite.cases(2)
    killed = next(i for i, case in enumerate(cases) if case.devices == 2)
    request = ScalingRequest(suite, framework, "cpu", tmp_path, fault_case=killed)
    assert ScalingRunner(request).run(echo=lambda line: None) == 0
    rows = [json.loads(line) for path in tmp_path.rglob("*.jsonl")
            for line in path.read_text().splitlines()]
    assert [row["scaling"]["devices"] for row in rows] == [c.devices for c in cases]
    assert rows[killed]["status"] == "failed"
    assert "signal 9" in rows[killed]["reason"] or "exit code" in rows[killed]["reason"]
    others = [row for i, row in enumerate(rows) if i != killed]
    # ONNX Runtime has no mixed precision: its bf16 cases are rows with the reason.
    refused = [row for row in others if framework == "ort"
               and row["settings"]["precision"] == "bf16"]
    assert all(row["status"] == "unsupported" and "mixed precision" in row["reason"]
               for row in refused)
    others = [row for row in others if row not in refused]
    assert all(row["status"] == "ok" for row in others), [r["reason"] for r in others]
    assert {row["settings"]["precision"] for row in others} == \
        ({"fp32"} if framework == "ort" else {"fp32", "bf16"})
    for row in others:
        s = row["scaling"]
        assert s["global_batch"] == s["devices"] * s["per_device_batch"]
        assert s["efficiency"] > 0 and s["images_per_s"] > 0
        assert row["timing"]["samples"] == suite.samples
        # The pools the ranks ran with, as the settings say. TensorFlow's one process
        # drives every replica and gets an inter-op thread for each.
        assert row["settings"]["threads"] >= 1
        assert row["settings"]["interop_threads"] == \
            (s["devices"] if framework == "tf" else 1)
        if s["devices"] == 1:
            assert s["efficiency"] == 1.0
