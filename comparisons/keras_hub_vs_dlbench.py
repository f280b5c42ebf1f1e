"""dlbench's JAX and TensorFlow adapters against keras-hub's GPT-2 and ViT on the matching
Keras 3 backend.

    KERAS_BACKEND=jax python -m comparisons.keras_hub_vs_dlbench --device gpu --out cmp/
    KERAS_BACKEND=tensorflow python -m comparisons.keras_hub_vs_dlbench --device gpu --out cmp/
    python -m comparisons.keras_hub_vs_dlbench --backend jax --device cpu --batch 2 \\
        --models gpt2_tiny,vit_tiny --budget 0.01 --min-samples 1      # a smoke run

(the jax_gpu or tf_gpu session's packages plus keras-hub, pinned with its few needed
requirements in noxfile.py COMPARISON_REQUIREMENTS). ``--backend`` (default: the
``KERAS_BACKEND`` environment variable, else the framework installed) picks Keras 3's
backend and dlbench's adapter: ``jax`` (JaxAdapter, variants ``jit`` and, on a GPU,
``cudnn_attention``, whose fp32 rows say unsupported) or ``tensorflow`` (TFAdapter, variants
``xla`` and ``graph``).

The twin of each transformer is keras-hub's (0.32.0) backbone built from its constructor,
sized from dlbench's IR (no preset, no download), with the head its task model puts on it:
``GPT2Backbone`` and GPT2CausalLM's tied LM head (``backbone.token_embedding(x,
reverse=True)``), ``ViTBackbone`` and ViTImageClassifier's head (the class token, a
``Dense`` of 1000 classes). Every dropout is 0 (dlbench's IR leaves dropout out), ViT's
LayerNorm epsilon is the IR's (1e-12, Hugging Face's ViTConfig; keras-hub's default is
1e-6, a constructor argument). dlbench's canonical weights are copied in through one table
(``keras_arrays``), which must fill every Keras variable exactly once and use every
canonical array.

BERT has no keras-hub twin here: ``BertBackbone`` builds its encoder layers with
``activation=gelu_approximate`` (keras_hub/src/models/bert/bert_backbone.py, 0.32.0), GELU's
tanh form, where BERT (Devlin et al.; Hugging Face's ``hidden_act="gelu"``) and dlbench's
``bert_base`` use the erf form; the backbone takes no argument to change it, and the
forms differ by up to 1e-3 per activation, far outside the fp32 bound. The row says so
(``NOT_EQUAL``), and nothing is timed.

Per precision (fp32 strict; bf16: Keras's ``mixed_bfloat16`` dtype policy, given to the
backbone and the head, bfloat16 compute on float32 variables, the loss in float32) and
variant, the pair is checked to compute the same function, then timed:

* **identity**: the logits of both agree within twice the derived bound on each one's
  error against float64 (models/error_bounds.py), and so do the losses; where the batch
  is small (``--float64``), the twin's fp32 logits and loss are also checked against
  models.reference's float64. The twin's logits must have the precision's dtype.
* **timing**: forward (inference mode) and train_step (forward, loss, gradient and Keras's
  own ``keras.optimizers.AdamW`` with models/optimizers.py's ADAMW), each side timed by
  suites/stats/timer.py with the adapter's sync, in A-B-B-A order; train_step is timed
  last. Keras compiles as its own trainer does: on JAX the stateless loop of Keras's
  guide "Writing a training loop from scratch in JAX" (``model.stateless_call``,
  ``jax.value_and_grad``, ``optimizer.stateless_apply``) under ``jax.jit`` with the state
  donated (keras/src/backend/jax/trainer.py jits its train step with
  ``donate_argnums=0``); on TensorFlow a ``tf.function`` with ``jit_compile`` (the
  ``xla`` variant) or without (``graph``) around a GradientTape step and
  ``optimizer.apply_gradients``, as Keras's guide for TensorFlow writes it.

fp32 is strict on both sides: dlbench's JAX adapter runs every dot at
``lax.Precision.HIGHEST``; the Keras side's JAX calls run under
``jax.default_matmul_precision("highest")`` (on a GPU, JAX's default is TF32); the
TensorFlow adapter turns TF32 off for the process, the Keras side included. The losses
are dlbench's: GPT-2's token cross-entropy over the labelled steps (label -1 ignored:
``SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)``, a mean over the
labelled steps), ViT's mean softmax cross-entropy; both upcast the logits to float32.

Attention: Keras's MultiHeadAttention (dropout 0) calls ``keras.ops.dot_product_attention``
(``jax.nn.dot_product_attention`` on JAX, cuDNN's fused kernel where Keras's flash
attention setting and the inputs allow; TensorFlow: its composite of matmuls and softmax);
the row records ``keras.config.is_flash_attention_enabled()`` beside dlbench's attention.

The issue's bar (issue 60, Twins): dlbench's fastest variant within ±5% of the twin's
fastest, per model, precision and measure. Results: a table on stdout, and ``--out DIR``
appends JSON lines to DIR/keras_hub_vs_dlbench.ndjson (an environment line, then one line
per case, flushed as measured). Exit status 1 when a pair computes different functions,
2 when keras-hub or the backend is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

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
    relative_difference,
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

MEASURES = ("forward", TRAIN_STEP)
PRECISIONS = ("fp32", "bf16")
BACKENDS = ("jax", "tensorflow")
# dlbench's variants per backend; the Keras side compiles the same way (jit / XLA / graph).
# On JAX, cudnn_attention (bf16 on a GPU only) is dlbench's fastest where it applies, and the
# twin's keras.ops.dot_product_attention takes cuDNN's flash attention itself there: the
# pair of each side's fastest.
VARIANTS = {"jax": ("jit", "cudnn_attention"), "tensorflow": ("xla", "graph")}


def default_variants(backend: str, device: str) -> tuple[str, ...]:
    """``VARIANTS[backend]``, less JAX's ``cudnn_attention`` on a CPU (it needs cuDNN)."""
    return ("jit",) if backend == "jax" and device == "cpu" else VARIANTS[backend]


