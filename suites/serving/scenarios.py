"""The LoadGen scenarios this harness runs and the settings each gets.

Scenario semantics are LoadGen's (mlcommons/inference loadgen/loadgen_settings.h): SingleStream
sends one sample and the next when it completes (headline: the 90th percentile latency);
MultiStream sends 8 samples per query, one query after another (headline: the 99th
percentile of the query latency); Offline sends every sample in one query (headline:
samples per second); Server sends single-sample queries at Poisson arrival times at a
target QPS, and a run is VALID when the 99th percentile of the sample latencies stays under
the target latency (with LoadGen's minimums and early stopping). The harness batches
Server's samples itself (suites/serving/sut.py Batcher) and searches the target QPS
(suites/serving/search.py): the headline is the largest target QPS whose run is VALID
under ``server_latency_bound_ms``. An unknown name is refused with the known ones
(``unknown``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from models.truth import OUTPUT_EXAMPLES


@dataclass(frozen=True)
class Scenario:
    name: str                 # LoadGen's TestScenario name
    samples_per_query: int    # 0: every sample in one query (Offline)
    headline: str             # the row's headline figure, in words
    headline_percentile: str  # its key in LoadgenResult.percentiles_ms ("" for Offline)


SCENARIOS = {s.name: s for s in (
    Scenario("SingleStream", 1, "p90 latency per sample", "90.00"),
    Scenario("MultiStream", 8, "p99 latency per 8-sample query", "99.00"),
    Scenario("Offline", 0, "samples per second", ""),
    Scenario("Server", 1, "largest target QPS whose p99 latency is under the bound", "99.00"),
)}
# The scenario name of a cold start's row (suites/serving/__main__.py ``[[cold_start]]``):
# no LoadGen scenario, a fresh process's first checked answer (suites/serving/cold_start.py).
COLD_START = "ColdStart"
# Server's latency percentile (LoadGen's server_target_latency_percentile; MLPerf's rules
# bound the 99th percentile for every datacenter vision and language model).
SERVER_PERCENTILE = 0.99

# LoadGen sizes Offline's one query from the expected QPS: 1.1 x expected QPS x min
# duration samples (seen with 5.0.18: 100 QPS expected, 300 ms, 33 samples). A run faster
# than expected then ends before the min duration and is INVALID, so the measured QPS of
# the warm-up is raised by this factor: a run longer than the minimum, never shorter. 2
# was not enough on a busy 2-core host: JAX's lstm_tiny served its fastest warm-up batch in
# 3.09 ms, then ran about 3x faster in the run, which LoadGen called INVALID ("min duration
# not met"); at 4 such a run lasts up to 4x the minimum, well within max_duration_ms.
OFFLINE_QPS_HEADROOM = 4.0
# SingleStream and MultiStream likewise: LoadGen pre-generates about min duration /
# expected latency queries, and a run whose queries come back faster than expected runs out
# of them before the min duration ("INVALID: min duration not met ... Decrease the expected
# latency so the loadgen pre-generates more queries", LoadGen 5.0.18). The expected latency
# is the fastest warm-up serve divided by this: more queries ready than the run uses, never
# fewer, on a host whose warm-up ran slow.
LATENCY_HEADROOM = 4.0


def unknown(name: str) -> str:
    """Why ``name`` is no scenario this harness runs ("" if it is one)."""
    if name in SCENARIOS:
        return ""
    return f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})"


def check_numbers(config: Any, kind: str) -> None:
    """Every int field of a settings dataclass a positive integer (``seed`` at least 0), every
    float field a positive number; a ValueError naming the ``kind`` of setting where not."""
    for f in fields(config):
        value = getattr(config, f.name)
        if f.type == "int" and (type(value) is not int or value < (0 if f.name == "seed" else 1)):
            raise ValueError(f"{kind} setting {f.name} = {value!r}: expected a positive integer")
        if f.type == "float" and (type(value) not in (int, float) or not value > 0):
            raise ValueError(f"{kind} setting {f.name} = {value!r}: expected a positive number")


@dataclass(frozen=True)
class ServingConfig:
    """One group of a serving suite. ``samples``: the QSL's seeded samples (all of them
    LoadGen's performance set); ``offline_batch``: how many samples the SUT serves at once
    in Offline (SingleStream serves 1, MultiStream 8); ``min_duration_ms``,
    ``min_query_count``: LoadGen's minimums, ``max_duration_ms`` its cap (a run it cuts
    short is INVALID, with the reason); ``checked``: the first samples whose served outputs
    are compared with float64 (``models/truth.py``'s k); ``warmup``: untimed serves of one
    batch before LoadGen starts, whose fastest sets LoadGen's expected latency.

    Server: ``server_max_batch``, the most samples the batcher serves in one call;
    ``server_batch_sizes``, smaller prepared sizes a short batch is padded to instead
    (TensorFlow Serving's ``allowed_batch_sizes``, less its last entry, which is
    ``server_max_batch``): a short batch goes at the smallest size that holds it, so at low
    load a lone sample is not charged a full batch's compute; empty, every call is padded to
    ``server_max_batch`` (one prepared shape); ``server_batch_timeout_ms``, how long the
    oldest pending sample waits for more before a short batch goes; ``server_latency_bound_ms``,
    LoadGen's target latency for the 99th percentile (15 ms is MLPerf Inference's bound for
    ResNet-50 in Server); ``server_search_runs``, the most LoadGen runs of the QPS search,
    each lasting ``min_duration_ms`` or ``min_query_count`` queries, whichever is longer;
    ``server_search_seconds``, the most seconds of those runs together (search.py: a run
    that would pass it is not started).

    The watchdog (suites/serving/watchdog.py): each LoadGen run must return within
    ``max_duration_ms`` plus ``watchdog_margin_s`` (LoadGen stops issuing at its cap but
    waits for the queries out, and Offline's one query may outlast it), the serves after it
    (the check's) within the margin; preparing the model and the warm-up serves, where a
    framework compiles, within ``setup_timeout_s``. Past a deadline the case is a failed row
    and its process is killed."""

    samples: int = 64
    offline_batch: int = 16
    min_duration_ms: int = 500
    max_duration_ms: int = 20_000
    min_query_count: int = 100
    checked: int = OUTPUT_EXAMPLES
    warmup: int = 3
    precision: str = "fp32"
    variant: str = "default"
    seed: int = 0
    server_max_batch: int = 8
    server_batch_sizes: tuple[int, ...] = ()
    server_batch_timeout_ms: float = 1.0
    server_latency_bound_ms: float = 15.0
    server_search_runs: int = 6
    server_search_seconds: float = 600.0
    watchdog_margin_s: float = 30.0
    setup_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_numbers(self, "serving")
        if self.checked > self.samples:
            raise ValueError(f"checked ({self.checked}) exceeds samples ({self.samples})")
        if self.max_duration_ms < self.min_duration_ms:
            raise ValueError("max_duration_ms is below min_duration_ms")
        sizes = self.server_batch_sizes
        if not isinstance(sizes, tuple) or any(type(n) is not int or not 0 < n < self.server_max_batch
                                               for n in sizes) or list(sizes) != sorted(set(sizes)):
            raise ValueError(f"serving setting server_batch_sizes = {list(sizes)!r}: expected "
                             f"increasing batch sizes below server_max_batch "
                             f"({self.server_max_batch})")

    @staticmethod
    def of(table: dict[str, Any]) -> ServingConfig:
        known = {f.name for f in fields(ServingConfig)}
        extra = sorted(set(table) - known)
        if extra:
            raise ValueError(f"unknown serving settings {extra} (known: {sorted(known)})")
        if isinstance(table.get("server_batch_sizes"), list):
            table = {**table, "server_batch_sizes": tuple(table["server_batch_sizes"])}
        return ServingConfig(**table)


def run_deadline_s(config: ServingConfig) -> float:
    """The seconds one LoadGen run may take before the watchdog ends its case."""
    return config.max_duration_ms / 1e3 + config.watchdog_margin_s


def batch_size(scenario: Scenario, config: ServingConfig) -> int:
    """How many samples the SUT serves in one call of ``Prepared.serve``."""
    if scenario.name == "Server":
        return config.server_max_batch
    return scenario.samples_per_query or config.offline_batch


def loadgen_settings(lg: Any, scenario: Scenario, config: ServingConfig, expected_s: float,
                     target_qps: float = 0.0) -> Any:
    """LoadGen's TestSettings for ``scenario``, in performance mode; ``expected_s``: the
    warm-up's seconds per served batch; ``target_qps``: Server's arrival rate."""
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario.name)
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = config.min_duration_ms
    settings.max_duration_ms = config.max_duration_ms
    settings.min_query_count = config.min_query_count
    settings.performance_sample_count_override = config.samples
    expected_ns = max(int(expected_s * 1e9 / LATENCY_HEADROOM), 1)
    if scenario.name == "SingleStream":
        settings.single_stream_expected_latency_ns = expected_ns
    elif scenario.name == "MultiStream":
        settings.multi_stream_samples_per_query = scenario.samples_per_query
        settings.multi_stream_expected_latency_ns = expected_ns
    elif scenario.name == "Server":
        settings.server_target_qps = target_qps
        settings.server_target_latency_ns = int(config.server_latency_bound_ms * 1e6)
        settings.server_target_latency_percentile = SERVER_PERCENTILE
    else:
        settings.offline_expected_qps = OFFLINE_QPS_HEADROOM * batch_size(scenario, config) / expected_s
    return settings


def recorded(scenario: Scenario, config: ServingConfig, expected_s: float) -> dict[str, Any]:
    """The settings the row records."""
    out: dict[str, Any] = {"scenario": scenario.name, "mode": "PerformanceOnly",
                           "min_duration_ms": config.min_duration_ms,
                           "max_duration_ms": config.max_duration_ms,
                           "min_query_count": config.min_query_count,
                           "performance_sample_count": config.samples,
                           "fastest_warmup_batch_ms": expected_s * 1e3,
                           "loadgen_run_deadline_s": run_deadline_s(config),
                           "setup_deadline_s": config.setup_timeout_s}
    if scenario.name in ("SingleStream", "MultiStream"):
        out["expected_latency_ms"] = expected_s * 1e3 / LATENCY_HEADROOM
    if scenario.name == "Offline":
        out["offline_expected_qps"] = OFFLINE_QPS_HEADROOM * batch_size(scenario, config) / expected_s
    if scenario.name == "Server":
        out.update(server_max_batch=config.server_max_batch,
                   server_batch_sizes=[*config.server_batch_sizes, config.server_max_batch],
                   server_batch_timeout_ms=config.server_batch_timeout_ms,
                   server_target_latency_ms=config.server_latency_bound_ms,
                   server_target_latency_percentile=SERVER_PERCENTILE,
                   server_search_runs=config.server_search_runs,
                   server_search_seconds=config.server_search_seconds)
    return out
