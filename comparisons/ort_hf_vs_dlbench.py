"""dlbench's ONNX Runtime transformers (``ort_fused``) against ONNX Runtime's own optimizer run
on the Hugging Face export of the same models: the twin of issue 60 ("ONNX Runtime | its own
optimizer run on the Hugging Face export").

    # one environment with torch, transformers, onnx and onnxruntime (the CPU test venv):
    python -m comparisons.ort_hf_vs_dlbench --device cpu --models gpt2_tiny,bert_tiny,vit_tiny \\
        --exporters torchscript --budget 0.01 --min-samples 1
    # GPU, two steps: the export on the CPU where torch and transformers are, then the
    # timing where onnxruntime-gpu is (the commands: docs/user-guide.md, twins)
    .nox/tests-torch/bin/python -m comparisons.ort_hf_vs_dlbench --export-only --exports exp/
    .nox/ort_gpu/bin/python -m comparisons.ort_hf_vs_dlbench --device cuda --exports exp/ --out cmp/

The twin of each transformer is what a user of ONNX Runtime's transformer tooling makes:

1. **export**: the Hugging Face model the PyTorch twin builds (comparisons/
   hf_transformers_vs_dlbench.py ``hf_model``: ``GPT2LMHeadModel``, ``BertForMaskedLM``,
   ``ViTForImageClassification`` from configs sized from dlbench's IR, SDPA attention,
   dropout 0, carrying dlbench's canonical weights through its ``MAPPING``) exported by
   ``torch.onnx.export`` at the opset and IR version dlbench's ORT adapter pins
   (adapters/ort/network.py ``OPSET``, ``IR_VERSION``), for dlbench's batch: static shapes,
   as dlbench's graphs are. Inputs as a tokenizer or image processor returns them: int64
   ``input_ids`` (+ ``attention_mask`` for BERT, from the batch's lengths), float32
   ``pixel_values`` for ViT. The output is named as dlbench's (``output``: the logits), so
   the adapter's IOBinding code binds it.
2. **optimize**: ``onnxruntime.transformers.optimizer.optimize_model`` with the model type,
   heads and width, at the opt_level dlbench's ``ort_fused`` uses, and for fp16 (CUDA only,
   as dlbench's) its ``convert_float_to_float16`` with float32 inputs and outputs: both
   through the adapter's own ``optimise_transformer`` (one place for the optimizer), which
   also counts what it fused (``get_fused_operator_statistics``) and what the IR called
   for and the graph still lacks. Both sides' counts are written in each row: the first
   thing to read where the timings differ.
3. **identity**: before timing, the twin's logits (valid steps; BERT's padded steps are
   unspecified in the IR) lie within twice the precision's derived bound
   (models/error_bounds.py) of dlbench's ``ort_fused`` logits (each side within one bound
   of float64 makes them within two of each other), and, where the batch is small enough
   (``--float64``), within one bound of models.reference's float64 directly.
4. **timing**: forward with IOBinding (inputs resident on the device, the output bound
   there), in a session made with the adapter's own session options and CUDA provider
   options (``session_options``, ``cuda_provider_options``: TF32 off in fp32, the same
   threads), each side timed by suites/stats/timer.py with the adapter's sync, in A-B-B-A
   order. The ratio is dlbench ÷ twin per (model, precision, form); the issue's bar
   (±5%) is taken against the twin's fastest form.

Results: a table on stdout, and ``--out DIR`` appends JSON lines to DIR/
ort_hf_vs_dlbench.ndjson (an environment line, then one line per case). Exit status 1 when
a pair computes different functions, 2 when a package a step needs is missing.

The exporter (``--exporters``): ``dynamo`` is torch.onnx.export's default in torch 2.13
(through torch.export and onnxscript); ``torchscript`` its older tracer (``dynamo=False``).
On the tiny models (transformers 5.17.0, onnxruntime 1.31.1) ORT's optimizer made the same
fusions of both graphs (SkipLayerNormalization, FastGelu/BiasGelu) and fused neither
graph's attention: transformers 5 exports SDPA as MatMul, Softmax and IsNaN/Where ops,
which the optimizer's attention patterns do not match; the rows say so (``not_fused``).
The tracer exported a tiny model in 0.4 s, torch.export in 9 s, and needs no onnxscript,
so the CPU tests use it; the GPU command runs both. The attention (``--attentions``):
Hugging Face's ``eager`` attention instead of SDPA (``set_attn_implementation``), the
modules ORT's optimizer was written for: traced, BERT's attention is then fused into
com.microsoft Attention (GPT-2's and ViT's still are not: tiny models, transformers
5.17.0, onnxruntime 1.31.1). Each form is a variant of the twin, and the closing table
sets dlbench's ``ort_fused`` against the fastest, as issue 60's bar asks.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from comparisons.transformer_twins import (
    FLOAT64_MAX_FLOPS,
    MODELS,
    SUITE_BATCH,
    ResultsLog,
    exit_status,
    is_transformer,
    model_for,
    one_line,
    parse_list,
    relative_difference,
    shape_of,
    wants_float64,
)
from models import ir, reference
from models.analysis import analyse
from models.error_bounds import bounds
from models.inputs import Batch, make_batch
from models.weights import canonical_weights

PRECISIONS = ("fp32", "fp16")
EXPORTERS = ("dynamo", "torchscript")
# Hugging Face's attn_implementation in the exported model: SDPA, as the PyTorch twin builds
# it, or eager (its matmul-softmax-matmul modules), whose BERT export the optimizer fuses.
ATTENTIONS = ("sdpa", "eager")
VARIANT = "ort_fused"   # dlbench's side: the ORT adapter's transformer fast path
RESULTS_FILE = "ort_hf_vs_dlbench.ndjson"
MANIFEST = "export.json"


@dataclass(frozen=True)
class Form:
    """How the twin's graph is made: the exporter and Hugging Face's attention."""

    exporter: str = "dynamo"
    attention: str = "sdpa"

    @property
    def label(self) -> str:
        return f"{self.exporter}+{self.attention}"


@dataclass(frozen=True)
class Export:
    """One exported graph and what it was made from: written beside it by the export step,
    read by the timing step (which may run in another environment)."""

    model: str            # the zoo's name (with its steps: gpt2:s=128)
    batch: int
    exporter: str
    attention: str
    inputs: tuple[str, ...]
    opset: int
    ir_version: int
    torch: str
    transformers: str

    @staticmethod
    def folder(root: Path, model: ir.Model, batch: int, form: Form) -> Path:
        return root / f"{model.name.replace(':', '_')}_b{batch}_{form.exporter}_{form.attention}"


def twin_inputs(model: ir.Model, batch: Batch, exporter: str) -> dict[str, np.ndarray]:
    """The Hugging Face model's inputs for dlbench's batch, as its preprocessing returns
    them: int64 token ids, BERT's attention mask (1 for a token, 0 for padding) from the
    lengths, ViT's float32 pixels. GPT-2 with the TorchScript tracer also gets its
    all-ones mask: without one, transformers 5.17's mask code (masking_utils.
    find_packed_sequence_indices) calls torch.diff, which that exporter cannot write
    (``aten::diff`` unsupported at opset 21); torch.export's graph needs none."""
    family = shape_of(model).family
    if family == "vit":
        return {"pixel_values": np.ascontiguousarray(batch.x, np.float32)}
    ids = np.ascontiguousarray(batch.x, np.int64)
    inputs = {"input_ids": ids}
    if family == "bert" and batch.lengths is not None:
        steps = np.arange(ids.shape[1])
        inputs["attention_mask"] = (steps[None, :] < batch.lengths[:, None]).astype(np.int64)
    elif family == "bert" or (family == "gpt2" and exporter == "torchscript"):
        inputs["attention_mask"] = np.ones_like(ids)
    return inputs