KERAS_POLICY = {"fp32": "float32", "bf16": "mixed_bfloat16"}
OUTPUT_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
UNTIMED_RUNS = 2   # each side's first calls trace and compile, untimed
RESULTS_FILE = "keras_hub_vs_dlbench.ndjson"
TWIN = "keras"
# Families keras-hub's backbone cannot compute as dlbench does, and why.
NOT_EQUAL = {
    "bert": "keras-hub's BertBackbone builds its encoder layers with GELU's tanh form "
            "(activation=gelu_approximate, keras_hub/src/models/bert/bert_backbone.py "
            "0.32.0); BERT and dlbench's bert_base use the erf form, and the backbone has no "
            "argument to change it",
}

# --- the weights: dlbench's canonical names → keras-hub's variable paths ----------------
# (family, dlbench prefix, Keras layer path, layout); "{i}" is a block's index, "{j}" the
# same plus one (ViT's blocks are numbered from 1). Layouts (canonical dense weights are
# (in, out), convolutions OIHW):
#   table   an embedding table (rows, dim): ``{path}/embeddings`` as is
#   norm    LayerNormalization: gamma and beta as is
#   dense   keras.layers.Dense, (in, out) as dlbench: kernel and bias as is
#   qkv     dlbench's fused (dim, 3·dim) q|k|v split into MultiHeadAttention's query, key,
#           value EinsumDense kernels (dim, heads, head_dim) and biases (heads, head_dim):
#           column block k, heads as consecutive head_dim columns (row-major reshape)
#   out     the attention output EinsumDense, kernel (heads, head_dim, dim)
#   conv    Conv2D channels_last, kernel (kh, kw, in, out) from OIHW
#   token   ViT's class token (dim,) → (1, 1, dim)
MAPPING = (
    ("gpt2", "wte", "token_embedding", "table"),
    ("gpt2", "wpe", "position_embedding", "table"),
    ("gpt2", "h{i}.ln1", "transformer_layer_{i}/self_attention_layer_norm", "norm"),
    ("gpt2", "h{i}.attn.qkv", "transformer_layer_{i}/self_attention", "qkv"),
    ("gpt2", "h{i}.attn.out", "transformer_layer_{i}/self_attention/attention_output", "out"),
    ("gpt2", "h{i}.ln2", "transformer_layer_{i}/feedforward_layer_norm", "norm"),
    ("gpt2", "h{i}.mlp.fc", "transformer_layer_{i}/feedforward_intermediate_dense", "dense"),
    ("gpt2", "h{i}.mlp.proj", "transformer_layer_{i}/feedforward_output_dense", "dense"),
    ("gpt2", "ln_f", "layer_norm", "norm"),
    ("vit", "embeddings.patch", "vit_patching_and_embedding/patch_embedding", "conv"),
    ("vit", "embeddings.patch.class_token", "vit_patching_and_embedding/class_token", "token"),
    ("vit", "embeddings.position", "vit_patching_and_embedding/position_embedding", "table"),
    ("vit", "layer{i}.ln1", "vit_encoder/transformer_block_{j}/ln_1", "norm"),
    ("vit", "layer{i}.attn.qkv", "vit_encoder/transformer_block_{j}/mha", "qkv"),
    ("vit", "layer{i}.attn.out", "vit_encoder/transformer_block_{j}/mha/attention_output", "out"),
    ("vit", "layer{i}.ln2", "vit_encoder/transformer_block_{j}/ln_2", "norm"),
    ("vit", "layer{i}.mlp.fc", "vit_encoder/transformer_block_{j}/mlp/dense_1", "dense"),
    ("vit", "layer{i}.mlp.proj", "vit_encoder/transformer_block_{j}/mlp/dense_2", "dense"),
    ("vit", "ln", "vit_encoder/ln", "norm"),
    ("vit", "classifier", "predictions", "dense"),
)
QKV = ("query", "key", "value")


