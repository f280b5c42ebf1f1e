"""TensorFlow adapter: ``tf.function`` graphs by default (TensorFlow's standard fast path:
Grappler with oneDNN or Eigen kernels on CPU, as the row records, cuDNN on GPU), eager
execution and XLA (``jit_compile=True``) as variants. Epochs pass their batches to one
traced function; train_step runs tape and Keras optimizer (the network's declared one:
Keras's SGD or AdamW) in one function of the variant, on a copy of the body; profiles come from
TensorFlow's own profiler (tf.profiler.experimental), read from the XPlane trace it writes
(profile.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from adapters.base import (
    Adapter,
    CaseConfig,
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
from adapters.tf.network import (
    ATTENTION,
    NCHW,
    NHWC,
    Context,
    Conv2d,
    Decode,
    Dense,
    Layout,
    Lengths,
    Network,
    build_network,
    grouped_conv_runs,
)
from adapters.tf.profile import profile_steps
from adapters.tf.settings import describe_settings, settings_in_force
from models.families.transformer import not_a_decoder
from models.inputs import Batch
from models.ir import LSTM as IRLSTM
from models.ir import Conv2d as IRConv2d
from models.ir import Model, SelfAttention, all_nodes
from models.optimizers import AdamW, Optimizer, SGDMomentum, optimizer_for
from models.weights import Weights
from suites.instruments.profiling import WARMUP_RUNS


class _CasesTraceOnPurpose(logging.Filter):
    """Every case builds its own tf.functions, which trace once each; TensorFlow's
    "frequent retracing" warning (keyed on the Python code, not the function object)
    would blame that on the adapter in every worker log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


tf.get_logger().addFilter(_CasesTraceOnPurpose())

# How each variant runs a step; keyword arguments (an input signature) go to tf.function.
# Nothing is traced in prepare(): a tf.function traces (and XLA compiles) on its first
# call, which the harness times as the first call.
COMPILE: dict[str, Callable[..., Callable]] = {
    "graph": lambda fn, **options: tf.function(fn, **options),
    "eager": lambda fn, **options: fn,
    "xla": lambda fn, **options: tf.function(fn, jit_compile=True, **options),
    "nchw": lambda fn, **options: tf.function(fn, **options),
    "nhwc": lambda fn, **options: tf.function(fn, **options),
}

# The activation layout of image networks, per device, unless the variant names one.
# CPU: NHWC, the only layout of TensorFlow's CPU convolutions and pooling. GPU: NHWC too,
# Keras's default (channels_last), and not slower: keras.applications in TF 2.21 on an
# H100, fp32, batch 16, ran ResNet50 forward in 15.1 ms channels_last vs 17.1 ms
# channels_first (gradient 46.6 vs 46.9) and VGG16 20.1 vs 20.0 (41.2 vs 41.1). In graph
# mode Grappler's layout optimiser hands cuDNN NCHW for fp32 convolutions anyway (the
# profiles' kernels are "..._nchwkcrs_nchw_..."), converting at the boundaries with
# Transpose kernels (ShuffleInTensor3Simple: about 3% of a ResNet-50 gradient profile).
# The nchw/nhwc variants fix the layout, to measure the other one.
DEFAULT_LAYOUT = {"cpu": NHWC, "gpu": NHWC}
LAYOUT_VARIANTS = {"nchw": NCHW, "nhwc": NHWC}


def layout_for(device: str, variant: str) -> Layout:
    """The activation layout a case runs in; raises Unsupported where it cannot run."""
    layout = LAYOUT_VARIANTS.get(variant, DEFAULT_LAYOUT[device])
    if device == "cpu" and not layout.channels_last:
        raise Unsupported("TensorFlow's CPU convolutions and pooling run NHWC only "
                          "(\"The Conv2D op currently only supports the NHWC tensor format "
                          "on the CPU\")")
    return layout


