"""TensorFlow adapter."""

import os

# Before TensorFlow's first import: keep its C++ info and warning logs out of worker logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Before TensorFlow's first import: the CUDA library its loader misses in the pip wheels
# (adapters/tf/cuda_libraries.py says which, and how it was found).
from adapters.tf import cuda_libraries  # noqa: E402

cuda_libraries.preload()


from adapters import lazy_adapter  # noqa: E402

__getattr__ = lazy_adapter(__name__, "TFAdapter")


__all__ = ["TFAdapter"]
