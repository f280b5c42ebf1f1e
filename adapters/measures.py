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
# "counters": per-kernel hardware counters from Nsight Compute (ncu), reduced as Li et al.
# 2016 did for Fig. 6 and Table II (suites/counters.py).
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
