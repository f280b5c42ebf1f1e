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
MEASURES = ("forward", "gradient", "grad_input", "grad_weight", "transfer", "transfer_pinned",
            *EPOCH_MEASURES, PROFILE)
PRECISIONS = ("fp32", "tf32", "bf16")
