"""Results at a glance (reports/glance.py): the README's block is what the canonical
published folders give, and the generator's parts on synthetic rows: ratios, "not
distinguishable", the compiled flag, a missing framework with its reason, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports import glance
from tests import report_fixtures as fx

ROOT = glance.ROOT


def test_readme_block_is_what_the_published_folders_give():
    published = ROOT / "published"
    present = [m.folder for m in glance.MACHINES if (published / m.folder).is_dir()]
    if not present:
        pytest.skip("no canonical published folder (published/h100, h200, cpu) in this tree")
    readme = ROOT / "README.md"
    _, current, _ = glance.split(readme.read_text(encoding="utf-8"), readme)
    assert current == glance.block(published, ROOT), \
        "README.md's results at a glance are stale: run python -m reports.glance"


# --- synthetic folders ----------------------------------------------------------------------

def gpu(model, batch, measure, fw, wall, device, *, variant=None, status="ok",
        precision="fp32", suite="test"):
    extra = fx.device_timing(device) if status == "ok" else None
    return fx.make_row(model, batch, measure, fw, "gpu", wall if status == "ok" else None,
                       variant=variant, status=status, precision=precision, suite=suite,
                       reason="no gradients in an inference engine" if status != "ok" else "",
                       timing_extra=extra)


def h100_rows():
    return [
        # within 3% by device time, though the wall times are apart; tf 31% slower
        gpu("resnet50", 16, "gradient", "torch", 24.0, 20.0),
        gpu("resnet50", 16, "gradient", "jax", 26.0, 20.4),
        gpu("resnet50", 16, "gradient", "tf", 28.0, 26.2),
        gpu("resnet50", 16, "gradient", "ort", None, None, variant="ort_all",
            status="unsupported"),
        # a faster non-default variant stays out: the glance sets default variants side by side
        gpu("resnet50", 16, "gradient", "torch", 15.0, 12.0, variant="compile"),
        # forward: jax by more than 3%, ort absent altogether
        gpu("resnet50", 16, "forward", "torch", 8.0, 7.0),
        gpu("resnet50", 16, "forward", "jax", 7.0, 6.0),
        # launch-bound: not ranked
        gpu("lstm", 16, "gradient", "torch", 9.0, 1.7),
        gpu("lstm", 16, "gradient", "jax", 3.5, 3.2),
    ]


def practice_rows():
    return [gpu("resnet50", 256, "train_step", fw, wall, device, precision="bf16",
                suite="practice-gpu", variant=variant)
            for fw, variant, wall, device in (
                ("jax", None, 47.0, 45.0), ("torch", None, 116.0, 114.0),
                # the compiled question takes each framework's fastest compiled variant
                ("torch", "compile", 50.0, 48.0), ("torch", "compile_channels_last", 47.5, 46.0),
                ("tf", "graph", 130.0, 128.0), ("tf", "xla", 60.0, 58.0))]


def cpu_rows():
    rows = []
    for fw, median, low, high in (("torch", 100.0, 90.0, 110.0), ("tf", 105.0, 100.0, 130.0)):
        rows.append(fx.make_row("resnet50", 16, "gradient", fw, "cpu", median,
                                timing_extra=fx.interval(median, low, high)))
    return rows


SERVE_ROWS = Path(__file__).resolve().parents[1] / "data" / "serving_rows"


def serve_rows():
    """ResNet-50 SingleStream rows made from a real one (tests/data/serving_rows): ort and
    tf VALID, torch INVALID, jax's default variant failed, and a faster non-default variant
    that stays out."""
    import copy
    import json
    template = next(json.loads(line) for path in SERVE_ROWS.rglob("ort_cpu.jsonl")
                    for line in path.read_text().splitlines()
                    if json.loads(line)["scenario"] == "SingleStream")
    rows = []
    for fw, variant, p90, valid, status in (("ort", "ort_all", 100.0, True, "ok"),
                                            ("tf", "graph", 125.0, True, "ok"),
                                            ("torch", "eager", 90.0, False, "ok"),
                                            ("torch", "compile", 50.0, True, "ok"),
                                            ("jax", "jit", None, False, "failed")):
        row = copy.deepcopy(template)
        row["model"] = "resnet50"
        row["case_id"] = f"serving-cpu/{fw}/cpu/resnet50/b1/serve/SingleStream/fp32/{variant}/t2"
        row["settings"].update(framework=fw, variant=variant)
        row["status"] = status
        row["reason"] = "the serving worker was killed by SIGKILL" if status != "ok" else ""
        result = row["serving"]["result"]
        result["valid"] = valid
        result["percentiles_ms"] = {**result["percentiles_ms"], "90.00": p90}
        rows.append(row)
    return rows


@pytest.fixture
def published(tmp_path) -> Path:
    root = tmp_path / "published"
    for folder, rows in (("h100", h100_rows()), ("h100-practice", practice_rows()),
                         ("cpu", cpu_rows())):
        (root / folder).mkdir(parents=True)
        fx._write(root / folder / "rows.jsonl", rows)
    fx._write(root / "cpu" / "serve.jsonl", serve_rows())
    return root


def table_row(block: str, machine: str, case: str) -> list[str]:
    section = block.split(f"#### {machine}:", 1)[1].split("####", 1)[0]
    line = next(x for x in section.splitlines() if x.startswith(f"| {case} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_ratios_not_distinguishable_and_missing_frameworks(published, tmp_path):
    block = glance.block(published, tmp_path)
    _, ratios, verdict = table_row(block, "H100", "ResNet-50 b16 fp32 strict, fwd+bwd")
    assert ratios == ("**torch eager 1.00** · jax jit 1.02 · tf graph 1.31 · "
                      "ort — (unsupported)")
    assert verdict == ("torch eager and jax jit not distinguishable by device time (within "
                       "3%); compiled (jax jit) vs uncompiled")
    _, ratios, verdict = table_row(block, "H100", "ResNet-50 b16 fp32 strict, forward")
    assert ratios == "**jax jit 1.00** · torch eager 1.17 · ort — (not run) · tf — (not run)"
    assert verdict.startswith("jax jit fastest by device time (by more than 3%)")


def test_launch_bound_and_practice_and_cpu_rows(published, tmp_path):
    block = glance.block(published, tmp_path)
    _, ratios, verdict = table_row(block, "H100", "LSTM b16 fp32 strict, fwd+bwd")
    assert ratios.startswith("**jax jit 1.00** · torch eager 2.57")       # wall time
    assert verdict.startswith("not ranked: launch-bound (ratios of wall time)")
    _, ratios, _ = table_row(block, "H100", "ResNet-50 b256 bf16, training step")
    assert ratios.startswith("**jax jit 1.00** · torch eager 2.53")
    _, ratios, verdict = table_row(block, "CPU", "ResNet-50 b16 fp32 strict, fwd+bwd")
    assert ratios.startswith("**torch eager 1.00** · tf graph 1.05")
    assert verdict == ("torch eager and tf graph not distinguishable by wall time (95% "
                       "intervals overlap)")                  # no compiled mode: no flag
    assert "#### H200" not in block                        # no folder, no table
    assert "/practice-gpu" not in block and "[`published/h100-practice`]" in block


def test_conclusions_come_from_the_rows_and_name_their_evidence(published, tmp_path):
    block = glance.block(published, tmp_path)
    lines = [x for x in block.splitlines() if x.startswith("- ")]
    assert 3 <= len(lines) <= 6
    assert lines[0].startswith("- On the H100, ResNet-50's forward and backward pass (batch "
                               "16, fp32 strict): torch eager (uncompiled) and jax jit "
                               "(compiled) are not distinguishable by device time; tf graph "
                               "(uncompiled) takes 1.31× the fastest's time.")
    assert "runs fastest in jax jit (compiled)" in lines[1] and "#fairness" in lines[1]
    assert "1 of the 5 GPU cases above (LSTM) are launch-bound" in block
    assert "in 0 of 1 cases" in block
    assert all("docs/methodology.md#" in x for x in lines)


def test_all_compiled_row_takes_each_frameworks_fastest_compiled_variant(published, tmp_path):
    block = glance.block(published, tmp_path)
    _, ratios, verdict = table_row(block, "H100", "ResNet-50 b256 bf16, training step, all compiled")
    assert ratios == ("**jax jit 1.00** · torch compile_channels_last 1.02 · tf xla 1.29 · "
                      "ort — (no compiled variant)")
    assert verdict == ("jax jit and torch compile_channels_last not distinguishable by device "
                       "time (within 3%)")                  # all compiled: no mode flag
    _, ratios, _ = table_row(block, "H100", "ResNet-50 b256 bf16, training step")
    assert ratios.startswith("**jax jit 1.00** · torch eager 2.53 · tf graph 2.84")


def test_a_serving_row_sets_the_default_variants_latencies_side_by_side_never_ranked(
        published, tmp_path):
    block = glance.block(published, tmp_path)
    _, ratios, verdict = table_row(block, "CPU",
                                   "ResNet-50 b1 fp32 strict, serving: SingleStream p90 latency")
    # An INVALID run and a failed row have no figure; the compiled variant is not a default.
    assert ratios == ("**ort ort_all 1.00** · tf graph 1.25 · torch — (LoadGen: INVALID) · "
                      "jax — (failed)")
    assert verdict == "not ranked: one LoadGen run each, no interval (p90 of ort ort_all: 100.0 ms)"
    assert "serving" not in block.split("#### H100:", 1)[1].split("####", 1)[0]   # none there


def test_a_fastest_variant_serving_row_takes_each_frameworks_fastest_valid_run(published,
                                                                                tmp_path):
    """torch's compiled variant (VALID, 50 ms) stands for torch, not its INVALID eager run,
    and the row says that compiled meets uncompiled; a framework with no valid run keeps
    its reason. No BERT rows in the folder: no BERT line."""
    block = glance.block(published, tmp_path)
    _, ratios, verdict = table_row(
        block, "CPU", "ResNet-50 b1 fp32 strict, serving: SingleStream p90 latency, each "
                      "framework's fastest variant")
    assert ratios == ("**torch compile 1.00** · ort ort_all 2.00 · tf graph 2.50 · "
                      "jax — (failed)")
    assert verdict == ("not ranked: one LoadGen run each, no interval (p90 of torch compile: "
                       "50.0 ms); compiled (torch compile) vs uncompiled")
    assert "BERT" not in block


def test_no_fastest_variant_row_where_every_fastest_is_the_default(published, tmp_path):
    serve = published / "cpu" / "serve.jsonl"
    fx._write(serve, [r for r in serve_rows() if r["settings"]["variant"] != "compile"])
    block = glance.block(published, tmp_path)
    assert "fastest variant" not in block
    assert "ResNet-50 b1 fp32 strict, serving: SingleStream p90 latency |" in block


def test_cli_writes_checks_and_refuses_a_readme_without_markers(published, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{glance.BEGIN}\nold\n{glance.END}\n\nafter\n", encoding="utf-8")
    args = ["--readme", str(readme), "--published", str(published)]
    assert glance.main([*args, "--check"]) == 1
    assert glance.main(args) == 0
    assert glance.main([*args, "--check"]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# x\n\n" + glance.BEGIN) and text.endswith(glance.END + "\n\nafter\n")
    readme.write_text("# no markers\n", encoding="utf-8")
    capsys.readouterr()
    assert glance.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs one" in err


def test_default_variants_come_from_the_registry():
    assert glance.default_variants() == {"torch": "eager", "ort": "ort_all", "tf": "graph",
                                         "jax": "jit"}


def test_the_cpu_conclusion_counts_the_cases_the_intervals_tell_apart():
    from types import SimpleNamespace

    def answer(order: tuple[str, ...], winner: str | None) -> SimpleNamespace:
        return SimpleNamespace(ranking=SimpleNamespace(order=order, winner=winner))

    apart, overlap = answer(("tf", "torch"), "tf"), answer(("ort", "torch"), None)
    assert glance.conclusion_cpu([apart, overlap]) == (
        "On the CPU, the nominal 95% intervals set the fastest apart from the rest in 1 of 2 "
        "cases; in the others they overlap and the fastest is not distinguishable from the "
        "next.")
    # Every case told apart: no sentence about "the others".
    assert glance.conclusion_cpu([apart, apart]).endswith("in 2 of 2 cases.")
    assert glance.conclusion_cpu([answer(("tf",), "tf")]) is None   # nothing to rank
