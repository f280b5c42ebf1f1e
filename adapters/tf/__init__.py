"""TensorFlow adapter."""

import os

# Before TensorFlow's first import: keep its C++ info and warning logs out of worker logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# The adapter class loads on first use (PEP 562 module __getattr__), so that importing
# this package's framework-free modules (launch.py, read by parallel/engines.py) imports
# no framework.
def __getattr__(name: str):
    if name == "TFAdapter":
        from adapters.tf.adapter import TFAdapter
        return TFAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TFAdapter"]
