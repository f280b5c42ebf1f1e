"""dlbench's JAX adapter against an idiomatic Flax ResNet-50, side by side.

    python -m comparisons.flax_vs_dlbench --device gpu                 # fp32, batches 16 and 128
    python -m comparisons.flax_vs_dlbench --device gpu --precision bf16 --batches 256 \\
        --measures forward,train_step --suite practice-gpu     # the practice suite's bf16 twin
    python -m comparisons.flax_vs_dlbench --device cpu --model resnet_tiny --batches 2 --tolerance 1   # smoke

The Flax model is written here in the style of Flax's examples/imagenet/models.py
(``nn.Module`` blocks, ``partial``'d ``nn.Conv`` and ``nn.BatchNorm``) to dlbench's
ResNet-50: torchvision's v1.5 (stride on the 3×3 convolution), batch norm after every
bias-free convolution, torch-style symmetric padding. dlbench's canonical weights are
copied into it (every path and shape checked), both must give the same output and loss
(within what the precision's rounding explains: ``identity_tolerance``), and then each
measure is timed for both with the same timer (suites.stats.timer.measure with the TimerSettings
of ``--suite``, by default the device's default suite), jit, precision, NHWC batch on the
device and loss (mean softmax cross-entropy, in float32).

``--precision fp32`` is strict: HIGHEST on every conv and dot, float32 throughout.
``bf16`` is mixed precision as Flax writes it: every module's ``dtype=jnp.bfloat16`` with
``param_dtype`` float32 (DEFAULT precision), the float32 parameters cast at their point
of use, as the adapter's bf16 does; batch-norm statistics stay float32 in both.

Flax's gradient is its idiomatic training form: ``mutable=["batch_stats"]`` with the new
statistics as aux. Its train_step is the Flax examples' training loop: a ``TrainState``
with ``batch_stats`` whose ``apply_gradients`` runs ``optax.sgd`` at dlbench's rate and
momentum (models/optimizers.py), in one ``jax.jit`` that donates the state; dlbench's is
the adapter's (the same optax SGD, parameters and momentum donated). Each trains its own
copy of the weights, so forward and gradient keep reading the canonical ones.
Each pair is timed in A-B-B-A order, ``--rounds`` times, so drift favours neither, and
each side's figure is the median of its runs' medians. The ratio is dlbench / Flax;
the exit status is 1 when the outputs differ or, on a GPU, a ratio is outside ±tolerance
(on the CPU, a smoke run, timings on shared cores decide nothing), 2 when jax, flax or
optax is missing or the device is not there.

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
MEASURES = ("forward", "gradient", "train_step")


def import_frameworks():
    """jax, flax.linen and the adapter (which sets the GPU allocator's flags before the
    backend starts: adapters/jax/__init__.py)."""
    try:
        import flax
        import flax.linen as nn
        import jax
        import optax  # noqa: F401  (flax requires it; train_step uses it)

        from adapters.jax import JaxAdapter
    except ImportError as error:
        print(f"error: {error}. This comparison needs jax and flax installed "
              f"(pip install flax); nothing was timed.", file=sys.stderr)
        raise SystemExit(2) from None
    return JaxAdapter, jax, flax, nn


# The zoo's bottleneck ResNets this Flax model is written for: ResNet-50, and the tiny
# one (models/families/resnet.py resnet_tiny: two stages of widths 4 and 8 after an 8-channel
# stem, 10 classes) that the CPU smoke run compiles in seconds where ResNet-50 takes minutes.
FLAX_RESNETS = {"resnet50": {"stage_sizes": (3, 4, 6, 3), "num_filters": 64, "stem_filters": 64,
                             "num_classes": 1000},
                "resnet_tiny": {"stage_sizes": (1, 1), "num_filters": 4, "stem_filters": 8,
                                "num_classes": 10}}


def flax_resnet(nn, jnp, dtype, precision, name: str = "resnet50"):
    """ResNet-v1.5 as Flax's examples/imagenet/models.py writes it, with dlbench's
    module names (``layer1_0/conv1_bn`` for ``layer1.0.conv1.bn``). ``dtype`` is the
    compute dtype; parameters keep Flax's default ``param_dtype``, float32; ``name`` one
    of ``FLAX_RESNETS``."""

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
        stem_filters: int = 64

        @nn.compact
        def __call__(self, x, train: bool = True):
            conv = partial(nn.Conv, use_bias=False, dtype=dtype, precision=precision)
            norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                           epsilon=1e-5, dtype=dtype)
            x = conv(self.stem_filters, (7, 7), (2, 2), padding=((3, 3), (3, 3)),
                     name="conv1")(x)
            x = nn.relu(norm(name="conv1_bn")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
            for i, block_size in enumerate(self.stage_sizes):
                for j in range(block_size):
                    strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                    x = BottleneckResNetBlock(self.num_filters * 2 ** i, conv, norm, nn.relu,
                                              strides, name=f"layer{i + 1}_{j}")(x)
            x = jnp.mean(x, axis=(1, 2))
            return nn.Dense(self.num_classes, dtype=dtype, precision=precision,
                            name="fc")(x)

    return ResNet(**FLAX_RESNETS[name])


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
    """The Flax model's forward, gradient and training steps on dlbench's device arrays."""

    def __init__(self, model, variables, x, labels, jax, jnp):
        import optax
        from flax.training import train_state

        from models.optimizers import SGD

        def forward(variables, x):
            return model.apply(variables, x, train=False)

        def loss(params, batch_stats, x, labels):
            logits, updates = model.apply({"params": params, "batch_stats": batch_stats}, x,
                                          train=True, mutable=["batch_stats"])
            # The loss in float32 also under bf16 compute, as the adapter's (and as mixed
            # precision keeps it).
            log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
            return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1)), updates

        class TrainState(train_state.TrainState):   # Flax examples/imagenet/train.py's
            batch_stats: Any

        def train_step(state, x, labels):
            (value, updates), grads = jax.value_and_grad(loss, has_aux=True)(
                state.params, state.batch_stats, x, labels)
            return state.apply_gradients(grads=grads,
                                         batch_stats=updates["batch_stats"]), value

        forward_fn = jax.jit(forward)
        gradient_fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
        train_fn = jax.jit(train_step, donate_argnums=0)
        self.forward = lambda: forward_fn(variables, x)
        self.gradient = lambda: gradient_fn(variables["params"], variables["batch_stats"], x,
                                            labels)
        # The trained copy: device-side copies, since the step donates (deletes) them.
        copy = partial(jax.tree.map, lambda a: jnp.array(a, copy=True))
        self.state = TrainState.create(
            apply_fn=model.apply, params=copy(variables["params"]),
            tx=optax.sgd(SGD.learning_rate, momentum=SGD.momentum, nesterov=False),
            batch_stats=copy(variables["batch_stats"]))
        # The step counter as the int32 device array every later call returns: create's
        # Python 0 would have the second call compile the step again.
        self.state = self.state.replace(step=jax.device_put(jnp.zeros((), jnp.int32), x.device))

        def train():
            self.state, value = train_fn(self.state, x, labels)
            return value
        self.train_step = train


def identity_tolerance(model, batch: int, precision: str) -> tuple[float, float]:
    """(output, loss) tolerances of the check that both sides compute the same network.
    Each side is within models/error_bounds.py's bound of the float64 truth, the output as
    max error over the largest value (the normalisation of ``difference`` below), the loss
    relative: fp32 accumulation, 4 standard deviations of 2^-24·sqrt(ΣK) over the
    reductions on the way (ResNet-50's forward: 5.7e-5; the loss adds batch norm's N·H·W
    statistics, 1.3e-4 at batch 2), and for bf16 the rounding of both operands of every
    product layer and of its stored output, 2·2^-8·sqrt(L) for L = 54 layers (0.057 on
    top). By the triangle inequality two correct implementations lie within twice the
    bound of each other; a wrongly copied weight moves the output by O(1)."""
    from models.error_bounds import bounds

    limits = bounds(model, batch, precision)
    return 2 * limits.output, 2 * limits.loss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--model", default="resnet50", choices=sorted(FLAX_RESNETS),
                        help="resnet_tiny: the CPU smoke run's")
    parser.add_argument("--batches", default="16,128")
    parser.add_argument("--measures", default=",".join(MEASURES),
                        help=f"comma-separated, of {', '.join(MEASURES)}")
    parser.add_argument("--suite", help="whose timer settings to use (default: the "
                                        "device's default suite)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="largest allowed |dlbench / Flax - 1|")
    parser.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds per measure")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    measures = args.measures.split(",")
    if not set(measures) <= set(MEASURES):
        parser.error(f"--measures: unknown {sorted(set(measures) - set(MEASURES))}")
    JaxAdapter, jax, flax, nn = import_frameworks()
    import jax.numpy as jnp
    import numpy as np

    from adapters.base import CaseConfig, DeviceUnavailable, RunConfig
    from adapters.jax.adapter import PRECISIONS
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.measures import TRAIN_STEP
    from models.weights import canonical_weights
    from models.zoo import get_model
    from suites.harness.spec import load_suite, resolve_suite_path
    from suites.stats.timer import measure

    try:
        adapter = JaxAdapter(RunConfig(args.device, len(os.sched_getaffinity(0)), 1))
    except DeviceUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    suite = args.suite or DEFAULT_SUITE[args.device]
    settings = load_suite(resolve_suite_path(suite), load_registry()).timer
    env = adapter.environment()
    print(f"jax {env['framework_version']}, flax {flax.__version__}, optax "
          f"{env['optax_version']} on {env['gpu_model'] or 'CPU'}; {args.precision}; "
          f"timer of {suite}: {settings}")
    model = get_model(args.model)
    weights = canonical_weights(model)
    # The adapter's lax precision and compute dtype for this precision.
    precision, dtype, _ = PRECISIONS[args.precision]
    flax_model = flax_resnet(nn, jnp, dtype, precision, args.model)
    results, worst = [], 0.0
    for batch in (int(b) for b in args.batches.split(",")):
        prepared = adapter.prepare(model, weights, make_batch(model, batch),
                                   CaseConfig(args.precision))
        template = jax.eval_shape(partial(flax_model.init, train=False),
                                  jax.random.PRNGKey(0), prepared.x)
        theirs = FlaxSteps(flax_model, flax_variables(weights, template, adapter.device, jax, np),
                           prepared.x, prepared.labels, jax, jnp)
        ours_out = prepared.forward_output()       # (N, classes) logits
        theirs_out = np.asarray(theirs.forward(), dtype=np.float32)
        difference = float(np.abs(ours_out - theirs_out).max() / np.abs(theirs_out).max())
        losses = {"gradient": (prepared.loss_and_gradients()[0], float(theirs.gradient()[0][0]))}
        if TRAIN_STEP in measures:
            # The first training step's loss is the canonical network's, in training mode.
            losses[TRAIN_STEP] = (float(prepared.step(TRAIN_STEP)()), float(theirs.train_step()))
        output_tolerance, loss_tolerance = identity_tolerance(model, batch, args.precision)
        for name, (ours_loss, theirs_loss) in losses.items():
            if difference > output_tolerance or \
                    abs(ours_loss - theirs_loss) > loss_tolerance * abs(theirs_loss):
                print(f"error: the models differ (output {difference:.1e}, {name} loss "
                      f"{ours_loss} vs {theirs_loss}; allowed {output_tolerance:.1e} and "
                      f"{loss_tolerance:.1e} relative); timings would not compare the same "
                      f"network", file=sys.stderr)
                return 1
        for name in measures:
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
            print(f"{args.model} b{batch:<4} {args.precision} {name:<10} dlbench {ours_ms:9.3f} ms"
                  f"  flax {theirs_ms:9.3f} ms  ratio {ratio:.3f}  {verdict}  "
                  f"(output diff {difference:.1e})", flush=True)
            results.append({"model": args.model, "batch": batch, "precision": args.precision,
                            "measure": name, "dlbench_ms": float(ours_ms),
                            "flax_ms": float(theirs_ms), "ratio": ratio, "runs_ms": medians,
                            "max_rel_output_diff": difference, "losses": losses,
                            "device": env["gpu_model"] or "cpu", "suite": suite})
        del theirs
        prepared.close()
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "flax": flax.__version__,
                                        "results": results}, indent=1))
    if args.device == "cpu":
        return 0   # a smoke run: the outputs were checked above, timings are not judged
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
