"""TensorFlow adapter."""

import os

# Before TensorFlow's first import: keep its C++ info and warning logs out of worker logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


from adapters import lazy_adapter  # noqa: E402

__getattr__ = lazy_adapter(__name__, "TFAdapter")


__all__ = ["TFAdapter"]
