"""One serving case: (framework, model, scenario) under LoadGen, into one ``serve`` row.

The adapter prepares the model at the scenario's batch size on the canonical weights;
the query sample library holds ``config.samples`` seeded samples of the model's input
(``models.inputs.make_batch``), all loaded up front (LoadGen's load/unload callbacks have
nothing to do). A few untimed serves warm the case up and set LoadGen's expected latency;
then LoadGen runs the scenario in performance mode and writes its logs into the case's
folder beside the results file, where they stay. The checked samples' served outputs
(the first k, served again after the run if LoadGen never picked one) are compared with
the float64 reference, against the bound ``models/error_bounds.py`` derives for the
precision: a wrong answer fails the row however fast it came."""

from __future__ import annotations

import time
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
from suites.rows.results import CaseKey, Row, Settings
from suites.serving import loadgen_log
from suites.serving.scenarios import (
    SCENARIOS,
    Scenario,
    ServingConfig,
    batch_size,
    loadgen_settings,
    recorded,
    unknown,
)
from suites.serving.sut import Server, one_line, select
from suites.truth.check import output_error

TIMING_NOTE = ("LoadGen's time from issue to completion of each query: the inputs' copy "
               "from host arrays onto the device, the forward and the output's copy back")


def check(model, config: ServingConfig, samples: Batch, outputs: dict[int, np.ndarray],
          batch: int) -> dict[str, Any]:
    """The served outputs of the checked samples against float64: max |y - y64| / max |y64|
    (suites/truth/check.py) and the precision's output bound."""
    indices = sorted(outputs)
    ref = reference.forward(model, canonical_weights(model, config.seed), select(samples, indices),
                            train=False)
    served = np.stack([outputs[i] for i in indices])
    bound = bounds(model, batch, config.precision).output
    if served.shape != ref.shape:
        return {"samples": indices, "error": None, "bound": bound, "passed": False,
                "problem": f"served output shape {served.shape} != float64 {ref.shape}"}
    error = output_error(served, ref)
    return {"samples": indices, "error": error, "bound": bound, "passed": bool(error <= bound),
            "norm": "max |y - y64| / max |y64|"}


def _run_loadgen(lg, server: Server, scenario: Scenario, config: ServingConfig, expected_s: float,
                 logs: Path) -> loadgen_log.LoadgenResult:
    logs.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(logs)
    output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = output
    log_settings.enable_trace = False
    sut = lg.ConstructSUT(lambda queries: server.issue(lg, queries), lambda: None)
    qsl = lg.ConstructQSL(config.samples, config.samples, lambda indices: None, lambda indices: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, loadgen_settings(lg, scenario, config, expected_s),
                                    log_settings)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return loadgen_log.read(logs)


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


def serve_case(lg, adapter: Adapter, model_name: str, scenario_name: str, config: ServingConfig,
               suite: str, logs_root: Path, env: dict[str, Any]) -> Row:
    """One row; every failure (an unknown scenario or model, a framework without ``serve``,
    an exception while serving, an INVALID run, a wrong answer) is its status and reason."""
    started_at = datetime.now().isoformat(timespec="seconds")
    clock = time.perf_counter()
    case = CaseConfig(config.precision, config.variant)
    variant = config.variant
    try:
        variant = adapter.resolve_variant(config.variant)
        execution = adapter.describe(case)
    except Unsupported:
        execution = ""
    settings = Settings(adapter.name, adapter.config.device, config.precision, variant,
                        adapter.config.threads, adapter.config.interop_threads, execution)
    scenario = SCENARIOS.get(scenario_name)
    batch = batch_size(scenario, config) if scenario else 0
    key = CaseKey(suite, model_name, batch, SERVE, settings, scenario_name)
    serving: dict[str, Any] = {"timing": TIMING_NOTE}

    def row(status: str, reason: str = "") -> Row:
        return Row(key, status, reason, env=env, started_at=started_at,
                   wall_s=time.perf_counter() - clock, serving=serving)

    if scenario is None:
        return row("failed", unknown(scenario_name))
    prepared = None
    try:
        model = zoo.get_model(model_name)
        samples = make_batch(model, config.samples, config.seed)
        samples = Batch(samples.x, None, samples.lengths)
        if batch > config.samples:
            return row("failed", f"batch {batch} exceeds the {config.samples} samples")
        # Copies (select), never views of the query set: an adapter may keep and write
        # into the arrays it is given.
        prepared = adapter.prepare(model, canonical_weights(model, config.seed),
                                   select(samples, range(batch)), case)
        first_s, expected_s = _warm_up(prepared, select(samples, range(batch)), config.warmup)
        serving["first_serve_ms"] = first_s * 1e3
        serving["settings"] = recorded(scenario, config, expected_s)
        server = Server(prepared.serve, samples, batch, config.checked)
        logs = logs_root / key.id().replace("/", "_")
        result = _run_loadgen(lg, server, scenario, config, expected_s, logs)
        serving["logs"] = str(logs)
        serving["result"] = result.to_dict()
        serving["batching"] = {"batch": batch, "serve_calls": server.calls,
                               "samples_served": server.served,
                               "padding_samples": server.padded,
                               "padding": "a short last batch is padded with copies of its last "
                                          "sample; their outputs are dropped"}
        if server.error:
            return row("failed", f"serve raised mid-run: {server.error}")
        missing = server.missing_checked()
        if missing:
            server.answer(missing)
        serving["check"] = {**check(model, config, samples, server.outputs, batch),
                            "served_after_run": missing}
    except Unsupported as error:
        return row("unsupported", str(error))
    except Exception as error:   # noqa: BLE001 - a failure is a row, never a traceback
        return row("failed", one_line(error))
    finally:
        if prepared is not None:
            prepared.close()
    if not serving["check"]["passed"]:
        found = serving["check"]
        return row("failed", found.get("problem") or
                   f"served outputs are {found['error']:.3g} from float64, above the "
                   f"{config.precision} bound {found['bound']:.3g}")
    if not result.valid:
        return row("failed", f"LoadGen: INVALID: {result.reason}")
    return row("ok")
