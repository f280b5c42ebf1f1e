"""dlbench's PyTorch adapter against torchvision's own models, side by side.

    python -m comparisons.torchvision_vs_dlbench --device gpu --batch 16 --out cmp.json
    python -m comparisons.torchvision_vs_dlbench --device gpu --models resnet50 --batch 256 \
        --precision bf16 --compile --channels-last      # the practice-gpu suite's settings
    python -m comparisons.torchvision_vs_dlbench --device cpu --batch 2 --models alexnet \
        --budget 0.05 --min-samples 2          # smoke (CI)

For resnet50, vgg16 and alexnet: build dlbench's model, copy its canonical weights into
the torchvision model of the same architecture (shapes checked parameter by parameter),
check both give the same output, then time forward, gradient and train_step for both with
the same timer, settings and input: cuDNN autotune, inference mode for forward, training
mode with cross-entropy and a backward pass for gradient, and for train_step the same
plus ``torch.optim.SGD`` with dlbench's rate and momentum (models/optimizers.py) in the
idiomatic loop (zero_grad(set_to_none=True), forward and loss, backward, step): dlbench
trains a copy of its network, torchvision's model trains itself (train_step is timed
last). ``--precision`` fp32 is strict (TF32 off); bf16 runs forward and loss under
``torch.autocast(dtype=torch.bfloat16)`` on both sides, PyTorch's mixed precision (fp32
parameters and update). ``--compile`` wraps both models in ``torch.compile`` (dlbench's
compile variants; the optimizer step stays eager on both sides), ``--channels-last``
puts both models and the batch in NHWC (dlbench's channels_last variants). Dropout is
replaced by identity in torchvision's classifiers, as dlbench (and convnet-benchmarks)
ignore it. With ``--compile`` each side first runs a couple of untimed iterations (the
compilation). The pair is timed twice in A-B-B-A order so drift does not favour either.
A ratio near 1.00 (target ±5%) shows dlbench adds no overhead to what it measures.

Identity is checked, not assumed: both outputs must be in the precision's dtype and agree
within its OUTPUT_TOLERANCE (derived below); a pair that does not is reported as
differing and the script exits with status 1 (2 where torchvision is missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from adapters.base import CaseConfig, RunConfig
from adapters.torch import TorchAdapter
from models.inputs import make_batch
from models.measures import TRAIN_STEP
from models.optimizers import SGD
from models.weights import canonical_weights
from models.zoo import get_model
from suites.stats.timer import TimerSettings, measure

MODELS = ("resnet50", "vgg16", "alexnet")
MEASURES = ("forward", "gradient", TRAIN_STEP)
TOLERANCE = 0.05   # the target: dlbench within ±5% of torchvision
# With --compile each side's first call of a measure compiles it, untimed: the timer would
# count the compilation against its budget and cut the warm-up short.
UNTIMED_RUNS = 2
# Same network, same weights, same input: the outputs differ only by rounding in another
# summation order (or convolution algorithm). fp32 (u = 2^-24 ≈ 6e-8): a dot product of K
# terms carries a relative error near sqrt(K)·u with random-sign rounding; ResNet-50's
# longest reductions are K = 3·3·512 = 4608, ~4e-6 per layer, grown about sqrt(54)-fold
# over its 54 layers: ~3e-5 of the output scale; Winograd and FFT algorithms (cuDNN's
# autotune may pick them) add up to ten times that, 3e-4; 1e-3 keeps a margin of three.
# bf16 under autocast: products are taken of bf16-rounded operands, which both sides round
# alike, and summed in fp32, so what can differ is each layer's output rounded to bf16
# (u = 2^-8 ≈ 3.9e-3), where one side's fp32 sum falls across a rounding boundary from the
# other's or where torch.compile fuses a rounding away: up to u per layer, ~sqrt(54)·u ≈
# 2.9e-2 over ResNet-50; a margin of three gives 0.1. A wrong weight differs by order 1;
# that both sides computed in bf16 at all is checked by the outputs' dtype, not the bound.
OUTPUT_TOLERANCE = {"fp32": 1e-3, "bf16": 3 * math.sqrt(54) * 2.0 ** -8}
OUTPUT_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def torchvision_model(name: str) -> nn.Module:
    import torchvision

    model = getattr(torchvision.models, name)(weights=None)
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(module, child_name, nn.Identity())
    return model


def copy_weights(source: nn.Module, target: nn.Module) -> None:
    """Copy parameters and buffers in registration order, insisting on equal shapes."""
    pairs = [(list(source.parameters()), list(target.parameters())),
             ([b for b in source.buffers() if b.dtype.is_floating_point],
              [b for b in target.buffers() if b.dtype.is_floating_point])]
    with torch.no_grad():
        for ours, theirs in pairs:
            if len(ours) != len(theirs):
                raise SystemExit(f"different tensor counts: {len(ours)} vs {len(theirs)}")
            for a, b in zip(ours, theirs):
                if a.shape != b.shape:
                    raise SystemExit(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
                b.copy_(a)


def variant(compiled: bool, channels_last: bool) -> str:
    """dlbench's torch variant for the flags."""
    return {(False, False): "eager", (True, False): "compile",
            (False, True): "channels_last", (True, True): "compile_channels_last"}[
        (compiled, channels_last)]