def valid_steps(batch: Batch) -> np.ndarray | None:
    """The steps whose logits the IR defines (a padded step's are unspecified)."""
    if batch.lengths is None:
        return None
    return np.arange(batch.x.shape[1])[None, :] < batch.lengths[:, None]


# --- step 1: the export (torch, transformers, onnx) -----------------------------------
def export(model: ir.Model, batch_size: int, form: Form, root: Path) -> Path:
    """The Hugging Face twin with dlbench's canonical weights through torch.onnx.export,
    on the CPU (the graph does not depend on where it was traced), into its folder."""
    import torch
    import transformers

    from adapters.ort.network import IR_VERSION, OPSET, OUTPUT
    from comparisons.hf_transformers_vs_dlbench import hf_model

    transformers.logging.set_verbosity_error()
    exporter = form.exporter
    folder = Export.folder(root, model, batch_size, form)
    folder.mkdir(parents=True, exist_ok=True)
    hf = hf_model(transformers, model, canonical_weights(model), torch.device("cpu")).eval()
    if form.attention != "sdpa":
        hf.set_attn_implementation(form.attention)
    inputs = {name: torch.from_numpy(array)
              for name, array in twin_inputs(model, make_batch(model, batch_size),
                                             exporter).items()}

    class Logits(torch.nn.Module):
        """The model called as users call it, ``model(**inputs).logits``, with the inputs
        passed positionally to the exporter: given keyword arguments, the TorchScript
        exporter passes every parameter of the model's forward with its default
        (torch/onnx/_internal/torchscript_exporter/utils.py, _decide_input_format, torch
        2.13), and a default number becomes a graph input: GPT2LMHeadModel's
        ``logits_to_keep=0`` became a scalar input whose Gather kept one position's
        logits."""

        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, *tensors):
            return self.hf(**dict(zip(inputs, tensors))).logits

    with torch.no_grad(), warnings.catch_warnings():
        # The tracer's notes on Python control flow it fixed to this batch's shapes (the
        # graph is static, as dlbench's are) and torch.onnx's deprecation of that exporter.
        warnings.simplefilter("ignore")
        torch.onnx.export(Logits().eval(), tuple(inputs.values()), str(folder / "model.onnx"),
                          input_names=list(inputs), output_names=[OUTPUT],
                          opset_version=OPSET, dynamo=exporter == "dynamo")
    import onnx
    proto = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    names = tuple(value.name for value in proto.graph.input)
    if names != tuple(inputs) or [o.name for o in proto.graph.output] != [OUTPUT]:
        raise ValueError(f"the {exporter} export's inputs {names} and outputs "
                         f"{[o.name for o in proto.graph.output]} are not {tuple(inputs)}, "
                         f"[{OUTPUT!r}]")
    if proto.ir_version != IR_VERSION:
        raise ValueError(f"the {exporter} export has IR version {proto.ir_version}, dlbench's "
                         f"graphs {IR_VERSION}")
    manifest = Export(model.name, batch_size, exporter, form.attention, names, OPSET,
                      proto.ir_version, torch.__version__, transformers.__version__)
    (folder / MANIFEST).write_text(json.dumps(asdict(manifest)) + "\n")
    return folder


