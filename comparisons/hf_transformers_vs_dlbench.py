"""dlbench's PyTorch adapter against Hugging Face transformers' own GPT-2, BERT and ViT.

    python -m comparisons.hf_transformers_vs_dlbench --device cuda --out cmp/   # the suite's shapes
    python -m comparisons.hf_transformers_vs_dlbench --device cuda --models gpt2 --out cmp/
    python -m comparisons.hf_transformers_vs_dlbench --device cpu --models gpt2 --batch 1 \\
        --steps 128 --measures forward --variants eager --precisions fp32
    python -m comparisons.hf_transformers_vs_dlbench --device cpu --batch 2 \\
        --models gpt2_tiny,bert_tiny,vit_tiny --variants eager --budget 0.01 --min-samples 1

The twin of each transformer is the model Hugging Face transformers (pinned in noxfile.py
COMPARISON_REQUIREMENTS) builds from its own config, sized from dlbench's IR (no download):
``GPT2LMHeadModel``, ``BertForMaskedLM`` and ``ViTForImageClassification``, with
``attn_implementation="sdpa"`` (torch's scaled_dot_product_attention, as dlbench's
adapter). dlbench's canonical weights are copied into it through one table (``MAPPING``),
which must cover every Hugging Face parameter exactly once and use every canonical array;
the tied heads (GPT-2's LM head, BERT's MLM decoder) are checked to share the token table.
Then, per precision (fp32 strict: TF32 off; bf16: ``torch.autocast`` over fp32 parameters
on both sides) and variant (eager; ``torch.compile`` of the model on both sides, the
optimizer step eager), the pair is checked to compute the same function and timed:

* **identity**: the logits of both agree within twice the derived bound on each one's
  error against float64 (models/error_bounds.py: an fp32 or bf16 evaluation lies within
  ``bounds(...).output`` of the exact output, so two lie within twice that of each other),
  and so do the losses (``bounds(...).loss``); where the batch is small enough
  (``--float64``), Hugging Face's fp32 output and loss are also checked against
  models.reference's float64 directly. Logits of padded steps are not compared (the IR
  leaves them unspecified).
* **timing**: forward (inference mode) and train_step (training mode; forward and loss
  under autocast, backward, ``torch.optim.AdamW`` with models/optimizers.py's ADAMW, in the
  idiomatic loop), each side timed by suites/stats/timer.py with the adapter's sync, in
  A-B-B-A order so that drift favours neither; dlbench trains a copy of its network, the
  twin trains itself (train_step is timed last).

Where Hugging Face's function differs from dlbench's, the comparison is made on dlbench's:

* **loss**: GPT2LMHeadModel shifts its labels (position t predicts token t+1); dlbench's
  token_xent labels every step itself, so the twin gets the labels as ``shift_labels``,
  which its ForCausalLMLoss uses unshifted (transformers/loss/loss_utils.py, 5.17). Hugging
  Face ignores label -100, dlbench -1: the labels are converted. Both means are over the
  labelled steps; both upcast the logits to fp32 for the loss.
* **padding mask**: BERT's ``attention_mask`` (1 for a token, 0 for padding) from the
  batch's lengths, as a tokenizer returns it; dlbench masks the same keys for every query.
* **dropout**: every dropout probability 0 (dlbench's IR leaves dropout out);
  ``use_cache=False`` (GPT-2 would otherwise build a key/value cache in eval mode).
* **GELU**: GPT-2's default ``gelu_new`` is the tanh form written as elementwise ops
  (NewGELUActivation), dlbench's ``nn.GELU(approximate="tanh")`` one kernel: the same
  function, kept as Hugging Face's default config builds it (a possible cause of an eager
  gap, which torch.compile fuses away).

The issue's bar (issue 60, Twins): dlbench's fastest variant within ±5% of the twin's
fastest, per model, precision and measure; the closing table says so or names the gap.
Each side's attention backend (flash, efficient, cuDNN, math) is read from torch.profiler
and written beside the timings, the first cause to look at. Results: a table on stdout,
and ``--out DIR`` appends JSON lines to DIR/hf_transformers_vs_dlbench.ndjson (an
environment line, then one line per case, flushed as it is measured). Exit status 1 when a
pair computes different functions, 2 when transformers is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from adapters.base import CaseConfig, RunConfig
from adapters.torch import TorchAdapter
from adapters.torch.adapter import sdpa_ops
from comparisons.kernel_gap import kernel_iterations, kernel_pair, kernel_said
from comparisons.transformer_twins import (
    FLOAT64_MAX_FLOPS,
    MODELS,
    SUITE_BATCH,
    ResultsLog,
    Shape,
    exit_status,
    is_transformer,
    model_for,
    one_line,
    parse_list,
    print_table,
    shape_of,
    wants_float64,
)
from models import ir, reference
from models.analysis import analyse
from models.error_bounds import bounds
from models.inputs import Batch, make_batch
from models.measures import TRAIN_STEP
from models.optimizers import ADAMW
from models.weights import canonical_weights
from suites.stats.timer import TimerSettings, measure

MEASURES = ("forward", TRAIN_STEP)
PRECISIONS = ("fp32", "bf16")
VARIANTS = ("eager", "compile")
# With compile each side's first calls compile, untimed (the timer would count the
# compilation against its budget and cut the warm-up short).
UNTIMED_RUNS = 2
OUTPUT_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}
RESULTS_FILE = "hf_transformers_vs_dlbench.ndjson"

# --- the weights: dlbench's canonical names → Hugging Face's ---------------------------
# One row per canonical parameter group: (family, dlbench prefix, Hugging Face prefix,
# layout); "{i}" is a block's index. Layouts (ARCHITECTURE.md: canonical dense weights
# are (in, out), convolutions OIHW):
#   table   an embedding table (rows, dim), as nn.Embedding stores it
#   norm    LayerNorm: gamma → weight, beta → bias
#   conv1d  GPT-2's Conv1D, which stores (in, out) as dlbench does: weight and bias as is
#   linear  nn.Linear, (out, in): the weight transposed, the bias as is
#   qkv     dlbench's fused (dim, 3·dim) q|k|v projection split into three nn.Linear
#           (BERT's query/key/value, ViT's q_proj/k_proj/v_proj): each a column block,
#           transposed; HF_QKV names the three
#   conv    a convolution, OIHW on both sides: weight and bias as is
#   token   ViT's class token (dim,) → (1, 1, dim)
#   rows    ViT's position table (tokens, dim) → (1, tokens, dim)
#   vector  a bias vector as is (BERT's MLM decoder bias, cls.predictions.bias)
# GPT-2's LM head and BERT's MLM decoder weight are tied to the token table on both sides
# (TIED: checked, not copied).
MAPPING = (
    ("gpt2", "wte.table", "transformer.wte.weight", "table"),
    ("gpt2", "wpe.table", "transformer.wpe.weight", "table"),
    ("gpt2", "h{i}.ln1", "transformer.h.{i}.ln_1", "norm"),
    ("gpt2", "h{i}.attn.qkv", "transformer.h.{i}.attn.c_attn", "conv1d"),
    ("gpt2", "h{i}.attn.out", "transformer.h.{i}.attn.c_proj", "conv1d"),
    ("gpt2", "h{i}.ln2", "transformer.h.{i}.ln_2", "norm"),
    ("gpt2", "h{i}.mlp.fc", "transformer.h.{i}.mlp.c_fc", "conv1d"),
    ("gpt2", "h{i}.mlp.proj", "transformer.h.{i}.mlp.c_proj", "conv1d"),
    ("gpt2", "ln_f", "transformer.ln_f", "norm"),
    ("bert", "word.table", "bert.embeddings.word_embeddings.weight", "table"),
    ("bert", "position.table", "bert.embeddings.position_embeddings.weight", "table"),
    ("bert", "position.segments", "bert.embeddings.token_type_embeddings.weight", "table"),
    ("bert", "embeddings.ln", "bert.embeddings.LayerNorm", "norm"),
    ("bert", "layer{i}.attn.qkv", "bert.encoder.layer.{i}.attention.self", "qkv"),
    ("bert", "layer{i}.attn.out", "bert.encoder.layer.{i}.attention.output.dense", "linear"),
    ("bert", "layer{i}.ln1", "bert.encoder.layer.{i}.attention.output.LayerNorm", "norm"),
    ("bert", "layer{i}.mlp.fc", "bert.encoder.layer.{i}.intermediate.dense", "linear"),
    ("bert", "layer{i}.mlp.proj", "bert.encoder.layer.{i}.output.dense", "linear"),
    ("bert", "layer{i}.ln2", "bert.encoder.layer.{i}.output.LayerNorm", "norm"),
    ("bert", "mlm.transform", "cls.predictions.transform.dense", "linear"),
    ("bert", "mlm.ln", "cls.predictions.transform.LayerNorm", "norm"),
    ("bert", "mlm.decoder.bias", "cls.predictions.bias", "vector"),
    ("vit", "embeddings.patch", "vit.embeddings.patch_embeddings.projection", "conv"),
    ("vit", "embeddings.patch.class_token", "vit.embeddings.cls_token", "token"),
    ("vit", "embeddings.position.table", "vit.embeddings.position_embeddings", "rows"),
    ("vit", "layer{i}.ln1", "vit.layers.{i}.layernorm_before", "norm"),
    ("vit", "layer{i}.attn.qkv", "vit.layers.{i}.attention", "qkv"),
    ("vit", "layer{i}.attn.out", "vit.layers.{i}.attention.o_proj", "linear"),
    ("vit", "layer{i}.ln2", "vit.layers.{i}.layernorm_after", "norm"),
    ("vit", "layer{i}.mlp.fc", "vit.layers.{i}.mlp.fc1", "linear"),
    ("vit", "layer{i}.mlp.proj", "vit.layers.{i}.mlp.fc2", "linear"),
    ("vit", "ln", "vit.layernorm", "norm"),
    ("vit", "classifier", "classifier", "linear"),
)
HF_QKV = {"bert": ("query", "key", "value"), "vit": ("q_proj", "k_proj", "v_proj")}
# (the tied module's weight, the table it shares) per family.
TIED = {"gpt2": ("lm_head.weight", "transformer.wte.weight"),
        "bert": ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight")}
HF_CLASS = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM",
            "vit": "ViTForImageClassification"}


def hf_config(transformers, shape: Shape):
    """The Hugging Face config of ``shape``: the family's defaults, sized as dlbench's
    model (the MLP is 4× the width, their default and dlbench's), every dropout 0,
    SDPA attention."""
    common = dict(attn_implementation="sdpa")
    if shape.family == "gpt2":
        # GPT-2's special token ids default to 50256: kept inside a tiny vocabulary.
        special = min(50256, shape.vocab - 1)
        return transformers.GPT2Config(
            vocab_size=shape.vocab, n_positions=shape.positions, n_embd=shape.width,
            n_layer=shape.layers, n_head=shape.heads, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, use_cache=False, bos_token_id=special, eos_token_id=special,
            **common)
    sizes = dict(hidden_size=shape.width, num_hidden_layers=shape.layers,
                 num_attention_heads=shape.heads, intermediate_size=4 * shape.width,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
    if shape.family == "bert":
        return transformers.BertConfig(vocab_size=shape.vocab,
                                       max_position_embeddings=shape.positions, **sizes)
    return transformers.ViTConfig(image_size=shape.image, patch_size=shape.patch,
                                  num_labels=shape.vocab, **sizes)


def hf_arrays(shape: Shape, weights) -> dict[str, np.ndarray]:
    """dlbench's canonical weights in Hugging Face's names and layouts (``MAPPING``)."""
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()

    def take(name: str) -> np.ndarray:
        used.add(name)
        return np.asarray(weights[name])

    for family, ours, theirs, layout in MAPPING:
        if family != shape.family:
            continue
        for i in range(shape.layers) if "{i}" in ours else (None,):
            a, b = ours.format(i=i), theirs.format(i=i)
            if layout in ("table", "vector"):
                out[b] = take(a)
            elif layout == "norm":
                out[f"{b}.weight"], out[f"{b}.bias"] = take(f"{a}.gamma"), take(f"{a}.beta")
            elif layout in ("conv1d", "conv"):
                out[f"{b}.weight"], out[f"{b}.bias"] = take(f"{a}.weight"), take(f"{a}.bias")
            elif layout == "linear":
                out[f"{b}.weight"], out[f"{b}.bias"] = take(f"{a}.weight").T, take(f"{a}.bias")
            elif layout == "qkv":
                w, bias, dim = take(f"{a}.weight"), take(f"{a}.bias"), shape.width
                for k, part in enumerate(HF_QKV[family]):
                    out[f"{b}.{part}.weight"] = w[:, k * dim:(k + 1) * dim].T
                    out[f"{b}.{part}.bias"] = bias[k * dim:(k + 1) * dim]
            elif layout == "token":
                out[b] = take(a).reshape(1, 1, -1)
            elif layout == "rows":
                out[b] = take(a)[None]
            else:
                raise ValueError(f"unknown layout {layout!r}")
    if unused := sorted(set(weights) - used):
        raise SystemExit(f"canonical weights with no Hugging Face parameter: {unused}")
    return out


def load_canonical(hf: nn.Module, shape: Shape, weights) -> None:
    """Copy the canonical weights in: every Hugging Face parameter once, equal shapes,
    tied heads sharing the token table."""
    arrays = hf_arrays(shape, weights)
    params = dict(hf.named_parameters())   # tied parameters appear once
    if missing := sorted(set(params) - set(arrays)):
        raise SystemExit(f"Hugging Face parameters with no canonical weight: {missing}")
    if extra := sorted(set(arrays) - set(params)):
        raise SystemExit(f"mapped names Hugging Face's model does not have: {extra}")
    with torch.no_grad():
        for name, param in params.items():
            array = arrays[name]
            if tuple(param.shape) != array.shape:
                raise SystemExit(f"{name}: shape {tuple(param.shape)} vs canonical {array.shape}")
            param.copy_(torch.from_numpy(np.ascontiguousarray(array)))
    if shape.family in TIED:
        head, table = TIED[shape.family]
        if hf.get_parameter(head) is not hf.get_parameter(table):
            raise SystemExit(f"{head} is not tied to {table}")


def hf_model(transformers, model: ir.Model, weights, device: torch.device) -> nn.Module:
    shape = shape_of(model)
    config = hf_config(transformers, shape)
    with torch.device(device):
        hf = getattr(transformers, HF_CLASS[shape.family])(config)
    load_canonical(hf, shape, weights)
    return hf


class Twin:
    """Hugging Face's model on the same device, inputs and labels as dlbench's, run as its
    users run it: ``model(**inputs, labels=...)``, its ``.logits`` and ``.loss``,
    ``torch.compile(model)`` in the compiled variant, autocast around forward and loss."""

    def __init__(self, hf: nn.Module, shape: Shape, prepared, device: torch.device,
                 precision: str, compiled: bool):
        self.model, self.family = hf, shape.family
        self.run = torch.compile(hf) if compiled else hf
        inputs = prepared.inputs
        if shape.family == "vit":
            self.inputs = {"pixel_values": inputs.x}
            self.labels = {"labels": inputs.labels}
        else:
            self.inputs = {"input_ids": inputs.x}
            if shape.family == "bert":
                self.inputs["attention_mask"] = (
                    inputs.lengths.keys[:, 0, 0, :].long() if inputs.lengths is not None
                    else torch.ones_like(inputs.x))
            labels = inputs.labels.masked_fill(inputs.labels < 0, -100)
            self.labels = {"labels": labels}
            if shape.family == "gpt2":
                self.labels["shift_labels"] = labels   # dlbench's per-step labels, unshifted
        self.autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
            if precision == "bf16" else contextlib.nullcontext

    def forward(self) -> torch.Tensor:
        with torch.inference_mode(), self.autocast():
            return self.run(**self.inputs).logits

    def loss(self) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            return self.run(**self.inputs, **self.labels).loss

    def train_step(self):
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=ADAMW.learning_rate,
                                      betas=(ADAMW.beta1, ADAMW.beta2), eps=ADAMW.eps,
                                      weight_decay=ADAMW.weight_decay)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                loss = self.run(**self.inputs, **self.labels).loss
            loss.backward()
            optimizer.step()
            return loss.detach()
        return step

    def step(self, measure_name: str):
        return self.forward if measure_name == "forward" else self.train_step()

    def attention_backend(self) -> str:
        """The SDPA backend the eager model dispatches to, as the adapter records its own."""
        with (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
              torch.inference_mode(), self.autocast()):
            self.model(**self.inputs)
        found = sdpa_ops(event.name for event in prof.events())
        return "; ".join(found) if found else "no SDPA op recorded by torch.profiler"


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor,
                        valid: torch.Tensor | None) -> float:
    """The largest difference over the largest magnitude of ``theirs``, on valid steps."""
    a, b = ours.float(), theirs.float()
    if valid is not None:
        a, b = a[valid], b[valid]
    return float((a - b).abs().max() / (b.abs().max() + 1e-30))


@dataclass(frozen=True)
class Identity:
    output: float            # the logits' largest difference, relative (dlbench vs twin)
    output_bound: float
    loss: float              # |loss difference| / |loss|
    loss_bound: float
    dtypes: tuple[str, str]
    float64_output: float | None = None   # the twin's fp32 error against float64
    float64_loss: float | None = None

    @property
    def same(self) -> bool:
        within = self.output <= self.output_bound and self.loss <= self.loss_bound
        if self.float64_output is not None:
            within = within and self.float64_output <= self.output_bound / 2 \
                and self.float64_loss <= self.loss_bound / 2
        return within and self.dtypes[0] == self.dtypes[1]


def identity(model: ir.Model, weights, batch: Batch, prepared, twin: Twin, precision: str,
             float64: bool) -> Identity:
    """Outputs and losses within twice each side's derived bound against float64
    (models/error_bounds.py); the twin's fp32 output and loss against models.reference's
    float64 within one bound where ``float64``."""
    bound = bounds(model, batch.size, precision)
    valid = prepared.inputs.lengths.keys[:, 0, 0, :] \
        if prepared.inputs.lengths is not None else None
    ours, theirs = prepared.step("forward")(), twin.forward()
    output = relative_difference(ours, theirs, valid)
    dtypes = (str(ours.dtype).removeprefix("torch."), str(theirs.dtype).removeprefix("torch."))
    wanted = str(OUTPUT_DTYPE[precision]).removeprefix("torch.")
    if dtypes[1] != wanted:
        dtypes = (dtypes[0], f"{dtypes[1]} (wanted {wanted})")
    our_loss = prepared.gradient_summary(False).loss
    their_loss = float(twin.loss())
    loss = abs(our_loss - their_loss) / abs(their_loss)
    f64_output = f64_loss = None
    if float64 and precision == "fp32":
        truth = torch.from_numpy(reference.forward(model, weights, batch))
        f64_output = relative_difference(theirs.cpu().double(), truth,
                                         None if valid is None else valid.cpu())
        exact = reference.loss(model, weights, batch)
        f64_loss = abs(their_loss - exact) / abs(exact)
    del ours, theirs
    return Identity(output, 2 * bound.output, loss, 2 * bound.loss, dtypes, f64_output, f64_loss)


def time_pair(prepared, twin: Twin, measure_name: str, compiled: bool,
              settings: TimerSettings, kernels: int = 0
              ) -> tuple[dict[str, list[float]], dict[str, Any] | None]:
    """Both sides' medians (ms) in A-B-B-A order, each side in the measure's mode; then,
    where ``kernels`` > 0, both sides' kernels over that many steps each (kernel_pair)."""
    steps = {"dlbench": prepared.step(measure_name), "hf": twin.step(measure_name)}
    training = measure_name == TRAIN_STEP
    twin.model.train(training)
    if compiled:
        for step in steps.values():
            for _ in range(UNTIMED_RUNS):
                prepared.sync(step())
    medians: dict[str, list[float]] = {"dlbench": [], "hf": []}
    for label in ("dlbench", "hf", "hf", "dlbench"):
        medians[label].append(measure(steps[label], prepared.sync, settings).median_s * 1e3)
    traced = kernel_pair(steps, prepared.sync, kernels, "hf", measure_name,
                         {label: sum(runs) / len(runs) for label, runs in medians.items()}) \
        if kernels else None
    return medians, traced


def run_case(adapter: TorchAdapter, transformers, name: str, model: ir.Model, batch_size: int,
             precision: str, variant: str, measures: list[str], settings: TimerSettings,
             float64: bool, write, kernels: int = 0) -> list[dict[str, Any]]:
    """One model × precision × variant: identity, then each measure's timing, as rows."""
    weights = canonical_weights(model)
    batch = make_batch(model, batch_size)
    base = {"model": name, "batch": batch_size, "steps": int(model.input.shape[0])
            if model.input.kind == "tokens" else None, "precision": precision,
            "variant": variant}
    rows = []
    prepared = twin = None
    try:
        prepared = adapter.prepare(model, weights, batch, CaseConfig(precision, variant))
        twin = Twin(hf_model(transformers, model, weights, adapter.device), shape_of(model),
                    prepared, adapter.device, precision, variant == "compile")
        check = identity(model, weights, batch, prepared, twin, precision, float64)
        attention = {"dlbench": prepared.extra.get("attention"), "hf": twin.attention_backend()}
        print(f"{name} {precision} {variant}: output diff {check.output:.1e} (bound "
              f"{check.output_bound:.1e}), loss diff {check.loss:.1e} (bound "
              f"{check.loss_bound:.1e})"
              + (f", HF vs float64 {check.float64_output:.1e} / {check.float64_loss:.1e}"
                 if check.float64_output is not None else "")
              + ("" if check.same else "  DIFFER"), flush=True)
        for measure_name in measures:
            medians, traced = time_pair(prepared, twin, measure_name, variant == "compile",
                                        settings, kernels)
            ours, theirs = (sum(medians[k]) / 2 for k in ("dlbench", "hf"))
            row = {**base, "measure": measure_name, "status": "ok", "dlbench_ms": ours,
                   "hf_ms": theirs, "ratio": ours / theirs, "runs_ms": medians,
                   "same_function": check.same, "identity": vars(check) | {"same": check.same},
                   "attention": attention}
            if traced is not None:
                row["kernels"] = traced
            print(f"  {measure_name:<10} dlbench {ours:10.3f} ms  HF {theirs:10.3f} ms  "
                  f"ratio {ours / theirs:.3f}", flush=True)
            if traced is not None:
                print(f"    kernels: {kernel_said(traced)}", flush=True)
            rows.append(row)
            write(row)
    except (RuntimeError, MemoryError, ValueError) as error:
        # Failures are data: an out-of-memory or a kernel's refusal is a row.
        status = "oom" if adapter.is_out_of_memory(error) else "failed"
        row = {**base, "measure": ",".join(measures), "status": status,
               "reason": one_line(error)}
        print(f"{name} {precision} {variant}: {status}: {row['reason']}", flush=True)
        rows.append(row)
        write(row)
    finally:
        if prepared is not None:
            prepared.close()
        del twin, prepared
        if adapter.device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "gpu", "cpu"),
                        help="cuda (= gpu) or cpu")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="gpt2, bert_base, vit_b16 or their _tiny versions")
    parser.add_argument("--batch", type=int, help="every model's batch (default: the suite's, "
                        "GPT-2 8, BERT 32, ViT 128; 2 for the tiny models)")
    parser.add_argument("--steps", type=int, help="GPT-2's and BERT's sequence length "
                        "(default: their context, 1024 and 512)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--measures", default=",".join(MEASURES))
    parser.add_argument("--float64", choices=("auto", "yes", "no"), default="auto",
                        help=f"check the twin against float64 (auto: batches of at most "
                             f"{FLOAT64_MAX_FLOPS:.0e} forward FLOPs)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--min-samples", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, help="a folder: JSON lines appended to "
                        f"{RESULTS_FILE} there")
    parser.add_argument("--kernels", type=kernel_iterations, default=0, metavar="N",
                        help="after each timing, trace N steps of each side's kernels with "
                             "CUPTI and write where each side's time goes (default 0: none)")
    args = parser.parse_args(argv)
    try:
        precisions = parse_list(args.precisions, PRECISIONS, "precisions")
        variants = parse_list(args.variants, VARIANTS, "variants")
        measures = parse_list(args.measures, MEASURES, "measures")
        models = {name: model_for(name, args.steps) for name in args.models.split(",")}
    except (argparse.ArgumentTypeError, KeyError, ValueError) as error:
        parser.error(str(error).strip("'\""))
    if not all(is_transformer(m) for m in models.values()):
        parser.error("--models: only the transformers (gpt2, bert_base, vit_b16, *_tiny)")
    try:
        import transformers
    except ImportError:
        print("error: transformers is not installed in this environment", file=sys.stderr)
        return 2
    transformers.logging.set_verbosity_error()   # config notes, not results
    device = "gpu" if args.device in ("gpu", "cuda") else "cpu"
    adapter = TorchAdapter(RunConfig(device, torch.get_num_threads(), 1))
    settings = TimerSettings(warmup=args.warmup, min_samples=args.min_samples, max_samples=400,
                             rel_ci=0.005, budget_s=args.budget)
    env = adapter.environment() | {"transformers_version": transformers.__version__,
                                   "threads": torch.get_num_threads()}
    print(f"torch {env['framework_version']}, transformers {transformers.__version__} on "
          f"{env['gpu_model'] or 'CPU'}; {', '.join(precisions)}; {', '.join(variants)}")
    log = ResultsLog(args.out, RESULTS_FILE, env, argv)
    write = log.write

    rows = []
    for name, model in models.items():
        batch = args.batch or SUITE_BATCH.get(name, 2)
        flops = analyse(model).flops * batch
        float64 = wants_float64(args.float64, flops)
        for precision in precisions:
            for variant in variants:
                rows += run_case(adapter, transformers, name, model, batch, precision, variant,
                                 measures, settings, float64, write, args.kernels)
    print_table(rows, "hf", "HF")
    log.close()
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
