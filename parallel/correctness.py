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
from pathlib import Path

import numpy as np

from parallel.engines import plan, processes
from parallel.launch import Outcome, launch
from parallel.spec import RankSpec


class LaunchFailed(RuntimeError):
    def __init__(self, outcome: Outcome):
        super().__init__(f"{outcome.status}: {outcome.reason}")
        self.outcome = outcome


def distributed_gradients(framework: str, model: str, devices: int, per_device_batch: int,
                          device: str = "cpu", hosts: int = 1, seed: int = 0,
                          timeout_s: float = 300) -> tuple[float, dict[str, np.ndarray]]:
    with tempfile.TemporaryDirectory(prefix="dlbench-dp-grad-") as scratch:
        result = Path(scratch) / "gradients.npz"
        spec = RankSpec(framework, device, model, per_device_batch, devices, "weak", 0, 0, seed,
                        result=str(result), task="gradients",
                        processes=processes(framework, devices, hosts))
        spec_path = Path(scratch) / "spec.json"
        spec.to_file(spec_path)
        launch_plan = plan(spec, str(spec_path), hosts)
        outcome = launch(launch_plan.commands, launch_plan.envs, timeout_s,
                         Path(scratch) / "logs", cwd=Path(__file__).resolve().parent.parent)
        if outcome.status != "ok" or not result.exists():
            raise LaunchFailed(outcome)
        with np.load(result) as data:
            loss = float(data["__loss__"])
            grads = {name: np.array(data[name]) for name in data.files if name != "__loss__"}
    return loss, grads
