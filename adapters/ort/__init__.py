"""ONNX Runtime adapter."""

from adapters.ort.adapter import OrtAdapter

__all__ = ["OrtAdapter"]