def keras_arrays(shape: Shape, weights) -> dict[str, np.ndarray]:
    """dlbench's canonical weights under keras-hub's variable paths and layouts."""
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()
    heads, head_dim = shape.heads, shape.width // shape.heads

    def take(name: str) -> np.ndarray:
        used.add(name)
        return np.asarray(weights[name])

    for family, ours, theirs, layout in MAPPING:
        if family != shape.family:
            continue
        for i in range(shape.layers) if "{i}" in ours else (None,):
            a = ours.format(i=i)
            b = theirs.format(i=i, j=None if i is None else i + 1)
            if layout == "table":
                out[f"{b}/embeddings"] = take(f"{a}.table")
            elif layout == "norm":
                out[f"{b}/gamma"], out[f"{b}/beta"] = take(f"{a}.gamma"), take(f"{a}.beta")
            elif layout == "dense":
                out[f"{b}/kernel"], out[f"{b}/bias"] = take(f"{a}.weight"), take(f"{a}.bias")
            elif layout == "qkv":
                w, bias, dim = take(f"{a}.weight"), take(f"{a}.bias"), shape.width
                for k, part in enumerate(QKV):
                    out[f"{b}/{part}/kernel"] = w[:, k * dim:(k + 1) * dim].reshape(
                        dim, heads, head_dim)
                    out[f"{b}/{part}/bias"] = bias[k * dim:(k + 1) * dim].reshape(heads, head_dim)
            elif layout == "out":
                out[f"{b}/kernel"] = take(f"{a}.weight").reshape(heads, head_dim, shape.width)
                out[f"{b}/bias"] = take(f"{a}.bias")
            elif layout == "conv":
                out[f"{b}/kernel"] = take(f"{a}.weight").transpose(2, 3, 1, 0)
                out[f"{b}/bias"] = take(f"{a}.bias")
            elif layout == "token":
                out[b] = take(a).reshape(1, 1, -1)
            else:
                raise ValueError(f"unknown layout {layout!r}")
    if unused := sorted(set(weights) - used):
        raise SystemExit(f"canonical weights with no keras-hub variable: {unused}")
    return out


