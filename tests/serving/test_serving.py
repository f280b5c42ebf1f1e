"""The serving harness (suites/serving/): LoadGen's logs read, a SingleStream run of a tiny
model through the real LoadGen, bad input as rows, and the float64 check of served outputs.
The runs use LoadGen's minimums of a few hundred milliseconds: seconds in all."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np
import pytest

from adapters.base import Adapter, CaseConfig, Memory, Prepared, RunConfig
from models import reference
from models.inputs import Batch
from suites.serving import loadgen_log
from suites.serving.collector import GcPauses
from suites.serving.run import serve_case
from suites.serving.scenarios import ServingConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "serving"


def logs(scenario: str) -> tuple[str, str]:
    return ((DATA / f"{scenario}_summary.txt").read_text(),
            (DATA / f"{scenario}_detail.txt").read_text())


def test_a_valid_single_stream_log_gives_its_percentiles_in_ms():
    result = loadgen_log.parse(*logs("SingleStream"))
    assert result.valid and result.reason == ""
    assert result.scenario == "SingleStream" and result.samples_per_query == 1
    assert result.percentiles_ms["90.00"] == pytest.approx(1.104841)
    assert result.percentiles_ms["99.90"] == pytest.approx(2.961453)
    assert list(result.percentiles_ms) == ["50.00", "90.00", "95.00", "97.00", "99.00", "99.90"]
    assert result.headline == "90.0th percentile latency (ns) : 1104841"
    assert result.query_count == 270 and result.version.startswith("5.0.18")


def test_multi_stream_reads_per_query_latencies_and_the_early_stopping_reason():
    result = loadgen_log.parse(*logs("MultiStream"))
    assert not result.valid and result.samples_per_query == 8
    assert result.percentiles_ms["99.00"] == pytest.approx(4.552686)
    assert result.mean_ms == pytest.approx(1.171686)
    assert "early stopping not met" in result.reason and "662 queries" in result.reason


def test_offline_gives_throughput_and_loadgen_s_invalid_reason():
    result = loadgen_log.parse(*logs("Offline"))
    assert not result.valid and result.samples_per_second == pytest.approx(27153.8)
    assert "min duration not met" in result.reason and "Increase expected QPS" in result.reason


def test_logs_without_a_verdict_or_disagreeing_are_refused():
    summary, detail = logs("SingleStream")
    with pytest.raises(loadgen_log.LogError, match="Result is"):
        loadgen_log.parse("", detail)
    with pytest.raises(loadgen_log.LogError, match="disagree"):
        loadgen_log.parse(summary.replace("Result is : VALID", "Result is : INVALID"), detail)


class NumpyPrepared(Prepared):
    """Serves the float64 reference in float32, optionally off by ``shift``, raising after
    ``fail_after`` calls or sleeping ``sleep_s`` per call (a server of known capacity)."""

    def __init__(self, model, weights, batch: int, shift: float, fail_after: int | None,
                 sleep_s: float = 0.0):
        super().__init__()
        self.model, self.weights, self.batch = model, weights, batch
        self.shift, self.fail_after, self.calls, self.sleep_s = shift, fail_after, 0, sleep_s

    def serve(self, batch: Batch) -> np.ndarray:
        assert batch.size == self.batch
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("the server fell over")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        out = reference.forward(self.model, self.weights, batch).astype(np.float32)
        return out + np.float32(self.shift) * np.abs(out).max()

    def step_forward(self): raise NotImplementedError
    def sync(self, handle) -> None: pass
    def reset_peak_memory(self) -> None: pass
    def peak_memory(self) -> Memory: return Memory(None, "rss")
    def forward_output(self) -> np.ndarray: raise NotImplementedError
    def loss_and_gradients(self): raise NotImplementedError


class NumpyAdapter(Adapter):
    name = "numpy"
    variants = {"float32": "the float64 reference rounded to float32"}

    def __init__(self, shift: float = 0.0, fail_after: int | None = None, sleep_s: float = 0.0):
        super().__init__(RunConfig("cpu", 1, 1))
        self.shift, self.fail_after, self.sleep_s = shift, fail_after, sleep_s

    def environment(self) -> dict: return {}
    def is_out_of_memory(self, error) -> bool: return False

    def prepare(self, model, weights, batch: Batch, case: CaseConfig) -> NumpyPrepared:
        return NumpyPrepared(model, weights, batch.size, self.shift, self.fail_after, self.sleep_s)


QUICK = ServingConfig(samples=8, offline_batch=4, min_duration_ms=200, max_duration_ms=5000,
                      min_query_count=64, warmup=1)


def run(tmp_path, adapter, scenario="SingleStream", model="lenet_tiny"):
    return serve_case(lg, adapter, model, scenario, QUICK, "serving-test", tmp_path, {})


def test_single_stream_through_the_real_loadgen_is_a_valid_checked_row(tmp_path):
    row = run(tmp_path, NumpyAdapter())
    assert row.status == "ok", row.reason
    data = row.to_json()
    assert data["scenario"] == "SingleStream" and data["measure"] == "serve"
    assert data["case_id"].endswith("/serve/SingleStream/fp32/float32/t1")
    serving = data["serving"]
    result = serving["result"]
    assert result["valid"] and result["query_count"] >= QUICK.min_query_count
    assert 0 < result["percentiles_ms"]["50.00"] <= result["percentiles_ms"]["90.00"] \
        <= result["percentiles_ms"]["99.90"]
    assert serving["settings"]["min_duration_ms"] == 200
    assert serving["settings"]["min_query_count"] == 64
    assert serving["check"]["passed"] and serving["check"]["samples"] == [0, 1, 2, 3]
    # float32 rounding of the reference: within a few units of fp32 roundoff.
    assert serving["check"]["error"] <= 4 * 2.0 ** -24
    assert (Path(serving["logs"]) / loadgen_log.SUMMARY).is_file()
    assert (Path(serving["logs"]) / loadgen_log.DETAIL).is_file()
    assert set(serving["gc"]["collections"]) == {"0", "1", "2"}
    assert serving["gc"]["total_ms"] >= max(serving["gc"]["longest_ms"].values()) >= 0


def test_the_collector_s_pauses_are_counted_by_generation_inside_the_block_only():
    gc.collect()
    with GcPauses() as pauses:
        gc.collect(2)
        gc.collect(0)
    gc.collect(2)    # after the block: not counted
    found = pauses.to_dict()
    assert found["collections"]["2"] == 1 and found["collections"]["0"] >= 1
    assert found["longest_ms"]["2"] > 0 and found["total_ms"] >= found["longest_ms"]["2"]
    assert pauses._on not in gc.callbacks


def test_a_wrong_answer_fails_the_float64_check(tmp_path):
    row = run(tmp_path, NumpyAdapter(shift=1e-3))
    assert row.status == "failed" and "from float64, above the fp32 bound" in row.reason
    assert not row.serving["check"]["passed"]
    assert row.serving["check"]["error"] == pytest.approx(1e-3, rel=0.01)


def test_a_precision_the_adapter_lacks_is_an_unsupported_row(tmp_path):
    config = ServingConfig(**{**QUICK.__dict__, "precision": "fp16"})
    row = serve_case(lg, NumpyAdapter(), "lenet_tiny", "SingleStream", config, "serving-test",
                     tmp_path, {})
    assert row.status == "unsupported" and "has no fp16 precision" in row.reason
    assert "result" not in row.serving


def test_an_unknown_scenario_is_a_row_with_the_reason(tmp_path):
    row = run(tmp_path, NumpyAdapter(), scenario="Bursty")
    assert row.status == "failed" and "unknown scenario 'Bursty'" in row.reason
    assert "SingleStream" in row.reason
    assert row.to_json()["case_id"].endswith("/serve/Bursty/fp32/float32/t1")


def test_a_sut_that_raises_mid_run_is_a_failed_row_and_loadgen_ends(tmp_path):
    row = run(tmp_path, NumpyAdapter(fail_after=5))
    assert row.status == "failed"
    assert row.reason == "serve raised mid-run: RuntimeError: the server fell over"


# bert_tiny: two inputs, token ids and their lengths (the attention mask's source): the
# padding copies both, or the float64 check of the served outputs fails.
@pytest.mark.parametrize("model", ["lenet_tiny", "bert_tiny"])
def test_offline_pads_a_short_last_batch_and_drops_the_padding(tmp_path, model):
    row = run(tmp_path, NumpyAdapter(), scenario="Offline", model=model)
    batching = row.serving["batching"]
    assert batching["samples_served"] == row.serving["result"]["samples_per_query"]
    assert batching["samples_served"] + batching["padding_samples"] == 4 * batching["serve_calls"]
    assert row.serving["check"]["passed"], row.serving["check"]
