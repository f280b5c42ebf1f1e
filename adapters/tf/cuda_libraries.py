"""TensorFlow's pip CUDA libraries, loaded before TensorFlow's first import.

``pip install tensorflow[and-cuda]==2.21.0`` brings CUDA 12 as nvidia-* wheels, and
TensorFlow opens them by soname when it first looks for a GPU. In the tf_gpu session's
virtualenv (adapters/registry.toml), on an NVIDIA H200 with driver 580.159.04, it opened
every one but ``libcusolver.so.11`` (its loader: "cannot open shared object file: No such
file or directory"), then registered no GPU at all ("Cannot dlopen some GPU libraries ...
Skipping registering GPU devices"): TensorFlow would run on the CPU, and the adapter
refuses that (``DeviceUnavailable``). Loading that one library first, from the nvidia-cusolver
wheel's folder and with its symbols global, lets TensorFlow's own dlopen find it by soname;
in the same virtualenv ``tf.config.list_physical_devices('GPU')`` then lists the GPU. The
same thing works by putting every ``nvidia/*/lib`` folder on LD_LIBRARY_PATH before the
process starts, which a worker started by the matrix or by hand would not have.
onnxruntime.preload_dlls() does the same for ONNX Runtime's CUDA wheels.

No TensorFlow import here: this runs before it (adapters/tf/__init__.py). Where no
nvidia-cusolver wheel is installed (tensorflow-cpu, a system CUDA) it does nothing.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

LIBRARIES = (("cusolver", "libcusolver.so.11"),)


def wheel_library_paths(roots: list[str] | None = None) -> list[Path]:
    """The libraries of LIBRARIES that an installed nvidia-* wheel holds; ``roots`` are the
    ``nvidia`` namespace package's folders (found on sys.path when None)."""
    if roots is None:
        spec = importlib.util.find_spec("nvidia")
        roots = list(spec.submodule_search_locations or []) if spec else []
    found = []
    for package, soname in LIBRARIES:
        for root in roots:
            path = Path(root) / package / "lib" / soname
            if path.is_file():
                found.append(path)
                break
    return found


def preload(roots: list[str] | None = None) -> list[Path]:
    """Load the wheels' libraries of LIBRARIES with global symbols; returns those loaded.
    A library that fails to load is left to TensorFlow, whose own error then names it."""
    loaded = []
    for path in wheel_library_paths(roots):
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        loaded.append(path)
    return loaded
