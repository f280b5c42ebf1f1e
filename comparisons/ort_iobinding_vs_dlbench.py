"""Does dlbench time ONNX Runtime fairly? dlbench's ORT forward time for a model (the
adapter driven by suites.stats.timer, as a suite run does) against the same ONNX model, exported
from dlbench's builder to a file, run by a minimal hand-written loop in this file, in the
same process, in alternating rounds. On the GPU the two medians must agree within ±5%
(exit status 1 otherwise).

    # GPU (onnxruntime-gpu importable; see ../shared/GPU-HOST.md):
    python comparisons/ort_iobinding_vs_dlbench.py --device gpu
    # CPU smoke test (the hand loop then uses plain session.run on a CPU input):
    python comparisons/ort_iobinding_vs_dlbench.py --device cpu --rounds 2

The hand loop on GPU: the batch copied to the GPU once as an OrtValue, bound with IOBinding
with the output bound to the GPU, then ``session.run_with_iobinding`` + ``synchronize`` per
iteration, timed with ``time.perf_counter`` (ONNX Runtime docs, "I/O Binding").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from adapters.base import CaseConfig, RunConfig  # noqa: E402
from adapters.ort import OrtAdapter  # noqa: E402
from adapters.ort.adapter import gpu_name, needs_lengths  # noqa: E402
from adapters.ort.network import build  # noqa: E402
from models.inputs import make_batch  # noqa: E402
from models.weights import canonical_weights  # noqa: E402
from models.zoo import get_model  # noqa: E402
from suites.instruments.environment import cpu_model, usable_cpus  # noqa: E402
from suites.stats.timer import TimerSettings, measure  # noqa: E402

TOLERANCE = 0.05


def dlbench_samples(prepared, device: str) -> list[float]:
    """Per-iteration seconds from the harness's own timer, with the default suite's
    timer settings for this device."""
    suite = ROOT / "suites" / f"default-{device}.toml"
    settings = TimerSettings(**tomllib.loads(suite.read_text()).get("timer", {}))
    return list(measure(prepared.step("forward"), prepared.sync, settings).samples_s)


def hand_session(path: str, device: str, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if device == "gpu":
        cuda = {"device_id": "0", "cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "0"}
        providers = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    return ort.InferenceSession(path, options, providers=providers)


def hand_samples(session: ort.InferenceSession, x: np.ndarray, device: str,
                 warmup: int, iterations: int) -> list[float]:
    samples = []
    if device == "gpu":
        x_gpu = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input("input", x_gpu)
        binding.bind_output("output", "cuda", 0)
        for i in range(warmup + iterations):
            start = time.perf_counter()
            session.run_with_iobinding(binding)
            binding.synchronize_outputs()
            if i >= warmup:
                samples.append(time.perf_counter() - start)
    else:
        feeds = {"input": x}   # on the CPU, ORT reads the numpy buffer in place
        for i in range(warmup + iterations):
            start = time.perf_counter()
            session.run(["output"], feeds)
            if i >= warmup:
                samples.append(time.perf_counter() - start)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=usable_cpus())
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--iterations", type=int, default=0,
                        help="hand-loop iterations per round (default: 200 GPU, 5 CPU)")
    args = parser.parse_args(argv)
    iterations = args.iterations or (200 if args.device == "gpu" else 5)

    model = get_model(args.model)
    weights = canonical_weights(model)
    batch = make_batch(model, args.batch)
    if needs_lengths(model, batch):
        parser.error("the hand loop binds one input; pick an image or vector model")
    adapter = OrtAdapter(RunConfig(args.device, args.threads, 1))
    prepared = adapter.prepare(model, weights, batch, CaseConfig())

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        onnx.save(build(model, weights, batch.x.shape, False), path)
        session = hand_session(path, args.device, args.threads)
        x = np.ascontiguousarray(batch.x)
        ours, hand = [], []
        for round_index in range(args.rounds):
            a = dlbench_samples(prepared, args.device)
            b = hand_samples(session, x, args.device, 5, iterations)
            ours += a
            hand += b
            print(f"round {round_index + 1}: dlbench {statistics.median(a) * 1e3:.3f} ms "
                  f"({len(a)} samples), hand loop {statistics.median(b) * 1e3:.3f} ms "
                  f"({len(b)} samples)")
    prepared.close()

    where = gpu_name() if args.device == "gpu" else f"{cpu_model()}, {args.threads} threads"
    load = f", load average {os.getloadavg()[0]:.2f}" if args.device == "cpu" else ""
    dlbench_ms, hand_ms = statistics.median(ours) * 1e3, statistics.median(hand) * 1e3
    ratio = dlbench_ms / hand_ms
    print(f"{args.model} batch {args.batch} forward on {where}{load}; onnxruntime "
          f"{ort.__version__}")
    print(f"dlbench median   {dlbench_ms:.3f} ms")
    print(f"hand-loop median {hand_ms:.3f} ms")
    print(f"ratio dlbench / hand loop = {ratio:.3f} (must be within 1 ± {TOLERANCE} on GPU)")
    if args.device == "cpu":
        print("CPU: smoke test only (plain session.run; shared CPUs make timings noisy)")
        return 0
    return 0 if abs(ratio - 1) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
