"""PyTorch-specific checks: settings really reach torch, variants behave, threads scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from adapters.base import CaseConfig, RunConfig, Unsupported
from adapters.torch import TorchAdapter
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def adapter():
    return TorchAdapter(RunConfig("cpu", threads=2, interop_threads=1))


def prepare(adapter, name, precision="fp32", variant="default", batch=4):
    model = get_model(name)
    return adapter.prepare(model, canonical_weights(model), make_batch(model, batch),
                           CaseConfig(precision, variant))


def test_fp32_is_strict(adapter):
    prepare(adapter, "lenet_tiny").close()
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_cpu_row_names_the_kernel_libraries_of_its_build(adapter):
    """The BLAS, oneDNN and ATen's vector extension, as the build reports them: an MKL build
    names MKL's version, an OpenBLAS build does not borrow it from another line."""
    from adapters.torch.adapter import cpu_kernels
    env = adapter.environment()
    assert env["cpu_kernels"] == cpu_kernels(torch.__config__.show())
    assert env["cpu_kernels"].startswith("BLAS ")
    assert env["cpu_kernels"].endswith(f"ATen {torch.backends.cpu.get_cpu_capability()}")
    mkl = ("  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605\n"
           "  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71)\n"
           "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release\n")
    assert cpu_kernels(mkl).startswith("BLAS mkl 2024.2, oneDNN 3.12.0, ATen ")
    openblas = ("  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build\n"
                "  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release\n")
    assert cpu_kernels(openblas).startswith("BLAS open, ATen ")
    assert cpu_kernels("").startswith("BLAS unknown, ATen ")


@pytest.mark.parametrize("precision, variant, reason", [
    ("tf32", "default", "GPU tensor-core mode"),
    ("fp32", "no_cudnn", "cuDNN exists on GPU only"),
    ("fp32", "cudnn_exhaustive", "cuDNN exists on GPU only"),
    ("fp32", "compile_reduce_overhead", "CUDA graphs need a GPU"),
])
def test_gpu_only_settings_are_unsupported_on_cpu(adapter, precision, variant, reason):
    with pytest.raises(Unsupported, match=reason):
        prepare(adapter, "lenet_tiny", precision, variant)


def test_cuda_graph_trees_reach_a_thread_that_did_not_import_them():
    # LoadGen's and the batcher's threads call serve; CUDAGraph Trees' managers live in a
    # threading.local (adapters/torch/adapter.py graph_trees_any_thread). Without the
    # wrapper a fresh thread gets none of the main thread's (torch 2.13: a new, empty one of
    # its own; earlier versions: a failed assert); with it, the main thread's.
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import cudagraph_trees as trees

    from adapters.torch.adapter import graph_trees_any_thread
    main = trees.get_obj(trees.local, "tree_manager_containers")

    def containers():
        try:
            return trees.get_obj(trees.local, "tree_manager_containers")
        except AssertionError:
            return None
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(containers).result() is not main
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(graph_trees_any_thread(containers)).result() is main


def test_channels_last_needs_images(adapter):
    with pytest.raises(Unsupported, match="channels-last"):
        prepare(adapter, "lstm_tiny", variant="channels_last")
    prepared = prepare(adapter, "resnet_tiny", variant="channels_last")
    assert prepared.x.is_contiguous(memory_format=torch.channels_last)
    prepared.close()


def test_compile_channels_last_is_both_and_refuses_what_compile_refuses(adapter):
    with pytest.raises(Unsupported, match="channels-last"):
        prepare(adapter, "lstm_tiny", variant="compile_channels_last")
    prepared = prepare(adapter, "conv_tiny", variant="compile_channels_last")
    assert prepared.x.is_contiguous(memory_format=torch.channels_last)
    assert isinstance(prepared.run_body, torch._dynamo.eval_frame.OptimizedModule)
    for measure in ("grad_input", "grad_weight"):
        with pytest.raises(Unsupported, match="compiled graph"):
            prepared.step(measure)
    prepared.close()


