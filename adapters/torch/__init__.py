"""PyTorch adapter."""

from adapters.torch.adapter import TorchAdapter

__all__ = ["TorchAdapter"]
