"""PyTorch adapter: eager execution with cuDNN autotune by default (the framework's
standard fast path), ``torch.compile``, cuDNN disabled, channels-last and channels-last
compiled as variants, and ``sdpa_*`` variants that force scaled_dot_product_attention's
backend. ``train_step`` trains a deep copy of the body with the network's declared
optimizer (models/optimizers.py) as ``torch.optim.SGD`` or ``torch.optim.AdamW``. A model
with self-attention records in each row which SDPA backend ran (``attention``)."""

from __future__ import annotations

import contextlib
import copy
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from adapters.base import (
    Adapter,
    CaseConfig,
    DeviceClock,
    DeviceUnavailable,
    Generator,
    Memory,
    Prepared,
    Profile,
    RunConfig,
    Unsupported,
    has_attention,
    require_device_memory,
)
from adapters.memory import peak_rss, reset_peak_rss
from adapters.summary import GradientSummary, OutputSummary, examples_per_chunk
from adapters.torch.network import DecodeStep, KVCache, Lengths, SelfAttention, build, cached_pass
from adapters.torch.profile import profile_steps
from models.families.transformer import not_a_decoder
from models.inputs import Batch, head
from models.ir import Model
from models.optimizers import AdamW, Optimizer, SGDMomentum, optimizer_for
from models.weights import Weights
from suites.instruments.profiling import WARMUP_RUNS

# torch.compile(mode="reduce-overhead"): inductor's kernels replayed as CUDA graphs through
# CUDAGraph Trees (torch.compiler_cudagraph_trees docs). Each replay copies the call's
# inputs into the graph's own input buffers (torch/_inductor/cudagraph_trees.py,
# CUDAGraphNode._copy_inputs_and_remove_from_src, over its non-static inputs: parameters
# keep their addresses), so freshly placed serving inputs need no static buffer of ours and
# cause no re-recording; a graph is recorded per input shape after warm-up calls, and a
# replay overwrites the previous one's outputs, which every hook here has copied or reduced
# before its next call. Inference only: its gradient hooks are unsupported.
REDUCE_OVERHEAD = "compile_reduce_overhead"
COMPILED = ("compile", "compile_channels_last", REDUCE_OVERHEAD)
CHANNELS_LAST = ("channels_last", "compile_channels_last")
# Variants that force F.scaled_dot_product_attention's backend (the others leave PyTorch's
# choice): the variant's name → the backend, set through torch.backends.cuda's
# enable_*_sdp flags, which the CPU dispatcher reads too (torch 2.13,
# aten/src/ATen/native/transformers/sdp_utils_cpp.cpp), as torch.nn.attention.sdpa_kernel
# sets them for a block; process-wide here, as the precision flags are, so that a compiled
# graph traced later sees them too.
SDPA_VARIANTS = {"sdpa_math": "math", "sdpa_flash": "flash", "sdpa_efficient": "efficient",
                 "sdpa_cudnn": "cudnn"}
SDPA_FLAGS = {"math": (torch.backends.cuda.enable_math_sdp, torch.backends.cuda.math_sdp_enabled),
              "flash": (torch.backends.cuda.enable_flash_sdp,
                        torch.backends.cuda.flash_sdp_enabled),
              "efficient": (torch.backends.cuda.enable_mem_efficient_sdp,
                            torch.backends.cuda.mem_efficient_sdp_enabled),
              "cudnn": (torch.backends.cuda.enable_cudnn_sdp,
                        torch.backends.cuda.cudnn_sdp_enabled)}
