"""LoadGen's Server scenario (suites/serving/): the batcher answers each sample with its own
output and never holds up the issuing thread, the QPS search's logic on a fake server of
known capacity, and through the real LoadGen a search's probes, an unmeetable bound and a
server that crashes mid-run as rows. The LoadGen runs last a few hundred milliseconds each:
a few seconds in all."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np
import pytest

from models.inputs import Batch
from suites.serving import loadgen_log, search
from suites.serving.run import _no_answer, serve_case
from suites.serving.scenarios import ServingConfig
from suites.serving.sut import Batcher, Server
from tests.serving.test_serving import DATA, NumpyAdapter


def test_a_server_log_gives_the_rates_and_the_latency_over_the_target():
    result = loadgen_log.parse((DATA / "Server_summary.txt").read_text(),
                               (DATA / "Server_detail.txt").read_text())
    assert result.scenario == "Server" and not result.valid
    assert result.target_qps == pytest.approx(4504.53, rel=1e-5)
    assert result.scheduled_samples_per_second == pytest.approx(4485.21)
    assert result.completed_samples_per_second == pytest.approx(3395.13)
    assert result.headline == "Completed samples per second : 3395.13"
    assert result.percentiles_ms["99.00"] == pytest.approx(64.647667)
    assert result.reason.startswith("performance constraints not met (p99 latency 64.6 ms > target 10 ms)")
    assert "early stopping not met" in result.reason


SAMPLES = Batch(np.arange(40 * 3, dtype=np.float32).reshape(40, 3), None, None)


def identity(batch: Batch) -> np.ndarray:
    """A server whose output is its input: a sample's output names the sample."""
    return batch.x * 1.0


