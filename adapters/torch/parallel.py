"""PyTorch data parallelism: ``DistributedDataParallel`` over NCCL (GPU) or gloo (CPU),
one process per device, started by ``torch.distributed.run`` (torchrun).

The network, weights and step are the adapter's own (``TorchPrepared``); DDP wraps its
trainable body. A step is forward, loss and ``loss.backward()``, during which DDP's
reducer all-reduces (averages) the gradients bucket by bucket as they are produced; no
optimizer runs. ``local_step`` is the same step under ``no_sync()``: no all-reduce.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from adapters.base import CaseConfig, DataParallelEngine, RunConfig
from adapters.torch.adapter import TorchAdapter
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from parallel.shards import shard


class _BodyOnShard(nn.Module):
    """The adapter's body with this rank's sequence lengths held as an attribute, so DDP's
    forward sees only the features tensor: the lengths must stay on the host for
    pack_padded_sequence, and DDP may move every tensor it is given to the device."""

    def __init__(self, body: nn.Module, lengths: Any):
        super().__init__()
        self.body = body
        self.lengths = lengths

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.body(features, self.lengths)


class DataParallel(DataParallelEngine):
    engine = "torch DistributedDataParallel (torchrun)"
    communication_method = ("exposed all-reduce: median step with DDP's gradient all-reduce "
                            "minus median of the same step under DDP.no_sync()")

    def __init__(self, spec, info, threads: int):
        self.on_gpu = spec.device == "gpu"
        self.backend = "nccl" if self.on_gpu else "gloo"
        self.info = info
        if self.on_gpu:
            torch.cuda.set_device(info.local_rank)
            # The peak of this case, not of an earlier case of the same launch.
            torch.cuda.reset_peak_memory_stats()
        if not dist.is_initialized():
            # env:// rendezvous: MASTER_ADDR/PORT, RANK and WORLD_SIZE come from torchrun;
            # the group serves every case of the launch (finish() ends it).
            dist.init_process_group(self.backend)
        self.adapter = TorchAdapter(RunConfig(spec.device, threads, 1))
        if self.on_gpu:
            # The adapter's single-device runs use cuda:0; a rank uses its own GPU.
            self.adapter.device = torch.device("cuda", info.local_rank)
        model = get_model(spec.model)
        batch = shard(make_batch(model, spec.global_batch, spec.seed), info.rank,
                      info.world_size)
        self.prepared = self.adapter.prepare(model, canonical_weights(model, spec.seed), batch,
                                             CaseConfig(spec.precision, "eager"))
        self.prepared.body.train()
        # device_ids=None: the inputs are already on the device.
        # broadcast_buffers=False: every rank starts from the same canonical weights and
        # statistics; batch norm keeps per-device batch statistics, as DDP does by default.
        self.ddp = DistributedDataParallel(
            _BodyOnShard(self.prepared.body, self.prepared.inputs.lengths),
            broadcast_buffers=False)
        self.params = list(self.prepared.params.values())

    def _step(self) -> torch.Tensor:
        p = self.prepared
        for param in self.params:
            param.grad = None
        inputs = p.inputs
        with p.autocast():
            features = p._features(inputs)
            loss = p._loss(self.ddp(features), features, inputs.labels)
        loss.backward()
        return loss

    def step(self):
        return self._step

    def local_step(self):
        def run():
            with self.ddp.no_sync():
                return self._step()
        return run

    def sync(self, handle: Any) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def gradients(self) -> tuple[float, dict]:
        loss = self._step().detach().clone()
        dist.all_reduce(loss)
        loss /= self.info.world_size
        return float(loss), {name: param.grad.float().cpu().numpy()
                             for name, param in self.prepared.params.items()}

    def peak_memory(self) -> dict[str, Any] | None:
        if not self.on_gpu:
            return None
        return {"peak_bytes": int(torch.cuda.max_memory_allocated()), "kind": "allocator"}

    def environment(self) -> dict[str, Any]:
        env = self.adapter.environment()
        if self.on_gpu:
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return env

    def close(self) -> None:
        # DDP's reducer holds gloo/NCCL work objects; release it (and the case's tensors)
        # while the group and the interpreter are alive.
        self.ddp = self.params = None
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None
        gc.collect()
        if self.on_gpu:
            torch.cuda.empty_cache()

    @classmethod
    def finish(cls) -> None:
        """End the launch's process group after its last case, before interpreter
        finalization, which tearing it down can abort (pytorch/pytorch#179291)."""
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