def exported(model: ir.Model, batch_size: int, form: Form, root: Path) -> tuple[Export, Path]:
    """The export of this case: from ``root`` where the export step left it, else made here
    (when torch and transformers are importable)."""
    folder = Export.folder(root, model, batch_size, form)
    if not (folder / MANIFEST).exists():
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError:
            raise FileNotFoundError(
                f"no export at {folder}: run this script with --export-only --exports {root} "
                f"--exporters {form.exporter} --attentions {form.attention} where torch, "
                "transformers and onnx are installed") from None
        export(model, batch_size, form, root)
    manifest = json.loads((folder / MANIFEST).read_text())
    if (manifest["model"], manifest["batch"]) != (model.name, batch_size):
        raise ValueError(f"{folder} holds {manifest['model']} at batch {manifest['batch']}, "
                         f"not {model.name} at batch {batch_size}")
    return Export(**{**manifest, "inputs": tuple(manifest["inputs"])}), folder / "model.onnx"


# --- step 2: optimize, check and time (onnxruntime, onnx) -----------------------------
@dataclass(frozen=True)
class Identity:
    output: float             # the logits' largest difference, relative (dlbench vs twin)
    output_bound: float       # twice the precision's bound against float64
    dtypes: tuple[str, str]
    float64_output: float | None = None   # the twin's error against float64
    float64_bound: float | None = None

    @property
    def same(self) -> bool:
        within = self.output <= self.output_bound and self.dtypes[0] == self.dtypes[1]
        if self.float64_output is not None:
            within = within and self.float64_output <= self.float64_bound
        return within


