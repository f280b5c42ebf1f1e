"""JAX adapter.

The worker imports this package (``entry.load()``) before anything imports jax, so the
settings XLA reads when its GPU client starts are set here, ahead of ``import jax``:

* ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: by default JAX reserves 75% of GPU memory at
  start-up, and the allocator's ``peak_bytes_in_use`` would then say nothing about a
  model (JAX docs, "GPU memory allocation"). A value set by the user is kept.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


from adapters import lazy_adapter  # noqa: E402

__getattr__ = lazy_adapter(__name__, "JaxAdapter")


__all__ = ["JaxAdapter"]