def set_threads(intra: int, inter: int) -> None:
    """Thread pools are fixed at TensorFlow's first operation (tf.config.threading docs);
    the worker creates the adapter first. A second adapter in the same process (tests)
    may only ask for the counts already in force."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        current = (tf.config.threading.get_intra_op_parallelism_threads(),
                   tf.config.threading.get_inter_op_parallelism_threads())
        if current != (intra, inter):
            raise RuntimeError(f"TensorFlow already runs with (intra, inter) = {current} "
                               f"threads; ({intra}, {inter}) needs a new process") from None


def apply_precision(precision: str, on_gpu: bool) -> None:
    """fp32 is strict: TensorFlow turns TF32 on by default on Ampere and newer GPUs
    (tf.config.experimental.enable_tensor_float_32_execution docs), so it is switched
    off unless the case asks for it. bf16 is mixed precision, handled by the network."""
    tf32 = precision == "tf32"
    if tf32 and not on_gpu:
        raise Unsupported("tf32 is a GPU tensor-core mode; CPUs have no TF32")
    tf.config.experimental.enable_tensor_float_32_execution(tf32)


# What each row of a network with an LSTM records of the kernel that ran it.
LSTM_KERNELS = {True: "cuDNN's fused LSTM (CudnnRNNV3) where Keras may use it",
                False: "Keras's masked tf.while_loop"}


def cudnn_lstm(on_gpu: bool, variant: str, precision: str) -> bool:
    """Whether Keras may pick cuDNN's fused LSTM (see network.LSTMLayer): only on a GPU
    (Keras looks for any visible GPU, not the one the case runs on), not under XLA, which
    cannot compile the cuDNN op, and never in bfloat16. TensorFlow 2.21's bfloat16
    CudnnRNNV3 computes the forward right but not its gradients: on an H200, the sentiment
    LSTM's gradient norms (lstm.w_ih) came out 0.0 at batch 128 with padded sequences,
    1.4e4 with every sequence full length and 1.5e21 at batch 16, where the masked loop
    gives 0.0560 in bfloat16 and cuDNN 0.0560 in float32; on an H100 they were NaN."""
    if not on_gpu or variant == "xla":
        return False
    return precision != "bf16"


def _placed(device: str, array: np.ndarray) -> tf.Tensor:
    with tf.device(device):
        return tf.identity(tf.constant(array))


def place_batch(model: Model, batch: Batch, device: str, layout: Layout = NHWC
                ) -> dict[str, Any]:
    """A batch as the computations take it: "x" (images in ``layout``), and "labels" and
    "lengths" where the batch has them. A dict, because tf.function input signatures
    cannot hold None for the parts a model has no use for."""
    x = batch.x
    if model.input.kind == "image":
        x = layout.from_nchw(x)  # NCHW -> the network's layout, once
    inputs: dict[str, Any] = {"x": _placed(device, x)}
    if batch.labels is not None:
        inputs["labels"] = _placed(device, batch.labels)
    if batch.lengths is not None:
        with tf.device(device):
            inputs["lengths"] = Lengths.of(batch.lengths, batch.x.shape[1])
    return inputs


def epoch_signature(epoch: list[dict[str, Any]]) -> dict[str, Any]:
    """The input signature that fits every batch of an epoch: a dimension that differs
    between batches (the padded length T of token batches) is None, every other one
    stays static, so fixed-size inputs trace the same graph as the single-batch step."""

    def fitting(*tensors: tf.Tensor) -> tf.TensorSpec:
        shapes = [tensor.shape.as_list() for tensor in tensors]
        dims = [size if all(shape[axis] == size for shape in shapes) else None
                for axis, size in enumerate(shapes[0])]
        return tf.TensorSpec(dims, tensors[0].dtype)

    return tf.nest.map_structure(fitting, *epoch)


class ConvBackward:
    """The kernels TensorFlow's autodiff runs for a convolution's input and weight (+
    bias) gradients, given a precomputed all-ones output gradient: convnet-benchmarks'
    updateGradInput / accGradParameters, with nothing else timed. (A tape cannot be
    replayed: a taped step would time the forward pass too.)"""

    def __init__(self, layer: Conv2d, x: tf.Tensor, dtype: tf.DType, device: str):
        self.device, self.layer, self.has_bias = device, layer, layer.bias is not None
        self.conv = dict(strides=layer.strides, padding=layer.padding,
                         data_format=layer.layout.name)
        self.groups = layer.groups   # > 1 only where the grouped kernels are missing
        self.axis = layer.layout.channel_axis
        with tf.device(device):
            self.x = tf.cast(layer.pad(x), dtype)  # the input the convolution kernel sees
            self.w = tf.cast(tf.convert_to_tensor(layer.weight), dtype)
            # The output's shape from shape inference alone: nothing runs a forward
            # kernel (which on the CPU would not exist for NCHW).
            shape = tf.function(lambda x, w: tf.nn.conv2d(x, w, **self.conv)) \
                .get_concrete_function(self.x, self.w).structured_outputs.shape
            self.g = tf.ones(shape, dtype)
            self.x_shape, self.w_shape = tf.shape(self.x), tf.shape(self.w)

    def grad_input(self) -> tf.Tensor:
        with tf.device(self.device):
            if self.groups == 1:
                dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=self.x_shape, filter=self.w,
                                                    out_backprop=self.g, **self.conv)
            else:
                xs = tf.split(self.x, self.groups, axis=self.axis)
                dx = tf.concat([tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=tf.shape(x), filter=w, out_backprop=g, **self.conv)
                    for x, w, g in zip(xs, tf.split(self.w, self.groups, axis=-1),
                                       tf.split(self.g, self.groups, axis=self.axis),
                                       strict=True)],
                    axis=self.axis)
            return self.layer.crop(dx)  # tf.pad's gradient

    def grad_weight(self) -> tuple[tf.Tensor, ...]:
        with tf.device(self.device):
            if self.groups == 1:
                dw = tf.raw_ops.Conv2DBackpropFilter(input=self.x, filter_sizes=self.w_shape,
                                                     out_backprop=self.g, **self.conv)
            else:
                ws = tf.split(self.w, self.groups, axis=-1)
                dw = tf.concat([tf.raw_ops.Conv2DBackpropFilter(
                    input=x, filter_sizes=tf.shape(w), out_backprop=g, **self.conv)
                    for x, w, g in zip(tf.split(self.x, self.groups, axis=self.axis), ws,
                                       tf.split(self.g, self.groups, axis=self.axis),
                                       strict=True)],
                    axis=-1)
            if not self.has_bias:
                return (dw,)
            return dw, tf.raw_ops.BiasAddGrad(out_backprop=self.g,
                                              data_format=self.conv["data_format"])


class DenseBackward:
    """MatMul's gradient kernels for a single dense layer, as ConvBackward."""

    def __init__(self, layer: Dense, x: tf.Tensor, dtype: tf.DType, device: str):
        self.device, self.has_bias = device, layer.bias is not None
        with tf.device(device):
            self.x = tf.cast(x, dtype)
            self.w = tf.cast(tf.convert_to_tensor(layer.weight), dtype)
            self.g = tf.ones_like(tf.matmul(self.x, self.w))

    def grad_input(self) -> tf.Tensor:
        with tf.device(self.device):
            return tf.matmul(self.g, self.w, transpose_b=True)

    def grad_weight(self) -> tuple[tf.Tensor, ...]:
        with tf.device(self.device):
            dw = tf.matmul(self.x, self.g, transpose_a=True)
            return (dw, tf.reduce_sum(self.g, axis=0)) if self.has_bias else (dw,)


