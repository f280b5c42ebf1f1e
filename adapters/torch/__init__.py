"""PyTorch adapter."""

from adapters import lazy_adapter

__getattr__ = lazy_adapter(__name__, "TorchAdapter")


__all__ = ["TorchAdapter"]
