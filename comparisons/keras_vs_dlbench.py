"""dlbench's TensorFlow adapter against the same networks written directly in Keras.

    .nox/tf_cpu/bin/python -m comparisons.keras_vs_dlbench --threads 2 --batch 16

(any environment with the tf_cpu or tf_gpu session's packages; ``--device gpu`` on a GPU
host). For resnet50 and vgg16: build dlbench's model through the adapter and a
hand-written, idiomatic Keras model of the same architecture (keras.applications' ResNet50
is ResNet v1 with the stride on the 1×1 convolution and biased convolutions, so it is not
the same network): torchvision-style ResNet-50 v1.5 (bias-free convolutions, batch norm
eps 1e-5, the stride on the 3×3, ZeroPadding2D before strided convolutions and the max
pool as keras.applications pads) and VGG-16 (dropout left out, as dlbench ignores it).
The canonical weights are loaded into the Keras model and both outputs are compared, so
the two are the same network. Both are then timed in one process with the same timer and
settings, input and threads: ``tf.function`` around ``model(x, training=False)`` for
forward and around a GradientTape step (Keras loss, ``training=True``) for gradient,
fp32 strict, NHWC. Each pair runs in A-B-B-A order (``--rounds`` repeats it) so drift
favours neither. A ratio near 1.00 shows dlbench's TensorFlow numbers are TensorFlow's, not
the adapter's.

Each model is also compared with ``tf_keras`` (Keras 2, TensorFlow's former ``tf.keras``:
the same model code, batch norm fused), and ResNet-50 with ``keras_fused_bn``: the same
Keras model with its batch norm on TensorFlow's fused kernel, which dlbench uses and
Keras 3 does not (tf.keras 2 did), so the references separate the cost of Keras 3's batch
norm from the rest.
Beside wall time the script prints the cores this process kept busy (near ``--threads``
on a quiet machine; lower means other processes had the cores, so rerun) and the ratio of
CPU time per call, which such contention disturbs far less.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from adapters.base import CaseConfig, RunConfig
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from suites.environment import limit_cpus
from suites.timer import TimerSettings, measure

MODELS = ("resnet50", "vgg16")
TOLERANCE = 0.10


def fused_batch_norm_layer(keras):
    """BatchNormalization on TensorFlow's fused kernel, as tf.keras 2's
    ``BatchNormalization(fused=True)`` ran it: Keras 3 computes batch norm from
    tf.nn.moments and tf.nn.batch_normalization (keras/src/backend/tensorflow/nn.py),
    several kernels each way where the fused op is one. Moving averages are updated in
    training, as Keras does."""
    import tensorflow as tf

    class FusedBatchNormalization(keras.layers.Layer):
        def __init__(self, epsilon: float, momentum: float = 0.99, **kwargs):
            super().__init__(**kwargs)
            self.epsilon, self.momentum = epsilon, momentum

        def build(self, input_shape):
            c = (input_shape[-1],)
            self.gamma = self.add_weight(shape=c, initializer="ones", name="gamma")
            self.beta = self.add_weight(shape=c, initializer="zeros", name="beta")
            self.moving_mean = self.add_weight(shape=c, initializer="zeros",
                                               trainable=False, name="moving_mean")
            self.moving_variance = self.add_weight(shape=c, initializer="ones",
                                                   trainable=False, name="moving_variance")

        def call(self, x, training=False):
            if not training:
                return tf.compat.v1.nn.fused_batch_norm(
                    x, self.gamma, self.beta, self.moving_mean, self.moving_variance,
                    self.epsilon, is_training=False)[0]
            y, mean, var = tf.compat.v1.nn.fused_batch_norm(x, self.gamma, self.beta,
                                                            epsilon=self.epsilon)
            for average, value in ((self.moving_mean, mean), (self.moving_variance, var)):
                average.assign(average * self.momentum + value * (1 - self.momentum))
            return y

    return FusedBatchNormalization


def keras_resnet50(keras, classes: int = 1000, fused_bn: bool = False):
    """ResNet-50 v1.5 as torchvision builds it, in Keras layers named as dlbench's IR.
    ``fused_bn`` swaps keras.layers.BatchNormalization for the fused-kernel layer."""
    layers = keras.layers
    batch_norm = fused_batch_norm_layer(keras) if fused_bn else layers.BatchNormalization

    def conv_bn(x, filters: int, kernel: int, stride: int, name: str):
        pad = kernel // 2
        if stride > 1 and pad:
            # PyTorch pads symmetrically; "same" would pad (0, 1) here, so pad explicitly.
            x = layers.ZeroPadding2D(pad)(x)
            padding = "valid"
        else:
            padding = "same"
        x = layers.Conv2D(filters, kernel, stride, padding=padding, use_bias=False, name=name)(x)
        return batch_norm(epsilon=1e-5, name=f"{name}.bn")(x)

    inputs = keras.Input((224, 224, 3))
    x = layers.ReLU()(conv_bn(inputs, 64, 7, 2, "conv1"))
    x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))  # zeros are safe after ReLU
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for index in range(blocks):
            name = f"layer{stage}.{index}"
            stride = 2 if stage > 1 and index == 0 else 1
            y = layers.ReLU()(conv_bn(x, width, 1, 1, f"{name}.conv1"))
            y = layers.ReLU()(conv_bn(y, width, 3, stride, f"{name}.conv2"))
            y = conv_bn(y, width * 4, 1, 1, f"{name}.conv3")
            shortcut = x
            if stride != 1 or cin != width * 4:
                shortcut = conv_bn(x, width * 4, 1, stride, f"{name}.downsample")
            x = layers.ReLU()(layers.Add()([y, shortcut]))
            cin = width * 4
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes, name="fc")(x), name="resnet50")


def keras_vgg16(keras, classes: int = 1000):
    layers = keras.layers
    inputs = keras.Input((224, 224, 3))
    x = inputs
    for stage, (count, width) in enumerate(zip((2, 2, 3, 3, 3), (64, 128, 256, 512, 512)),
                                           start=1):
        for index in range(1, count + 1):
            x = layers.Conv2D(width, 3, padding="same", activation="relu",
                              name=f"conv{stage}_{index}")(x)
        x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(4096, activation="relu", name="fc1")(x)
    x = layers.Dense(4096, activation="relu", name="fc2")(x)
    return keras.Model(inputs, layers.Dense(classes, name="fc3")(x), name="vgg16")


def load_canonical(keras, model, weights: dict) -> None:
    """Canonical (NCHW-world) weights into the Keras model, by layer name."""
    for layer in model.layers:
        name = layer.name
        if isinstance(layer, keras.layers.Conv2D):
            values = [weights[f"{name}.weight"].transpose(2, 3, 1, 0)]  # OIHW -> HWIO
            if layer.use_bias:
                values.append(weights[f"{name}.bias"])
        elif name.endswith(".bn"):  # BatchNormalization or the fused-kernel layer
            values = [weights[f"{name}.{k}"] for k in ("gamma", "beta", "running_mean",
                                                       "running_var")]
        elif isinstance(layer, keras.layers.Dense):
            kernel = weights[f"{name}.weight"]
            fin = layer.input.shape[-1]
            if name == "fc1":  # after Flatten: canonical rows (C, H, W) -> NHWC's (H, W, C)
                kernel = kernel.reshape(512, 7, 7, -1).transpose(1, 2, 0, 3).reshape(fin, -1)
            values = [kernel, weights[f"{name}.bias"]]
        else:
            continue
        layer.set_weights(values)


# reference label -> (Keras package, builder). ``tf_keras`` is Keras 2, TensorFlow's own
# ``tf.keras`` until TF 2.16, still released with TensorFlow: the same model code, with its
# BatchNormalization on the fused kernel by default.
REFERENCES = {
    "resnet50": {"keras": ("keras", keras_resnet50),
                 "tf_keras": ("tf_keras", keras_resnet50),
                 "keras_fused_bn": ("keras", lambda keras: keras_resnet50(keras, fused_bn=True))},
    "vgg16": {"keras": ("keras", keras_vgg16), "tf_keras": ("tf_keras", keras_vgg16)},
}


class KerasSteps:
    """The idiomatic custom-loop steps for a Keras model, on dlbench's NHWC batch."""

    def __init__(self, keras, tf, model, weights: dict, prepared):
        load_canonical(keras, model, weights)
        self.tf, self.model = tf, model
        self.x, self.labels = prepared.x, prepared.inputs["labels"]  # the same tensors, on the device
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.forward = tf.function(self._forward)
        self.gradient = tf.function(self._gradient)

    def _forward(self):
        return self.model(self.x, training=False)

    def _gradient(self):
        with self.tf.GradientTape() as tape:
            loss = self.loss_fn(self.labels, self.model(self.x, training=True))
        return tape.gradient(loss, self.model.trainable_variables)


