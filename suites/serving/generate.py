"""Greedy text generation at batch 1 with a key/value cache, under LoadGen: one ``generate``
row per (framework, model, precision, variant), measured as serving users measure a
language model (issue 61): time to first token (TTFT), time per output token (TPOT) at
p50 and p99, and tokens per second.

The adapter prepares the decoder-only model at the generation's length (prompt + new
tokens) on the canonical weights and gives a ``Generator`` (adapters/base.py) whose cache
holds that many positions. The query sample library holds ``prompts`` seeded prompts
(``models.inputs.make_batch`` at the prompt's length). LoadGen runs SingleStream in
performance mode with token latencies (``TestSettings.use_token_latencies``, as MLPerf's
LLM benchmarks do): each query is one prompt, answered in LoadGen's issue callback by the
prefill, whose token is reported through ``FirstTokenComplete``, then ``new_tokens - 1``
decode steps, the query completed with its token count. LoadGen times the first token from
the query's issue and the rest per output token, (latency - TTFT) / (tokens - 1) per query,
and logs their percentiles over the ``runs`` queries (suites/serving/loadgen_log.py). The
int each call returns is the device's argmax copied to the host, so every call has ended on
the device before the next starts.

After the timed run, one untimed generation from the first prompt is checked against
float64: the reference (``models.reference``) runs once on the prompt and the generated
tokens (teacher forcing) and gives the logits at every generated position; each step's
``last_logits()`` must be within the precision's output bound of the model at the
generation's length (``models/error_bounds.py``: its attention reductions are as long as
the longest step's), and every greedy token must be float64's argmax, except where
float64's two largest logits lie within twice that bound of each other (each may move by
the bound), which the row lists with float64's lead over the token chosen."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import Adapter, CaseConfig, Generator, Unsupported
from models import ir, reference, zoo
from models.error_bounds import bounds
from models.families.transformer import context_length, not_a_decoder
from models.inputs import Batch, make_batch
from models.measures import GENERATE
from models.weights import canonical_weights
from suites.instruments.host_probe import probe_summary
from suites.rows.results import CaseKey, Row
from suites.serving import loadgen_log
from suites.serving.run import Watch, no_watch, row_settings, run_loadgen
from suites.serving.scenarios import LATENCY_HEADROOM, check_numbers
from suites.serving.sut import one_line
from suites.truth.check import output_error

TIMING_NOTE = ("LoadGen SingleStream with token latencies: time to first token from the "
               "query's issue to the prefill's token on the host (FirstTokenComplete); time "
               "per output token per query, (latency - TTFT) / (tokens - 1), the decode steps' "
               "tokens each copied to the host; percentiles over the queries")
# LoadGen's early stopping for SingleStream with token latencies needs at least 64 queries
# ("Need to process at least 64 queries for early stopping", LoadGen 5.0.18's summary of a
# 20-query run); fewer make every run INVALID.
MIN_RUNS = 64
PERCENTILES = ("50.00", "99.00")


@dataclass(frozen=True)
class GenerateConfig:
    """A suite group's ``[cases.generate]`` table. ``prompt``: the prompt's tokens;
    ``new_tokens``: the tokens generated after it (the cache holds both); ``prompts``: the
    seeded prompts LoadGen picks from; ``runs``: the timed generations (LoadGen's minimum
    and maximum query count, at least ``MIN_RUNS``); ``warmup``: untimed generations
    before LoadGen starts (the first compiles, where a framework compiles), whose fastest
    sets LoadGen's expected latency; ``max_duration_ms``: LoadGen's cap on the run (a run
    cut short is INVALID, with the reason)."""

    prompt: int = 128
    new_tokens: int = 128
    prompts: int = 8
    runs: int = MIN_RUNS
    warmup: int = 2
    max_duration_ms: int = 600_000
    precision: str = "fp32"
    variant: str = "default"
    seed: int = 0
    # The serving watchdog's (suites/serving/watchdog.py): the setup and warm-up generations
    # get setup_timeout_s; the LoadGen run max_duration_ms plus watchdog_margin_s, and past
    # it as long as generations still return within the margin.
    watchdog_margin_s: float = 30.0
    setup_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_numbers(self, "generate")
        if self.runs < MIN_RUNS:
            raise ValueError(f"generate setting runs = {self.runs}: LoadGen's early stopping "
                             f"needs at least {MIN_RUNS} queries")

    @property
    def length(self) -> int:
        """The cache's capacity: prompt and new tokens."""
        return self.prompt + self.new_tokens

    @staticmethod
    def of(table: dict[str, Any]) -> GenerateConfig:
        known = {f.name for f in fields(GenerateConfig)}
        extra = sorted(set(table) - known)
        if extra:
            raise ValueError(f"unknown generate settings {extra} (known: {sorted(known)})")
        return GenerateConfig(**table)

    def recorded(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt, "new_tokens": self.new_tokens,
                "cache_capacity": self.length, "prompts": self.prompts, "runs": self.runs,
                "warmup_generations": self.warmup, "max_duration_ms": self.max_duration_ms,
                "scenario": "SingleStream", "mode": "PerformanceOnly",
                "token_latencies": "LoadGen (use_token_latencies)",
                "run_deadline_s": self.max_duration_ms / 1e3 + self.watchdog_margin_s,
                "setup_deadline_s": self.setup_timeout_s}