def load_canonical(model, shape: Shape, weights) -> None:
    """Every Keras variable assigned once from the canonical weights, shapes equal."""
    arrays = keras_arrays(shape, weights)
    variables = {v.path: v for v in model.weights}
    if missing := sorted(set(variables) - set(arrays)):
        raise SystemExit(f"keras-hub variables with no canonical weight: {missing}")
    if extra := sorted(set(arrays) - set(variables)):
        raise SystemExit(f"mapped paths keras-hub's model does not have: {extra}")
    for path, variable in variables.items():
        if tuple(variable.shape) != arrays[path].shape:
            raise SystemExit(f"{path}: shape {tuple(variable.shape)} vs canonical "
                             f"{arrays[path].shape}")
        variable.assign(arrays[path].astype(np.float32))


def keras_model(keras, keras_hub, shape: Shape, precision: str):
    """keras-hub's backbone and its task model's head, as one functional Keras model of
    the backbone's inputs → logits, under the precision's dtype policy."""
    if shape.family in NOT_EQUAL:
        raise NotEqual(NOT_EQUAL[shape.family])
    dtype = KERAS_POLICY[precision]
    if shape.family == "gpt2":
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=shape.vocab, num_layers=shape.layers, num_heads=shape.heads,
            hidden_dim=shape.width, intermediate_dim=4 * shape.width, dropout=0.0,
            max_sequence_length=shape.positions, dtype=dtype)
        # GPT2CausalLM's head: the token table, transposed (keras_hub gpt2_causal_lm.py).
        logits = backbone.token_embedding(backbone.output, reverse=True)
    else:
        backbone = keras_hub.models.ViTBackbone(
            image_shape=(shape.image, shape.image, 3), patch_size=shape.patch,
            num_layers=shape.layers, num_heads=shape.heads, hidden_dim=shape.width,
            mlp_dim=4 * shape.width, dropout_rate=0.0, attention_dropout=0.0,
            layer_norm_epsilon=shape.eps, data_format="channels_last", dtype=dtype)
        # ViTImageClassifier's head with pooling="token" (vit_image_classifier.py).
        head = keras.layers.Dense(shape.vocab, dtype=dtype, name="predictions")
        logits = head(backbone.output[:, 0])
    check_epsilons(keras, backbone, shape)
    return keras.Model(backbone.input, logits, name=f"keras_hub_{shape.family}")


class NotEqual(Exception):
    """keras-hub's model computes another function than dlbench's (the reason)."""


def check_epsilons(keras, model, shape: Shape) -> None:
    found = {layer.epsilon for layer in model._flatten_layers(include_self=False)
             if isinstance(layer, keras.layers.LayerNormalization)}
    if found != {shape.eps}:
        raise NotEqual(f"keras-hub's LayerNorm epsilons {sorted(found)} are not dlbench's "
                       f"{shape.eps}")


def keras_inputs(shape: Shape, batch: Batch) -> dict[str, np.ndarray] | np.ndarray:
    """The seeded batch as keras-hub's model takes it, on the host."""
    if shape.family == "vit":
        return np.ascontiguousarray(batch.x.transpose(0, 2, 3, 1), dtype=np.float32)
    tokens = batch.x.astype(np.int32)
    steps = np.arange(tokens.shape[1])[None, :]
    lengths = batch.lengths if batch.lengths is not None else np.full(len(tokens),
                                                                      tokens.shape[1])
    return {"token_ids": tokens, "padding_mask": (steps < lengths[:, None]).astype(np.int32)}


