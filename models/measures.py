"""Every measure, declared once: its name, its phase, the adapter hook that builds its step,
its FLOPs relative to one forward pass, and the report section that shows it. Everything
else derives from ``DECLARED``: the suite spec's known names (suites/harness/spec.py), the
registry's check of each framework's list (adapters/registry.py), the adapters' step
dispatch (adapters/base.py ``Prepared.step``), the report's FLOP factors
(reports/pipeline/peaks.py) and per-measure timing fields (reports/pipeline/tidy.py).

Plain data, importing nothing but the standard library: the worker needs these names
before its CPU affinity is set, ahead of numpy."""

from __future__ import annotations

from dataclasses import dataclass

# How a measure is run. "step": the harness times the callable its hook returns (one
# iteration); "epoch": the hook gets a fixed sequence of batches and returns one pass over
# them; "profile": the hook runs the framework's own profiler; "harness": no adapter hook,
# the harness measures it around a child process; "loadgen": MLPerf LoadGen sends queries
# and times each from issue to completion, the hook answering them (suites/serving/).
DRIVERS = ("step", "epoch", "profile", "harness", "loadgen")
PHASES = ("forward", "backward", "training", "transfer", "profile")


@dataclass(frozen=True)
class Measure:
    """One measure. ``hook`` names the ``adapters.base.Prepared`` method that builds it
    (every hook has a default there that raises ``Unsupported``; an adapter overrides the
    hooks it supports). ``flop_factor``: FLOPs per example relative to the forward pass's
    (``models.analysis``), None where the measure does no arithmetic on the network or
    is not rated in TFLOP/s; ``flop_reason`` says why that factor. ``section`` is the
    module of ``reports/sections`` whose tables show its rows. ``over``: for an epoch
    measure, the step measure it repeats over the epoch's batches. ``timing_fields``: the
    extra numeric timing fields its rows carry beyond every timed row's."""

    name: str
    phase: str
    driver: str
    hook: str
    flop_factor: float | None
    flop_reason: str
    section: str
    over: str = ""
    timing_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS or self.phase not in PHASES:
            raise ValueError(f"measure {self.name!r}: driver {self.driver!r} / phase "
                             f"{self.phase!r} not in {DRIVERS} / {PHASES}")
        if (self.driver == "harness") != (not self.hook):
            raise ValueError(f"measure {self.name!r}: only a harness measure has no hook")


# FLOP factors follow the usual training estimate (Kaplan et al. 2020, 6N against 2N per
# token): a backward pass is two products (w.r.t. the inputs and w.r.t. the weights), each
# about one forward's FLOPs (reports/pipeline/peaks.py states the convention in the report).
_GRADIENT = "one forward plus two backward products (inputs and weights): 3 x forward"
# Bahrampour et al. 2016, 4.4: an LSTM timed over an epoch of IMDB batches. Bahrampour et al.
# report the epoch's time per batch (Table 6): the batches' count, the median per batch and
# the mean padded length of a variable-length epoch.
_EPOCH_FIELDS = ("epoch_batches", "per_batch_median_ms", "mean_padded_length")
_NOT_RATED = "not rated in TFLOP/s"

