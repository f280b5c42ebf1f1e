"""The all-reduced gradient of a data-parallel step, fetched from a real launch (the same
processes, engines and collectives a timed case uses), for the correctness checks:

* with a mean loss and no batch norm, the average of the shards' gradients *is* the
  gradient of the concatenated global batch, so it must equal the one-device gradient of
  that batch;
* with batch norm each device normalises by its own shard's statistics (DDP's default;
  ``adapters/jax/parallel.py`` does the same), so the all-reduced gradient must equal the
  mean of the one-device gradients of the shards.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np

from parallel.engines import plan, processes
from parallel.launch import Outcome, launch
from parallel.spec import RankSpec

# fp32 reassociation bound of the batch sums, as in tests/conformance/test_data_parallel.py.
RTOL = 1e-4


class LaunchFailed(RuntimeError):
    def __init__(self, outcome: Outcome):
        super().__init__(f"{outcome.status}: {outcome.reason}")
        self.outcome = outcome


def _launch_gradients(framework: str, model: str, devices: int, per_device_batch: int,
                      device: str, hosts: int, seed: int, timeout_s: float
                      ) -> tuple[float, dict[str, np.ndarray]]:
    with tempfile.TemporaryDirectory(prefix="dlbench-dp-grad-") as scratch:
        result = Path(scratch) / "gradients.npz"
        spec = RankSpec(framework, device, model, per_device_batch, devices, "weak", 0, 0, seed,
                        result=str(result), task="gradients",
                        processes=processes(framework, devices, hosts))
        spec_path = Path(scratch) / "spec.json"
        spec.to_file(spec_path)
        launch_plan = plan(spec, [str(spec_path)], hosts)
        outcome = launch(launch_plan.commands, launch_plan.envs, timeout_s,
                         Path(scratch) / "logs", cwd=Path(__file__).resolve().parent.parent)
        if outcome.status != "ok" or not result.exists():
            raise LaunchFailed(outcome)
        with np.load(result) as data:
            loss = float(data["__loss__"])
            grads = {name: np.array(data[name]) for name in data.files if name != "__loss__"}
    return loss, grads


def distributed_gradients(framework: str, model: str, devices: int, per_device_batch: int,
                          device: str = "cpu", hosts: int = 1, seed: int = 0,
                          timeout_s: float = 300) -> tuple[float, dict[str, np.ndarray]]:
    """The all-reduced gradient. What this checks is arithmetic, so a launch whose process
    crashed (a transport fault, not a wrong number) is tried once more, with a warning
    that quotes the crash; a second crash, a timeout or a wrong gradient still fails."""
    try:
        return _launch_gradients(framework, model, devices, per_device_batch, device, hosts,
                                 seed, timeout_s)
    except LaunchFailed as first:
        if first.outcome.status != "failed":
            raise
        warnings.warn(f"{framework} {model}: data-parallel launch crashed, tried again: "
                      f"{first.outcome.reason}", RuntimeWarning, stacklevel=2)
    return _launch_gradients(framework, model, devices, per_device_batch, device, hosts,
                             seed, timeout_s)


def compare(framework: str, model: str, device: str, devices: int = 2,
            per_device_batch: int = 4) -> float:
    """Worst |N-device − one-device| / max|one-device| over the parameters, both through
    the engine (the one-device run is N = 1 on the global batch). For a GPU check of the
    NCCL path: ``python -m parallel check --framework torch --device gpu``."""
    _, one = distributed_gradients(framework, model, 1, devices * per_device_batch, device)
    _, many = distributed_gradients(framework, model, devices, per_device_batch, device)
    worst = 0.0
    for name, reference in one.items():
        scale = float(np.abs(reference).max()) or 1.0
        worst = max(worst, float(np.abs(many[name] - reference).max()) / scale)
    return worst
