"""One serving case: (framework, model, scenario) under LoadGen, into one ``serve`` row.

The adapter prepares the model at the scenario's batch size on the canonical weights;
the query sample library holds ``config.samples`` seeded samples of the model's input
(``models.inputs.make_batch``), all loaded up front (LoadGen's load/unload callbacks have
nothing to do). A few untimed serves warm the case up and set LoadGen's expected latency;
then LoadGen runs the scenario in performance mode and writes its logs into the case's
folder beside the results file, where they stay. The checked samples' served outputs
(the first k, served again after the run if LoadGen never picked one) are compared with
the float64 reference, against the bound ``models/error_bounds.py`` derives for the
precision: a wrong answer fails the row however fast it came.

Server is a search of several LoadGen runs (suites/serving/search.py), each with its logs
in a folder of its own under the case's (``probe-01-<target>qps``), its samples batched by
``sut.Batcher``; the row gives every probe and the answer, and its ``result`` is the
answering probe's.

A serve that never returns would hang LoadGen, and the suite with it: before each phase that
may not end (preparing and warming up, each LoadGen run, the check's serves after it)
``serve_case`` hands its ``watch`` callback the phase's deadline, the row to stand for the
case if the phase outlives it and, for the phases that serve, a count of the serve calls
returned so far; the serving worker sends them to the parent, whose watchdog kills the
worker and writes that row (suites/serving/watchdog.py)."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import Adapter, CaseConfig, Prepared, Unsupported
from models import reference, zoo
from models.error_bounds import bounds
from models.inputs import Batch, make_batch
from models.measures import SERVE
from models.weights import canonical_weights
from suites.instruments.host_probe import probe_summary
from suites.rows.results import CaseKey, Row, Settings
from suites.serving import loadgen_log, search
from suites.serving.collector import GcPauses
from suites.serving.scenarios import (
    SCENARIOS,
    ServingConfig,
    batch_size,
    loadgen_settings,
    recorded,
    run_deadline_s,
    unknown,
)
from suites.serving.sut import Batcher, Server, loadgen_complete, one_line, select
from suites.truth.check import output_error

TIMING_NOTE = ("LoadGen's time from issue to completion of each query: the inputs' copy "
               "from host arrays onto the device, the forward and the output's copy back")
# LoadGen times every sample from its query's scheduled time (loadgen/loadgen.cc,
# ResponseDelegateDetailed::SampleComplete: latency = complete time - scheduled_time), so a
# Server sample's wait in the batcher's queue is in it too.
SERVER_TIMING_NOTE = ("LoadGen's time from each sample's scheduled arrival to its completion: "
                      "the wait in the batcher's queue (for a batch to fill, its timeout or the "
                      "previous batch), the inputs' copy onto the device, the forward of the "
                      "padded batch and the output's copy back")


@functools.lru_cache(maxsize=2)
def _reference(model_name: str, seed: int, count: int, indices: tuple[int, ...]) -> np.ndarray:
    """The float64 outputs of the checked samples, computed once per worker for every case
    of the model (its scenarios, precisions and variants share the seeded query set):
    BERT-base's four at 384 tokens are about 0.4 TFLOP of numpy float64."""
    model = zoo.get_model(model_name)
    samples = make_batch(model, count, seed)
    return reference.forward(model, canonical_weights(model, seed),
                             select(Batch(samples.x, None, samples.lengths), indices), train=False)


def check(model, config: ServingConfig, outputs: dict[int, np.ndarray],
          batch: int) -> dict[str, Any]:
    """The served outputs of the checked samples against float64: max |y - y64| / max |y64|
    (suites/truth/check.py) and the precision's output bound."""
    indices = sorted(outputs)
    ref = _reference(model.name, config.seed, config.samples, tuple(indices))
    served = np.stack([outputs[i] for i in indices])
    bound = bounds(model, batch, config.precision).output
    if served.shape != ref.shape:
        return {"samples": indices, "error": None, "bound": bound, "passed": False,
                "problem": f"served output shape {served.shape} != float64 {ref.shape}"}
    error = output_error(served, ref)
    return {"samples": indices, "error": error, "bound": bound, "passed": bool(error <= bound),
            "norm": "max |y - y64| / max |y64|"}