def trained(prepared, steps=2):
    step = prepared.step("train_step")
    for _ in range(steps):
        prepared.sync(step())
    return prepared.trained_weights()


# The compiled variant trains the one-convolution network: inductor compiles its forward
# and backward in seconds on the CPU, LeNet's in half a minute.
@pytest.mark.parametrize("variant, name, conv", [("channels_last", "lenet_tiny", "conv1"),
                                                 ("compile_channels_last", "conv_tiny", "conv")])
def test_train_step_in_layout_variants_trains_as_eager(adapter, variant, name, conv):
    """Two steps of a channels-last (compiled) training copy give eager's weights (the
    conformance kit checks eager against float64), keep the copy's parameters
    channels-last, and leave the canonical network as it was."""
    reference = prepare(adapter, name)
    expected = trained(reference)
    reference.close()
    prepared = prepare(adapter, name, variant=variant)
    before = prepared.forward_output()
    weights = trained(prepared)
    copied = prepared.train_copy.params[f"{conv}.weight"]
    assert copied is not prepared.params[f"{conv}.weight"]
    assert copied.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(prepared.forward_output(), before)
    prepared.close()
    assert set(weights) == set(expected)
    for param, value in expected.items():
        np.testing.assert_allclose(weights[param], value, rtol=1e-5, atol=1e-6, err_msg=param)


def test_compiled_train_step_compiles_the_loss_with_the_forward(adapter):
    """The compiled training step is one graph from features to loss, as JAX's jit and
    TensorFlow's XLA compile theirs: the cross-entropy is traced with the network, not
    left eager after a compiled module."""
    prepared = prepare(adapter, "lenet_tiny", variant="compile")
    loss = prepared._training().loss     # dynamo only traces here; nothing is compiled
    inputs = prepared.inputs
    explained = torch._dynamo.explain(loss._torchdynamo_orig_callable)(
        inputs.x, inputs.lengths, inputs.labels)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    code = explained.graphs[0].code
    assert "cross_entropy" in code and "conv2d" in code
    prepared.close()