def with_steps(model: ir.Model, steps: int) -> ir.Model:
    """``model`` fed ``steps`` tokens (its input's length; the weights are the same)."""
    return dataclasses.replace(model, input=dataclasses.replace(model.input, shape=(steps,)))


def prompts(model: ir.Model, config: GenerateConfig) -> np.ndarray:
    """int32 (prompts, prompt): the seeded prompts."""
    return make_batch(with_steps(model, config.prompt), config.prompts, config.seed).x


class CountedGenerator:
    """A generator whose returned calls are counted: the watchdog's sign that a run past its
    deadline still generates (suites/serving/watchdog.py)."""

    def __init__(self, inner: Generator):
        self.inner, self.calls = inner, 0

    def prefill(self, prompt: np.ndarray) -> int:
        token = self.inner.prefill(prompt)
        self.calls += 1
        return token

    def decode(self, token: int) -> int:
        token = self.inner.decode(token)
        self.calls += 1
        return token

    def last_logits(self) -> np.ndarray:
        return self.inner.last_logits()


def generate(generator: Generator, prompt: np.ndarray, new_tokens: int,
             first=None) -> list[int]:
    """Greedy decoding: the prefill's token, then one decode step per further token;
    ``first`` is called once the first token is on the host."""
    tokens = [generator.prefill(prompt)]
    if first is not None:
        first(tokens[0])
    while len(tokens) < new_tokens:
        tokens.append(generator.decode(tokens[-1]))
    return tokens


def check(model: ir.Model, weights, generator: Generator, prompt: np.ndarray, new_tokens: int,
          precision: str) -> dict[str, Any]:
    """One untimed generation against float64 (module docstring): each step's logits
    error, max |y - y64| / max |y64|, under the output bound, and each greedy token against
    float64's argmax."""
    tokens, logits = [generator.prefill(prompt)], [generator.last_logits()]
    while len(tokens) < new_tokens:
        tokens.append(generator.decode(tokens[-1]))
        logits.append(generator.last_logits())
    fed = np.concatenate([prompt, tokens[:-1]]).astype(np.int32)[None]
    ref = reference.forward(model, weights, Batch(fed, None, None))[0, len(prompt) - 1:]
    bound = bounds(model, 1, precision).output
    errors, mismatches, unexplained = [], [], []
    for step, (token, got, want) in enumerate(zip(tokens, logits, ref)):
        if got.shape != want.shape:
            return {"passed": False, "bound": bound,
                    "problem": f"step {step}: logits of shape {got.shape}, float64 {want.shape}"}
        errors.append(output_error(got, want))
        if token != int(want.argmax()):
            # float64's lead of its argmax over the token chosen (its top-2 margin where
            # the token is float64's runner-up), over max |y64| as the error is.
            margin = float(want.max() - want[token]) / float(np.abs(want).max())
            mismatches.append({"step": step, "token": token, "float64": int(want.argmax()),
                               "float64_margin": margin})
            if margin > 2 * bound:
                unexplained.append(step)
    worst = max(errors)
    passed = worst <= bound and not unexplained
    out = {"steps": len(tokens), "error": worst, "errors": errors, "bound": bound,
           "norm": "per step max |y - y64| / max |y64|",
           "greedy_matches": len(tokens) - len(mismatches), "mismatches": mismatches,
           "mismatch_rule": "a token other than float64's argmax is allowed only where "
                            "float64's lead over it (over max |y64|) is within twice the bound",
           "passed": passed}
    if worst > bound:
        out["problem"] = (f"generated logits are {worst:.3g} from float64 (step "
                          f"{errors.index(worst)}), above the {precision} bound {bound:.3g}")
    elif unexplained:
        out["problem"] = (f"greedy tokens differ from float64's argmax at steps {unexplained}, "
                          f"where float64's lead exceeds twice the {precision} bound {bound:.3g}")
    return out