DECLARED: tuple[Measure, ...] = (
    Measure("forward", "forward", "step", "step_forward", 1.0,
            "the forward FLOPs themselves (models.analysis: 2 x multiply-accumulates)", "models"),
    Measure("gradient", "backward", "step", "step_gradient", 3.0, _GRADIENT, "models"),
    # "train_step": one training iteration as training runs it: forward in training mode,
    # loss, backward for every trainable body parameter, and an optimizer step that updates
    # them with the framework's own optimizer: SGD with momentum for the CNNs, autoencoders
    # and the LSTM, AdamW for the transformers (models/optimizers.py declares both and which
    # family uses which; the row's timing names the one that ran). "gradient" stops before
    # the update (Bahrampour et al.'s "gradient computation"); the update is what real
    # training adds: a read and a write of every parameter and its optimizer buffers (one
    # for SGD's momentum, two for AdamW's moments), plus whatever the framework fuses it into.
    Measure("train_step", "training", "step", "step_train", 3.0,
            "as gradient: the optimizer's update is left out, as the usual training estimate "
            "leaves it out: SGD with momentum adds 4 FLOPs per parameter (b <- m*b + g, "
            "w <- w - lr*b), under 0.5% of ResNet-50's 3 x 8.2 GFLOP per example at batch 1; "
            "AdamW about 15 (decay, two moments, bias corrections, square root, division), "
            "under 0.1% of GPT-2 small's 3 x 2 x 124M FLOPs per token at 8 x 1024 tokens",
            "practice"),
    # convnet-benchmarks' updateGradInput and accGradParameters of one layer.
    Measure("grad_input", "backward", "step", "step_grad_input", 1.0,
            "one backward product, w.r.t. the layer's input", "layers"),
    Measure("grad_weight", "backward", "step", "step_grad_weight", 1.0,
            "one backward product, w.r.t. the layer's weights", "layers"),
    # "transfer": the batch from a pageable host buffer to the device; "transfer_pinned":
    # the same from page-locked host memory (Li et al. 2016, Fig. 7 and its discussion).
    Measure("transfer", "transfer", "step", "step_transfer", None,
            "a host-to-device copy: no arithmetic", "misc"),
    Measure("transfer_pinned", "transfer", "step", "step_transfer_pinned", None,
            "a host-to-device copy: no arithmetic", "misc"),
    # "epoch_forward"/"epoch_gradient": one pass over a fixed sequence of variable-length
    # batches (Bahrampour et al. 2016, 4.4).
    Measure("epoch_forward", "forward", "epoch", "epoch_step", None, _NOT_RATED, "bahrampour",
            over="forward", timing_fields=_EPOCH_FIELDS),
    Measure("epoch_gradient", "backward", "epoch", "epoch_step", None, _NOT_RATED, "bahrampour",
            over="gradient", timing_fields=_EPOCH_FIELDS),
    # "profile": the framework's own profiler over a few iterations, broken down by layer
    # type and kernel (Li et al. 2016, Fig. 2 and Fig. 4).
    Measure("profile", "profile", "profile", "profile", None, _NOT_RATED, "profiles"),
    # "counters": per-kernel hardware counters from Nsight Compute (ncu), reduced as Li et
    # al. 2016 did for Fig. 6 and Table II (suites/instruments/counters.py). It needs no
    # adapter hook: the harness runs ncu around a child process for any framework.
    Measure("counters", "profile", "harness", "", None, _NOT_RATED, "kernels"),
    # "serve": MLPerf LoadGen's scenarios (SingleStream, MultiStream, Offline) sending
    # queries of seeded samples, each answered by the hook ``serve`` (host arrays in, host
    # array out) and timed by LoadGen from issue to completion (suites/serving/, issue 61).
    # Its rows carry percentiles or throughput in ``serving``, not a median per step.
    Measure("serve", "forward", "loadgen", "serve", None, _NOT_RATED, "misc"),
    # "generate": greedy decoding at batch 1 with a key/value cache (issue 61), a seeded
    # prompt's prefill and each new token's decode step answered by the hook ``generator``
    # (adapters.base.Generator), timed by LoadGen's SingleStream with token latencies: time
    # to first token, time per output token, tokens per second (suites/serving/generate.py).
    Measure("generate", "forward", "loadgen", "generator", None, _NOT_RATED, "misc"),
)