def test_compiled_train_step_compiles_once_with_adamw(adapter):
    """Later calls reuse the first call's graph: the AdamW state torch creates at the first
    optimizer step is outside the compiled region and triggers no recompile (JAX's train
    step compiled twice from a half-uncommitted first state: tests/adapters/test_jax.py)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    prepared = prepare(adapter, "gpt2_tiny", variant="compile", batch=2)
    try:
        run = prepared.step("train_step")
        prepared.sync(run())
        frames = dict(counters["frames"])
        for _ in range(3):
            prepared.sync(run())
        assert frames.get("ok", 0) >= 1
        assert dict(counters["frames"]) == frames and not counters["recompiles"]
    finally:
        prepared.close()


def test_bf16_train_step_keeps_fp32_master_weights(adapter):
    fp32 = prepare(adapter, "lenet_tiny")
    initial = fp32.trained_weights()
    expected = trained(fp32)
    fp32.close()
    bf16 = prepare(adapter, "lenet_tiny", precision="bf16")
    weights = trained(bf16)
    assert all(p.dtype == torch.float32 for p in bf16.train_copy.params.values())
    assert all(p.grad.dtype == torch.float32 for p in bf16.train_copy.params.values())
    bf16.close()
    for name, value in expected.items():
        update, bf16_update = value - initial[name], weights[name] - initial[name]
        assert not np.array_equal(bf16_update, update), name   # another precision
        # bf16 products (unit roundoff 2^-8) in short reductions: a few per cent of the
        # update, far below the update itself.
        assert np.linalg.norm(bf16_update - update) <= 0.1 * np.linalg.norm(update), name


def test_variants_compute_the_same_function(adapter):
    reference = prepare(adapter, "resnet_tiny")
    expected = reference.forward_output()
    reference.close()
    for variant in ("channels_last", "compile"):
        prepared = prepare(adapter, "resnet_tiny", variant=variant)
        np.testing.assert_allclose(prepared.forward_output(), expected, rtol=1e-4, atol=1e-5)
        prepared.close()


def test_bf16_runs_in_bfloat16_and_stays_close(adapter):
    fp32 = prepare(adapter, "lenet_tiny")
    bf16 = prepare(adapter, "lenet_tiny", precision="bf16")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert bf16.run_body(bf16.x).dtype == torch.bfloat16
    a, b = fp32.forward_output(), bf16.forward_output()
    assert not np.array_equal(a, b)                     # it really is another precision
    np.testing.assert_allclose(b, a, rtol=0.1, atol=0.1 * np.abs(a).max())


def test_bf16_generation_caches_bfloat16_and_matches_float64_within_its_bound(adapter):
    from tests.conformance.test_generate import generates_as_float64, prepared_for
    _, _, _, prepared = prepared_for(adapter, "gpt2_tiny", "bf16")
    generator = prepared.generator(16)
    assert {cache.keys.dtype for cache in generator.caches.values()} == {torch.bfloat16}
    generates_as_float64(adapter, "bf16")


def test_compiled_generation_matches_float64_and_compiles_each_pass_once(adapter):
    """torch.compile's generation: every step within fp32's bound of float64 and every
    token float64's, over two prompts and 15 steps, from two graphs (the prefill's and the
    decode step's) compiled once each: a decode step that specialised on its position
    would recompile at every token."""
    from torch._dynamo.utils import counters

    from tests.conformance.test_generate import generates_as_float64
    torch._dynamo.reset()
    counters.clear()
    generates_as_float64(adapter, "fp32", "compile")
    assert dict(counters["frames"]) == {"total": 2, "ok": 2}
    assert counters["stats"]["unique_graphs"] == 2 and not counters["recompiles"]


def test_a_server_s_batch_sizes_keep_one_static_program_each(adapter):
    """A Server's allowed batch sizes under torch.compile, prepared as one case
    (``prepare_sizes``, as suites/serving/run.py does) and served: one static program per
    size, and serving them all again compiles nothing. By default torch compiles a later
    shape of one function for a dynamic batch (size 1 stays specialised) and serves the
    sizes after it from that program: 3 programs here, not 4. (Prepared one by one, each
    preparation also cleared torch.compile's state, discarding the sizes before it:
    tests/serving/test_server.py.)"""
    from torch._dynamo.utils import counters

    from suites.serving.sut import select
    model = get_model("lenet_tiny")
    samples = make_batch(model, 8)
    sizes = [8, 1, 2, 4]
    prepared = adapter.prepare_sizes(model, canonical_weights(model),
                                     [select(samples, range(n)) for n in sizes],
                                     CaseConfig(variant="compile"))
    try:
        counters.clear()
        for each, n in zip(prepared, sizes, strict=True):
            each.serve(select(samples, range(n)))
        assert counters["stats"]["unique_graphs"] == len(sizes)
        counters.clear()
        for each, n in reversed(list(zip(prepared, sizes, strict=True))):
            assert each.serve(select(samples, range(n))).shape[0] == n
        assert not counters["recompiles"] and not counters["stats"]["unique_graphs"]
    finally:
        for each in prepared:
            each.close()


def test_more_batch_sizes_than_torch_compiles_are_unsupported(adapter):
    """Past recompile_limit programs of one function torch.compile runs it uncompiled: a
    case that would need more is refused, never timed eager under a compiled name."""
    from suites.serving.sut import select
    model = get_model("lenet_tiny")
    samples = make_batch(model, 9)
    limit = torch._dynamo.config.recompile_limit
    with pytest.raises(Unsupported, match="recompile_limit"):
        adapter.prepare_sizes(model, canonical_weights(model),
                              [select(samples, range(n)) for n in range(1, limit + 2)],
                              CaseConfig(variant="compile"))


def test_cuda_graph_generation_marks_its_cache_static(adapter):
    """compile_reduce_overhead's generator marks every key and value cache and its
    positions static inputs, the tensors its CUDA graphs write in place or read by address.
    The variant needs a GPU, so the generator is built here over a CPU model prepared under
    ``compile`` and given the variant's name; nothing is compiled until a pass runs."""
    from adapters.torch.adapter import REDUCE_OVERHEAD, TorchGenerator
    from tests.conformance.test_generate import prepared_for
    _, _, _, prepared = prepared_for(adapter, "gpt2_tiny", "fp32", "compile")
    prepared.variant = REDUCE_OVERHEAD
    generator = TorchGenerator(prepared, 16)
    marked = [tensor for cache in generator.caches.values()
              for tensor in (cache.keys, cache.values)] + [generator.arange]
    assert len(marked) == 2 * len(generator.caches) + 1 and len(generator.caches) == 2
    assert {getattr(t, "_dynamo_static_input_type", None) for t in marked} == {"unguarded"}
    prepared.close()