class Twin:
    """keras-hub's model run as Keras runs it on the backend: its forward and a train step
    (AdamW) compiled as the variant says; the first calls of each compile."""

    def __init__(self, keras, backend: str, model, shape: Shape, batch: Batch, precision: str,
                 variant: str, device):
        self.keras, self.backend, self.model, self.precision = keras, backend, model, precision
        ignore = {"ignore_class": -1} if shape.family != "vit" else {}
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, **ignore)
        self.optimizer = keras.optimizers.AdamW(
            learning_rate=ADAMW.learning_rate, weight_decay=ADAMW.weight_decay,
            beta_1=ADAMW.beta1, beta_2=ADAMW.beta2, epsilon=ADAMW.eps, amsgrad=False)
        inputs, labels = keras_inputs(shape, batch), batch.labels.astype(np.int32)
        if backend == "jax":
            import jax
            self.jax = jax
            self.x = jax.device_put(inputs, device)
            self.y = jax.device_put(labels, device)
            self._jax_functions()
        else:
            import tensorflow as tf
            self.tf = tf
            with tf.device(device):
                self.x = tf.nest.map_structure(tf.constant, inputs)
                self.y = tf.constant(labels)
            self._tf_functions(variant == "xla")

    def scope(self):
        """fp32 strict on JAX: every dot at HIGHEST (JAX's GPU default is TF32)."""
        if self.backend == "jax" and self.precision == "fp32":
            return self.jax.default_matmul_precision("highest")
        return contextlib.nullcontext()

    def refresh(self) -> None:
        """Read the model's variables again (after ``load_canonical``): JAX's stateless
        calls take them as arguments; TensorFlow's functions read the variables."""
        if self.backend == "jax":
            self.trainable = [v.value for v in self.model.trainable_variables]
            self.fixed = [v.value for v in self.model.non_trainable_variables]

    def _jax_functions(self) -> None:
        jax, model, loss_fn, optimizer = self.jax, self.model, self.loss_fn, self.optimizer
        self.refresh()

        def forward(trainable, fixed, x):
            return model.stateless_call(trainable, fixed, x, training=False)[0]

        def loss(trainable, fixed, x, y):
            logits, fixed = model.stateless_call(trainable, fixed, x, training=True)
            return loss_fn(y, logits), fixed

        def train(state, x, y):
            trainable, fixed, opt_vars = state
            (value, fixed), grads = jax.value_and_grad(loss, has_aux=True)(trainable, fixed, x, y)
            trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
            return value, (trainable, fixed, opt_vars)

        self._forward = jax.jit(forward)
        self._loss = jax.jit(lambda *args: loss(*args)[0])
        self._train = jax.jit(train, donate_argnums=0)
        self.state = None

    def _tf_functions(self, xla: bool) -> None:
        tf, model, loss_fn, optimizer = self.tf, self.model, self.loss_fn, self.optimizer

        @tf.function(jit_compile=xla)
        def forward(x):
            return model(x, training=False)

        @tf.function(jit_compile=xla)
        def loss(x, y):
            return loss_fn(y, model(x, training=True))

        @tf.function(jit_compile=xla)
        def train(x, y):
            with tf.GradientTape() as tape:
                value = loss_fn(y, model(x, training=True))
            grads = tape.gradient(value, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return value

        self._forward, self._loss, self._train = forward, loss, train

    def forward(self):
        with self.scope():
            if self.backend == "jax":
                return self._forward(self.trainable, self.fixed, self.x)
            return self._forward(self.x)

    def loss(self) -> float:
        with self.scope():
            if self.backend == "jax":
                return float(self._loss(self.trainable, self.fixed, self.x, self.y))
            return float(self._loss(self.x, self.y))

    def train_step(self):
        """A step of training the twin: on JAX a copy of the weights with the optimizer's
        state (donated to each step), on TensorFlow the model itself (timed last)."""
        if self.backend != "jax":
            def tf_step():
                return self._train(self.x, self.y)
            return tf_step
        jax = self.jax
        self.optimizer.build(self.model.trainable_variables)
        copy = jax.tree.map(lambda a: a.copy(), (self.trainable, self.fixed))
        self.state = (*copy, [v.value for v in self.optimizer.variables])

        def jax_step():
            with self.scope():
                value, self.state = self._train(self.state, self.x, self.y)
            return value
        return jax_step

    def step(self, measure_name: str):
        return self.forward if measure_name == "forward" else self.train_step()


def to_host(keras, tensor) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32")))


def identity(keras, model: ir.Model, weights, batch: Batch, prepared, twin: Twin,
             precision: str, float64: bool) -> dict[str, Any]:
    """Logits and losses within twice each side's derived bound against float64
    (models/error_bounds.py), the twin's logits of the precision's dtype; the twin's fp32
    logits and loss against models.reference's float64 within one bound where ``float64``."""
    bound = bounds(model, batch.size, precision)
    valid = None
    if batch.lengths is not None:
        valid = np.arange(batch.x.shape[1])[None, :] < batch.lengths[:, None]
    logits = twin.forward()
    dtype = keras.backend.standardize_dtype(logits.dtype)
    theirs = to_host(keras, logits)
    ours = np.asarray(prepared.forward_output(), np.float64)
    their_loss = twin.loss()
    our_loss = prepared.gradient_summary(False).loss
    check = {"output": relative_difference(ours, theirs, valid), "output_bound": 2 * bound.output,
             "loss": abs(our_loss - their_loss) / abs(their_loss), "loss_bound": 2 * bound.loss,
             "dtype": dtype, "wanted_dtype": OUTPUT_DTYPE[precision],
             "float64_output": None, "float64_loss": None}
    same = (check["output"] <= check["output_bound"] and check["loss"] <= check["loss_bound"]
            and dtype == OUTPUT_DTYPE[precision])
    if float64 and precision == "fp32":
        truth = reference.forward(model, weights, batch)
        check["float64_output"] = relative_difference(theirs, truth, valid)
        exact = reference.loss(model, weights, batch)
        check["float64_loss"] = abs(their_loss - exact) / abs(exact)
        same = same and check["float64_output"] <= bound.output \
            and check["float64_loss"] <= bound.loss
    return check | {"same": bool(same)}


def time_pair(prepared, twin: Twin, measure_name: str, settings, kernels: int = 0
              ) -> tuple[dict[str, list[float]], dict[str, Any] | None]:
    """Both sides' medians (ms) in A-B-B-A order, after each side's untimed compiling
    calls; then, where ``kernels`` > 0, both sides' kernels over that many steps each
    (kernel_pair)."""
    from suites.stats.timer import measure
    steps = {"dlbench": prepared.step(measure_name), TWIN: twin.step(measure_name)}
    for step in steps.values():
        for _ in range(UNTIMED_RUNS):
            prepared.sync(step())
    medians: dict[str, list[float]] = {"dlbench": [], TWIN: []}
    for label in ("dlbench", TWIN, TWIN, "dlbench"):
        medians[label].append(measure(steps[label], prepared.sync, settings).median_s * 1e3)
    traced = kernel_pair(steps, prepared.sync, kernels, TWIN, measure_name,
                         {label: sum(runs) / len(runs) for label, runs in medians.items()}) \
        if kernels else None
    return medians, traced


def run_case(ctx, name: str, model: ir.Model, batch_size: int, precision: str, variant: str,
             measures: list[str], settings, float64: bool, write,
             kernels: int = 0) -> list[dict[str, Any]]:
    """One model × precision × variant: identity, then each measure's timing, as rows."""
    from adapters.base import CaseConfig, Unsupported
    adapter, keras, keras_hub, backend = ctx
    shape = shape_of(model)
    base = {"model": name, "batch": batch_size, "steps": int(model.input.shape[0])
            if model.input.kind == "tokens" else None, "precision": precision,
            "variant": variant, "backend": backend}
    prepared = twin = None
    rows = []

    def failure(status: str, reason: str, said: str = "") -> None:
        row = {**base, "measure": ",".join(measures), "status": status, "reason": reason}
        print(f"{name} {precision} {variant}: {said or status}: {reason}", flush=True)
        rows.append(row)
        write(row)

    try:
        built = keras_model(keras, keras_hub, shape, precision)
        weights = canonical_weights(model)
        batch = make_batch(model, batch_size)
        load_canonical(built, shape, weights)
        prepared = adapter.prepare(model, weights, batch, CaseConfig(precision, variant))
        twin = Twin(keras, backend, built, shape, batch, precision, variant, adapter.device)
        check = identity(keras, model, weights, batch, prepared, twin, precision, float64)
        attention = {"dlbench": prepared.extra.get("attention"),
                     TWIN: "keras.ops.dot_product_attention, flash attention "
                           f"{'on' if keras.config.is_flash_attention_enabled() else 'default'}"}
        print(f"{name} {precision} {variant}: output diff {check['output']:.1e} (bound "
              f"{check['output_bound']:.1e}), loss diff {check['loss']:.1e} (bound "
              f"{check['loss_bound']:.1e}), logits {check['dtype']}"
              + (f", keras vs float64 {check['float64_output']:.1e} / "
                 f"{check['float64_loss']:.1e}" if check["float64_output"] is not None else "")
              + ("" if check["same"] else "  DIFFER"), flush=True)
        for measure_name in measures:
            medians, traced = time_pair(prepared, twin, measure_name, settings, kernels)
            ours, theirs = (sum(medians[k]) / 2 for k in ("dlbench", TWIN))
            row = {**base, "measure": measure_name, "status": "ok", "dlbench_ms": ours,
                   f"{TWIN}_ms": theirs, "ratio": ours / theirs, "runs_ms": medians,
                   "same_function": check["same"], "identity": check, "attention": attention}
            if traced is not None:
                row["kernels"] = traced
            print(f"  {measure_name:<10} dlbench {ours:10.3f} ms  keras {theirs:10.3f} ms  "
                  f"ratio {ours / theirs:.3f}", flush=True)
            if traced is not None:
                print(f"    kernels: {kernel_said(traced)}", flush=True)
            rows.append(row)
            write(row)
    except Unsupported as reason:
        # cudnn_attention in fp32: dlbench's adapter refuses it, with the reason.
        failure("unsupported", str(reason))
    except NotEqual as reason:
        failure("not_equal", str(reason), "no twin")
    except (RuntimeError, MemoryError, ValueError) as error:
        # Failures are data: an out-of-memory or a kernel's refusal is a row.
        failure("oom" if adapter.is_out_of_memory(error) else "failed", one_line(error))
    finally:
        if prepared is not None:
            prepared.close()
        del twin, prepared
        keras.backend.clear_session()
    return rows


def default_backend() -> str:
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen:
        return chosen
    return "tensorflow" if importlib.util.find_spec("tensorflow") else "jax"


def import_keras(backend: str):
    """Keras on ``backend`` and keras-hub; SystemExit(2) when one is missing or Keras was
    imported on another backend before."""
    os.environ.setdefault("KERAS_BACKEND", backend)
    try:
        import keras
        import keras_hub
    except ImportError as error:
        print(f"error: {error}. This comparison needs keras-hub and {backend} (noxfile.py "
              f"COMPARISON_REQUIREMENTS); nothing was timed.", file=sys.stderr)
        raise SystemExit(2) from None
    if keras.backend.backend() != backend:
        print(f"error: Keras runs on {keras.backend.backend()!r}, not {backend!r} (set "
              f"KERAS_BACKEND={backend} before Keras is imported)", file=sys.stderr)
        raise SystemExit(2)
    return keras, keras_hub


def import_frameworks(backend: str, device: str):
    """dlbench's adapter first (it sets the framework's process-wide flags before its first
    op), then Keras on ``backend`` and keras-hub."""
    os.environ["KERAS_BACKEND"] = backend
    try:
        if backend == "jax":
            from adapters.jax import JaxAdapter as Adapter
        else:
            from adapters.tf import TFAdapter as Adapter
    except ImportError as error:
        print(f"error: {error}; nothing was timed.", file=sys.stderr)
        raise SystemExit(2) from None
    from adapters.base import RunConfig
    adapter = Adapter(RunConfig(device, len(os.sched_getaffinity(0)), 1))
    return (adapter, *import_keras(backend))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="Keras's backend and dlbench's adapter (default: KERAS_BACKEND, "
                             "else the framework installed)")
    parser.add_argument("--device", default="gpu", choices=("gpu", "cuda", "cpu"))
    parser.add_argument("--models", default=",".join(MODELS),
                        help="gpt2, bert_base, vit_b16 or their _tiny versions")
    parser.add_argument("--batch", type=int, help="every model's batch (default: the suite's, "
                        "GPT-2 8, BERT 32, ViT 128; 2 for the tiny models)")
    parser.add_argument("--steps", type=int, help="GPT-2's and BERT's sequence length "
                        "(default: their context, 1024 and 512)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--variants", help="dlbench's variants (default: jit, and "
                        "cudnn_attention on a GPU, on JAX; xla "
                        "and graph on TensorFlow)")
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
    backend = args.backend or default_backend()
    if backend not in BACKENDS:
        parser.error(f"KERAS_BACKEND={backend!r}: choose from {BACKENDS}")
    try:
        precisions = parse_list(args.precisions, PRECISIONS, "precisions")
        device = "gpu" if args.device in ("gpu", "cuda") else "cpu"
        variants = parse_list(args.variants or ",".join(default_variants(backend, device)),
                              VARIANTS[backend], f"variants on {backend}")
        measures = parse_list(args.measures, MEASURES, "measures")
        models = {name: model_for(name, args.steps) for name in args.models.split(",")}
    except (argparse.ArgumentTypeError, KeyError, ValueError) as error:
        parser.error(str(error).strip("'\""))
    if not all(is_transformer(m) for m in models.values()):
        parser.error("--models: only the transformers (gpt2, bert_base, vit_b16, *_tiny)")
    adapter, keras, keras_hub = import_frameworks(backend, device)
    from suites.stats.timer import TimerSettings
    settings = TimerSettings(warmup=args.warmup, min_samples=args.min_samples, max_samples=400,
                             rel_ci=0.005, budget_s=args.budget)
    env = adapter.environment() | {"keras_version": keras.__version__,
                                   "keras_hub_version": keras_hub.__version__,
                                   "keras_backend": backend}
    print(f"{backend} {env['framework_version']}, keras {keras.__version__}, keras-hub "
          f"{keras_hub.__version__} on {env['gpu_model'] or 'CPU'}; {', '.join(precisions)}; "
          f"{', '.join(variants)}")
    log = ResultsLog(args.out, RESULTS_FILE, env, argv)
    write = log.write

    rows = []
    ctx = (adapter, keras, keras_hub, backend)
    for name, model in models.items():
        batch = args.batch or SUITE_BATCH.get(name, 2)
        flops = analyse(model).flops * batch
        float64 = wants_float64(args.float64, flops)
        for precision in precisions:
            for variant in variants:
                rows += run_case(ctx, name, model, batch, precision, variant, measures,
                                 settings, float64, write, args.kernels)
    print_table(rows, TWIN, "keras")
    log.close()
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