# ``watch(seconds, row, what, progress)``: the next phase (``what``, in words) has a deadline
# of ``seconds``; ``row`` (failed) stands for the case if the watchdog ends it; ``progress``
# (None while preparing) counts the serve calls that have returned.
Watch = Callable[[float, Row, str, "Callable[[], int] | None"], None]


def no_watch(seconds: float, row: Row, what: str, progress: Callable[[], int] | None) -> None:
    """In-process use (the tests' direct calls): nothing watches."""


def run_loadgen(lg, issue, flush, settings, samples: int,
                logs: Path) -> tuple[loadgen_log.LoadgenResult, dict[str, Any]]:
    """One LoadGen run of ``samples`` preloaded samples with its logs in ``logs``: LoadGen's
    result, read from them, and the garbage collector's pauses during it (collector.py)."""
    logs.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(logs)
    output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = output
    log_settings.enable_trace = False
    sut = lg.ConstructSUT(issue, flush)
    qsl = lg.ConstructQSL(samples, samples, lambda indices: None, lambda indices: None)
    try:
        with GcPauses() as pauses:
            lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return loadgen_log.read(logs), pauses.to_dict()


def _probe(lg, server: Server, config: ServingConfig, expected_s: float, logs: Path,
           target_qps: float, number: int) -> search.Probe:
    """One LoadGen Server run at ``target_qps`` through a fresh batcher."""
    folder = logs / f"probe-{number:02d}-{target_qps:.1f}qps"
    calls, served, padded = server.calls, server.served, server.padded
    by_size = dict(server.calls_by_size)
    with Batcher(server, config.server_batch_timeout_ms / 1e3, loadgen_complete(lg)) as batcher:
        result, collector = run_loadgen(
            lg, batcher.issue, batcher.flush,
            loadgen_settings(lg, SCENARIOS["Server"], config, expected_s, target_qps),
            config.samples, folder)
    calls = server.calls - calls
    batching = {"serve_calls": calls, "samples_served": server.served - served,
                "padding_samples": server.padded - padded,
                "mean_batch": (server.served - served) / calls if calls else None,
                "batch_sizes": dict(sorted(batcher.batch_sizes.items())),
                "serve_calls_by_size": {str(n): c - by_size.get(n, 0)
                                        for n, c in sorted(server.calls_by_size.items())}}
    # After serve raised, the rest of the run's samples were completed unserved: LoadGen's
    # verdict on them says nothing of the SUT.
    valid, reason = result.valid, result.reason
    if server.error:
        valid, reason = False, f"serve raised mid-run: {server.error}"
    return search.Probe(target_qps, valid, reason,
                        achieved_qps=result.completed_samples_per_second,
                        scheduled_qps=result.scheduled_samples_per_second,
                        p99_ms=result.percentiles_ms.get("99.00"), min_ms=result.min_ms,
                        query_count=result.query_count, logs=str(folder), batching=batching,
                        error=server.error, gc=collector)


def _no_answer(found: search.Search, bound_ms: float) -> str:
    """Why a search found no target QPS: the lowest tried, its p99 and LoadGen's reason."""
    if not found.probes:
        return f"no target QPS meets the p99 bound of {bound_ms:g} ms: {found.stopped}"
    lowest = min(found.probes, key=lambda p: p.target_qps)
    p99 = "no p99" if lowest.p99_ms is None else f"p99 {lowest.p99_ms:.3g} ms"
    return (f"no target QPS meets the p99 bound of {bound_ms:g} ms: the lowest tried, "
            f"{lowest.target_qps:.4g} QPS, had {p99} (LoadGen: INVALID: {lowest.reason}); "
            f"{found.stopped}")