def test_generation_that_would_skip_cuda_graphs_is_unsupported():
    """Under compile_reduce_overhead, inductor's refusal of CUDA graphs (raised where
    ``cudagraph_or_error`` is set) becomes the case's Unsupported with inductor's reason;
    any other error stays what it is."""
    from adapters.torch.adapter import TorchGenerator

    def skips(*_):
        raise RuntimeError("backend='inductor' raised:\nRuntimeError: skipping cudagraphs "
                           "due to mutated inputs (2 instances). Found from:\n  File x.py")

    def fails(*_):
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(Unsupported, match=r"compile_reduce_overhead: .*without CUDA graphs "
                                          r"\(RuntimeError: skipping cudagraphs due to "
                                          r"mutated inputs \(2 instances\)\. Found from:\)"):
        TorchGenerator._graphed_or_unsupported(skips, None, None)
    with pytest.raises(RuntimeError, match="out of memory"):
        TorchGenerator._graphed_or_unsupported(fails, None, None)


def test_grad_input_and_grad_weight_are_separate_kernels(adapter):
    prepared = prepare(adapter, "conv_tiny")
    grad_x = prepared.step("grad_input")()
    grad_w = prepared.step("grad_weight")()
    assert len(grad_x) == 1 and grad_x[0].shape == prepared.x.shape
    assert [g.shape for g in grad_w] == [p.shape for p in prepared.params.values()]
    prepared.close()


def test_batch_norm_statistics_do_not_drift_during_gradient_passes(adapter):
    prepared = prepare(adapter, "resnet_tiny")
    before = prepared.forward_output()
    step = prepared.step("gradient")
    for _ in range(3):
        step()
    np.testing.assert_array_equal(prepared.forward_output(), before)
    prepared.close()


def test_out_of_memory_errors_are_recognised(adapter):
    assert adapter.is_out_of_memory(MemoryError())
    assert adapter.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert not adapter.is_out_of_memory(RuntimeError("shape mismatch"))


PROBE = """
import json, os, sys
from suites.instruments.environment import limit_cpus
threads = int(sys.argv[1])
limit_cpus(threads)
from adapters.base import CaseConfig, RunConfig
from adapters.torch import TorchAdapter
from models.inputs import make_batch
from models.weights import canonical_weights
from models.zoo import get_model
import torch

def cpu_ticks_per_thread():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks

adapter = TorchAdapter(RunConfig("cpu", threads, 1))
model = get_model("conv_l5")
prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, 8), CaseConfig())
step = prepared.step("gradient")
step()
before = cpu_ticks_per_thread()
for _ in range(10):
    step()
after = cpu_ticks_per_thread()
deltas = [after[t] - before.get(t, 0) for t in after]
busy = [d for d in deltas if d > 0.2 * max(deltas)]
print(json.dumps({"threads": torch.get_num_threads(), "busy_threads": len(busy),
                  "cpus": len(os.sched_getaffinity(0))}))
"""


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_thread_count_really_changes_cpu_use():
    results = {}
    for threads in (1, 2):
        out = subprocess.run([sys.executable, "-c", PROBE, str(threads)], cwd=ROOT,
                             capture_output=True, text=True, timeout=600, check=True).stdout
        results[threads] = json.loads(out.strip().splitlines()[-1])
    # Structural, not a speed bound: count the OS threads that did real work in the
    # timed steps (robust to other load on the machine, unlike CPU-time ratios).
    assert results[1] == {"threads": 1, "busy_threads": 1, "cpus": 1}, results
    assert results[2] == {"threads": 2, "busy_threads": 2, "cpus": 2}, results


