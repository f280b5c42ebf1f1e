"""JAX adapter.

The worker imports this package (``entry.load()``) before anything imports jax, so the
settings XLA reads when its GPU client starts are set here, ahead of ``import jax``:

* ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: by default JAX reserves 75% of GPU memory at
  start-up, and the allocator's ``peak_bytes_in_use`` would then say nothing about a
  model (JAX docs, "GPU memory allocation"). A value set by the user is kept.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


# The adapter class loads on first use (PEP 562 module __getattr__), so that importing
# this package's framework-free modules (launch.py, read by parallel/engines.py) imports
# no framework.
def __getattr__(name: str):
    if name == "JaxAdapter":
        from adapters.jax.adapter import JaxAdapter
        return JaxAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["JaxAdapter"]
