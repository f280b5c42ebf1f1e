"""dlbench's JAX adapter against an idiomatic Flax ResNet-50, side by side.

    python -m comparisons.flax_vs_dlbench --device gpu                 # batches 16 and 128
    python -m comparisons.flax_vs_dlbench --device cpu --batches 2 --tolerance 1   # smoke

The Flax model is written here in the style of Flax's examples/imagenet/models.py
(``nn.Module`` blocks, ``partial``'d ``nn.Conv`` and ``nn.BatchNorm``) to dlbench's
ResNet-50: torchvision's v1.5 (stride on the 3×3 convolution), batch norm after every
bias-free convolution, torch-style symmetric padding. dlbench's canonical weights are
copied into it (every path and shape checked), both must give the same output, and then
forward and gradient are timed for both with the same timer (suites.timer.measure with
the device's default-suite TimerSettings), jit, precision (HIGHEST on every conv and
dot), NHWC batch on the device and loss (mean softmax cross-entropy). Flax's gradient is
its idiomatic training form: ``mutable=["batch_stats"]`` with the new statistics as aux.
Each pair is timed in A-B-B-A order, ``--rounds`` times, so drift favours neither, and
each side's figure is the median of its runs' medians. The ratio is dlbench / Flax;
the exit status is 1 when a ratio is outside ±tolerance or the outputs differ, 2 when
jax or flax is missing or the device is not there.

On the CPU (jax 0.10.2) XLA's optimised forward programs of the two are the same op for
op, and the gradients differ only by Flax's update of the running statistics (vectors of
channel size), which dlbench leaves out; so the ratio measures what dlbench adds around
the program: argument handling and dispatch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

DEFAULT_SUITE = {"cpu": "default-cpu", "gpu": "default-gpu"}


def import_frameworks():
    """jax, flax.linen and the adapter (which sets the GPU allocator's flags before the
    backend starts: adapters/jax/__init__.py)."""
    try:
        import flax
        import flax.linen as nn
        import jax

        from adapters.jax import JaxAdapter
    except ImportError as error:
        print(f"error: {error}. This comparison needs jax and flax installed "
              f"(pip install flax); nothing was timed.", file=sys.stderr)
        raise SystemExit(2) from None
    return JaxAdapter, jax, flax, nn


def flax_resnet(nn, jnp, lax):
    """ResNet-v1.5 as Flax's examples/imagenet/models.py writes it, with dlbench's
    module names (``layer1_0/conv1_bn`` for ``layer1.0.conv1.bn``)."""

    class BottleneckResNetBlock(nn.Module):
        filters: int
        conv: Any
        norm: Any
        act: Any
        strides: tuple[int, int] = (1, 1)

        @nn.compact
        def __call__(self, x):
            residual = x
            y = self.conv(self.filters, (1, 1), name="conv1")(x)
            y = self.act(self.norm(name="conv1_bn")(y))
            y = self.conv(self.filters, (3, 3), self.strides, padding=((1, 1), (1, 1)),
                          name="conv2")(y)
            y = self.act(self.norm(name="conv2_bn")(y))
            y = self.conv(self.filters * 4, (1, 1), name="conv3")(y)
            y = self.norm(name="conv3_bn")(y)
            if residual.shape != y.shape:
                residual = self.conv(self.filters * 4, (1, 1), self.strides,
                                     name="downsample")(residual)
                residual = self.norm(name="downsample_bn")(residual)
            return self.act(residual + y)

    class ResNet(nn.Module):
        stage_sizes: tuple[int, ...]
        num_classes: int = 1000
        num_filters: int = 64

        @nn.compact
        def __call__(self, x, train: bool = True):
            highest = lax.Precision.HIGHEST
            conv = partial(nn.Conv, use_bias=False, dtype=jnp.float32, precision=highest)
            norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                           epsilon=1e-5, dtype=jnp.float32)
            x = conv(self.num_filters, (7, 7), (2, 2), padding=((3, 3), (3, 3)),
                     name="conv1")(x)
            x = nn.relu(norm(name="conv1_bn")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
            for i, block_size in enumerate(self.stage_sizes):
                for j in range(block_size):
                    strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                    x = BottleneckResNetBlock(self.num_filters * 2 ** i, conv, norm, nn.relu,
                                              strides, name=f"layer{i + 1}_{j}")(x)
            x = jnp.mean(x, axis=(1, 2))
            return nn.Dense(self.num_classes, dtype=jnp.float32, precision=highest,
                            name="fc")(x)

    return ResNet(stage_sizes=(3, 4, 6, 3))


# canonical suffix -> (Flax collection, Flax leaf name)
LEAVES = {"weight": ("params", "kernel"), "bias": ("params", "bias"),
          "gamma": ("params", "scale"), "beta": ("params", "bias"),
          "running_mean": ("batch_stats", "mean"), "running_var": ("batch_stats", "var")}


def flax_path(canonical: str) -> tuple[str, ...]:
    """``layer1.0.conv1.bn.gamma`` -> ``('params', 'layer1_0', 'conv1_bn', 'scale')``."""
    module, _, leaf = canonical.rpartition(".")
    collection, name = LEAVES[leaf]
    parts = module.split(".")
    if parts[0].startswith("layer"):
        return (collection, f"{parts[0]}_{parts[1]}", "_".join(parts[2:]), name)
    return (collection, "_".join(parts), name)


def flax_variables(weights, template, device, jax, np) -> dict:
    """dlbench's canonical weights in the Flax model's variable tree, every path and
    shape checked against the tree ``model.init`` would make."""
    from flax import traverse_util

    flat_template = traverse_util.flatten_dict(template)
    flat = {}
    for name, array in weights.items():
        if array.ndim == 4:
            array = np.transpose(array, (2, 3, 1, 0))  # OIHW -> HWIO
        path = flax_path(name)
        if path not in flat_template or flat_template[path].shape != array.shape:
            raise SystemExit(f"{name} -> {'/'.join(path)}: no such Flax variable of shape "
                             f"{array.shape}")
        flat[path] = array
    missing = set(flat_template) - set(flat)
    if missing:
        raise SystemExit(f"Flax variables without a dlbench weight: {sorted(missing)[:5]}")
    return jax.device_put(traverse_util.unflatten_dict(flat), device)


class FlaxSteps:
    """The Flax model's forward and gradient steps on dlbench's device arrays."""

    def __init__(self, model, variables, x, labels, jax, jnp):
        def forward(variables, x):
            return model.apply(variables, x, train=False)

        def loss(params, batch_stats, x, labels):
            logits, updates = model.apply({"params": params, "batch_stats": batch_stats}, x,
                                          train=True, mutable=["batch_stats"])
            log_probs = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1)), updates

        forward_fn = jax.jit(forward)
        gradient_fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
        self.forward = lambda: forward_fn(variables, x)
        self.gradient = lambda: gradient_fn(variables["params"], variables["batch_stats"], x,
                                            labels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--batches", default="16,128")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="largest allowed |dlbench / Flax - 1|")
    parser.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds per measure")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    JaxAdapter, jax, flax, nn = import_frameworks()
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    from adapters.base import CaseConfig, DeviceUnavailable, RunConfig
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.weights import canonical_weights
    from models.zoo import get_model
    from suites.spec import load_suite, resolve_suite_path
    from suites.timer import measure

    try:
        adapter = JaxAdapter(RunConfig(args.device, len(os.sched_getaffinity(0)), 1))
    except DeviceUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings = load_suite(resolve_suite_path(DEFAULT_SUITE[args.device]), load_registry()).timer
    env = adapter.environment()
    print(f"jax {env['framework_version']}, flax {flax.__version__} on "
          f"{env['gpu_model'] or 'CPU'}; timer {settings}")
    model = get_model("resnet50")
    weights = canonical_weights(model)
    flax_model = flax_resnet(nn, jnp, lax)
    results, worst = [], 0.0
    for batch in (int(b) for b in args.batches.split(",")):
        prepared = adapter.prepare(model, weights, make_batch(model, batch), CaseConfig())
        template = jax.eval_shape(partial(flax_model.init, train=False),
                                  jax.random.PRNGKey(0), prepared.x)
        theirs = FlaxSteps(flax_model, flax_variables(weights, template, adapter.device, jax, np),
                           prepared.x, prepared.labels, jax, jnp)
        ours_out = prepared.forward_output()       # (N, classes) logits
        theirs_out = np.asarray(theirs.forward())
        difference = float(np.abs(ours_out - theirs_out).max() / np.abs(theirs_out).max())
        ours_loss = prepared.loss_and_gradients()[0]
        theirs_loss = float(theirs.gradient()[0][0])
        if difference > 1e-3 or abs(ours_loss - theirs_loss) > 1e-3 * abs(theirs_loss):
            print(f"error: the models differ (output {difference:.1e}, loss {ours_loss} vs "
                  f"{theirs_loss}); timings would not compare the same network",
                  file=sys.stderr)
            return 1
        for name in ("forward", "gradient"):
            steps = {"dlbench": prepared.step(name), "flax": getattr(theirs, name)}
            medians: dict[str, list[float]] = {"dlbench": [], "flax": []}
            for label in ("dlbench", "flax", "flax", "dlbench") * args.rounds:
                medians[label].append(measure(steps[label], prepared.sync, settings).median_s
                                      * 1e3)
            ours_ms, theirs_ms = np.median(medians["dlbench"]), np.median(medians["flax"])
            ratio = float(ours_ms / theirs_ms)
            worst = max(worst, abs(ratio - 1))
            verdict = "ok" if abs(ratio - 1) <= args.tolerance else \
                f"OUTSIDE ±{args.tolerance:.0%}"
            print(f"resnet50 b{batch:<4} {name:<8} dlbench {ours_ms:9.3f} ms  flax "
                  f"{theirs_ms:9.3f} ms  ratio {ratio:.3f}  {verdict}  "
                  f"(output diff {difference:.1e})", flush=True)
            results.append({"model": "resnet50", "batch": batch, "measure": name,
                            "dlbench_ms": float(ours_ms), "flax_ms": float(theirs_ms),
                            "ratio": ratio, "runs_ms": medians,
                            "max_rel_output_diff": difference,
                            "device": env["gpu_model"] or "cpu"})
        del theirs
        prepared.close()
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "flax": flax.__version__,
                                        "results": results}, indent=1))
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
