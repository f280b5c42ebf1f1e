"""JAX data parallelism: one process drives all local devices over a
``jax.sharding.Mesh`` with one axis, ``data``; across hosts, one process per host joined
by ``jax.distributed.initialize`` (the mesh then spans every process's devices).

The step is ``jax.shard_map`` of the adapter's own loss (``JaxPrepared._loss``): each
device runs forward, loss and backward on its shard of the global batch with replicated
parameters, and ``lax.pmean`` all-reduces the gradients (and the loss) over ``data``, as
DistributedDataParallel does. Batch norm therefore sees per-device statistics, as in DDP
(a plain ``jax.jit`` over a sharded batch would instead compute global statistics, with
extra all-reduces in forward and backward). ``local_step`` is the same program without the
``pmean``: each device keeps its own gradients.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from adapters.base import CaseConfig, DataParallelEngine, RunConfig
from adapters.jax.adapter import JaxAdapter
from adapters.jax.network import Lengths
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from parallel.shards import shard

AXIS = "data"
# Cases this process has run (a launch runs several in turn), and whether it has joined
# jax.distributed (once per process).
_CASES = 0
_DISTRIBUTED = False


class DataParallel(DataParallelEngine):
    communication_method = ("exposed all-reduce: median step with lax.pmean of the "
                            "gradients minus median of the same shard_map program without it")

    def __init__(self, spec, info, threads: int):
        global _CASES, _DISTRIBUTED
        _CASES += 1
        self.on_gpu = spec.device == "gpu"
        self.multi_process = info.world_size > 1
        if self.multi_process and not _DISTRIBUTED:
            options: dict[str, Any] = {}
            if self.on_gpu:
                per_process = spec.devices // info.world_size
                first = info.local_rank * per_process
                options["local_device_ids"] = list(range(first, first + per_process))
            else:
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(info.coordinator, info.world_size, info.rank, **options)
            _DISTRIBUTED = True
        self.engine = ("JAX shard_map over a device mesh, " +
                       ("jax.distributed (one process per host)" if self.multi_process
                        else "one process"))
        self.adapter = JaxAdapter(RunConfig(spec.device, threads, 1))
        devices = jax.devices("gpu" if self.on_gpu else "cpu")[:spec.devices]
        if len(devices) < spec.devices:
            raise RuntimeError(f"{spec.devices} devices asked for, JAX sees {len(devices)}")
        self.backend = ("NCCL (XLA collectives)" if self.on_gpu else
                        "gloo (XLA CPU collectives)" if self.multi_process
                        else "XLA CPU collectives (in process)")
        self.mesh = Mesh(np.array(devices), (AXIS,))
        model = get_model(spec.model)
        full = make_batch(model, spec.global_batch, spec.seed)
        local = shard(full, jax.process_index(), jax.process_count())
        # The adapter builds the network and its pure loss; its own single-device
        # placement of this process's shard is not used by the steps below.
        self.prepared = self.adapter.prepare(model, canonical_weights(model, spec.seed), local,
                                             CaseConfig(spec.precision, "jit"))
        p = self.prepared
        replicated = NamedSharding(self.mesh, P())

        def put(sharding, array):
            return jax.make_array_from_process_local_data(sharding, np.asarray(array))

        self.trainable = {k: put(replicated, v) for k, v in p.net.trainable.items()}
        self.fixed = {k: put(replicated, v) for k, v in p.net.fixed.items()}
        batch_spec, time_major = P(AXIS), P(None, AXIS)
        x = put(NamedSharding(self.mesh, batch_spec), p._host_x(local))
        labels = None if local.labels is None else \
            put(NamedSharding(self.mesh, batch_spec), local.labels.astype(np.int32))
        lengths = None
        lengths_spec: Any = P()
        if local.lengths is not None:
            host = Lengths.of(local.lengths, local.x.shape[1])
            lengths_spec = Lengths(time_major, batch_spec, batch_spec)
            lengths = Lengths(*(put(NamedSharding(self.mesh, s), a)
                                for s, a in zip(lengths_spec, host)))
        self.args = (self.trainable, self.fixed, x, labels, lengths)
        in_specs = (P(), P(), batch_spec, batch_spec, lengths_spec)
        gradient = jax.value_and_grad(p._loss)

        def all_reduced(*args):
            loss, grads = gradient(*args)
            return jax.lax.pmean(loss, AXIS), jax.lax.pmean(grads, AXIS)

        def per_device(*args):
            loss, grads = gradient(*args)
            return loss[None], jax.tree.map(lambda g: g[None], grads)

        # check_vma=False: the LSTM's lax.scan starts from a zero state that does not vary
        # over devices while its body's does, which the replication checker rejects; the
        # out_specs are right by construction (pmean'd values are replicated).
        self.full_fn = jax.jit(jax.shard_map(all_reduced, mesh=self.mesh, in_specs=in_specs,
                                             out_specs=(P(), P()), check_vma=False))
        self.local_fn = jax.jit(jax.shard_map(per_device, mesh=self.mesh, in_specs=in_specs,
                                              out_specs=(P(AXIS), P(AXIS)), check_vma=False))

    def step(self):
        return lambda: self.full_fn(*self.args)

    def local_step(self):
        return lambda: self.local_fn(*self.args)

    def sync(self, handle: Any) -> None:
        if handle is not None:
            jax.block_until_ready(handle)

    def gradients(self) -> tuple[float, dict]:
        loss, grads = self.full_fn(*self.args)

        def host(array) -> np.ndarray:   # replicated: this process's copy is the value
            return np.asarray(array.addressable_shards[0].data, dtype=np.float32)

        return float(host(loss)), {name: self.prepared.net.canonical(name, host(g))
                                   for name, g in grads.items()}

    def peak_memory(self) -> dict[str, Any] | None:
        if not self.on_gpu:
            return None
        stats = self.mesh.devices.flat[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        if peak is None:
            return None
        # XLA's allocator keeps one peak for the process's life, with no reset.
        kind = "allocator" if _CASES == 1 else \
            "allocator, the process's peak (earlier cases of the launch included)"
        return {"peak_bytes": int(peak), "kind": kind}

    def environment(self) -> dict[str, Any]:
        return {**self.adapter.environment(), "jax_process_count": jax.process_count()}

    def close(self) -> None:
        del self.args, self.trainable, self.fixed
        self.prepared.close()

    @classmethod
    def finish(cls) -> None:
        """After the launch's last case: leave jax.distributed (it serves every case)."""
        if _DISTRIBUTED:
            jax.distributed.shutdown()
