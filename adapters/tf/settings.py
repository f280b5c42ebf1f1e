"""The numeric and kernel-selection settings TensorFlow runs with, read back from
TensorFlow and from the environment as TensorFlow reads it, so that every row says what
was in force (as the ONNX Runtime adapter records the CUDA options its session applied).

TensorFlow has no API that reports its cuDNN or cuBLAS choices; it reads environment
variables where it uses them (tensorflow/core/util/env_var.cc, ``ReadBoolFromEnvVar``:
unset means the default, "0"/"false" and "1"/"true" in any case are read, anything else
is rejected with an error log and the default is kept). The names and defaults below
are those TensorFlow 2.21 reads:

* ``TF_CUDNN_USE_AUTOTUNE`` (default true; tensorflow/core/util/use_cudnn.cc): cuDNN's
  algorithm search for convolutions on each new shape, the analogue of PyTorch's
  ``cudnn.benchmark`` and ORT's EXHAUSTIVE search.
* ``TF_CUDNN_DETERMINISTIC`` (default false; same file): deterministic cuDNN algorithms
  only; op determinism (``tf.config.experimental.enable_op_determinism`` or
  ``TF_DETERMINISTIC_OPS``) implies it.
* ``TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32`` (unset by default): the TF 1.x switch for
  tensor-core fp32 matmuls; since TF 2.4 TF32 is governed by
  ``tf.config.experimental.enable_tensor_float_32_execution``, which is read back here.
* ``XLA_FLAGS``' ``--xla_gpu_autotune_level`` (XLA's default 4: compile every candidate,
  check results; xla/debug_options_flags.cc) for the ``xla`` variant.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

# (environment variable, TensorFlow's default when unset or unreadable)
BOOL_ENV = {
    "TF_CUDNN_USE_AUTOTUNE": True,
    "TF_CUDNN_DETERMINISTIC": False,
    "TF_DETERMINISTIC_OPS": False,
}
XLA_GPU_AUTOTUNE_DEFAULT = 4
_XLA_AUTOTUNE = re.compile(r"^--xla_gpu_autotune_level=(\d+)$")


def read_bool_env(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """What TensorFlow's ReadBoolFromEnvVar makes of ``name``."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None:
        return default
    text = value.lower()
    if text in ("0", "false"):
        return False
    if text in ("1", "true"):
        return True
    return default   # TensorFlow logs the bad value and keeps the default


def xla_gpu_autotune_level(environ: Mapping[str, str] | None = None) -> int:
    """The last ``--xla_gpu_autotune_level`` in XLA_FLAGS (XLA parses left to right, a
    later flag overriding an earlier one), else XLA's default."""
    level = XLA_GPU_AUTOTUNE_DEFAULT
    for flag in shlex.split((os.environ if environ is None else environ).get("XLA_FLAGS", "")):
        match = _XLA_AUTOTUNE.match(flag)
        if match:
            level = int(match.group(1))
    return level


def op_determinism_enabled() -> bool:
    # The getter is not public API (tensorflow/python/framework/config.py): only the
    # setter is exported, and TF_DETERMINISTIC_OPS is read at the same place.
    from tensorflow.python.framework import config

    return bool(config.is_op_determinism_enabled()) or read_bool_env(
        "TF_DETERMINISTIC_OPS", False)


def onednn_enabled() -> bool | None:
    """Whether this process runs TensorFlow's oneDNN kernels on the CPU (None: unknown).
    TensorFlow's own answer (IsMKLEnabled, tensorflow/core/util/util.cc), read once at its
    first call from the build, TF_ENABLE_ONEDNN_OPTS and the CPU; not public API, but
    TensorFlow's tests read it the same way."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def settings_in_force(on_gpu: bool, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings a row records. Precision first (TF32 read back from TensorFlow, not
    from what the adapter asked for), then kernel selection; on the CPU only what
    applies there (oneDNN, determinism)."""
    env = os.environ if environ is None else environ
    determinism = op_determinism_enabled()
    settings: dict[str, Any] = {
        "tf32_execution": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
        "op_determinism": determinism,
        # Grappler's options that differ from its defaults (empty: all defaults, the
        # layout optimiser included) and XLA auto-clustering ("" when off).
        "grappler_options_set": {key: value for key, value in
                                 tf.config.optimizer.get_experimental_options().items()
                                 if key not in ("disable_model_pruning",
                                                "disable_meta_optimizer") or value},
        "xla_auto_jit": str(tf.config.optimizer.get_jit() or ""),
    }
    if not on_gpu:
        # What was asked ("0" turns oneDNN off, "1" on) and what TensorFlow decided: by
        # default its x86 Linux wheels turn oneDNN on only for CPUs with the neural-network
        # features of AVX-512 (VNNI, BF16, AMX: TensorFlow 2.9's release notes), so the
        # same wheel runs oneDNN's kernels on one 2-core VM and Eigen's on another.
        settings["onednn_opts"] = env.get("TF_ENABLE_ONEDNN_OPTS", "default")
        settings["onednn"] = onednn_enabled()
        return settings
    settings.update({
        "cudnn_autotune": read_bool_env("TF_CUDNN_USE_AUTOTUNE", True, env),
        "cudnn_deterministic": determinism or read_bool_env("TF_CUDNN_DETERMINISTIC",
                                                            False, env),
        "cublas_tensor_op_math_fp32_env": env.get("TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32"),
        # The workspace cuDNN's algorithms may use (an algorithm needing more is skipped
        # by the autotuner): unset means TensorFlow's default.
        "cudnn_workspace_limit_mb_env": env.get("TF_CUDNN_WORKSPACE_LIMIT_IN_MB"),
        "xla_gpu_autotune_level": xla_gpu_autotune_level(env),
    })
    return settings


def describe_settings(settings: Mapping[str, Any]) -> str:
    """The settings in words for a row's execution description."""
    words = [f"TF32 {'on' if settings['tf32_execution'] else 'off'}"]
    if "cudnn_autotune" in settings:
        words.append(f"cuDNN autotune {'on' if settings['cudnn_autotune'] else 'off'}")
        if settings["cudnn_deterministic"]:
            words.append("cuDNN deterministic")
        words.append(f"XLA GPU autotune level {settings['xla_gpu_autotune_level']}")
    elif settings.get("onednn") is not None:
        words.append(f"oneDNN {'on' if settings['onednn'] else 'off (Eigen kernels)'}")
    elif settings.get("onednn_opts") == "0":
        words.append("oneDNN off")
    if settings["op_determinism"]:
        words.append("op determinism")
    return ", ".join(words)
