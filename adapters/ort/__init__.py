"""ONNX Runtime adapter."""

from adapters import lazy_adapter

__getattr__ = lazy_adapter(__name__, "OrtAdapter")


__all__ = ["OrtAdapter"]
