"""TensorFlow data parallelism: ``tf.distribute.MirroredStrategy``, one process driving
all local devices (GPUs, or logical CPU devices on a CPU host), NCCL all-reduce between
GPUs; across hosts ``MultiWorkerMirroredStrategy``, configured by ``TF_CONFIG``.

The adapter's network is built inside the strategy's scope, so its variables are mirrored
on every device; the step (``tf.function`` of ``strategy.run``) runs the adapter's own
forward, loss and ``GradientTape`` backward on each replica's shard, then the replica
context's ``all_reduce(MEAN)`` of the gradients, as DDP does. Batch norm sees per-replica
statistics. ``local_step`` is the same step without the all-reduce.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import tensorflow as tf

from adapters.base import CaseConfig, DataParallelEngine, RunConfig
from adapters.tf.adapter import TFAdapter, place_batch
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from parallel.shards import shard

MEAN = tf.distribute.ReduceOp.MEAN


def make_logical_cpus(count: int) -> None:
    """Split the CPU into ``count`` logical devices (before TensorFlow's runtime starts),
    the CPU stand-in for ``count`` GPUs. A later case of the same launch (the same N)
    finds them made."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    made = tf.config.get_logical_device_configuration(cpu)
    if made and len(made) == count:
        return
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])


@functools.cache
def process_adapter(device: str, threads: int, replicas: int) -> TFAdapter:
    """One adapter per process: TensorFlow fixes its thread pools and GPU memory growth at
    its first operation, so the cases of a launch (one N) share the first case's.

    One inter-op thread per local replica. The strategy's step is one multi-device
    function whose per-device parts run on the inter-op pool; with a single thread, as the
    one-device cases use, every replica's kernels are launched from that one thread in
    turn. Measured so on 4x H200 (h200x4-2026-11b (at 2efa0ce), commit 318f549): ResNet-50
    fp32 weak at N = 4 took 128 ms against 73 ms on one GPU, and 45 of the 55 ms lost were
    time in which no kernel ran. PyTorch gives each GPU a process, XLA each device a launch
    thread of its own."""
    return TFAdapter(RunConfig(device, threads, max(1, replicas)))


@functools.cache
def multi_worker_strategy() -> tf.distribute.MultiWorkerMirroredStrategy:
    """TensorFlow allows one MultiWorkerMirroredStrategy per process."""
    return tf.distribute.MultiWorkerMirroredStrategy()


class DataParallel(DataParallelEngine):
    communication_method = ("exposed all-reduce: median step with the replica context's "
                            "all_reduce(MEAN) of the gradients minus median without it")

    def __init__(self, spec, info, threads: int):
        self.on_gpu = spec.device == "gpu"
        self.multi_worker = "TF_CONFIG" in os.environ
        workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]) \
            if self.multi_worker else 1
        local = spec.devices // workers
        if not self.on_gpu:
            make_logical_cpus(local)
        self.adapter = process_adapter(spec.device, threads, local)
        if self.on_gpu:
            # The peak of this case, not of an earlier case of the same launch.
            tf.config.experimental.reset_memory_stats("GPU:0")
        kind = "GPU" if self.on_gpu else "CPU"
        if self.multi_worker:
            self.strategy = multi_worker_strategy()
            self.engine = "tf.distribute.MultiWorkerMirroredStrategy (TF_CONFIG)"
            self.backend = "NCCL" if self.on_gpu else "gRPC ring (collective ops)"
        else:
            devices = [f"/{kind}:{i}" for i in range(local)]
            # NCCL between GPUs (the strategy's default there); on CPU devices the
            # reduction goes through one device.
            cross = tf.distribute.NcclAllReduce() if self.on_gpu \
                else tf.distribute.ReductionToOneDevice()
            self.strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=cross)
            self.engine = "tf.distribute.MirroredStrategy (one process)"
            self.backend = type(cross).__name__
        model = get_model(spec.model)
        full = make_batch(model, spec.global_batch, spec.seed)
        replicas = self.strategy.num_replicas_in_sync
        with self.strategy.scope():
            self.prepared = self.adapter.prepare(model, canonical_weights(model, spec.seed),
                                                 shard(full, 0, replicas),
                                                 CaseConfig(spec.precision, "graph"))
        p = self.prepared
        worker_devices = self.strategy.extended.worker_devices

        def replica_inputs(context: tf.distribute.InputContext | Any) -> dict[str, Any]:
            index = context.replica_id_in_sync_group
            local_index = index % len(worker_devices)
            return place_batch(model, shard(full, index, replicas), worker_devices[local_index])

        self.inputs = self.strategy.experimental_distribute_values_from_function(replica_inputs)

        def gradient(inputs):
            features = p._features(inputs)
            with tf.GradientTape() as tape:
                out = p.body(features, p._context(True, inputs))
                loss = p._loss(out, features, inputs)
            # Dense gradients (an embedding's IndexedSlices too), as DDP all-reduces them.
            return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, p.variables)]

        def all_reduced(inputs):
            loss, grads = gradient(inputs)
            context = tf.distribute.get_replica_context()
            return context.all_reduce(MEAN, loss), context.all_reduce(MEAN, grads)

        self.full_fn = tf.function(lambda: self.strategy.run(all_reduced, args=(self.inputs,)))
        self.local_fn = tf.function(lambda: self.strategy.run(gradient, args=(self.inputs,)))

    def step(self):
        return self.full_fn

    def local_step(self):
        return self.local_fn

    def sync(self, handle: Any) -> None:
        if self.on_gpu:
            tf.test.experimental.sync_devices()

    def gradients(self) -> tuple[float, dict]:
        loss, grads = self.full_fn()
        first = self.strategy.experimental_local_results
        return float(first(loss)[0]), {name: first(g)[0].numpy()
                                       for name, g in zip(self.prepared.params, grads)}

    def peak_memory(self) -> dict[str, Any] | None:
        if not self.on_gpu:
            return None
        return {"peak_bytes": int(tf.config.experimental.get_memory_info("GPU:0")["peak"]),
                "kind": "allocator"}

    def environment(self) -> dict[str, Any]:
        return self.adapter.environment()

    def close(self) -> None:
        self.full_fn = self.local_fn = self.inputs = None
        self.prepared.close()