class Reference:
    """torchvision's model on the same device, input and labels as dlbench's, written as
    a PyTorch user would: the model (NHWC with ``--channels-last``), ``torch.compile``d
    with ``--compile``, autocast around forward and loss in bf16."""

    def __init__(self, name: str, prepared, device: torch.device, precision: str,
                 compiled: bool, channels_last: bool):
        memory_format = torch.channels_last if channels_last else torch.preserve_format
        self.model = torchvision_model(name).to(device, memory_format=memory_format)
        copy_weights(nn.ModuleList([prepared.frozen, prepared.body]), self.model)
        self.run = torch.compile(self.model) if compiled else self.model
        # The adapter placed the batch in the variant's memory format.
        self.x, self.labels = prepared.x, prepared.inputs.labels
        self.autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
            if precision == "bf16" else contextlib.nullcontext

    def forward(self):
        self.model.eval()
        with torch.inference_mode(), self.autocast():
            return self.run(self.x)

    def gradient_step(self):
        self.model.train()

        def step():
            self.model.zero_grad(set_to_none=True)
            with self.autocast():
                loss = F.cross_entropy(self.run(self.x), self.labels)
            loss.backward()
            return loss
        return step

    def train_step(self):
        self.model.train()
        optimizer = torch.optim.SGD(self.model.parameters(), lr=SGD.learning_rate,
                                    momentum=SGD.momentum)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                loss = F.cross_entropy(self.run(self.x), self.labels)
            loss.backward()
            optimizer.step()
            return loss
        return step

    def step(self, measure_name: str):
        return {"forward": lambda: self.forward, "gradient": self.gradient_step,
                TRAIN_STEP: self.train_step}[measure_name]()


def identity(prepared, reference: Reference, precision: str) -> tuple[float, bool]:
    """The largest output difference relative to the output's scale, and whether it and
    both outputs' dtypes are what the precision allows."""
    ours, theirs = prepared.step("forward")(), reference.forward()
    wanted = OUTPUT_DTYPE[precision]
    ours_f, theirs_f = ours.float().cpu(), theirs.float().cpu()
    difference = float((ours_f - theirs_f).abs().max() / (theirs_f.abs().max() + 1e-12))
    same = ours.dtype == theirs.dtype == wanted and difference <= OUTPUT_TOLERANCE[precision]
    return difference, same