def identity(model: ir.Model, weights, batch: Batch, precision: str, ours: np.ndarray,
             theirs: np.ndarray, float64: bool) -> Identity:
    """Both sides' logits within twice the precision's bound on each one's error against
    float64 (models/error_bounds.py), so of each other; the twin's within one bound of
    float64 where ``float64``."""
    bound = bounds(model, batch.size, precision).output
    valid = valid_steps(batch)
    f64 = None
    if float64:
        f64 = relative_difference(theirs, reference.forward(model, weights, batch), valid)
    return Identity(relative_difference(ours, theirs, valid), 2 * bound,
                    (str(ours.dtype), str(theirs.dtype)), f64, bound if float64 else None)


def fusions_of(graph) -> dict[str, Any]:
    """What ONNX Runtime's optimizer reported (adapters/ort/network.FusedGraph), as the
    adapter's rows record it; ``already_in_graph`` (the rows' ``written_by_builder``): ops
    of a fused type the export had before the optimizer ran, not counted as fusions."""
    return {"model_type": graph.model_type, "fusions": graph.fusions,
            "already_in_graph": graph.written, "not_fused": list(graph.not_fused) or None,
            "float16": graph.float16}


def time_pair(dlbench_step, twin_step, sync, settings) -> dict[str, list[float]]:
    """Both sides' medians (ms) in A-B-B-A order, so that drift favours neither."""
    from suites.stats.timer import measure
    steps = {"dlbench": dlbench_step, "twin": twin_step}
    medians: dict[str, list[float]] = {"dlbench": [], "twin": []}
    for label in ("dlbench", "twin", "twin", "dlbench"):
        medians[label].append(measure(steps[label], sync, settings).median_s * 1e3)
    return medians