class CountedCalls:
    def __init__(self, step):
        self.step, self.count = step, 0

    def __call__(self):
        self.count += 1
        return self.step()


def _rounded(values: dict[str, list[float]], digits: int = 1) -> dict[str, list[float]]:
    return {side: [round(v, digits) for v in items] for side, items in values.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per timing")
    parser.add_argument("--rounds", type=int, default=1,
                        help="A-B-B-A repetitions per pair (more where the load shifts)")
    parser.add_argument("--min-samples", type=int, default=5,
                        help="fewest samples per timing (CI's smoke run uses 2)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        limit_cpus(args.threads)  # as the worker does, before TensorFlow starts
    from adapters.tf import TFAdapter

    adapter = TFAdapter(RunConfig(args.device, args.threads, 1))
    import keras
    import tensorflow as tf
    import tf_keras
    del keras  # imported once here so its start-up is not inside a timed block

    # VGG-16 takes seconds per iteration on two cores: few but enough samples.
    settings = TimerSettings(warmup=1, min_samples=args.min_samples, max_samples=50, rel_ci=0.02,
                             budget_s=args.budget)
    env = adapter.environment()
    print(f"tensorflow {env['framework_version']}, keras {env['keras_version']}, tf_keras "
          f"{tf_keras.__version__} on "
          f"{env['gpu_model'] or 'CPU'}, {args.threads} threads, batch {args.batch}, "
          f"load average before {os.getloadavg()[0]:.2f}")
    results = []
    for name in args.models.split(","):
        model = get_model(name)
        weights = canonical_weights(model)
        prepared = adapter.prepare(model, weights, make_batch(model, args.batch), CaseConfig())
        ours_out = prepared.forward_output()
        for label, (package, build) in REFERENCES[name].items():
            keras = importlib.import_module(package)
            with tf.device(adapter.device):
                reference = KerasSteps(keras, tf, build(keras), weights, prepared)
            theirs_out = reference.forward().numpy()
            difference = float(abs(ours_out - theirs_out).max() / abs(theirs_out).max())
            for measure_name in ("forward", "gradient"):
                steps = {"dlbench": prepared.step(measure_name),
                         label: getattr(reference, measure_name)}
                medians: dict[str, list[float]] = {"dlbench": [], label: []}
                busy: dict[str, list[float]] = {"dlbench": [], label: []}
                cpu_ms: dict[str, list[float]] = {"dlbench": [], label: []}
                for side in ("dlbench", label, label, "dlbench") * args.rounds:
                    calls = CountedCalls(steps[side])
                    cpu, wall = time.process_time(), time.perf_counter()
                    timing = measure(calls, prepared.sync, settings)
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    medians[side].append(timing.median_s * 1e3)
                    # Cores kept busy (near the thread count on a quiet machine) and CPU
                    # time per call, which other processes on the cores disturb far less
                    # than wall time.
                    busy[side].append(cpu / wall)
                    cpu_ms[side].append(cpu / calls.count * 1e3)
                # The median over runs: one run that lost a core to another process
                # (cores busy well below the thread count) does not move it.
                ours_ms = float(np.median(medians["dlbench"]))
                theirs_ms = float(np.median(medians[label]))
                ratio = ours_ms / theirs_ms
                cpu_ratio = float(np.median(cpu_ms["dlbench"]) / np.median(cpu_ms[label]))
                verdict = "ok" if abs(ratio - 1) <= TOLERANCE else f"OUTSIDE ±{TOLERANCE:.0%}"
                results.append({"model": name, "reference": label, "measure": measure_name,
                                "batch": args.batch, "threads": args.threads,
                                "dlbench_ms": ours_ms, "reference_ms": theirs_ms,
                                "ratio": ratio, "runs_ms": medians, "cores_busy": busy,
                                "cpu_ms_per_call": cpu_ms, "cpu_ratio": cpu_ratio,
                                "max_rel_output_diff": difference,
                                "device": env["gpu_model"] or "cpu"})
                print(f"{name:<9} {measure_name:<8} dlbench {ours_ms:9.1f} ms  {label:<14} "
                      f"{theirs_ms:9.1f} ms  ratio {ratio:.3f}  {verdict}  CPU-time ratio "
                      f"{cpu_ratio:.3f}  (medians {_rounded(medians)}, cores busy "
                      f"{_rounded(busy, 2)}, output diff {difference:.1e})", flush=True)
            del reference
        prepared.close()
    print(f"load average after {os.getloadavg()[0]:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
