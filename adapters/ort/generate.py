"""Greedy generation at batch 1 with a key/value cache in ONNX Runtime (issue 61): two
sessions of graphs built from the IR by the same builder (network.build_generation), a
prefill over the prompt and a decode step for one token, both returning the next token
from an ArgMax inside the graph.

The cache never leaves the device. Every output but the next token is bound to the device
(IOBinding, ``bind_output(name, device)``: ORT allocates it from its arena), and the
``present`` keys and values one run leaves there are bound as the next decode step's
``past`` inputs (``bind_ortvalue_input``): no host round trip between steps, the pattern of
onnxruntime's GPT-2 generation helpers (onnxruntime.transformers gpt2_helper, IOBinding with
past state). Only the next token, an int64 bound to host memory, is copied back, which is
also the point the host waits for the device. Decode's cache grows by one position per step
(``past`` has a symbolic length), so its shapes change every step: ORT's CUDA graphs, which
need fixed shapes and addresses, do not apply here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from adapters.ort.network import INPUT, LOGITS, NEXT


@dataclass(frozen=True)
class GenerationGraphs:
    """The two sessions and the device their inputs and cache live on ("cpu" or "cuda")."""

    prefill: ort.InferenceSession
    decode: ort.InferenceSession
    device: str


class OrtGenerator:
    """``adapters.base.Generator`` for ONNX Runtime: ``prefill`` then ``decode`` per token;
    ``last_logits`` (the check, untimed) copies the last run's logits to the host."""

    def __init__(self, graphs: GenerationGraphs, max_length: int):
        self.graphs, self.max_length = graphs, max_length
        self.device = graphs.device
        self.outputs = [value.name for value in graphs.prefill.get_outputs()]
        self.presents = [name for name in self.outputs if name.startswith("present")]
        decode_inputs = {value.name for value in graphs.decode.get_inputs()}
        self.pasts = [name.replace("present", "past", 1) for name in self.presents]
        if set(self.pasts) | {INPUT} != decode_inputs:
            raise ValueError(f"decode inputs {sorted(decode_inputs)} do not match the prefill's "
                             f"present outputs {self.presents}")
        # The decode step's token: one device buffer, overwritten in place each step.
        self.token = ort.OrtValue.ortvalue_from_shape_and_type((1, 1), np.int32, self.device, 0)
        self.prefill_binding = graphs.prefill.io_binding()
        self.decode_binding = graphs.decode.io_binding()
        self.decode_binding.bind_ortvalue_input(INPUT, self.token)
        self.binding: ort.IOBinding | None = None   # the last run's
        self.length = 0                              # positions in the cache

    def _bind_outputs(self, binding: ort.IOBinding) -> None:
        # Bound anew before every run: an output left bound from the previous run would be
        # that run's buffer (of the old cache length), which the next step reads as past.
        for name in self.outputs:
            binding.bind_output(name, "cpu" if name == NEXT else self.device, 0)

    def _run(self, session: ort.InferenceSession, binding: ort.IOBinding) -> int:
        self._bind_outputs(binding)
        session.run_with_iobinding(binding)
        self.binding = binding
        values = binding.get_outputs()
        self.cache = [values[self.outputs.index(name)] for name in self.presents]
        return int(values[self.outputs.index(NEXT)].numpy().reshape(-1)[0])

    def prefill(self, prompt: np.ndarray) -> int:
        prompt = np.ascontiguousarray(prompt, dtype=np.int32).reshape(1, -1)
        if prompt.shape[1] == 0:
            raise ValueError("an empty prompt")
        if prompt.shape[1] > self.max_length:
            raise ValueError(f"position {prompt.shape[1]} beyond the cache's {self.max_length}")
        # A prompt's shape can change between generations: its own device buffer.
        self.prompt = ort.OrtValue.ortvalue_from_numpy(prompt, self.device, 0)
        self.prefill_binding.bind_ortvalue_input(INPUT, self.prompt)
        token = self._run(self.graphs.prefill, self.prefill_binding)
        self.length = prompt.shape[1]
        return token

    def decode(self, token: int) -> int:
        if self.binding is None:
            raise ValueError("decode before prefill")
        if self.length >= self.max_length:
            raise ValueError(f"position {self.length + 1} beyond the cache's {self.max_length}")
        self.token.update_inplace(np.array([[token]], np.int32))
        for name, value in zip(self.pasts, self.cache):
            self.decode_binding.bind_ortvalue_input(name, value)
        next_token = self._run(self.graphs.decode, self.decode_binding)
        self.length += 1
        return next_token

    def last_logits(self) -> np.ndarray:
        if self.binding is None:
            raise ValueError("no logits before prefill")
        logits = self.binding.copy_outputs_to_cpu()[self.outputs.index(LOGITS)]
        return np.asarray(logits, np.float64).reshape(-1)