@pytest.mark.parametrize("variant, recorded", [
    ("default", "flash (aten::_scaled_dot_product_flash_attention_for_cpu)"),
    ("sdpa_math", "math (aten::_scaled_dot_product_attention_math)"),
    ("sdpa_flash", "flash (aten::_scaled_dot_product_flash_attention_for_cpu)"),
    ("default", "flash (aten::_scaled_dot_product_flash_attention_for_cpu)"),   # restored
])
def test_the_row_records_the_sdpa_backend_that_ran(adapter, variant, recorded):
    """PyTorch's choice on a CPU is its CPU flash kernel; a variant forces another, and the
    next job's default gets PyTorch's choice back."""
    prepared = prepare(adapter, "gpt2_tiny", variant=variant, batch=2)
    try:
        assert prepared.extra["attention"] == recorded
    finally:
        prepared.close()


@pytest.mark.parametrize("model, variant, reason", [
    ("gpt2_tiny", "sdpa_efficient", "no efficient attention kernel on a CPU"),
    ("gpt2_tiny", "sdpa_cudnn", "no cudnn attention kernel on a CPU"),
    ("lenet_tiny", "sdpa_math", "lenet_tiny has no self-attention"),
    ("gpt2_tiny", "sdpa_nonsense", "torch has no variant 'sdpa_nonsense'"),
])
def test_a_backend_that_cannot_run_is_unsupported_in_one_line(adapter, model, variant, reason):
    with pytest.raises(Unsupported, match=reason) as error:
        prepare(adapter, model, variant=variant)
    assert "\n" not in str(error.value)


def test_models_without_attention_record_none(adapter):
    prepared = prepare(adapter, "lenet_tiny")
    assert "attention" not in prepared.extra
    prepared.close()


@pytest.mark.parametrize("variant", ["default", "sdpa_math"])
def test_attention_with_causal_and_padding_masks_matches_float64(adapter, variant):
    """The tiny networks use one mask each (GPT-2 causal, BERT padding); both together
    take the path that merges the causal triangle into the boolean attn_mask. PyTorch's
    choice (the CPU flash kernel) and the math backend alike."""
    from models import ir, reference, reference_grad

    vocab, width = 40, 16
    model = ir.Model("causal_padded_attention", "test", ir.InputSpec("tokens", (12,), vocab),
                     (ir.Embedding("emb", vocab, width),
                      ir.SelfAttention("attn", width, 2, causal=True, padding=True),
                      ir.TiedDense("head", "emb", bias=False, table=True)),
                     ir.Loss("token_xent", vocab))
    weights, batch = canonical_weights(model), make_batch(model, 4)
    assert len(set(batch.lengths.tolist())) > 1   # padded rows, so the mask matters
    prepared = adapter.prepare(model, weights, batch, CaseConfig(variant=variant))
    try:
        assert prepared.extra["attention"].startswith("math" if variant == "sdpa_math" else "flash")
        output = prepared.forward_output()
        loss, grads = prepared.loss_and_gradients()
        grads = {n: prepared.canonical_gradient(n, g) for n, g in grads.items()}
    finally:
        prepared.close()
    np.testing.assert_allclose(output, reference.forward(model, weights, batch),
                               rtol=1e-4, atol=1e-5)
    expected_loss, expected = reference_grad.loss_and_gradients(model, weights, batch)
    assert np.isclose(loss, expected_loss, rtol=1e-5)
    assert set(grads) == set(expected)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, expected[name], rtol=1e-3, atol=1e-5, err_msg=name)