def run_case(adapter, name: str, model: ir.Model, batch_size: int, precision: str,
             form: Form, root: Path, settings, float64: bool, write) -> dict[str, Any]:
    """One model × precision: the twin's graph optimized, checked against dlbench's
    ``ort_fused`` and float64, then both forwards timed; a row either way."""
    import onnx
    import onnxruntime as ort

    from adapters.base import CaseConfig, Unsupported
    from adapters.ort.adapter import BoundBatch, check_precision, session_options
    from adapters.ort.network import optimise_transformer

    on_gpu = adapter.config.device == "gpu"
    base = {"model": name, "batch": batch_size, "steps": int(model.input.shape[0])
            if model.input.kind == "tokens" else None, "precision": precision,
            "variant": form.label, "dlbench_variant": VARIANT, "exporter": form.exporter,
            "attention": form.attention, "measure": "forward"}
    prepared = None
    try:
        check_precision(precision, on_gpu, VARIANT)
        manifest, path = exported(model, batch_size, form, root)
        weights, batch = canonical_weights(model), make_batch(model, batch_size)
        graph = optimise_transformer(model, onnx.load(str(path)), precision == "fp16")
        prepared = adapter.prepare(model, weights, batch, CaseConfig(precision, VARIANT))
        session = ort.InferenceSession(graph.proto.SerializeToString(),
                                       session_options(adapter.config, VARIANT),
                                       providers=prepared.providers)
        inputs = twin_inputs(model, batch, form.exporter)
        if tuple(inputs) != manifest.inputs:
            raise ValueError(f"the export takes {manifest.inputs}, the batch gives {tuple(inputs)}")
        bound = BoundBatch.place(session, inputs, prepared.device)
        run_options = ort.RunOptions()

        def twin_step() -> ort.IOBinding:
            return bound.run(run_options)

        twin_step()
        theirs = np.asarray(bound.binding.copy_outputs_to_cpu()[0])
        check = identity(model, weights, batch, precision, prepared.forward_output(), theirs,
                         float64)
        fusions = {"dlbench": prepared.extra.get("transformer_optimizer"),
                   "twin": fusions_of(graph)}
        print(f"{name} {precision} {form.label}: output diff {check.output:.1e} (bound "
              f"{check.output_bound:.1e})"
              + (f", twin vs float64 {check.float64_output:.1e} (bound {check.float64_bound:.1e})"
                 if check.float64_output is not None else "")
              + ("" if check.same else "  DIFFER"), flush=True)
        print(f"  fused: dlbench {fusions['dlbench']['fusions']}, twin "
              f"{fusions['twin']['fusions']}; twin not fused: {fusions['twin']['not_fused']}",
              flush=True)
        medians = time_pair(prepared.step("forward"), twin_step, prepared.sync, settings)
        ours, twins = (sum(medians[k]) / 2 for k in ("dlbench", "twin"))
        row = {**base, "status": "ok", "dlbench_ms": ours, "twin_ms": twins,
               "ratio": ours / twins, "runs_ms": medians, "same_function": check.same,
               "identity": asdict(check) | {"same": check.same}, "fusions": fusions,
               "export": asdict(manifest), "providers": session.get_providers()}
        print(f"  forward    dlbench {ours:10.3f} ms  twin {twins:10.3f} ms  "
              f"ratio {ours / twins:.3f}", flush=True)
    except Unsupported as error:
        row = {**base, "status": "unsupported", "reason": str(error)}
        print(f"{name} {precision} {form.label}: unsupported: {row['reason']}", flush=True)
    except Exception as error:   # ONNX Runtime's errors are not RuntimeErrors
        # Failures are data: an out-of-memory, an exporter's refusal, a missing export.
        status = "oom" if adapter.is_out_of_memory(error) else "failed"
        row = {**base, "status": status, "reason": one_line(error)}
        print(f"{name} {precision} {form.label}: {status}: {row['reason']}", flush=True)
    finally:
        if prepared is not None:
            prepared.close()
    write(row)
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """Every row, then per model and precision dlbench against the twin's fastest form."""
    from comparisons.transformer_twins import TOLERANCE, fastest_pairs
    print(f"\n{'model':<10} {'precision':<9} {'twin':<17} {'dlbench ms':>11} {'twin ms':>11} "
          f"{'ratio':>6}  verdict")
    for row in rows:
        head = f"{row['model']:<10} {row['precision']:<9} {row['variant']:<17}"
        if row["status"] != "ok":
            print(f"{head} {row['status']}: {row['reason']}")
            continue
        verdict = "ok" if abs(row["ratio"] - 1) <= TOLERANCE else \
            f"outside ±{TOLERANCE:.0%}: see the fusions"
        if not row["same_function"]:
            verdict += ", outputs DIFFER"
        print(f"{head} {row['dlbench_ms']:11.3f} {row['twin_ms']:11.3f} {row['ratio']:6.3f}  "
              f"{verdict}")
    print("\nthe twin's fastest form (the issue's ±5% bar):")
    for pair in fastest_pairs(rows, "twin"):
        print(f"{pair['model']:<10} {pair['precision']:<9} dlbench {VARIANT} "
              f"{pair['dlbench_ms']:.3f} ms, twin {pair['twin_variant']} {pair['twin_ms']:.3f} ms, "
              f"ratio {pair['ratio']:.3f} "
              f"{'ok' if pair['within'] else 'OUTSIDE: see both sides fusions'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "gpu", "cpu"),
                        help="cuda (= gpu) or cpu")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="gpt2, bert_base, vit_b16 or their _tiny versions")
    parser.add_argument("--batch", type=int, help="every model's batch (default: the suite's, "
                        "GPT-2 8, BERT 32, ViT 128; 2 for the tiny models)")
    parser.add_argument("--steps", type=int, help="GPT-2's and BERT's sequence length "
                        "(default: their context, 1024 and 512)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--exporters", default="dynamo", help=f"of {EXPORTERS}: "
                        "torch.onnx.export's dynamo=True (its default) or False")
    parser.add_argument("--attentions", default="sdpa", help=f"of {ATTENTIONS}: Hugging "
                        "Face's attn_implementation in the exported model")
    parser.add_argument("--exports", type=Path, help="the folder of the exported graphs "
                        "(default: a temporary one, exported in this process)")
    parser.add_argument("--export-only", action="store_true",
                        help="export into --exports and stop (needs torch and transformers, "
                             "not onnxruntime)")
    parser.add_argument("--float64", choices=("auto", "yes", "no"), default="auto",
                        help=f"check the twin against float64 (auto: batches of at most "
                             f"{FLOAT64_MAX_FLOPS:.0e} forward FLOPs)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--min-samples", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, help="a folder: JSON lines appended to "
                        f"{RESULTS_FILE} there")
    args = parser.parse_args(argv)
    try:
        precisions = parse_list(args.precisions, PRECISIONS, "precisions")
        forms = [Form(exporter, attention)
                 for exporter in parse_list(args.exporters, EXPORTERS, "exporters")
                 for attention in parse_list(args.attentions, ATTENTIONS, "attentions")]
        models = {name: model_for(name, args.steps) for name in args.models.split(",")}
    except (argparse.ArgumentTypeError, KeyError, ValueError) as error:
        parser.error(str(error).strip("'\""))
    if not all(is_transformer(m) for m in models.values()):
        parser.error("--models: only the transformers (gpt2, bert_base, vit_b16, *_tiny)")
    if args.export_only and args.exports is None:
        parser.error("--export-only needs --exports, the folder the timing step reads")
    batches = {name: args.batch or SUITE_BATCH.get(name, 2) for name in models}

    if args.export_only:
        try:
            for name, model in models.items():
                for form in forms:
                    print(f"exported {name}: {export(model, batches[name], form, args.exports)}")
        except ImportError as error:
            print(f"error: the export needs torch, transformers and onnx: {error}",
                  file=sys.stderr)
            return 2
        return 0

    try:
        import onnxruntime  # noqa: F401

        from adapters.base import RunConfig
        from adapters.ort import OrtAdapter
        from suites.instruments.environment import usable_cpus
        from suites.stats.timer import TimerSettings
    except ImportError as error:
        print(f"error: the timing step needs onnxruntime and onnx: {error}", file=sys.stderr)
        return 2
    device = "gpu" if args.device in ("gpu", "cuda") else "cpu"
    threads = usable_cpus()   # the process's CPUs, as the adapter's sessions are sized
    adapter = OrtAdapter(RunConfig(device, threads, 1))
    settings = TimerSettings(warmup=args.warmup, min_samples=args.min_samples, max_samples=400,
                             rel_ci=0.005, budget_s=args.budget)
    env = adapter.environment() | {"threads": threads}
    print(f"onnxruntime {env['framework_version']} on {env['gpu_model'] or 'CPU'}; "
          f"{', '.join(precisions)}; the twin exported by torch.onnx.export as "
          f"{', '.join(form.label for form in forms)}")
    log = ResultsLog(args.out, RESULTS_FILE, env, argv)
    write = log.write

    rows = []
    with tempfile.TemporaryDirectory(prefix="ort-hf-exports-") as scratch:
        root = args.exports or Path(scratch)
        for name, model in models.items():
            flops = analyse(model).flops * batches[name]
            float64 = wants_float64(args.float64, flops)
            for precision in precisions:
                for form in forms:
                    rows.append(run_case(adapter, name, model, batches[name], precision,
                                         form, root, settings, float64, write))
    print_table(rows)
    log.close()
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
