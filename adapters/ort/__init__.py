"""ONNX Runtime adapter."""


# The adapter class loads on first use (PEP 562 module __getattr__), so that importing
# this package's framework-free modules (launch.py, read by parallel/engines.py) imports
# no framework.
def __getattr__(name: str):
    if name == "OrtAdapter":
        from adapters.ort.adapter import OrtAdapter
        return OrtAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OrtAdapter"]
