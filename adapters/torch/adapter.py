"""PyTorch adapter: eager execution with cuDNN autotune by default (the framework's
standard fast path), ``torch.compile``, cuDNN disabled and channels-last as variants."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from adapters.base import (
    Adapter,
    CaseConfig,
    DeviceUnavailable,
    Memory,
    Prepared,
    RunConfig,
    Unsupported,
)
from adapters.memory import peak_rss, reset_peak_rss
from adapters.torch.network import Lengths, build
from models.inputs import Batch
from models.ir import Model
from models.weights import Weights


def apply_precision(precision: str, on_gpu: bool) -> None:
    """fp32 is strict: TF32 tensor-core math off for matmuls and convolutions (PyTorch's
    default for convolutions is TF32 on, which alone made a 3.7× "framework gap")."""
    tf32 = precision == "tf32"
    if tf32 and not on_gpu:
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


class TorchPrepared(Prepared):
    def __init__(self, adapter: TorchAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.adapter = adapter
        self.device = adapter.device
        self.on_gpu = adapter.config.device == "gpu"
        self.model = model
        self.variant = variant
        frozen, body, self.params = build(model, weights)
        memory_format = torch.preserve_format
        if variant == "channels_last":
            if model.input.kind != "image":
                raise Unsupported("channels-last applies to 4-D image tensors only")
            memory_format = torch.channels_last
        self.frozen = frozen.to(self.device, memory_format=memory_format)
        self.body = body.to(self.device, memory_format=memory_format)
        # Module.to() keeps parameter identity, so the canonical map stays valid.
        self.run_frozen: Callable = self.frozen
        self.run_body: Callable = self.body
        if variant == "compile":
            self.run_frozen = torch.compile(self.frozen)
            self.run_body = torch.compile(self.body)
        self.host_x = torch.from_numpy(batch.x)
        x = self.host_x.long() if model.input.kind == "tokens" else self.host_x
        self.x = x.to(self.device, memory_format=memory_format) if x.dim() == 4 \
            else x.to(self.device)
        self.labels = None if batch.labels is None \
            else torch.from_numpy(batch.labels).long().to(self.device)
        self.lengths = None if batch.lengths is None \
            else Lengths.of(batch.lengths, batch.x.shape[1], self.device)
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) \
            if case.precision == "bf16" else contextlib.nullcontext

    # --- the computations ---------------------------------------------------------
    def _features(self) -> torch.Tensor:
        with torch.no_grad():
            return self.run_frozen(self.x, self.lengths) if self.model.frozen else self.x

    def _loss(self, out: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        kind = self.model.loss.kind
        if kind == "softmax_xent":
            return F.cross_entropy(out.float(), self.labels)
        if kind == "mse_reconstruction":
            return F.mse_loss(out.float(), features.float())
        return out.float().sum()

    def _forward(self) -> torch.Tensor:
        with torch.inference_mode(), self.autocast():
            return self.run_body(self._features(), self.lengths)

    def _gradient(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with self.autocast():
            features = self._features()
            loss = self._loss(self.run_body(features, self.lengths), features)
        return loss, torch.autograd.grad(loss, list(self.params.values()))

    def _single_layer_graph(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward once, keeping the graph, so grad-input and grad-weight time only their
        own backward kernels (convnet-benchmarks' updateGradInput / accGradParameters)."""
        if len(self.model.body) != 1 or self.model.frozen:
            raise Unsupported("grad_input and grad_weight are single-layer measures")
        if self.variant == "compile":
            raise Unsupported("a compiled graph computes all gradients together")
        x = self.x.detach().requires_grad_(True)
        with self.autocast():
            out = self.body(x)
        return x, out

    def step(self, measure: str) -> Callable[[], Any]:
        if measure == "forward":
            self.body.eval()
            return self._forward
        if measure == "gradient":
            self.body.train()
            return lambda: self._gradient()[1]
        if measure in ("grad_input", "grad_weight"):
            self.body.train()
            x, out = self._single_layer_graph()
            grad_out = torch.ones_like(out)  # the gradient of the "sum" loss
            targets = [x] if measure == "grad_input" else list(self.params.values())
            return lambda: torch.autograd.grad(out, targets, grad_out, retain_graph=True)
        if measure == "transfer":
            if not self.on_gpu:
                raise Unsupported("host and device are the same on cpu")
            # A pageable host buffer, as a framework's plain feed uses (Li et al. 2016, Fig. 7).
            return lambda: self.host_x.to(self.device)
        raise Unsupported(f"unknown measure '{measure}'")

    def sync(self, handle: Any) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def reset_peak_memory(self) -> None:
        if self.on_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()

    def peak_memory(self) -> Memory:
        if self.on_gpu:
            return Memory(int(torch.cuda.max_memory_allocated(self.device)), "allocator")
        return peak_rss()

    def forward_output(self) -> np.ndarray:
        self.body.eval()
        return self._forward().float().cpu().numpy()

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        self.body.train()
        loss, grads = self._gradient()
        return float(loss.detach()), {name: g.float().cpu().numpy()
                                      for name, g in zip(self.params, grads)}

    def close(self) -> None:
        del self.frozen, self.body, self.run_frozen, self.run_body, self.params, self.x
        if self.on_gpu:
            torch.cuda.empty_cache()


class TorchAdapter(Adapter):
    name = "torch"
    variants = {
        "eager": "eager; cuDNN autotune (cudnn.benchmark) on GPU",
        "compile": "torch.compile (inductor, default mode)",
        "no_cudnn": "eager with cuDNN disabled (cnn-benchmarks' 'None' rows)",
        "channels_last": "eager, NHWC memory format (channels_last)",
    }

    def __init__(self, config: RunConfig):
        super().__init__(config)
        # Thread counts must be set before the first parallel operation.
        torch.set_num_threads(config.threads)
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(config.interop_threads)
        if config.device == "gpu":
            if not torch.cuda.is_available():
                raise DeviceUnavailable(f"torch {torch.__version__} sees no CUDA GPU")
            self.device = torch.device("cuda", 0)
        else:
            self.device = torch.device("cpu")

    def environment(self) -> dict[str, Any]:
        on_gpu = self.config.device == "gpu"
        return {
            "framework_version": torch.__version__,
            "gpu_model": torch.cuda.get_device_name(self.device) if on_gpu else None,
            "cuda": torch.version.cuda if on_gpu else None,
            "cudnn": str(torch.backends.cudnn.version()) if on_gpu else None,
        }

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        on_gpu = self.config.device == "gpu"
        apply_precision(case.precision, on_gpu)
        if variant == "no_cudnn" and not on_gpu:
            raise Unsupported("cuDNN exists on GPU only")
        torch.backends.cudnn.enabled = variant != "no_cudnn"
        torch.backends.cudnn.benchmark = on_gpu
        return TorchPrepared(self, model, weights, batch, case, variant)

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
            return True
        text = str(error)
        return isinstance(error, RuntimeError) and (
            "out of memory" in text or "can't allocate memory" in text)