BY_NAME: dict[str, Measure] = {m.name: m for m in DECLARED}
MEASURES = tuple(BY_NAME)
EPOCH_MEASURES = tuple(m.name for m in DECLARED if m.driver == "epoch")
PROFILE = "profile"
TRANSFERS = tuple(m.name for m in DECLARED if m.phase == "transfer")
COUNTERS = "counters"
SERVE = "serve"
GENERATE = "generate"
# The measures MLPerf LoadGen times (suites/serving/): percentiles in ``serving``, no median
# per step, so they stay out of the step tables, rankings and ratios.
LOADGEN_MEASURES = tuple(m.name for m in DECLARED if m.driver == "loadgen")
TRAIN_STEP = "train_step"
GRADIENT = "gradient"
# FLOPs per example relative to the forward pass, for the measures rated in TFLOP/s.
FLOP_FACTORS = {m.name: m.flop_factor for m in DECLARED if m.flop_factor is not None}
# The extra numeric timing fields some measures' rows carry, in declaration order.
MEASURE_TIMING_FIELDS = tuple(dict.fromkeys(f for m in DECLARED for f in m.timing_fields))


def unknown_measures(names) -> list[str]:
    """The names in ``names`` that no measure declares."""
    return [name for name in names if name not in BY_NAME]


# fp16: ONNX Runtime's ort_fused variant only, its graph converted to float16 by the
# transformer optimizer (adapters/ort); other adapters make it an unsupported row.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


# A measure whose device blocks CUPTI received nothing in, while it received the job's
# other measures in the same process, did nothing on the device (suites/harness/device_pass.py
# marks it; reports/pipeline/tidy.py makes its wall row an error).
NO_DEVICE_WORK = ("the step did no work on the GPU: CUPTI recorded no kernel, copy or set in "
                  "its device blocks while it recorded the job's other measures in the same "
                  "process, so its wall figure times no device work")

# A step's device busy time cannot exceed the wall time of the same iterations: the wall
# clock spans every kernel they launch. The device phase (suites/harness/device_pass.py) rebuilds
# the job after the wall samples, with CUPTI loaded, and a framework that autotunes again
# there can choose other kernels. Seen: TensorFlow's conv_l1 forward at batch 128 on an H200,
# 7.79 ms of busy time in the device phase against a wall median of 3.12 ms (commit
# f6c69c1), and li2016's 11x11 convolution with 304 filters, 9.61 against 4.84 ms
# (published/h200); JAX's LSTM epoch gradient 1.09-1.10 times its wall median on
# H200s, with the device phase in the wall phase's worker (published/h200) and in a
# worker of its own (h200x4-2026-11-all (at 2efa0ce)) alike. Its traced epochs spanned 1.6-2.4 s
# against 374-376 ms of wall median in all three H200 folders: under CUPTI the epoch's many
# small launches run 4-6 times slower, and the busy time it records (kernels and copies)
# grows past the untraced wall time: not the timed samples' work. Over the published
# GPU folders' other 4,289 compute rows with a device figure the ratio stayed at or below
# 1.007, so 5% leaves room for the GPU's clock moving between the two phases.
# Transfers are apart: their two phases' copies can run at different speeds (ONNX Runtime's
# pageable copies in published/h100: device figures up to 2.0 times the wall
# median), which the report marks instead (reports/pipeline/cells.py).
DEVICE_ABOVE_WALL_LIMIT = 1.05


def device_exceeds_wall(measure: str, device_median_ms: float | None,
                        wall_median_ms: float | None) -> bool:
    """Whether a device phase's busy time is too long to be the work the wall samples timed
    (``DEVICE_ABOVE_WALL_LIMIT``); never for transfers or a missing figure."""
    if measure in TRANSFERS or not device_median_ms or not wall_median_ms:
        return False
    return device_median_ms > DEVICE_ABOVE_WALL_LIMIT * wall_median_ms


def device_above_wall_reason(device_median_ms: float, wall_median_ms: float) -> str:
    """Why such a row keeps no device time from the device phase."""
    return (f"the device phase's busy time ({device_median_ms:.4g} ms) exceeds this row's wall "
            f"median ({wall_median_ms:.4g} ms), which spans every kernel of the same "
            f"iterations: the device phase did not time the work the wall samples timed "
            f"(TensorFlow was seen autotuning the rebuilt job into other kernels), so its "
            f"device time is left out")