@dataclass(frozen=True)
class Training:
    """train_step's copy of the network: a body on tf.Variables of its own, started from
    the canonical ones, and the Keras optimizer that updates them (its slot variables
    already built), so the canonical network never changes."""

    network: Network
    optimizer: keras.optimizers.Optimizer
    variables: list[tf.Variable]


def make_optimizer(declared: Optimizer) -> tuple[keras.optimizers.Optimizer, str]:
    """Keras's own optimizer for the declared one (models/optimizers.py), and its
    description for the row. No LossScaleOptimizer under bf16: Keras wraps the optimizer
    in one only for the "mixed_float16" policy (keras/src/trainers/trainer.py,
    Trainer.compile); bfloat16 has float32's exponent range, and the variables and
    gradients here are float32.

    Keras's SGD keeps v <- m*v - lr*g, w <- w + v: heavy-ball momentum with the buffer
    scaled by -lr, the same update for a constant rate.

    Keras's AdamW (Keras 3.15: keras/src/optimizers/adamw.py, an Adam with weight_decay)
    first decays every variable, w <- w - w*wd*lr (the TensorFlow backend's
    ``_apply_weight_decay``, before the update step; no variable is excluded unless
    ``exclude_from_weight_decay`` is called, so every trainable parameter decays), then
    takes Adam's step in Kingma & Ba's "efficient" order (keras/src/optimizers/adam.py
    ``update_step``): alpha = lr*sqrt(1-b2^t)/(1-b1^t), w <- w - alpha*m/(sqrt(v) + eps).
    That adds eps to sqrt(v) before the bias correction, i.e. it computes
    m_hat/(sqrt(v_hat) + eps/sqrt(1-b2^t)) where torch.optim.AdamW and optax.adamw compute
    m_hat/(sqrt(v_hat) + eps): the same hyper-parameters, an epsilon 32 times larger at
    the first step (1/sqrt(1-0.999)), which matters only where |g| is within a few
    multiples of 3e-7 (``AdamW.update``'s ``epsilon_hat``; ``TFAdapter.adamw_epsilon_hat``)."""
    if isinstance(declared, SGDMomentum):
        return (keras.optimizers.SGD(learning_rate=declared.learning_rate,
                                     momentum=declared.momentum, nesterov=False),
                f"{declared.describe()}: keras.optimizers.SGD")
    if isinstance(declared, AdamW):
        return (keras.optimizers.AdamW(learning_rate=declared.learning_rate,
                                       weight_decay=declared.weight_decay,
                                       beta_1=declared.beta1, beta_2=declared.beta2,
                                       epsilon=declared.eps, amsgrad=False),
                f"{declared.describe()}: keras.optimizers.AdamW, epsilon added to sqrt(v) "
                f"before the bias correction")
    raise Unsupported(f"no Keras optimizer for {declared!r}")


