"""dlbench's PyTorch adapter against torchvision's own models, side by side.

    python -m comparisons.torchvision_vs_dlbench --device gpu --batch 16 --out cmp.json
    python -m comparisons.torchvision_vs_dlbench --device cpu --batch 2 --models alexnet \
        --budget 0.05 --min-samples 2          # smoke (CI)

For resnet50, vgg16 and alexnet: build dlbench's model, copy its canonical weights into
the torchvision model of the same architecture (shapes checked parameter by parameter),
check both give the same output, then time forward and gradient for both with the same
timer, settings and input: fp32 strict (TF32 off), cuDNN autotune, inference mode for
forward, training mode with cross-entropy and a backward pass for gradient. Dropout is
replaced by identity in torchvision's classifiers, as dlbench (and convnet-benchmarks)
ignore it. The pair is timed twice in A-B-B-A order so drift does not favour either.
A ratio near 1.00 shows dlbench adds no overhead to what it measures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from adapters.base import CaseConfig, RunConfig
from adapters.torch import TorchAdapter
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
from suites.timer import TimerSettings, measure

MODELS = ("resnet50", "vgg16", "alexnet")


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


class Reference:
    """torchvision's model on the same device, input and labels as dlbench's."""

    def __init__(self, name: str, prepared, device: torch.device):
        self.model = torchvision_model(name).to(device)
        copy_weights(nn.ModuleList([prepared.frozen, prepared.body]), self.model)
        self.x, self.labels = prepared.x, prepared.inputs.labels

    def forward(self):
        self.model.eval()
        with torch.inference_mode():
            return self.model(self.x)

    def gradient_step(self):
        self.model.train()

        def step():
            self.model.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self.x), self.labels)
            loss.backward()
            return loss
        return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    parser.add_argument("--min-samples", type=int, default=20,
                        help="fewest samples per timing (CI's smoke run uses 2)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("error: torchvision is not installed in this environment", file=sys.stderr)
        return 2
    adapter = TorchAdapter(RunConfig(args.device, torch.get_num_threads(), 1))
    settings = TimerSettings(warmup=5, min_samples=args.min_samples, max_samples=400, rel_ci=0.005,
                             budget_s=args.budget)
    env = adapter.environment()
    print(f"torch {env['framework_version']} on {env['gpu_model'] or 'CPU'}, batch {args.batch}")
    results = []
    for name in args.models.split(","):
        model = get_model(name)
        prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, args.batch),
                                   CaseConfig())
        reference = Reference(name, prepared, adapter.device)
        ours_out = prepared.forward_output()
        theirs_out = reference.forward().float().cpu().numpy()
        difference = float(abs(ours_out - theirs_out).max() / (abs(theirs_out).max() + 1e-12))
        timings: dict[str, list[float]] = {}
        for measure_name in ("forward", "gradient"):
            ours = prepared.step(measure_name)
            theirs = reference.forward if measure_name == "forward" else reference.gradient_step()
            medians = {"dlbench": [], "torchvision": []}
            for label in ("dlbench", "torchvision", "torchvision", "dlbench"):
                if measure_name == "gradient":
                    (prepared.body if label == "dlbench" else reference.model).train()
                else:
                    (prepared.body if label == "dlbench" else reference.model).eval()
                step = ours if label == "dlbench" else theirs
                timing = measure(step, prepared.sync, settings)
                medians[label].append(timing.median_s * 1e3)
            timings[measure_name] = medians
            ours_ms = sum(medians["dlbench"]) / 2
            theirs_ms = sum(medians["torchvision"]) / 2
            ratio = ours_ms / theirs_ms
            results.append({"model": name, "measure": measure_name, "batch": args.batch,
                            "dlbench_ms": ours_ms, "torchvision_ms": theirs_ms, "ratio": ratio,
                            "max_rel_output_diff": difference, "device": env["gpu_model"] or "cpu",
                            "runs_ms": medians})
            verdict = "ok" if abs(ratio - 1) <= 0.05 else "OUTSIDE ±5%"
            print(f"{name:<9} {measure_name:<8} dlbench {ours_ms:9.3f} ms  torchvision "
                  f"{theirs_ms:9.3f} ms  ratio {ratio:.3f}  {verdict}  (output diff {difference:.1e})")
        prepared.close()
        del reference
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