def _warm_up(prepared: Prepared, batch: Batch, runs: int) -> tuple[float, float]:
    """The first serve's seconds and the fastest of the next ``runs``: LoadGen wants its
    expected latency on the low side (suites/serving/scenarios.py LATENCY_HEADROOM)."""
    started = time.perf_counter()
    prepared.serve(batch)
    first = time.perf_counter() - started
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        prepared.serve(batch)
        times.append(time.perf_counter() - started)
    return first, min(times)


def row_settings(adapter: Adapter, case: CaseConfig) -> Settings:
    """A serving row's settings: the variant resolved and described where the adapter has
    it (else as asked, with no description: the row then says why it is unsupported)."""
    variant, execution = case.variant, ""
    try:
        variant = adapter.resolve_variant(case.variant)
        execution = adapter.describe(case)
    except Unsupported:
        pass
    return Settings(adapter.name, adapter.config.device, case.precision, variant,
                    adapter.config.threads, adapter.config.interop_threads, execution)


def serve_case(lg, adapter: Adapter, model_name: str, scenario_name: str, config: ServingConfig,
               suite: str, logs_root: Path, env: dict[str, Any], watch: Watch = no_watch) -> Row:
    """One row; every failure (an unknown scenario or model, a framework without ``serve``,
    an exception while serving, an INVALID run, a wrong answer) is its status and reason;
    ``watch`` is told each phase's deadline (the module's docstring)."""
    started_at = datetime.now().isoformat(timespec="seconds")
    clock = time.perf_counter()
    case = CaseConfig(config.precision, config.variant)
    settings = row_settings(adapter, case)
    scenario = SCENARIOS.get(scenario_name)
    batch = batch_size(scenario, config) if scenario else 0
    key = CaseKey(suite, model_name, batch, SERVE, settings, scenario_name)
    serving: dict[str, Any] = {"timing": SERVER_TIMING_NOTE if scenario_name == "Server" else TIMING_NOTE}

    def row(status: str, reason: str = "") -> Row:
        return Row(key, status, reason, env=env, started_at=started_at,
                   wall_s=time.perf_counter() - clock, serving=serving)

    def deadline(seconds: float, what: str, progress: Callable[[], int] | None = None) -> None:
        late = Row(key, "failed", f"{what} did not return within {seconds:g} s: the watchdog "
                                  "killed the case's process",
                   env=env, started_at=started_at, wall_s=time.perf_counter() - clock,
                   serving=dict(serving), time_limit_s=seconds)
        watch(seconds, late, what, progress)

    if scenario is None:
        return row("failed", unknown(scenario_name))
    prepared = None
    smaller: dict[int, Prepared] = {}   # Server's further prepared sizes
    run_limit = run_deadline_s(config)
    try:
        model = zoo.get_model(model_name)
        samples = make_batch(model, config.samples, config.seed)
        samples = Batch(samples.x, None, samples.lengths)
        if batch > config.samples:
            return row("failed", f"batch {batch} exceeds the {config.samples} samples")
        # A precision the adapter lacks is an unsupported row, as the runner's worker
        # makes it: never the default precision served under the asked one's label.
        adapter.check_precision(case)
        deadline(config.setup_timeout_s, "preparing the model and its warm-up serves")
        # Copies (select), never views of the query set: an adapter may keep and write
        # into the arrays it is given.
        weights = canonical_weights(model, config.seed)
        # Server's smaller allowed sizes are prepared with the full one, as one case
        # (Adapter.prepare_sizes: no size's compiled program discarded by the next's).
        sizes = list(config.server_batch_sizes) if scenario.name == "Server" else []
        prepared, *others = adapter.prepare_sizes(
            model, weights, [select(samples, range(n)) for n in [batch, *sizes]], case)
        smaller.update(zip(sizes, others, strict=True))
        first_s, expected_s = _warm_up(prepared, select(samples, range(batch)), config.warmup)
        serving["first_serve_ms"] = first_s * 1e3
        serving["settings"] = recorded(scenario, config, expected_s)
        alone_s = expected_s
        if scenario.name == "Server":
            # Each smaller size warmed up as the full one; a lone sample's unloaded latency
            # is the smallest one's fastest serve.
            warm = {size: _warm_up(smaller[size], select(samples, range(size)), config.warmup)
                    for size in sizes}
            if warm:
                alone_s = warm[min(warm)][1]
                serving["settings"]["fastest_warmup_batch_ms_by_size"] = {
                    **{str(n): t * 1e3 for n, (_, t) in warm.items()}, str(batch): expected_s * 1e3}
        serving["host_probe"] = probe_summary()
        server = Server(prepared.serve, samples, batch, config.checked,
                        {n: p.serve for n, p in smaller.items()})
        logs = logs_root / key.id().replace("/", "_")
        serving["logs"] = str(logs)
        if scenario.name == "Server":
            floor = search.floor_qps(config.min_query_count, config.max_duration_ms)
            start = search.START_FRACTION * batch / expected_s
            serving["settings"].update(search_start_qps=start, search_floor_qps=floor,
                                       lone_sample_ms=alone_s * 1e3)
            numbers = itertools.count(1)

            def probe(qps: float) -> search.Probe:
                number = next(numbers)
                deadline(run_limit, f"serve (LoadGen's Server run {number}, at {qps:.4g} QPS)",
                         lambda: server.calls)
                return _probe(lg, server, config, expected_s, logs, qps, number)

            found = search.search(
                probe, start, config.server_search_runs, config.server_latency_bound_ms, floor,
                alone_s * 1e3, config.server_search_seconds,
                lambda qps: search.run_seconds(qps, config.min_query_count,
                                               config.min_duration_ms, config.max_duration_ms))
            serving["search"] = found.to_dict()
            result = None
            if found.answer is not None:
                result = loadgen_log.read(Path(found.answer.logs))
                serving["result"] = result.to_dict()
        else:
            deadline(run_limit, f"serve (LoadGen's {scenario.name} run)", lambda: server.calls)
            result, serving["gc"] = run_loadgen(
                lg, lambda queries: server.issue(lg, queries), lambda: None,
                loadgen_settings(lg, scenario, config, expected_s), config.samples, logs)
            serving["result"] = result.to_dict()
        serving["batching"] = {"batch": batch, "serve_calls": server.calls,
                               "serve_calls_by_size": {str(n): c for n, c in
                                                       sorted(server.calls_by_size.items())},
                               "samples_served": server.served,
                               "padding_samples": server.padded,
                               "padding": "a short batch is padded with copies of its last "
                                          "sample to the smallest prepared size that holds "
                                          "it; the padding's outputs are dropped"}
        if server.error:
            return row("failed", f"serve raised mid-run: {server.error}")
        missing = server.missing_checked()
        if missing:
            deadline(config.watchdog_margin_s, "serve (the checked samples, after the run)",
                     lambda: server.calls)
            server.answer(missing)
        serving["check"] = {**check(model, config, server.outputs, batch),
                            "served_after_run": missing}
    except Unsupported as error:
        return row("unsupported", str(error))
    except Exception as error:   # noqa: BLE001 - a failure is a row, never a traceback
        return row("failed", one_line(error))
    finally:
        for held in [prepared, *smaller.values()]:
            if held is not None:
                held.close()
    if not serving["check"]["passed"]:
        found = serving["check"]
        return row("failed", found.get("problem") or
                   f"served outputs are {found['error']:.3g} from float64, above the "
                   f"{config.precision} bound {found['bound']:.3g}")
    if result is None:
        return row("failed", _no_answer(found, config.server_latency_bound_ms))
    if not result.valid:
        return row("failed", f"LoadGen: INVALID: {result.reason}")
    return row("ok")
