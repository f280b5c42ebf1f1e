"""The names of what can be measured and at which precision. Plain data, importing
nothing: the worker needs them before its CPU affinity is set, ahead of numpy."""

# "epoch_forward"/"epoch_gradient": one pass over a fixed sequence of variable-length
# batches (Bahrampour et al. 2016, 4.4: an LSTM timed over an epoch of IMDB batches).
# "profile": the framework's own profiler over a few iterations, broken down by layer type
# and kernel (Li et al. 2016, Fig. 2 and Fig. 4).
EPOCH_MEASURES = ("epoch_forward", "epoch_gradient")
PROFILE = "profile"
# "transfer": the batch from a pageable host buffer to the device; "transfer_pinned": the
# same from page-locked host memory (Li et al. 2016, Fig. 7 and its discussion).
TRANSFERS = ("transfer", "transfer_pinned")
# "counters": per-kernel hardware counters from Nsight Compute (ncu), reduced as Li et al.
# 2016 did for Fig. 6 and Table II (suites/instruments/counters.py).
COUNTERS = "counters"
# "train_step": one training iteration as training runs it: forward in training mode, loss,
# backward for every trainable body parameter, and an optimizer step (SGD with momentum)
# that updates them. "gradient" stops before the update (Bahrampour et al.'s "gradient
# computation"); the update is what real training adds: a read and a write of every
# parameter and its momentum buffer, plus whatever the framework fuses it into.
TRAIN_STEP = "train_step"
MEASURES = ("forward", "gradient", TRAIN_STEP, "grad_input", "grad_weight", "transfer",
            "transfer_pinned", *EPOCH_MEASURES, PROFILE, COUNTERS)
# The optimizer of "train_step", the same in every framework: plain SGD with heavy-ball
# momentum 0.9 (He et al. 2016, 3.4, ResNet's recipe), no Nesterov, no weight decay, a
# constant rate. Every framework's SGD then computes the same update: the momentum buffer
# b <- m*b + g (Keras keeps v = -lr*b, which is the same for a constant rate) and
# w <- w - lr*b, so the first step is w - lr*g. The rate is ten times below He et al.'s
# starting 0.1: the timed loop trains on one batch with random labels for thousands of
# iterations, and a smaller rate keeps the weights finite; the time of an update does not
# depend on its rate.
SGD_LEARNING_RATE = 0.01
SGD_MOMENTUM = 0.9
PRECISIONS = ("fp32", "tf32", "bf16")


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
# (published/h200-2026-11); JAX's LSTM epoch gradient 1.09-1.10 times its wall median on
# H200s, with the device phase in the wall phase's worker (published/h200-2026-11) and in a
# worker of its own (published/h200x4-2026-11-all) alike. Its traced epochs spanned 1.6-2.4 s
# against 374-376 ms of wall median in all three H200 folders: under CUPTI the epoch's many
# small launches run 4-6 times slower, and the busy time it records (kernels and copies)
# grows past the untraced wall time: not the timed samples' work. Over the published
# GPU folders' other 4,289 compute rows with a device figure the ratio stayed at or below
# 1.007, so 5% leaves room for the GPU's clock moving between the two phases.
# Transfers are apart: their two phases' copies can run at different speeds (ONNX Runtime's
# pageable copies in published/h100-2026-11c: device figures up to 2.0 times the wall
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
