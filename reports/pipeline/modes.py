"""Each framework variant's execution mode, keyed by the variant names of
adapters/registry.toml: what a comparison of two frameworks pairs, so that no table or
sentence sets a compiled mode beside an uncompiled one without saying so
(docs/methodology.md#fairness).

- compiled: a compiler sees the whole step and fuses its operations into kernels of its
  own: JAX ``jax.jit`` (XLA), ``torch.compile`` (inductor), TensorFlow's XLA.
- graph: TensorFlow's ``tf.function`` graph: traced once and run by the graph executor,
  with grappler's rewrites, but each operation still calls its own library kernel.
- session: an ONNX Runtime InferenceSession: a graph optimised at load time (fusions of
  known patterns at ``ort_all``) and run kernel by kernel.
- eager: operation by operation from Python (PyTorch eager and its layout and cuDNN
  variants, TensorFlow and JAX eager).

Graph and session are not compiled in the sense above: their kernels are the libraries'
(cuDNN, cuBLAS, oneDNN), as in eager mode; so "compiled vs uncompiled" is flagged wherever a
compiled mode meets any of the other three.
"""

from __future__ import annotations

COMPILED = "compiled"
MODES = {
    "torch": {"eager": "eager", "compile": COMPILED, "no_cudnn": "eager",
              "channels_last": "eager", "compile_channels_last": COMPILED,
              "compile_reduce_overhead": COMPILED,
              "cudnn_exhaustive": "eager", "sdpa_math": "eager", "sdpa_flash": "eager",
              "sdpa_efficient": "eager", "sdpa_cudnn": "eager"},
    "tf": {"graph": "graph", "eager": "eager", "xla": COMPILED, "nchw": "graph",
           "nhwc": "graph"},
    "jax": {"jit": COMPILED, "eager": "eager", "cudnn_attention": COMPILED},
    # ort_fused too: its fusions are rewrites of the graph the session then runs kernel
    # by kernel (ONNX Runtime's contrib kernels), not code generated for the graph.
    "ort": {variant: "session" for variant in ("ort_all", "ort_extended", "ort_basic",
                                               "ort_disabled", "cudnn_heuristic",
                                               "cudnn_default_algo", "ort_fused",
                                               "ort_cuda_graph")},
}


def mode(framework: str, variant: str) -> str:
    """The variant's execution mode; "" for one this table does not know (a stand-in
    framework of the tests, a variant added without an entry here)."""
    return MODES.get(framework, {}).get(variant, "")


def is_compiled(framework: str, variant: str) -> bool:
    return mode(framework, variant) == COMPILED


def mixes_compiled(pairs) -> bool:
    """Whether (framework, variant) ``pairs`` set a compiled mode beside an uncompiled one."""
    compiled = {is_compiled(fw, variant) for fw, variant in pairs}
    return compiled == {True, False}


def marked(framework: str, variant: str) -> str:
    """The variant's name with "(compiled)" after it where its mode is compiled."""
    return f"{variant} (compiled)" if is_compiled(framework, variant) else variant
