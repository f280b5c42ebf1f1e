"""The fingerprint's summary of an ONNX Runtime output where it lives (adapters/summary.py):
a second, small ONNX graph that takes the bound output as its input and returns the first
examples and, per example, the float32 sum, the centre and the squared deviations from it.

ONNX Runtime has no array API beside its sessions, so the reduction is a session too. Its
inputs have symbolic dimensions, so one session serves every output shape of a process.
Without it a GPU output was copied whole to the host and reduced there in float64: on an
H100 the 69 single-layer fingerprints of ``li2016`` took a median 0.73 s each, 60 s in all,
against PyTorch's 0.13 s reduced on the device (commit e6c73e3, published/h100).
On an H100 this graph summarised fresh shapes of ``li2016``'s 11×11 convolution at batch
64 (57–138 M values) in a median 0.035 s, the whole copy in 0.44 s, with the same head and
the standard deviation the same to 2.5e-9.
"""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from adapters.base import RunConfig
from adapters.ort.network import IR_VERSION, OPSET
from adapters.summary import OutputSummary

OUT, EXAMPLES = "out", "examples"
PARTS = ("head", "sums", "centres", "squares")


def summary_graph() -> bytes:
    """head = out[:examples]; flat = out as (batch, values); sums = Σ flat per example;
    centres = sums / values; squares = Σ (flat − centre)² per example."""
    node = helper.make_node
    const = helper.make_tensor
    nodes = [
        node("Constant", [], ["zero"], value=const("zero", TensorProto.INT64, [1], [0])),
        node("Constant", [], ["one"], value=const("one", TensorProto.INT64, [1], [1])),
        node("Constant", [], ["rows"], value=const("rows", TensorProto.INT64, [2], [0, -1])),
        node("Slice", [OUT, "zero", EXAMPLES, "zero"], ["head"]),
        node("Reshape", [OUT, "rows"], ["flat"]),
        node("ReduceSum", ["flat", "one"], ["row_sums"], keepdims=1),
        node("Shape", ["flat"], ["flat_shape"]),
        node("Gather", ["flat_shape", "one"], ["values_i"]),
        node("Cast", ["values_i"], ["values"], to=TensorProto.FLOAT),
        node("Div", ["row_sums", "values"], ["row_centres"]),
        node("Sub", ["flat", "row_centres"], ["deviation"]),
        node("ReduceSumSquare", ["deviation", "one"], ["squares"], keepdims=0),
        node("Squeeze", ["row_sums", "one"], ["sums"]),
        node("Squeeze", ["row_centres", "one"], ["centres"]),
    ]
    graph = helper.make_graph(
        nodes, "output_summary",
        [helper.make_tensor_value_info(OUT, TensorProto.FLOAT, None),
         helper.make_tensor_value_info(EXAMPLES, TensorProto.INT64, [1])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in PARTS])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="dlbench")
    return model.SerializeToString()


@functools.cache
def summary_session(on_gpu: bool, config: RunConfig) -> ort.InferenceSession:
    """One per process: on a GPU the CUDA provider of device 0, where the case's session
    left its output (no convolution or matrix product here, so neither cuDNN's search nor
    TF32 applies)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = config.threads      # explicit: see session_options
    options.inter_op_num_threads = config.interop_threads
    options.log_severity_level = 3
    providers = [("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"] \
        if on_gpu else ["CPUExecutionProvider"]
    return ort.InferenceSession(summary_graph(), options, providers=providers)


def summarise_bound_output(output: ort.OrtValue, examples: int, on_gpu: bool,
                           config: RunConfig) -> OutputSummary:
    """The summary of ``output`` (an OrtValue where the case's session wrote it), only the
    head and four numbers per example copied to the host."""
    shape = tuple(output.shape())
    session = summary_session(on_gpu, config)
    binding = session.io_binding()
    binding.bind_ortvalue_input(OUT, output)
    binding.bind_cpu_input(EXAMPLES, np.array([min(examples, shape[0])], dtype=np.int64))
    for name in PARTS:
        binding.bind_output(name, "cpu")
    # The deviations are a temporary as large as the output, taken from this session's own
    # arena: shrunk after the run, so the summary holds no GPU memory the cases that
    # follow in the process could need (ONNX Runtime's arena shrinkage run option).
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage",
                                 "gpu:0" if on_gpu else "cpu:0")
    session.run_with_iobinding(binding, options)
    head, sums, centres, squares = binding.copy_outputs_to_cpu()
    return OutputSummary.from_example_moments(shape, head, sums, centres, squares)