def _warm_up(generator: Generator, prompt: np.ndarray, new_tokens: int, runs: int
             ) -> tuple[float, float]:
    """The first generation's seconds and the fastest one's."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        generate(generator, prompt, new_tokens)
        times.append(time.perf_counter() - started)
    return times[0], min(times)


def _run_loadgen(lg, generator: Generator, queries: np.ndarray, config: GenerateConfig,
                 expected_s: float, logs: Path
                 ) -> tuple[loadgen_log.LoadgenResult, dict[str, Any], str]:
    """LoadGen SingleStream with token latencies over ``queries``; (result, the garbage
    collector's pauses during it, the error a generation raised or "")."""
    errors: list[str] = []

    def issue(query_samples) -> None:
        for q in query_samples:
            count = 0
            if not errors:
                try:
                    count = len(generate(
                        generator, queries[int(q.index)], config.new_tokens,
                        lambda token, rid=q.id: lg.FirstTokenComplete(
                            [lg.QuerySampleResponse(rid, 0, 0, 1)])))
                except Exception as error:   # noqa: BLE001 - any failure becomes the row's reason
                    errors.append(one_line(error))
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0, count)])

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.SingleStream
    settings.mode = lg.TestMode.PerformanceOnly
    settings.use_token_latencies = True
    settings.min_duration_ms = 0
    settings.max_duration_ms = config.max_duration_ms
    settings.min_query_count = config.runs
    settings.max_query_count = config.runs
    settings.performance_sample_count_override = config.prompts
    settings.single_stream_expected_latency_ns = max(int(expected_s * 1e9 / LATENCY_HEADROOM), 1)
    result, collector = run_loadgen(lg, issue, lambda: None, settings, config.prompts, logs)
    return result, collector, errors[0] if errors else ""


def headline(result: loadgen_log.LoadgenResult) -> dict[str, Any]:
    """The row's figures from LoadGen's result."""
    return {"ttft_ms": {p: result.first_token_ms.get(p) for p in PERCENTILES},
            "tpot_ms": {p: result.per_token_ms.get(p) for p in PERCENTILES},
            "tokens_per_second": result.tokens_per_second}


def generate_case(lg, adapter: Adapter, model_name: str, config: GenerateConfig, suite: str,
                  logs_root: Path, env: dict[str, Any], watch: Watch = no_watch) -> Row:
    """One row; every failure (an unknown model, one that is not a decoder, a generation
    longer than its context, a framework without a generator, an exception while
    generating, an INVALID run, a wrong answer) is its status and reason. ``watch`` is told
    the LoadGen run's deadline (suites/serving/run.py says how)."""
    started_at = datetime.now().isoformat(timespec="seconds")
    clock = time.perf_counter()
    case = CaseConfig(config.precision, config.variant)
    settings = row_settings(adapter, case)
    key = CaseKey(suite, model_name, 1, GENERATE, settings)
    serving: dict[str, Any] = {"timing": TIMING_NOTE, "settings": config.recorded()}

    def row(status: str, reason: str = "") -> Row:
        return Row(key, status, reason, env=env, started_at=started_at,
                   wall_s=time.perf_counter() - clock, serving=serving)

    prepared = None
    try:
        model = zoo.get_model(model_name)
        reason = not_a_decoder(model)
        if reason:
            return row("unsupported", reason)
        if config.length > context_length(model):
            return row("failed", f"prompt {config.prompt} + {config.new_tokens} new tokens = "
                                 f"{config.length} positions, beyond {model_name}'s context of "
                                 f"{context_length(model)}")
        adapter.check_precision(case)
        weights = canonical_weights(model, config.seed)
        sized = with_steps(model, config.length)
        queries = prompts(model, config)
        first = make_batch(sized, 1, config.seed)
        prepared = adapter.prepare(sized, weights, Batch(first.x, None, first.lengths), case)
        generator = prepared.generator(config.length)
        first_s, expected_s = _warm_up(generator, queries[0], config.new_tokens, config.warmup)
        serving["first_generation_ms"] = first_s * 1e3
        serving["fastest_warmup_generation_ms"] = expected_s * 1e3
        serving["host_probe"] = probe_summary()
        logs = logs_root / key.id().replace("/", "_")
        serving["logs"] = str(logs)
        counted = CountedGenerator(generator)
        seconds = config.max_duration_ms / 1e3 + config.watchdog_margin_s
        what = "generate (LoadGen's SingleStream run)"
        watch(seconds, Row(key, "failed", f"{what} did not return within {seconds:g} s: the "
                                          "watchdog killed the case's process",
                           env=env, started_at=started_at, wall_s=time.perf_counter() - clock,
                           serving=dict(serving), time_limit_s=seconds),
              what, lambda: counted.calls)
        result, serving["gc"], error = _run_loadgen(lg, counted, queries, config, expected_s,
                                                     logs)
        serving["result"] = result.to_dict()
        serving["generation"] = headline(result)
        if error:
            return row("failed", f"generation raised mid-run: {error}")
        serving["check"] = check(sized, weights, generator, queries[0], config.new_tokens,
                                 config.precision)
    except Unsupported as error:
        return row("unsupported", str(error))
    except Exception as error:   # noqa: BLE001 - a failure is a row, never a traceback
        return row("failed", one_line(error))
    finally:
        if prepared is not None:
            prepared.close()
    if not serving["check"]["passed"]:
        return row("failed", serving["check"]["problem"])
    if not result.valid:
        return row("failed", f"LoadGen: INVALID: {result.reason}")
    return row("ok")