def set_mode(prepared, reference: Reference, label: str, measure_name: str) -> None:
    """Each side's network in the measure's mode (the other measures' calls switch it);
    dlbench's training copy is always in training mode."""
    training = measure_name == "gradient"
    if label == "dlbench":
        prepared.body.train(training)
    else:
        reference.model.train(training or measure_name == TRAIN_STEP)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--measures", default=",".join(MEASURES),
                        help=f"some of {', '.join(MEASURES)}")
    parser.add_argument("--precision", default="fp32", choices=tuple(OUTPUT_TOLERANCE))
    parser.add_argument("--compile", action="store_true", help="torch.compile on both sides")
    parser.add_argument("--channels-last", action="store_true",
                        help="NHWC models and batch on both sides")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    parser.add_argument("--min-samples", type=int, default=20,
                        help="fewest samples per timing (CI's smoke run uses 2)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    measures = args.measures.split(",")
    if unknown := set(measures) - set(MEASURES):
        parser.error(f"unknown measures {sorted(unknown)}")
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("error: torchvision is not installed in this environment", file=sys.stderr)
        return 2
    adapter = TorchAdapter(RunConfig(args.device, torch.get_num_threads(), 1))
    settings = TimerSettings(warmup=5, min_samples=args.min_samples, max_samples=400, rel_ci=0.005,
                             budget_s=args.budget)
    case = CaseConfig(args.precision, variant(args.compile, args.channels_last))
    env = adapter.environment()
    print(f"torch {env['framework_version']} on {env['gpu_model'] or 'CPU'}, batch {args.batch}, "
          f"{args.precision}, {adapter.describe(case)}")
    results, differing = [], []
    # train_step last: torchvision's model trains itself, and no other measure may see it.
    ordered = [m for m in MEASURES if m in measures]
    for name in args.models.split(","):
        model = get_model(name)
        prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, args.batch),
                                   case)
        reference = Reference(name, prepared, adapter.device, args.precision, args.compile,
                              args.channels_last)
        difference, same = identity(prepared, reference, args.precision)
        if not same:
            differing.append(name)
            print(f"{name}: outputs DIFFER ({difference:.1e}, tolerance "
                  f"{OUTPUT_TOLERANCE[args.precision]:.1e}, dtype {OUTPUT_DTYPE[args.precision]})")
        for measure_name in ordered:
            steps = {"dlbench": prepared.step(measure_name),
                     "torchvision": reference.step(measure_name)}
            for label, step in steps.items() if args.compile else ():
                set_mode(prepared, reference, label, measure_name)
                for _ in range(UNTIMED_RUNS):
                    prepared.sync(step())
            medians = {"dlbench": [], "torchvision": []}
            for label in ("dlbench", "torchvision", "torchvision", "dlbench"):
                set_mode(prepared, reference, label, measure_name)
                timing = measure(steps[label], prepared.sync, settings)
                medians[label].append(timing.median_s * 1e3)
            ours_ms = sum(medians["dlbench"]) / 2
            theirs_ms = sum(medians["torchvision"]) / 2
            ratio = ours_ms / theirs_ms
            results.append({"model": name, "measure": measure_name, "batch": args.batch,
                            "precision": args.precision, "variant": case.variant,
                            "dlbench_ms": ours_ms, "torchvision_ms": theirs_ms, "ratio": ratio,
                            "max_rel_output_diff": difference, "same_output": same,
                            "device": env["gpu_model"] or "cpu", "runs_ms": medians})
            verdict = "ok" if abs(ratio - 1) <= TOLERANCE else f"OUTSIDE ±{TOLERANCE:.0%}"
            print(f"{name:<9} {measure_name:<10} dlbench {ours_ms:9.3f} ms  torchvision "
                  f"{theirs_ms:9.3f} ms  ratio {ratio:.3f}  {verdict}  "
                  f"(output diff {difference:.1e})", flush=True)
        prepared.close()
        del reference
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=1))
    if differing:
        print(f"error: outputs differ for {', '.join(differing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