class TFGenerator:
    """Greedy decoding with a preallocated key/value cache (adapters.base.Generator): the
    body's own layers over the new steps only (network.Decode), the caches fixed-shape
    variables (max_length, heads, d) per attention layer in the compute dtype, written in
    place. The step runs as the variant runs a step (COMPILE): a tf.function traces, and
    XLA compiles, once for the prefill's shape and once for the decode step's (the
    position is an int32 tensor, never a Python int, which would retrace per value)."""

    def __init__(self, prepared: TFPrepared, max_length: int):
        self.prepared = prepared
        self.capacity = max_length
        with tf.device(prepared.device):
            self.caches = {
                node.name: tuple(tf.Variable(tf.zeros((max_length, node.heads, node.dim // node.heads),
                                                      prepared.dtype), trainable=False)
                                 for _ in range(2))
                for node in all_nodes(prepared.model) if isinstance(node, SelfAttention)}
        self.step = COMPILE[prepared.variant](self._step)
        self.length = 0
        self.logits: tf.Tensor | None = None

    def _step(self, tokens: tf.Tensor, start: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The last new step's logits and their argmax, on the device."""
        with tf.device(self.prepared.device):
            ctx = Context(False, self.prepared.dtype, None, Decode(start, self.caches))
            logits = self.prepared.body(tokens, ctx)[0, -1]
            return logits, tf.argmax(logits, output_type=tf.int32)

    def _run(self, tokens: np.ndarray) -> int:
        steps = tokens.shape[1]
        if self.length + steps > self.capacity:
            raise ValueError(f"position {self.length + steps} beyond the cache's {self.capacity}")
        self.logits, token = self.step(tf.constant(tokens), tf.constant(self.length, tf.int32))
        self.length += steps
        return int(token)   # the copy to the host waits for the device

    def prefill(self, prompt: np.ndarray) -> int:
        self.length = 0
        return self._run(np.asarray(prompt, dtype=np.int32)[None])

    def decode(self, token: int) -> int:
        return self._run(np.array([[token]], dtype=np.int32))

    def last_logits(self) -> np.ndarray:
        return tf.cast(self.logits, tf.float64).numpy()


class TFPrepared(Prepared):
    def __init__(self, adapter: TFAdapter, model: Model, weights: Weights, batch: Batch,
                 case: CaseConfig, variant: str):
        super().__init__()
        self.device = adapter.device
        self.on_gpu = adapter.config.device == "gpu"
        self.model = model
        self.variant = variant
        self.layout = layout_for(adapter.config.device, variant)
        bf16 = case.precision == "bf16"
        # Mixed precision as Keras's "mixed_bfloat16" policy: bfloat16 compute, float32
        # variables (cast where used), float32 loss.
        self.dtype = tf.bfloat16 if bf16 else tf.float32
        with tf.device(self.device):
            # XLA compiles grouped convolutions itself; the other variants run TensorFlow's
            # kernels, which may lack groups (network.grouped_conv_runs).
            grouped = any(isinstance(n, IRConv2d) and n.groups > 1 for n in all_nodes(model))
            split_groups = grouped and variant != "xla" and not grouped_conv_runs(self.device)
            self.build_options = dict(
                cudnn_lstm=cudnn_lstm(self.on_gpu, variant, case.precision),
                policy="mixed_bfloat16" if bf16 else "float32", layout=self.layout,
                split_groups=split_groups)
            self.network = build_network(model, weights, **self.build_options)
            self.frozen, self.body, self.params = (self.network.frozen, self.network.body,
                                                   self.network.params)
        self.inputs = place_batch(model, batch, self.device, self.layout)
        self.x = self.inputs["x"]
        self.host_x = _placed("/CPU:0", self.x.numpy())
        self.variables = list(self.params.values())
        # Recorded in every row: the thread pools in force, the activation layout, and
        # the precision and kernel-selection settings read back after apply_precision.
        self.extra = {"intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
                      "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
                      "layout": self.layout.name if model.input.kind == "image" else "NC",
                      "tf_settings": settings_in_force(self.on_gpu),
                      **({"grouped_conv_split": split_groups} if grouped else {}),
                      **({"lstm_kernel": LSTM_KERNELS[self.build_options["cudnn_lstm"]]}
                         if any(isinstance(n, IRLSTM) for n in all_nodes(model)) else {}),
                      **({"attention": f"{ATTENTION}, {variant}"}
                         if has_attention(model) else {})}
        compile_fn = COMPILE[variant]
        self.run_forward = compile_fn(self._forward)
        self.run_gradient = compile_fn(self._gradient)
        self.epoch_runs: dict[str, Callable] = {}   # epoch_step's compiled computations
        # train_step's copy and its compiled step, made on first use: no other measure
        # holds a second copy of the weights.
        self.training: Training | None = None
        self.run_train: Callable | None = None
        self.run_serve: Callable | None = None   # serve's computation, made at its first call

    # --- the computations, on a batch placed by place_batch ---------------------------
    def _context(self, training: bool, inputs: dict[str, Any]) -> Context:
        return Context(training, self.dtype, inputs.get("lengths"))

    def _features(self, inputs: dict[str, Any]) -> tf.Tensor:
        """The body's input: the frozen prefix's output (inference mode, outside any
        tape, so it gets no gradient), or the batch itself."""
        x = inputs["x"]
        x = x if self.model.input.kind == "tokens" else tf.cast(x, self.dtype)
        return self.frozen(x, self._context(False, inputs)) if self.model.frozen else x

    def _loss(self, out: tf.Tensor, features: tf.Tensor, inputs: dict[str, Any]) -> tf.Tensor:
        out = tf.cast(out, tf.float32)  # the loss in float32, also under mixed precision
        kind = self.model.loss.kind
        if kind == "softmax_xent":
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=inputs["labels"], logits=out))
        if kind == "mse_reconstruction":
            return tf.reduce_mean(tf.square(out - tf.cast(features, tf.float32)))
        if kind == "token_xent":
            # The mean over the labelled steps (label >= 0) of the batch, as PyTorch's
            # cross_entropy with ignore_index=-1 (models/ops/losses.py token_xent). The
            # ignored steps get a valid dummy label 0, then weight 0: the op rejects -1
            # (an error on the CPU, NaN on a GPU, per its docs).
            labels = inputs["labels"]
            counted = labels >= 0
            per_step = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.where(counted, labels, tf.zeros_like(labels)), logits=out)
            weight = tf.cast(counted, tf.float32)
            return tf.reduce_sum(per_step * weight) / tf.reduce_sum(weight)
        return tf.reduce_sum(out)

    def _forward_on(self, inputs: dict[str, Any]) -> tf.Tensor:
        with tf.device(self.device):
            return self.body(self._features(inputs), self._context(False, inputs))

    def _gradient_on(self, inputs: dict[str, Any], body: Callable | None = None,
                     variables: list[tf.Variable] | None = None
                     ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """The loss and its gradients for the canonical body, or for ``body`` over
        ``variables`` (train_step's copy)."""
        body = self.body if body is None else body
        variables = self.variables if variables is None else variables
        with tf.device(self.device):
            features = self._features(inputs)
            with tf.GradientTape() as tape:
                out = body(features, self._context(True, inputs))
                loss = self._loss(out, features, inputs)
            return loss, tape.gradient(loss, variables)

    # The single-batch steps capture the seeded batch (no arguments to trace).
    def _forward(self) -> tf.Tensor:
        return self._forward_on(self.inputs)

    def _gradient(self) -> tuple[tf.Tensor, list[tf.Tensor]]:
        return self._gradient_on(self.inputs)

    def _training(self) -> Training:
        """train_step's copy, made once: the body rebuilt on new variables that start as
        device-side copies of the canonical ones, and the optimizer's momentum buffers
        built here, so no timed call creates a variable (tf.function may create variables
        on its first trace only). Batch norm is the gradient path's: fused batch norm with
        batch statistics, a functional op, so the copy's running statistics stay the
        canonical ones, as in every gradient pass (network.BatchNorm)."""
        if self.training is None:
            with tf.device(self.device):
                network = build_network(self.model, {}, **self.build_options,
                                        source=self.network)
                variables = list(network.params.values())
                optimizer, self.extra["optimizer"] = make_optimizer(optimizer_for(self.model))
                optimizer.build(variables)
            self.training = Training(network, optimizer, variables)
        return self.training

    def _train(self) -> tf.Tensor:
        """One training iteration in one graph, as a custom TensorFlow training loop
        writes it (tf.function around the tape and ``apply_gradients``): forward in
        training mode, loss, backward, and the optimizer's update of the copy's variables. Under
        bf16 the gradients are float32 (the tape differentiates through the casts of the
        float32 variables), so the update runs in float32 on the master weights."""
        training = self.training
        loss, grads = self._gradient_on(self.inputs, training.network.body,
                                        training.variables)
        with tf.device(self.device):
            training.optimizer.apply_gradients(zip(grads, training.variables, strict=True))
        return loss

    def step_forward(self) -> Callable[[], Any]:
        return self.run_forward

    def step_gradient(self) -> Callable[[], Any]:
        return self.run_gradient

    def step_train(self) -> Callable[[], Any]:
        self._training()
        if self.run_train is None:
            # One function for the case, traced (and XLA-compiled) on its first call
            # and reused by every later call: the loss is its handle for sync().
            self.run_train = COMPILE[self.variant](self._train)
        return self.run_train

    def trained_weights(self) -> dict[str, np.ndarray]:
        network = self._training().network
        return {name: network.canonical(name, var.numpy())
                for name, var in network.params.items()}

    def canonical_gradient(self, name: str, grad: np.ndarray) -> np.ndarray:
        """A gradient of ``loss_and_gradients`` in the IR's layout: the inverse of the
        layout its variable was loaded in (network.ParamLayout)."""
        return self.network.canonical(name, grad)

    def step_grad_input(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_input")

    def step_grad_weight(self) -> Callable[[], Any]:
        return self._single_layer_backward("grad_weight")

    def _single_layer_backward(self, measure: str) -> Callable[[], Any]:
        if len(self.model.body) != 1 or self.model.frozen:
            raise Unsupported("grad_input and grad_weight are single-layer measures")
        layer = self.body.layers[0]
        kinds = {Conv2d: ConvBackward, Dense: DenseBackward}
        if type(layer) not in kinds:
            raise Unsupported(f"no single-layer backward kernels for "
                              f"{type(self.model.body[0]).__name__}")
        kernels = kinds[type(layer)](layer, self.x, self.dtype, self.device)
        return COMPILE[self.variant](kernels.grad_input if measure == "grad_input"
                                     else kernels.grad_weight)

    def step_transfer(self) -> Callable[[], Any]:
        require_device_memory(self.on_gpu)
        host_x, device = self.host_x, self.device
        self.extra["host_buffer"] = ("pageable (a tf.Tensor in ordinary host memory), "
                                     "copied from a new handle each call: an identity on "
                                     "the CPU (an op dispatch, no host copy), then the copy")

        def transfer():
            # An op on the GPU whose input lives in host memory: TensorFlow copies
            # the pageable host buffer in (Li et al. 2016, Fig. 7). An identity of
            # host_x itself copied nothing after the first call: H100 and H200 rows
            # timed 0.04-0.07 ms for 9.6-67 MB, and CUPTI saw no copy in those calls
            # (suites/harness/device_pass.py mark_idle_steps); most likely eager TensorFlow's
            # mirroring, where a handle keeps its first copy on the GPU for later ops
            # there. Each call therefore copies from a new handle: an identity on
            # the CPU, which shares host_x's buffer (no host copy) and has no GPU
            # copy yet.
            with tf.device("/CPU:0"):
                fresh = tf.identity(host_x)
            with tf.device(device):
                return tf.identity(fresh)
        return transfer

    def step_transfer_pinned(self) -> Callable[[], Any]:
        raise Unsupported("TensorFlow has no public API for page-locked host buffers: "
                          "'transfer' times its copy from a numpy array (pageable memory)")

    def epoch_step(self, measure: str, batches: list[Batch]) -> Callable[[], Any]:
        computations = {"forward": self._forward_on, "gradient": self._gradient_on}
        if measure not in computations:
            raise Unsupported(f"no epoch of {measure}")
        # The whole epoch in device memory, placed once (Bahrampour et al. 2016, 4.4).
        epoch = [place_batch(self.model, batch, self.device, self.layout) for batch in batches]
        # The batches are arguments, not captured tensors, and the signature leaves the
        # padded length open: the epoch traces one graph on its first batch and every
        # later batch and epoch reuses it. (Without a signature tf.function would trace
        # once per distinct length, each a full LSTM graph, which the second epoch would
        # still reuse but the first would pay for many times over.) XLA needs static
        # shapes and compiles the traced graph once per length it meets, also cached.
        run = COMPILE[self.variant](computations[measure],
                                    input_signature=[epoch_signature(epoch)])
        self.epoch_runs[measure] = run

        def run_epoch():
            handle = None
            for inputs in epoch:
                handle = run(inputs)
            return handle
        return run_epoch

    def profile(self, measure: str, iterations: int) -> Profile:
        step = self.step(measure)
        for _ in range(WARMUP_RUNS):
            self.sync(step())
        return profile_steps(step, self.sync, measure, iterations, self.on_gpu)

    def sync(self, handle: Any) -> None:
        # GPU kernels run asynchronously; sync_devices waits for them (its docs name
        # benchmarking as the use). On the CPU an eager call or a tf.function call
        # returns only once its kernels are done (synchronous execution is the default).
        if self.on_gpu:
            tf.test.experimental.sync_devices()

    def reset_peak_memory(self) -> None:
        if self.on_gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")
        else:
            reset_peak_rss()

    def peak_memory(self) -> Memory:
        if self.on_gpu:
            return Memory(int(tf.config.experimental.get_memory_info("GPU:0")["peak"]),
                          "allocator")
        return peak_rss()

    def forward_output(self) -> np.ndarray:
        out = tf.cast(self.run_forward(), tf.float32).numpy()
        return self.layout.to_nchw(out) if out.ndim == 4 else out  # -> canonical NCHW

    def serve(self, batch: Batch) -> np.ndarray:
        # The host arrays onto the device (place_batch, as prepare places the seeded
        # batch), the variant's forward on them in inference mode, the output back to the
        # host: .numpy() waits for it. The function takes the batch as its argument, with
        # the prepared batch's shapes as its input signature: graph mode traces once and
        # XLA compiles once, at the first serve, and no later call retraces. A batch of
        # other shapes is refused (the signature would refuse it less clearly).
        inputs = place_batch(self.model, batch, self.device, self.layout)
        inputs.pop("labels", None)   # inference needs none
        x = inputs["x"]
        if (x.shape, x.dtype) != (self.x.shape, self.x.dtype):
            raise ValueError(f"serve: input {tuple(x.shape)} {x.dtype.name} is not the batch "
                             f"prepared, {tuple(self.x.shape)} {self.x.dtype.name}")
        if self.run_serve is None:
            prepared = {name: value for name, value in self.inputs.items() if name != "labels"}
            self.run_serve = COMPILE[self.variant](
                self._forward_on, input_signature=[epoch_signature([prepared])])
        out = tf.cast(self.run_serve(inputs), tf.float32).numpy()
        return self.layout.to_nchw(out) if out.ndim == 4 else out  # -> canonical NCHW

    def generator(self, max_length: int) -> Generator:
        reason = not_a_decoder(self.model)
        if reason:
            raise Unsupported(reason)
        return TFGenerator(self, max_length)

    def loss_and_gradients(self) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.run_gradient()
        # An embedding's gradient is IndexedSlices (rows touched); made dense here only.
        return float(loss), {name: tf.cast(tf.convert_to_tensor(g), tf.float32).numpy()
                             for name, g in zip(self.params, grads)}

    def output_summary(self, examples: int) -> OutputSummary:
        """Mean and standard deviation in float64 on the output's device, the head alone
        fetched (adapters/summary.py); layout-free, so NHWC needs no transpose but the
        head's."""
        out = tf.cast(self.run_forward(), tf.float32)
        head = out[:examples].numpy()
        if head.ndim == 4:
            head = self.layout.to_nchw(head)
        shape = (int(out.shape[0]), *head.shape[1:])
        count = int(tf.size(out))
        if count == 0:
            return OutputSummary.of(head)
        step = examples_per_chunk(tuple(out.shape))
        starts = range(0, shape[0], step)
        with tf.device(self.device):
            mean = sum(float(tf.reduce_sum(tf.cast(out[i:i + step], tf.float64)))
                       for i in starts) / count
            squares = sum(float(tf.reduce_sum(tf.square(tf.cast(out[i:i + step], tf.float64)
                                                          - mean)))
                          for i in starts)
        return OutputSummary(shape, head, mean, math.sqrt(squares / count))

    def gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        loss, grads = self.run_gradient()
        return self._summarise(loss, grads, keep_arrays)

    def train_step_gradient_summary(self, keep_arrays: bool) -> GradientSummary:
        """The training copy's variables set back to the canonical ones and its optimizer's
        buffers and step count to zero (assignments: the traced step sees the same
        variables, so nothing is traced or compiled again), one call of the timed
        ``train_step``, and the gradients read off the optimizer's buffers
        (``first_step_gradients``)."""
        training = self._training()
        step = self.step_train()
        optimizer = training.optimizer
        with tf.device(self.device):
            for copy_, canonical in zip(training.variables, self.variables, strict=True):
                copy_.assign(canonical)
            for buffer in optimizer_buffers(optimizer):
                buffer.assign(tf.zeros_like(buffer))
            optimizer.iterations.assign(0)
        loss = step()
        return self._summarise(loss, first_step_gradients(optimizer, optimizer_for(self.model)),
                               keep_arrays)

    def _summarise(self, loss: tf.Tensor, grads: list, keep_arrays: bool) -> GradientSummary:
        """Norms in float64 on the gradients' device; the arrays fetched only if kept."""
        dense = [tf.convert_to_tensor(g) for g in grads]   # IndexedSlices made dense
        with tf.device(self.device):
            norms = {name: float(tf.norm(tf.cast(g, tf.float64)))
                     for name, g in zip(self.params, dense, strict=True)}
        arrays = {name: tf.cast(g, tf.float32).numpy()
                  for name, g in zip(self.params, dense, strict=True)} if keep_arrays else None
        return GradientSummary(float(loss), norms, arrays)

    def close(self) -> None:
        del self.frozen, self.body, self.params, self.variables, self.x, self.host_x
        del self.inputs, self.run_forward, self.run_gradient, self.epoch_runs
        del self.network, self.training, self.run_train, self.run_serve


def optimizer_buffers(optimizer: keras.optimizers.Optimizer) -> list[tf.Variable]:
    """A Keras optimizer's per-variable buffers (Keras 3.15: ``Adam``'s ``_momentums`` and
    ``_velocities``, ``SGD``'s ``momentums``), each list in the order of the variables it
    was built for."""
    if isinstance(optimizer, keras.optimizers.Adam):   # AdamW is an Adam
        return [*optimizer._momentums, *optimizer._velocities]
    return list(optimizer.momentums)


def first_step_gradients(optimizer: keras.optimizers.Optimizer, declared: Optimizer
                         ) -> list[tf.Tensor]:
    """The gradients of a first step from zeroed buffers, read off them after it (Keras
    3.15): ``Adam`` adds (g - m)*(1 - beta_1) to its first moment m
    (keras/src/optimizers/adam.py ``update_step``), so m = (1 - beta_1)*g; ``SGD`` sets its
    velocity to momentum*v - lr*g (sgd.py), so v = -lr*g. Divided in float64: the fp32
    product is within one rounding of the exact one, so g comes back within about 2 units
    of fp32's last place, far inside any gradient's error bound."""
    if isinstance(declared, AdamW):
        return [tf.cast(m, tf.float64) / (1 - declared.beta1) for m in optimizer._momentums]
    if isinstance(declared, SGDMomentum):
        return [tf.cast(v, tf.float64) / -declared.learning_rate for v in optimizer.momentums]
    raise Unsupported(f"no first moment in Keras's optimizer for {declared!r}")


class TFAdapter(Adapter):
    name = "tf"
    variants = {
        "graph": "tf.function graph (Grappler; oneDNN or Eigen kernels on CPU, cuDNN on GPU)",
        "eager": "eager execution, op by op",
        "xla": "tf.function(jit_compile=True): XLA-compiled",
        "nchw": "tf.function graph with NCHW activations (cuDNN's native fp32 layout; GPU only)",
        "nhwc": "tf.function graph with NHWC activations (Keras's channels_last)",
    }
    adamw_epsilon_hat = True   # keras.optimizers.AdamW (make_optimizer)

    def __init__(self, config: RunConfig):
        super().__init__(config)
        set_threads(config.threads, config.interop_threads)
        gpus = tf.config.list_physical_devices("GPU")
        if config.device == "gpu":
            if not gpus:
                build = "CUDA" if tf.sysconfig.get_build_info().get("is_cuda_build") else "CPU-only"
                raise DeviceUnavailable(f"tensorflow {tf.__version__} ({build} build) sees no GPU")
            for gpu in gpus:
                # Allocate as needed instead of reserving the whole GPU at start; the
                # allocator's peak (get_memory_info) is unaffected.
                tf.config.experimental.set_memory_growth(gpu, True)
            self.device = "/GPU:0"
        else:
            if gpus:
                tf.config.set_visible_devices([], "GPU")  # a CPU run touches no GPU
            self.device = "/CPU:0"

    def describe(self, case: CaseConfig) -> str:
        """The variant's text, then the settings that decide the numbers: TF32 as this case
        sets it (the worker describes a case before preparing it), cuDNN's and XLA's
        autotuning and determinism as TensorFlow reads them from the environment. Rows
        also hold the same settings read back after the case was set up (``tf_settings``)."""
        variant = self.resolve_variant(case.variant)
        settings = {**settings_in_force(self.config.device == "gpu"),
                    "tf32_execution": case.precision == "tf32"}
        return f"{self.variants[variant]}; {describe_settings(settings)}"

    def environment(self) -> dict[str, Any]:
        on_gpu = self.config.device == "gpu"
        info = tf.sysconfig.get_build_info()
        gpu_model = None
        if on_gpu:
            details = tf.config.experimental.get_device_details(
                tf.config.list_physical_devices("GPU")[0])
            gpu_model = details.get("device_name")
        return {
            "framework_version": tf.__version__,
            "gpu_model": gpu_model,
            "cuda": info.get("cuda_version") if on_gpu else None,
            "cudnn": info.get("cudnn_version") if on_gpu else None,
            "keras_version": keras.__version__,  # its LSTM layer is part of the network
        }

    def prepare(self, model: Model, weights: Weights, batch: Batch,
                case: CaseConfig) -> Prepared:
        variant = self.resolve_variant(case.variant)
        self.reapply(case)
        return TFPrepared(self, model, weights, batch, case, variant)

    def reapply(self, case: CaseConfig) -> None:
        apply_precision(case.precision, self.config.device == "gpu")

    def bytes_in_use(self) -> int | None:
        if self.config.device != "gpu":
            return None
        return int(tf.config.experimental.get_memory_info("GPU:0")["current"])

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, (tf.errors.ResourceExhaustedError, MemoryError)):
            return True
        text = str(error)
        # XLA reports "RESOURCE_EXHAUSTED: Out of memory ..." inside other error types.
        return isinstance(error, tf.errors.OpError) and (
            "OOM when allocating" in text or "RESOURCE_EXHAUSTED" in text
            or "out of memory" in text.lower())