def test_the_batcher_completes_each_sample_with_its_own_output_under_concurrency():
    completed: dict[int, np.ndarray] = {}
    guard = threading.Lock()

    def complete(ids, outputs):
        with guard:
            for rid, out in zip(ids, outputs, strict=True):
                assert rid not in completed
                completed[rid] = out

    server = Server(identity, SAMPLES, 4, checked=2)
    issued: dict[int, int] = {}   # response id -> sample index
    with Batcher(server, 0.5e-3, complete) as batcher:
        def client(first: int) -> None:
            rng = random.Random(first)
            for rid in range(first, first + 50):
                pairs = [(rid, rng.randrange(40))]
                issued[rid] = pairs[0][1]
                batcher.submit(pairs)
        clients = [threading.Thread(target=client, args=(k * 1000,)) for k in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        batcher.flush()
    assert sorted(completed) == sorted(issued)
    for rid, index in issued.items():
        np.testing.assert_array_equal(completed[rid], SAMPLES.x[index])
    assert server.served == 200 and server.served + server.padded == 4 * server.calls
    assert sum(batcher.batch_sizes.values()) == server.calls and max(batcher.batch_sizes) <= 4
    assert not server.error


def test_a_short_batch_goes_at_the_smallest_prepared_size_that_holds_it():
    sizes = []

    def counted(batch: Batch) -> np.ndarray:
        sizes.append(batch.size)
        return identity(batch)

    server = Server(counted, SAMPLES, 8, checked=0, smaller={1: counted, 4: counted})
    for chunk in ([5], [1, 2], [3, 4, 6, 7, 9], list(range(8))):
        np.testing.assert_array_equal(server.serve_padded(chunk), SAMPLES.x[chunk])
    assert sizes == [1, 4, 8, 8] and server.calls_by_size == {1: 1, 4: 1, 8: 2}
    assert server.served == 16 and server.padded == 0 + 2 + 3 + 0


def test_the_batcher_thread_serves_each_prepared_size_before_the_run_starts():
    # A framework's first call in a new thread pays that thread's setup: the batcher's
    # thread pays it before LoadGen issues anything, and the warm-up counts as no call.
    seen = []

    def recorded(batch: Batch) -> np.ndarray:
        seen.append((threading.current_thread().name, batch.size))
        return identity(batch)

    server = Server(recorded, SAMPLES, 8, checked=0, smaller={1: recorded})
    with Batcher(server, 0.0, lambda ids, outputs: None):
        assert seen == [("serving-batcher", 1), ("serving-batcher", 8)]
    assert server.calls == 0 and server.served == 0


def test_submitting_never_waits_for_the_model():
    started, release = threading.Event(), threading.Event()

    calls = []

    def held(batch: Batch) -> np.ndarray:
        calls.append(batch.size)
        if len(calls) > 1:   # the batcher thread's warm-up serve is let through
            started.set()
            release.wait()
        return identity(batch)

    done: list[int] = []
    server = Server(held, SAMPLES, 2, checked=1)
    with Batcher(server, 0.0, lambda ids, outputs: done.extend(ids)) as batcher:
        batcher.submit([(1, 0)])
        started.wait()
        # serve is held: a submit that waited for it would never return while it is.
        issuing = threading.Thread(target=batcher.submit, args=([(2, 1), (3, 2)],))
        issuing.start()
        issuing.join(timeout=30)
        returned = not issuing.is_alive()
        release.set()
    assert returned and sorted(done) == [1, 2, 3] and calls[0] == 2


def test_after_serve_raises_every_sample_is_completed_unserved():
    calls = []

    def breaks(batch: Batch) -> np.ndarray:
        calls.append(batch.size)
        raise RuntimeError("out of cheese")

    done: dict[int, object] = {}
    server = Server(breaks, SAMPLES, 4, checked=1)
    with Batcher(server, 0.0, lambda ids, outputs: done.update(dict.fromkeys(ids, outputs))) as batcher:
        for rid in range(10):
            batcher.submit([(rid, rid)])
        batcher.flush()
    assert sorted(done) == list(range(10)) and all(v is None for v in done.values())
    assert server.error == "RuntimeError: out of cheese" and len(calls) == 1


class QueueingServer:
    """A fake server whose p99 latency is a deterministic function of load: service time s
    at no load, s / (1 - q/C) at q QPS (an M/M/1 queue's growth), overloaded from C. Under
    a bound b the largest QPS that meets it is C (1 - s/b)."""

    def __init__(self, capacity: float, service_ms: float, bound_ms: float):
        self.capacity, self.service_ms, self.bound_ms = capacity, service_ms, bound_ms
        self.answer = capacity * (1 - service_ms / bound_ms)

    def __call__(self, qps: float) -> search.Probe:
        p99 = self.service_ms / (1 - qps / self.capacity) if qps < self.capacity else float("inf")
        return search.Probe(qps, p99 <= self.bound_ms, "" if p99 <= self.bound_ms else "over",
                            p99_ms=p99, min_ms=self.service_ms)


def check_search(found: search.Search, fake: QueueingServer, runs: int) -> None:
    passed = [p.target_qps for p in found.probes if p.valid]
    failed = [p.target_qps for p in found.probes if not p.valid]
    assert 1 <= len(found.probes) <= runs
    assert not passed or not failed or max(passed) < min(failed)
    assert found.answer is not None and found.answer.target_qps == max(passed)
    assert found.answer.target_qps <= fake.answer


@pytest.mark.parametrize("start", [50.0, 700.0, 5000.0])
def test_the_search_brackets_a_known_capacity_from_below_and_above(start):
    fake = QueueingServer(capacity=1000.0, service_ms=2.0, bound_ms=10.0)   # answer 800 QPS
    found = search.search(fake, start, runs=12, bound_ms=10.0, floor=10.0)
    check_search(found, fake, 12)
    assert found.stopped.startswith("bracketed")
    assert found.answer.target_qps * search.RESOLUTION >= fake.answer


def test_the_search_stops_after_its_runs_with_the_best_so_far():
    fake = QueueingServer(capacity=1000.0, service_ms=2.0, bound_ms=10.0)
    found = search.search(fake, 50.0, runs=3, bound_ms=10.0, floor=10.0)
    check_search(found, fake, 3)
    assert [p.target_qps for p in found.probes] == [50.0, 100.0, 200.0]
    assert found.stopped == "the 3 runs of the search were used"


def test_a_search_stops_before_a_run_that_would_pass_its_budget_of_seconds():
    # A run lasts 500 queries at its rate or 1 s, whichever is longer, within a 60 s cap.
    def seconds(qps: float) -> float:
        return search.run_seconds(qps, 500, 1000, 60_000)
    assert (seconds(50.0), seconds(1000.0), seconds(1.0)) == (10.0, 1.0, 60.0)
    fake = QueueingServer(capacity=1000.0, service_ms=2.0, bound_ms=10.0)   # answer 800 QPS
    # 50, 100 and 200 QPS take 10 + 5 + 2.5 s; 400 QPS's 1.25 s more would pass 18 s.
    found = search.search(fake, 50.0, runs=12, bound_ms=10.0, floor=10.0, budget_s=18.0,
                          seconds=seconds)
    check_search(found, fake, 12)
    assert [p.target_qps for p in found.probes] == [50.0, 100.0, 200.0]
    assert found.stopped == ("the next run, at 400 QPS, would take about 1.25 s, past the "
                             "search's 18 s (17.5 s spent)")
    # The first run goes whatever it costs; near capacity runs are short, and the budget
    # lets the search close its bracket.
    alone = search.search(fake, 50.0, runs=12, bound_ms=10.0, floor=10.0, budget_s=1.0,
                          seconds=seconds)
    assert len(alone.probes) == 1 and alone.stopped.startswith("the next run, at 100 QPS")
    near = search.search(fake, 700.0, runs=8, bound_ms=10.0, floor=10.0, budget_s=20.0,
                         seconds=seconds)
    check_search(near, fake, 8)
    assert near.stopped.startswith("bracketed")


def test_serving_gpu_s_budget_never_cuts_a_search_that_goes_down_to_the_floor():
    """Each Server table's runs and seconds in serving-gpu hold the longest way down, from
    any start rate (the floor to 10^5 QPS) by fourths to the floor, so a "no QPS meets the
    bound" verdict rests on the floor's own run. (serving-cpu's 5 runs reach its floor from
    starts up to about 4 x 10^4 QPS; beyond, its row says the runs were used.)"""
    from suites.serving.__main__ import load
    configs = {g.config for g in load("serving-gpu")["groups"]
               if "Server" in g.scenarios and isinstance(g.config, ServingConfig)}
    assert configs
    for config in configs:
        floor = search.floor_qps(config.min_query_count, config.max_duration_ms)

        def seconds(qps: float, config=config) -> float:
            return search.run_seconds(qps, config.min_query_count, config.min_duration_ms,
                                      config.max_duration_ms)

        def always_over(qps: float) -> search.Probe:
            return search.Probe(qps, False, "over", p99_ms=1e3, min_ms=1.0)

        for start in np.geomspace(floor, 1e5, 400):
            found = search.search(always_over, float(start), config.server_search_runs,
                                  config.server_latency_bound_ms, floor, 0.0,
                                  config.server_search_seconds, seconds)
            assert found.stopped == f"the floor of {floor:.4g} QPS failed", (start, found.stopped)


def test_a_bound_a_lone_sample_misses_runs_no_probe():
    fake = QueueingServer(capacity=1000.0, service_ms=2.0, bound_ms=1.0)
    found = search.search(fake, 500.0, runs=6, bound_ms=1.0, floor=10.0, alone_ms=2.0)
    assert found.answer is None and found.probes == ()
    assert found.stopped == "a sample alone takes 2 ms, over the 1 ms bound: no QPS can meet it"


def test_an_overloaded_probe_s_slow_fastest_sample_does_not_end_the_search():
    # Beyond capacity every sample queues (its fastest took 400 ms): a lower load passes.
    def overloaded_above_100(qps: float) -> search.Probe:
        if qps > 100.0:
            return search.Probe(qps, False, "over", p99_ms=9000.0, min_ms=400.0)
        return search.Probe(qps, True, p99_ms=12.0, min_ms=5.0)
    found = search.search(overloaded_above_100, 400.0, runs=4, bound_ms=15.0, floor=10.0,
                          alone_ms=5.0)
    assert [p.target_qps for p in found.probes][:2] == [400.0, 100.0]
    assert found.answer is not None and found.answer.target_qps == 100.0


def test_a_bound_missed_at_every_load_goes_down_to_the_floor_and_stops():
    def always_over(qps: float) -> search.Probe:
        return search.Probe(qps, False, "over", p99_ms=50.0, min_ms=1.0)
    found = search.search(always_over, 1000.0, runs=10, bound_ms=10.0, floor=20.0)
    assert [p.target_qps for p in found.probes] == [1000.0, 250.0, 62.5, 20.0]
    assert found.answer is None and found.stopped == "the floor of 20 QPS failed"


def test_a_step_down_to_just_above_the_floor_goes_to_the_floor():
    """From 587.7 QPS by fourths: 146.9, then 36.73, within RESOLUTION of the floor of 36.31,
    so the floor itself (an H200 search ran both, 55 s each); 42 QPS, 1.16 times the floor,
    is still a run of its own."""
    def always_over(qps: float) -> search.Probe:
        return search.Probe(qps, False, "over", p99_ms=50.0, min_ms=1.0)
    found = search.search(always_over, 587.68, runs=8, bound_ms=15.0, floor=36.31)
    assert [round(p.target_qps, 2) for p in found.probes] == [587.68, 146.92, 36.31]
    found = search.search(always_over, 673.03, runs=8, bound_ms=15.0, floor=36.31)
    assert [round(p.target_qps, 2) for p in found.probes] == [673.03, 168.26, 42.06, 36.31]


def test_server_settings_are_checked():
    assert search.floor_qps(400, 5000) == pytest.approx((400 + search.FLOOR_SIGMAS * 20) / 5)
    with pytest.raises(ValueError, match="server_latency_bound_ms"):
        ServingConfig(server_latency_bound_ms=0)
    with pytest.raises(ValueError, match="server_max_batch"):
        ServingConfig(server_max_batch=2.5)
    for sizes in ([8], [2, 1], [0], [1, 1]):
        with pytest.raises(ValueError, match="server_batch_sizes"):
            ServingConfig.of({"server_max_batch": 8, "server_batch_sizes": sizes})
    assert ServingConfig.of({"server_batch_sizes": [1, 4]}).server_batch_sizes == (1, 4)


# Every probe lasts min_query_count = 500 queries (LoadGen's early stopping needs about
# 460 for a 99th percentile with none over the bound) or 200 ms, whichever is longer.
SERVER = ServingConfig(samples=16, min_duration_ms=200, max_duration_ms=5000, min_query_count=500,
                       warmup=1, server_max_batch=4, server_batch_sizes=(1,),
                       server_batch_timeout_ms=1.0,
                       server_latency_bound_ms=50.0, server_search_runs=3)


def run_server(tmp_path, adapter, config=SERVER):
    return serve_case(lg, adapter, "lenet_tiny", "Server", config, "serving-test", tmp_path, {})


def test_a_server_search_through_the_real_loadgen_keeps_every_probe(tmp_path):
    sleep_s = 2e-3    # per batch of 4: no run completes more than 4 / 2 ms = 2000 samples/s
    row = run_server(tmp_path, NumpyAdapter(sleep_s=sleep_s))
    # A 50 ms bound over a 2 ms service time leaves wide headroom, but a host that stalls the
    # batcher's thread for 50 ms at every load (a 2-core CI host running other tests) fails
    # every probe: that is a failed row saying so, and the probes' structure holds either way.
    assert row.status == "ok" or row.reason.startswith("no target QPS meets"), row.reason
    assert row.to_json()["case_id"].endswith("/b4/serve/Server/fp32/float32/t1")
    found = row.serving["search"]
    probes = found["probes"]
    assert 1 <= len(probes) <= SERVER.server_search_runs
    assert probes[0]["target_qps"] == pytest.approx(row.serving["settings"]["search_start_qps"])
    passed = [p["target_qps"] for p in probes if p["valid"]]
    failed = [p["target_qps"] for p in probes if not p["valid"]]
    assert (row.status == "ok") == bool(passed)
    assert not (passed and failed) or max(passed) < min(failed)
    for number, probe in enumerate(probes, 1):
        folder = Path(probe["logs"])
        assert folder.name.startswith(f"probe-{number:02d}-")
        assert (folder / loadgen_log.SUMMARY).is_file() and (folder / loadgen_log.DETAIL).is_file()
        assert probe["query_count"] >= SERVER.min_query_count
        assert probe["achieved_qps"] <= 4 / sleep_s
        assert probe["valid"] == (probe["reason"] == "")
        assert probe["valid"] <= (probe["p99_ms"] <= SERVER.server_latency_bound_ms)
        assert probe["batching"]["samples_served"] == probe["query_count"]
        assert set(probe["gc"]["collections"]) == {"0", "1", "2"}   # collector.GcPauses
        by_size = probe["batching"]["serve_calls_by_size"]
        assert set(by_size) <= {"1", "4"} and sum(by_size.values()) == probe["batching"]["serve_calls"]
    assert row.serving["check"]["passed"]
    if passed:
        assert found["answer_qps"] == max(passed)
        result = row.serving["result"]
        assert result["valid"] and result["target_qps"] == pytest.approx(found["answer_qps"],
                                                                          rel=1e-5)


def test_a_bound_no_qps_meets_is_a_failed_row_that_says_why(tmp_path):
    # A lone sample (the fastest warm-up serve of the smallest prepared size, 1) already
    # takes longer than 1 microsecond: no LoadGen run is made.
    config = ServingConfig(**{**SERVER.__dict__, "server_latency_bound_ms": 1e-3,
                              "server_batch_sizes": (1,)})
    row = run_server(tmp_path, NumpyAdapter(), config)
    lone = row.serving["settings"]["lone_sample_ms"]
    assert row.serving["settings"]["fastest_warmup_batch_ms_by_size"]["1"] == lone
    assert row.status == "failed" and row.serving["search"]["probes"] == []
    assert row.reason == (f"no target QPS meets the p99 bound of 0.001 ms: a sample alone takes "
                          f"{lone:.3g} ms, over the 0.001 ms bound: no QPS can meet it")
    assert "result" not in row.serving


class SizesRecorded(NumpyAdapter):
    def __init__(self):
        super().__init__()
        self.calls: list[list[int]] = []

    def prepare(self, model, weights, batch, case):
        self.calls.append([batch.size])
        return super().prepare(model, weights, batch, case)

    def prepare_sizes(self, model, weights, batches, case):
        self.calls.append([batch.size for batch in batches])
        return [NumpyAdapter.prepare(self, model, weights, batch, case) for batch in batches]


def test_a_server_prepares_its_batch_sizes_as_one_case(tmp_path):
    """The full batch and every smaller allowed size in one ``prepare_sizes``: prepared one
    by one, PyTorch's ``prepare`` started each afresh and discarded the sizes before it
    (tests/adapters/test_torch.py). A bound no lone sample meets: no LoadGen run."""
    adapter = SizesRecorded()
    config = ServingConfig(**{**SERVER.__dict__, "server_latency_bound_ms": 1e-3,
                              "server_batch_sizes": (1, 2)})
    row = run_server(tmp_path, adapter, config)
    assert adapter.calls == [[4, 1, 2]]
    assert set(row.serving["settings"]["fastest_warmup_batch_ms_by_size"]) == {"1", "2", "4"}


def test_a_server_that_crashes_mid_run_is_a_failed_row_and_the_next_case_runs(tmp_path):
    row = run_server(tmp_path, NumpyAdapter(fail_after=5))
    assert row.status == "failed"
    assert row.reason == "serve raised mid-run: RuntimeError: the server fell over"
    probes = row.serving["search"]["probes"]
    assert len(probes) == 1 and not probes[0]["valid"]
    assert probes[0]["error"] == "RuntimeError: the server fell over"
    following = serve_case(lg, NumpyAdapter(), "lenet_tiny", "SingleStream",
                           ServingConfig(samples=8, min_duration_ms=200, min_query_count=64, warmup=1),
                           "serving-test", tmp_path, {})
    assert following.status == "ok", following.reason


def test_a_search_that_ran_probes_names_the_lowest_qps_tried_and_its_p99():
    probes = (search.Probe(400.0, False, "over", p99_ms=30.0),
              search.Probe(100.0, False, "still over", p99_ms=20.5))
    found = search.Search(probes, None, "the floor of 100 QPS failed")
    assert _no_answer(found, 15.0) == (
        "no target QPS meets the p99 bound of 15 ms: the lowest tried, 100 QPS, had p99 "
        "20.5 ms (LoadGen: INVALID: still over); the floor of 100 QPS failed")