SDPA_DEFAULTS = {name: enabled() for name, (_, enabled) in SDPA_FLAGS.items()}
# PyTorch has no efficient (xFormers) or cuDNN attention kernel on a CPU; its CPU flash
# kernel (_scaled_dot_product_flash_attention_for_cpu) takes fp32 and bf16.
SDPA_GPU_ONLY = ("efficient", "cudnn")
# The aten op each backend dispatches to, as torch.profiler names it (torch 2.13): the
# record of which one ran. The longest names first: "..._flash_attention_for_cpu" before
# "..._flash_attention".
SDPA_OPS = (("aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
            ("aten::_scaled_dot_product_flash_attention", "flash"),
            ("aten::_scaled_dot_product_efficient_attention", "efficient"),
            ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
            ("aten::_scaled_dot_product_fused_attention_overrideable", "overrideable"),
            ("aten::_scaled_dot_product_attention_math", "math"))
# torch's RuntimeError when the forced backend cannot run the case (its dtype, mask or head
# size): "No available kernel. Aborting execution." on CUDA, "No viable backend ..." on CPU.
SDPA_REFUSED = ("No available kernel", "No viable backend")


def graph_trees_any_thread(compiled: Callable) -> Callable:
    """``compiled`` (mode="reduce-overhead") called from any thread with the tree manager
    of the thread that prepared it.

    CUDAGraph Trees keep their tree managers (one per device) in a ``threading.local``
    (torch/_inductor/cudagraph_trees.py, ``local.tree_manager_containers`` and
    ``tree_manager_locks``); autograd's threads get the same objects through the C++ TLS
    stash the module sets up, a plain thread does not: torch 2.13's ``get_obj`` gives it
    empty ones of its own (a tree manager that records every graph again), earlier
    versions fail a bare ``assert``. LoadGen calls the SUT from its issue thread and the
    Server batcher from a thread of its own, new for each search run, while the worker
    compiled, recorded and warmed up on its main thread (prepare runs there). So the main
    thread's two objects, taken here, are given to each calling thread that lacks them:
    every call then replays the graphs the warm-up recorded. Serving calls never overlap
    (one LoadGen or batcher thread at a time)."""
    from torch._inductor import cudagraph_trees as trees
    containers = trees.get_obj(trees.local, "tree_manager_containers")
    locks = trees.get_obj(trees.local, "tree_manager_locks")

    def call(*args: Any) -> Any:
        if not hasattr(trees.local, "tree_manager_containers"):
            trees.local.tree_manager_containers = containers
            trees.local.tree_manager_locks = locks
        return compiled(*args)
    return call


def apply_sdpa(backend: str | None) -> None:
    """Only ``backend`` enabled, or PyTorch's defaults where it is None."""
    for name, (enable, _) in SDPA_FLAGS.items():
        enable(name == backend if backend else SDPA_DEFAULTS[name])


def sdpa_ops(events) -> list[str]:
    """The SDPA backends among profiler events' names, each with its aten op, in order."""
    found = []
    for event in events:
        for op, backend in SDPA_OPS:
            if event == op:
                found.append(f"{backend} ({op})")
                break
    return list(dict.fromkeys(found))


def apply_precision(precision: str, on_gpu: bool) -> None:
    """fp32 is strict: TF32 tensor-core math off for matmuls and convolutions (PyTorch's
    default for convolutions is TF32 on, which alone made a 3.7× "framework gap")."""
    tf32 = precision == "tf32"
    if tf32 and not on_gpu:
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


class CudaEventClock(DeviceClock):
    """A DeviceClock with CUDA events on the current stream. ``hold`` queues
    ``torch.cuda._sleep`` (a kernel that spins for a number of GPU cycles, calibrated
    once against the events) so the block's launches queue up behind it and the events
    time the kernels back to back, without the host's launch gaps (nvbench's blocking
    kernel). Without ``_sleep`` the events span the block, launch gaps included."""

    HOLD_LIMIT_S = 1.0

    def __init__(self, device: torch.device):
        self.device = device
        self.begin = torch.cuda.Event(enable_timing=True)
        self.finish = torch.cuda.Event(enable_timing=True)
        self.can_hold = hasattr(torch.cuda, "_sleep")
        self.kind = ("CUDA events, launches queued behind a spin kernel" if self.can_hold
                     else "CUDA events around the block (launch gaps included)")
        self.cycles_per_s: float | None = None

    def _calibrate(self) -> float:
        cycles = 5_000_000
        torch.cuda.synchronize(self.device)
        self.begin.record()
        torch.cuda._sleep(cycles)
        self.finish.record()
        self.finish.synchronize()
        return cycles / max(self.begin.elapsed_time(self.finish) / 1e3, 1e-6)

    def hold(self, seconds: float) -> None:
        if not self.can_hold:
            return
        if self.cycles_per_s is None:
            self.cycles_per_s = self._calibrate()
        torch.cuda._sleep(int(min(seconds, self.HOLD_LIMIT_S) * self.cycles_per_s))

    def start(self) -> None:
        self.begin.record()

    def end(self) -> None:
        self.finish.record()

    def elapsed(self) -> float | None:
        self.finish.synchronize()
        return self.begin.elapsed_time(self.finish) / 1e3


@dataclass(frozen=True)
class Inputs:
    """One batch on the device."""

    x: torch.Tensor
    labels: torch.Tensor | None
    lengths: Lengths | None


@dataclass(frozen=True)
class Training:
    """What ``train_step`` trains: a deep copy of the body, its loss function (features,
    lengths, labels -> the loss: the copy's forward and the model's loss, compiled together
    in the compiled variants), the copy's parameters by canonical name, and its own
    optimizer."""

    body: nn.Module
    loss: Callable[..., torch.Tensor]
    params: dict[str, nn.Parameter]
    optimizer: torch.optim.Optimizer


def make_optimizer(declared: Optimizer,
                   params: list[nn.Parameter]) -> tuple[torch.optim.Optimizer, str]:
    """PyTorch's own optimizer for the declared one, and its description for the row.

    The default implementation of torch.optim: foreach (multi-tensor kernels) on CUDA, a
    for-loop of single-tensor updates on the CPU; both compute the update in the
    parameters' dtype (float32: bf16 autocast leaves parameters and gradients float32).
    The torch.optim docs make foreach the default on CUDA and leave fused=True opt-in
    ("Since the fused implementation is relatively new, we want to give it sufficient
    bake-in time"); torchvision's reference training script
    (references/classification/train.py) and Hugging Face's Trainer set neither.

    ``torch.optim.AdamW`` (torch 2.13: ``Adam`` with ``decoupled_weight_decay=True``)
    computes w <- w*(1 - lr*wd), then the Adam step w <- w - lr*m_hat/(sqrt(v_hat) + eps)
    (torch/optim/adam.py, _single_tensor_adam and _multi_tensor_adam: eps added after the
    bias correction of sqrt(v)), as models/optimizers.py's ``AdamW``. One parameter group:
    every trainable parameter decays."""
    implementation = "foreach" if params and params[0].is_cuda else "for-loop"
    if isinstance(declared, SGDMomentum):
        optimizer = torch.optim.SGD(params, lr=declared.learning_rate,
                                    momentum=declared.momentum)
        return optimizer, f"{declared.describe()}: torch.optim.SGD, {implementation}"
    if isinstance(declared, AdamW):
        optimizer = torch.optim.AdamW(params, lr=declared.learning_rate,
                                      betas=(declared.beta1, declared.beta2),
                                      eps=declared.eps, weight_decay=declared.weight_decay)
        return optimizer, f"{declared.describe()}: torch.optim.AdamW, {implementation}"
    raise Unsupported(f"no PyTorch optimizer for {declared!r}")


class TorchGenerator:
    """Greedy decoding with a preallocated key/value cache (adapters.base.Generator): the
    body's own modules run over the new steps only (network.cached_pass), in evaluation
    mode under the case's precision. The cache holds ``max_length`` positions in the dtype
    attention computes in (bf16 under bf16 autocast). In the compiled variants the prefill
    and the decode step are each one ``torch.compile``d function of fixed shapes (the
    positions are a device tensor, never a Python int the graph would specialise on), so
    each compiles once. ``compile_reduce_overhead`` replays both as CUDA graphs: the cache,
    written in place by every step, is marked a static input (its address fixed, as Hugging
    Face's StaticCache marks its own), since CUDAGraph Trees replay in-place writes only
    to static inputs (torch/_inductor/cudagraph_utils.py, ``check_for_mutation``). Where
    inductor would still skip the graphs, its first calls raise (``cudagraph_or_error``)
    and the case is ``Unsupported`` with inductor's reason, never a row of plain
    ``torch.compile`` under this variant's name."""

    # Calls of each pass checked for skipped graphs: inductor decides at the compile (the
    # first call) and CUDAGraph Trees check input mutation when they record (a later one).
    GRAPH_CHECKED_CALLS = 3

    def __init__(self, prepared: TorchPrepared, max_length: int):
        self.prepared = prepared
        self.device = prepared.device
        self.capacity = max_length
        self.body = prepared.body.eval()
        dtype = torch.bfloat16 if prepared.case.precision == "bf16" else torch.float32
        self.caches = {
            m: KVCache(*(torch.zeros(1, m.heads, max_length, m.out.in_features // m.heads,
                                     dtype=dtype, device=self.device) for _ in range(2)))
            for m in self.body.modules() if isinstance(m, SelfAttention)}
        self.arange = torch.arange(max_length, device=self.device)
        self.length = 0
        self.logits: torch.Tensor | None = None
        run = self._pass
        self.graphs = prepared.variant == REDUCE_OVERHEAD
        if self.graphs:
            for cache in self.caches.values():
                torch._dynamo.mark_static_address(cache.keys)
                torch._dynamo.mark_static_address(cache.values)
            torch._dynamo.mark_static_address(self.arange)
        if prepared.variant in COMPILED:
            mode = "reduce-overhead" if self.graphs else None
            self._prefill_pass = torch.compile(run, dynamic=False, mode=mode)
            self._decode_pass = torch.compile(run, dynamic=False, mode=mode)
            if self.graphs:
                self._prefill_pass = graph_trees_any_thread(self._prefill_pass)
                self._decode_pass = graph_trees_any_thread(self._decode_pass)
        else:
            self._prefill_pass = self._decode_pass = run
        self.calls = {id(self._prefill_pass): 0, id(self._decode_pass): 0}

    def _pass(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of the last step and its argmax, both on the device."""
        step = DecodeStep(positions, positions[:, None] >= self.arange[None, :])
        logits = cached_pass(self.body, tokens, self.caches, step)[0, -1]
        return logits, logits.argmax()

    def _run(self, run, tokens: torch.Tensor) -> int:
        steps = tokens.shape[1]
        if self.length + steps > self.capacity:
            raise ValueError(f"position {self.length + steps} beyond the cache's {self.capacity}")
        positions = self.arange[self.length:self.length + steps]
        with torch.inference_mode(), self.prepared.autocast():
            if self.graphs and self.calls[id(run)] < self.GRAPH_CHECKED_CALLS:
                self.calls[id(run)] += 1
                self.logits, token = self._graphed_or_unsupported(run, tokens, positions)
            else:
                self.logits, token = run(tokens, positions)
        self.length += steps
        return int(token)   # the copy to the host waits for the device

    @staticmethod
    def _graphed_or_unsupported(run, tokens: torch.Tensor, positions: torch.Tensor):
        from torch._inductor import config
        try:
            with config.patch({"triton.cudagraph_or_error": True}):
                return run(tokens, positions)
        except RuntimeError as error:
            if "cudagraph" not in str(error).lower():
                raise
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            first = next((line for line in lines if "cudagraph" in line.lower()), lines[0])
            raise Unsupported(f"{REDUCE_OVERHEAD}: inductor would run generation without "
                              f"CUDA graphs ({first})") from None

    def prefill(self, prompt: np.ndarray) -> int:
        self.length = 0
        return self._run(self._prefill_pass, torch.from_numpy(
            np.asarray(prompt, dtype=np.int64)[None]).to(self.device))

    def decode(self, token: int) -> int:
        return self._run(self._decode_pass, torch.tensor([[token]], device=self.device))

    def last_logits(self) -> np.ndarray:
        return self.logits.double().cpu().numpy()


class TorchPrepared(Prepared):
    def __init__(self, adapter: TorchAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.adapter = adapter
        self.device = adapter.device
        self.on_gpu = adapter.config.device == "gpu"
        self.model = model
        self.variant = variant
        self.case = case
        frozen, body, self.params = build(model, weights, self.device)
        memory_format = torch.preserve_format
        if variant in CHANNELS_LAST:
            if model.input.kind != "image":
                raise Unsupported("channels-last applies to 4-D image tensors only")
            memory_format = torch.channels_last
        self.frozen = frozen.to(self.device, memory_format=memory_format)
        self.body = body.to(self.device, memory_format=memory_format)
        # Module.to() keeps parameter identity, so the canonical map stays valid.
        self.run_frozen: Callable = self.frozen
        self.run_body: Callable = self.body
        if variant in COMPILED:
            mode = "reduce-overhead" if variant == REDUCE_OVERHEAD else None
            # dynamic=False: each input shape its own static program, as the first compile
            # is. By default a second shape seen by the same code (a Server's other batch
            # sizes) is compiled for dynamic shapes, serving every size after it from one
            # symbolic-batch program that no row asked for.
            self.run_frozen = torch.compile(self.frozen, mode=mode, dynamic=False)
            self.run_body = torch.compile(self.body, mode=mode, dynamic=False)
            if variant == REDUCE_OVERHEAD:
                self.run_frozen = graph_trees_any_thread(self.run_frozen)
                self.run_body = graph_trees_any_thread(self.run_body)
        self.memory_format = memory_format
        self.host_x = torch.from_numpy(batch.x)
        self.pinned_x: torch.Tensor | None = None   # made on first use (transfer_pinned)
        self.inputs = self._place(batch)
        self.x = self.inputs.x
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) \
            if case.precision == "bf16" else contextlib.nullcontext
        self.train_copy: Training | None = None   # made by the first train_step
        if has_attention(model):
            self.extra["attention"] = self._attention_backend(batch)

    def _attention_backend(self, batch: Batch) -> str:
        """Which backend scaled_dot_product_attention dispatched to: one profiled forward of
        the batch's first example through the eager body under the case's precision, the
        aten op it called named (SDPA_OPS). A compiled variant's graph calls the op torch
        chose when tracing, under the same flags. Where a forced backend cannot run the
        case, torch's refusal becomes the job's ``Unsupported``."""
        inputs = self._place(head(batch, 1))
        try:
            with (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                  as prof, torch.inference_mode(), self.autocast()):
                x = self.frozen(inputs.x, inputs.lengths) if self.model.frozen else inputs.x
                self.body(x, inputs.lengths)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            if self.variant in SDPA_VARIANTS and any(t in first for t in SDPA_REFUSED):
                raise Unsupported(f"{self.variant}: PyTorch's {SDPA_VARIANTS[self.variant]} "
                                  f"attention cannot run this case ({first})") from None
            raise
        found = sdpa_ops(event.name for event in prof.events())
        return "; ".join(found) if found else "no SDPA op recorded by torch.profiler"

    def _place(self, batch: Batch) -> Inputs:
        host_x = torch.from_numpy(batch.x)
        x = host_x.long() if self.model.input.kind == "tokens" else host_x
        x = x.to(self.device, memory_format=self.memory_format) if x.dim() == 4 \
            else x.to(self.device)
        labels = None if batch.labels is None \
            else torch.from_numpy(batch.labels).long().to(self.device)
        lengths = None if batch.lengths is None \
            else Lengths.of(batch.lengths, batch.x.shape[1], self.device)
        return Inputs(x, labels, lengths)

    # --- the computations ---------------------------------------------------------
    def _features(self, inputs: Inputs) -> torch.Tensor:
        with torch.no_grad():
            return self.run_frozen(inputs.x, inputs.lengths) if self.model.frozen else inputs.x

    def _loss(self, out: torch.Tensor, features: torch.Tensor, labels) -> torch.Tensor:
        kind = self.model.loss.kind
        if kind == "softmax_xent":
            return F.cross_entropy(out.float(), labels)
        if kind == "mse_reconstruction":
            return F.mse_loss(out.float(), features.float())
        if kind == "token_xent":
            # The mean over the labelled steps: cross_entropy's "mean" reduction divides
            # by the count of targets not equal to ignore_index (torch.nn.CrossEntropyLoss
            # docs), the -1 of unlabelled and padded steps.
            return F.cross_entropy(out.float().flatten(0, 1), labels.flatten(), ignore_index=-1)
        return out.float().sum()

    def _forward(self, inputs: Inputs | None = None) -> torch.Tensor:
        inputs = inputs or self.inputs
        with torch.inference_mode(), self.autocast():
            return self.run_body(self._features(inputs), inputs.lengths)

    def _gradient(self, inputs: Inputs | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        self._inference_only()
        inputs = inputs or self.inputs
        with self.autocast():
            features = self._features(inputs)
            loss = self._loss(self.run_body(features, inputs.lengths), features, inputs.labels)
        return loss, torch.autograd.grad(loss, list(self.params.values()))

    def _single_layer_graph(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward once, keeping the graph, so grad-input and grad-weight time only their
        own backward kernels (convnet-benchmarks' updateGradInput / accGradParameters)."""
        if len(self.model.body) != 1 or self.model.frozen:
            raise Unsupported("grad_input and grad_weight are single-layer measures")
        if self.variant in COMPILED:
            raise Unsupported("a compiled graph computes all gradients together")
        x = self.x.detach().requires_grad_(True)
        with self.autocast():
            out = self.body(x)
        return x, out

    def _inference_only(self) -> None:
        if self.variant == REDUCE_OVERHEAD:
            raise Unsupported(f"{REDUCE_OVERHEAD} serves inference: its CUDA graphs replay the "
                              "forward only (gradients would record a training graph of their "
                              "own, which this variant does not claim to measure)")

    def _training(self) -> Training:
        """The training copy, made once. deepcopy clones every parameter with
        ``preserve_format``, so a channels-last body stays channels-last, and its memo
        maps each canonical parameter to its clone (a tied decoder keeps sharing its
        encoder's clone). ``Module.to`` on the device it is already on moves nothing but
        re-flattens cuDNN's LSTM weights into one buffer (RNNBase._apply), which a copy
        made parameter by parameter is not. Batch norm keeps momentum 0 in the copy
        (network.py), as in gradient passes: training mode normalises by the batch's
        statistics, and the running ones stay canonical."""
        self._inference_only()
        if self.train_copy is None:
            memo: dict[int, Any] = {}
            body = copy.deepcopy(self.body, memo).to(self.device, memory_format=self.memory_format)
            body.train()
            params = {name: memo[id(param)] for name, param in self.params.items()}
            # The compiled variants compile the forward and the loss together, as JAX's
            # jit and TensorFlow's XLA compile theirs, and as a Hugging Face model under
            # torch.compile computes its loss in its forward. Compiling the module alone
            # (``torch.compile(model)``) left the loss eager: on an H200, GPT-2's bf16
            # training step spent 3.22 ms per step in ATen's log-softmax over the
            # 8 x 1024 x 50,257 logits, where Hugging Face's compiled twin spent 1.53
            # (published/h200-transformers/twins). The optimizer step stays eager:
            # compiling it is a separate beta recipe of the PyTorch tutorials ("Compiling
            # the optimizer with torch.compile"), not the standard loop.
            optimizer, self.extra["optimizer"] = make_optimizer(optimizer_for(self.model),
                                                                list(params.values()))

            def body_loss(features: torch.Tensor, lengths: Lengths | None,
                          labels: torch.Tensor | None) -> torch.Tensor:
                return self._loss(body(features, lengths), features, labels)
            self.train_copy = Training(body, torch.compile(body_loss)
                                       if self.variant in COMPILED else body_loss,
                                       params, optimizer)
        return self.train_copy

    def step_forward(self) -> Callable[[], Any]:
        self.body.eval()
        return self._forward

    def step_gradient(self) -> Callable[[], Any]:
        self.body.train()
        return lambda: self._gradient()[1]

    def step_train(self) -> Callable[[], torch.Tensor]:
        """One training iteration: forward and loss under the case's autocast (bf16 compute
        over fp32 parameters, so the update is fp32), backward outside it as the AMP docs
        advise (bf16 needs no GradScaler: it has fp32's exponent range), then the
        optimizer's update. The frozen prefix runs without gradients, as in ``_gradient``."""
        training = self._training()
        inputs = self.inputs

        def train_step() -> torch.Tensor:
            training.optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                features = self._features(inputs)
                loss = training.loss(features, inputs.lengths, inputs.labels)
            loss.backward()
            training.optimizer.step()
            return loss.detach()
        return train_step

    def step_grad_input(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_input")

    def step_grad_weight(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_weight")

    def _single_layer_backward(self, measure: str) -> Callable[[], Any]:
        self.body.train()
        x, out = self._single_layer_graph()
        grad_out = torch.ones_like(out)  # the gradient of the "sum" loss
        targets = [x] if measure == "grad_input" else list(self.params.values())
        return lambda: torch.autograd.grad(out, targets, grad_out, retain_graph=True)

    def step_transfer(self) -> Callable[[], Any]:
        require_device_memory(self.on_gpu)
        # A pageable host buffer, as a framework's plain feed uses (Li et al. 2016, Fig. 7).
        self.extra["host_buffer"] = "pageable (numpy array in ordinary host memory)"
        return lambda: self.host_x.to(self.device)

    def step_transfer_pinned(self) -> Callable[[], Any]:
        require_device_memory(self.on_gpu)
        # Page-locked host memory, which the GPU's copy engine reads directly (Li et al.
        # 2016, Fig. 7's discussion: a pageable buffer is staged through a pinned one).
        if self.pinned_x is None:
            self.pinned_x = self.host_x.pin_memory()
        self.extra["host_buffer"] = "pinned (page-locked, torch pin_memory)"
        return lambda: self.pinned_x.to(self.device, non_blocking=True)

    def epoch_step(self, measure: str, batches: list[Batch]) -> Callable[[], Any]:
        if measure not in ("forward", "gradient"):
            raise Unsupported(f"no epoch of {measure}")
        placed = [self._place(batch) for batch in batches]
        self.body.train(measure == "gradient")
        run = self._forward if measure == "forward" else (lambda inputs: self._gradient(inputs)[1])

        def epoch() -> Any:
            handle = None
            for inputs in placed:
                handle = run(inputs)
            return handle
        return epoch

    def profile(self, measure: str, iterations: int) -> Profile:
        run = self.step(measure)
        for _ in range(WARMUP_RUNS):
            self.sync(run())
        return profile_steps(run, self.sync, measure, iterations, self.on_gpu)

    def device_clock(self) -> CudaEventClock | None:
        return CudaEventClock(self.device) if self.on_gpu else None

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

    def serve(self, batch: Batch) -> np.ndarray:
        # The host arrays onto the device (_place, as prepare places the seeded batch),
        # the forward in evaluation mode, the output back to the host: .cpu() waits for it.
        self.body.eval()
        return self._forward(self._place(batch)).float().cpu().numpy()

    def generator(self, max_length: int) -> Generator:
        reason = not_a_decoder(self.model)
        if reason:
            raise Unsupported(reason)
        return TorchGenerator(self, max_length)

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        self.body.train()
        loss, grads = self._gradient()
        return float(loss.detach()), {name: g.float().cpu().numpy()
                                      for name, g in zip(self.params, grads)}

    def output_summary(self, examples: int) -> OutputSummary:
        """Mean and standard deviation in float64 on the output's device, the head alone
        fetched (adapters/summary.py)."""
        self.body.eval()
        out = self._forward().float()
        count = out.numel()
        head = out[:examples].cpu().numpy()
        if count == 0:
            return OutputSummary.of(head)
        parts = out.split(examples_per_chunk(tuple(out.shape)))
        mean = float(sum(part.double().sum() for part in parts)) / count
        squares = torch.zeros((), dtype=torch.float64, device=out.device)
        for part in parts:
            deviation = part.double() - mean
            squares += torch.sum(deviation * deviation)
        return OutputSummary(tuple(out.shape), head, mean, math.sqrt(float(squares) / count))

    def gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        self.body.train()
        loss, grads = self._gradient()
        return summarise_gradients(loss, dict(zip(self.params, grads)), keep_arrays)

    def train_step_gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        """The training copy set back to the canonical weights, one call of the timed
        ``train_step`` (its compiled module, if compiled), and the ``.grad`` it left on the
        copy's parameters: the backward pass's gradients at the canonical weights, before
        the optimizer's update (``zero_grad`` clears them only at the next step's start).
        The optimizer's buffers keep their history: they do not enter the gradient."""
        training = self._training()
        step = self.step_train()
        with torch.no_grad():
            for name, param in training.params.items():
                param.copy_(self.params[name])
        loss = step()
        return summarise_gradients(loss, {name: param.grad
                                          for name, param in training.params.items()},
                                   keep_arrays)

    def canonical_gradient(self, name: str, grad: np.ndarray) -> np.ndarray:
        """A gradient of ``loss_and_gradients`` in the IR's layout: nn.Linear and nn.LSTM
        hold their matrices as (out, in), the IR as (in, out); embedding, position and
        token-type tables agree."""
        return grad.T if grad.ndim == 2 and not name.endswith((".table", ".segments")) \
            else grad

    def trained_weights(self) -> dict[str, np.ndarray]:
        # Before the first step there is no copy: the canonical parameters are its weights.
        params = self.params if self.train_copy is None else self.train_copy.params
        return {name: np.ascontiguousarray(
                    self.canonical_gradient(name, p.detach().float().cpu().numpy()))
                for name, p in params.items()}

    def close(self) -> None:
        self.train_copy = None
        del self.frozen, self.body, self.run_frozen, self.run_body, self.params, self.x, self.inputs
        self.pinned_x = None
        if self.on_gpu:
            torch.cuda.empty_cache()


def summarise_gradients(loss: torch.Tensor, grads: dict[str, torch.Tensor],
                        keep_arrays: bool) -> GradientSummary:
    """Norms in float64 on the gradients' device; the arrays fetched only if kept."""
    norms = {name: float(torch.linalg.vector_norm(g.detach(), dtype=torch.float64))
             for name, g in grads.items()}
    arrays = {name: g.float().cpu().numpy() for name, g in grads.items()} if keep_arrays \
        else None
    return GradientSummary(float(loss.detach()), norms, arrays)


def cpu_kernels(config: str) -> str:
    """PyTorch's CPU kernel libraries as its build reports them (``torch.__config__.show()``):
    the BLAS behind its dense layers (MKL, with its version, or OpenBLAS), oneDNN's version
    (its convolutions) and the vector extension ATen's own kernels use. A row names them
    because they decide the CPU figures: on the 2-core AVX-512 AMD EPYC of published/cpu,
    the dense layers took PyTorch (MKL) about twice as long as the other frameworks."""
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    words = [f"BLAS {blas.group(1) if blas else 'unknown'}"]
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
    if blas and blas.group(1) == "mkl" and mkl:
        words[0] += f" {mkl.group(1)}"
    onednn = re.search(r"MKL-DNN v([\w.]+)", config)
    if onednn:
        words.append(f"oneDNN {onednn.group(1)}")
    words.append(f"ATen {torch.backends.cpu.get_cpu_capability()}")
    return ", ".join(words)


class TorchAdapter(Adapter):
    name = "torch"
    variants = {
        "eager": "eager; cuDNN autotune (cudnn.benchmark) on GPU",
        "compile": "torch.compile (inductor, default mode); train_step: forward and loss "
                   "compiled together, the optimizer eager",
        "no_cudnn": "eager with cuDNN disabled (cnn-benchmarks' 'None' rows)",
        "channels_last": "eager, NHWC memory format (channels_last)",
        "compile_channels_last": "torch.compile (inductor, default mode), NHWC memory "
                                 "format (channels_last); train_step: forward and loss "
                                 "compiled together, the optimizer eager",
        REDUCE_OVERHEAD: "torch.compile (inductor, mode=\"reduce-overhead\": CUDA graphs "
                         "through CUDAGraph Trees), inference only; GPU only",
        # cudnn.benchmark tries at most benchmark_limit (default 10) of the algorithms
        # cuDNN's heuristics rank; 0 tries every one (torch.backends.cudnn docs). The
        # benchmark cache is per process and keyed by the convolution, not the limit, so
        # this variant means something only in a process that has not run the same shapes
        # under the default: suites/convnet-benchmarks-search.toml runs it alone.
        "cudnn_exhaustive": "eager; cuDNN autotune over every algorithm (benchmark_limit=0)",
        "sdpa_math": "eager, scaled_dot_product_attention forced to its math backend",
        "sdpa_flash": "eager, scaled_dot_product_attention forced to its flash backend",
        "sdpa_efficient": "eager, scaled_dot_product_attention forced to its memory-efficient "
                          "backend",
        "sdpa_cudnn": "eager, scaled_dot_product_attention forced to its cuDNN backend",
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
            "cpu_kernels": None if on_gpu else cpu_kernels(torch.__config__.show()),
        }

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        return self.prepare_sizes(model, weights, [batch], case)[0]

    def prepare_sizes(self, model: Model, weights: Weights, batches: Sequence[Batch],
                      case: CaseConfig) -> list[Prepared]:
        variant = self.resolve_variant(case.variant)
        if variant in SDPA_VARIANTS and not has_attention(model):
            raise Unsupported(f"{variant} forces scaled_dot_product_attention's backend: "
                              f"{model.name} has no self-attention")
        self.reapply(case)
        if variant in COMPILED:
            # A fresh start for each case, as a process training one network has: torch
            # compiles a function's code once per input shape and layout, up to
            # recompile_limit times, then runs it uncompiled. Every case's network shares
            # Sequence.forward, so earlier cases in the worker's process would otherwise
            # decide whether this one is compiled. The case's sizes share the start: a reset
            # between them discarded the earlier sizes' programs, which their next serve
            # compiled again (for dynamic shapes, before TorchPrepared's dynamic=False).
            # A frozen prefix is a second Sequence: its programs count against the same code.
            programs = len(batches) * (2 if model.frozen else 1)
            limit = torch._dynamo.config.recompile_limit
            if programs > limit:
                raise Unsupported(f"{len(batches)} batch sizes of one compiled network need "
                                  f"{programs} programs of one function; torch.compile compiles "
                                  f"one at most {limit} times (recompile_limit), then runs it "
                                  f"uncompiled")
            torch.compiler.reset()
        return [TorchPrepared(self, model, weights, batch, case, variant) for batch in batches]

    def reapply(self, case: CaseConfig) -> None:
        variant = self.resolve_variant(case.variant)
        on_gpu = self.config.device == "gpu"
        apply_precision(case.precision, on_gpu)
        if variant in ("no_cudnn", "cudnn_exhaustive") and not on_gpu:
            raise Unsupported("cuDNN exists on GPU only")
        if variant == REDUCE_OVERHEAD and not on_gpu:
            # On a CPU inductor skips CUDA graphs and runs the plain compiled code: the row
            # would time "compile" under this variant's name.
            raise Unsupported(f"{REDUCE_OVERHEAD}: CUDA graphs need a GPU (on a CPU "
                              "torch.compile's reduce-overhead mode is its default mode)")
        torch.backends.cudnn.enabled = variant != "no_cudnn"
        torch.backends.cudnn.benchmark = on_gpu
        torch.backends.cudnn.benchmark_limit = 0 if variant == "cudnn_exhaustive" else 10
        backend = SDPA_VARIANTS.get(variant)
        if backend in SDPA_GPU_ONLY and not on_gpu:
            raise Unsupported(f"{variant}: PyTorch has no {backend} attention kernel on a CPU")
        apply_sdpa(backend)

    def bytes_in_use(self) -> int | None:
        return int(torch.cuda.memory_allocated(self.device)) \
            if self.config.device == "gpu" else None

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
            return True
        text = str(error)
        return isinstance(error, RuntimeError) and (
            "out of memory" in text or "can't allocate memory" in text)
