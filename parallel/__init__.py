"""Data-parallel scaling: one training step (forward, loss, backward, gradient all-reduce,
no optimizer update) over N devices on each framework's own distributed engine, at a fixed
per-device batch (weak scaling) or a fixed global batch (strong scaling); ONNX Runtime
scales inference with one session per GPU. ``python -m parallel run SUITE ...``."""