# --- Hugging Face transformers, PyTorch's twin for the transformers (issue 60) -------------

def _transformers():
    """transformers with its model classes loadable, or the test skipped: it imports
    lazily, and a model module fails where an installed torchvision cannot load."""
    transformers = pytest.importorskip("transformers")
    try:
        transformers.GPT2LMHeadModel, transformers.BertForMaskedLM  # noqa: B018
        transformers.ViTForImageClassification  # noqa: B018
    except (ImportError, RuntimeError) as error:
        pytest.skip(f"transformers' models do not load here: {str(error).splitlines()[0]}")
    return transformers


def test_parameter_counts_equal_hugging_faces_default_models():
    """The counts tests/models/test_transformers.py states equal those of the Hugging Face
    models built from their default configs (on the meta device: no memory, no init),
    so neither the zoo nor the stated numbers can drift from transformers."""
    from models.analysis import analyse
    from tests.models.test_transformers import HF_PARAMETERS
    transformers = _transformers()
    with torch.device("meta"):
        built = {"gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config()),
                 "bert_base": transformers.BertForMaskedLM(transformers.BertConfig()),
                 "vit_b16": transformers.ViTForImageClassification(
                     transformers.ViTConfig(num_labels=1000))}
    for name, hf in built.items():
        count = sum(p.numel() for p in hf.parameters())   # tied weights once
        assert count == HF_PARAMETERS[name] == analyse(get_model(name)).params, name


@pytest.mark.parametrize("name", ["gpt2_tiny", "bert_tiny", "vit_tiny"])
def test_hugging_face_twin_gets_every_weight_and_computes_the_same_function(adapter, name):
    """The weight table fills every Hugging Face parameter, and the twin's fp32 logits and
    loss are dlbench's and float64's within the derived bounds; swapping two of the q|k|v
    blocks (a wrong table row) is caught by the same check."""
    transformers = _transformers()
    from comparisons import hf_transformers_vs_dlbench as twin_module
    model = get_model(name)
    weights, batch = canonical_weights(model), make_batch(model, 2)
    prepared = adapter.prepare(model, weights, batch, CaseConfig("fp32", "eager"))
    shape = twin_module.shape_of(model)
    twin = twin_module.Twin(twin_module.hf_model(transformers, model, weights, adapter.device),
                            shape, prepared, adapter.device, "fp32", compiled=False)
    check = twin_module.identity(model, weights, batch, prepared, twin, "fp32", float64=True)
    assert check.same, check
    family = shape.family
    if family in twin_module.HF_QKV:
        swapped = twin_module.HF_QKV[family]
        twin_module.HF_QKV[family] = (swapped[1], swapped[0], swapped[2])
    else:   # GPT-2's fused c_attn (one table row): its q and k column blocks swapped
        original, d = weights["h0.attn.qkv.weight"], shape.width
        weights = {**weights, "h0.attn.qkv.weight": np.concatenate(
            [original[:, d:2 * d], original[:, :d], original[:, 2 * d:]], axis=1)}
    try:
        wrong = twin_module.Twin(twin_module.hf_model(transformers, model, weights, adapter.device),
                                 shape, prepared, adapter.device, "fp32", compiled=False)
        assert not twin_module.identity(model, weights, batch, prepared, wrong, "fp32",
                                        float64=False).same
    finally:
        if family in twin_module.HF_QKV:
            twin_module.HF_QKV[family] = swapped
    prepared.close()


def test_hugging_face_weight_table_refuses_an_unmapped_parameter():
    from comparisons import hf_transformers_vs_dlbench as twin_module
    model = get_model("vit_tiny")
    weights = dict(canonical_weights(model))
    weights["extra.weight"] = np.zeros(3)
    with pytest.raises(SystemExit, match="extra.weight"):
        twin_module.hf_arrays(twin_module.shape_of(model), weights)
