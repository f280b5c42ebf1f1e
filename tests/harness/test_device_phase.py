"""The GPU's two phases: wall samples and fingerprints in a process that never loads
CUPTI, then device time, profiles and counters in one of their own (suites/harness/device_pass.py,
suites/harness/runner.py phases); and the report's join of the device time onto the wall rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from suites.harness.runner import device_measures, pending_measures, phases, recorded_references
from suites.harness.spec import Job
from tests.fake_cupti import FakeCupti, install
from tests.fake_worker import SimulatedPrepared, run_job


def test_a_gpu_job_gets_a_device_time_row_and_two_phases():
    job = Job("lenet", 64, "gpu", 16, 1, "fp32", "eager", ("forward", "gradient", "profile"))
    cpu = Job("lenet", 64, "cpu", 2, 1, "fp32", "eager", ("forward", "gradient"))
    (_, names), = pending_measures([job], lambda j, m: type("K", (), {"id": lambda s: m})(),
                                   set())
    assert names == ["forward", "gradient", "profile", "fingerprint", "device_time"]
    assert phases("gpu", names) == [("wall", ["forward", "gradient", "fingerprint"]),
                                    ("device", ["profile", "device_time"])]
    (_, cpu_names), = pending_measures([cpu], lambda j, m: type("K", (), {"id": lambda s: m})(),
                                       set())
    assert cpu_names == ["forward", "gradient", "fingerprint"]
    assert phases("cpu", cpu_names) == [("all", cpu_names)]


def test_a_device_phase_gets_the_figures_recorded_before_it():
    # kernels-gpu's profiles of conv_l1: its gradient row was copied from default-gpu and
    # its device time taken there, so the profile's kernel check needs them from the file.
    def case_id(measure):
        return f"kernels-gpu/torch/gpu/conv_l1/b128/{measure}/fp32/eager/t16"
    rows = {
        case_id("gradient"): {"status": "ok", "timing": {"median_ms": 6.3}},
        case_id("forward"): {"status": "failed", "timing": None},
        case_id("device_time"): {"status": "ok", "device_times": {"measures": {
            "gradient": {"device_median_ms": 6.09}, "forward": {"device_median_ms": 2.6}}}},
    }
    found = recorded_references(rows, ("forward", "gradient", "grad_input"), case_id)
    assert found == {"gradient": [6.3, 6.09]}   # a failed row is no reference
    assert recorded_references({}, ("gradient",), case_id) == {}


def test_compile_cache_jobs_get_no_device_time():
    job = Job("lenet", 64, "gpu", 16, 1, "fp32", "jit", ("forward",), compile_cache="cold")
    (_, names), = pending_measures([job], lambda j, m: type("K", (), {"id": lambda s: m})(),
                                   set())
    assert names == ["forward", "fingerprint"]


def test_a_compile_cache_jobs_rows_say_why_they_have_no_device_time(monkeypatch, tmp_path):
    fake = install(monkeypatch, FakeCupti())
    rows = run_job(tmp_path, SimulatedPrepared(fake), ["forward"], phase="wall",
                   compile_cache="warm")
    reason = rows["forward"]["timing"]["device_time_reason"]
    assert "compile-cache job" in reason and "device_time row" not in reason


def test_a_case_split_over_two_jobs_has_one_device_time_row_for_all_its_measures():
    from dataclasses import replace
    first = Job("conv_l1", 128, "gpu", 16, 1, "fp32", "eager", ("forward", "gradient"))
    second = replace(first, measures=("grad_input", "profile"), fingerprint=False)
    assert list(device_measures([first, second]).values()) == [
        ("forward", "gradient", "grad_input")]
    pending = pending_measures([first, second], lambda j, m: type("K", (), {
        "id": lambda s: f"{j.measures}{m}"})(), set())
    assert sum(names.count("device_time") for _, names in pending) == 1


def test_the_wall_phase_never_enables_cupti_and_the_device_phase_times_every_measure(
        monkeypatch, tmp_path):
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock, raising=False)
    prepared = SimulatedPrepared(fake, kernel_ns=100_000, gap_ns=400_000)
    wall = run_job(tmp_path, prepared, ["forward", "gradient", "fingerprint"], phase="wall")
    assert fake.launches_while_enabled == 0
    assert wall["forward"]["status"] == "ok"
    assert wall["forward"]["timing"]["device_median_ms"] is None
    assert "device_time row" in wall["forward"]["timing"]["device_time_reason"]
    device = run_job(tmp_path, prepared, ["profile", "device_time"], phase="device",
                     device_measures=("forward", "gradient"))
    row = device["device_time"]
    assert row["status"] == "ok"
    measures = row["device_times"]["measures"]
    assert set(measures) == {"forward", "gradient"}
    assert measures["forward"]["device_median_ms"] == pytest.approx(0.1)
    assert measures["forward"]["device_time_kind"].startswith("CUPTI")
    assert "in a process of its own" in row["device_times"]["method"]
    # The profile ran after the device time and set its kernels against it.
    check = device["profile"]["profile"]["kernel_check"]
    assert check["timed_reference"] == "device_median_ms"
    assert check["kernel_busy_ratio"] == pytest.approx(1.0)


def test_a_profile_in_the_device_phase_says_the_recorded_wall_median_is_host_work(
        monkeypatch, tmp_path):
    """The wall median recorded by the wall phase outlives the device phase's own device
    time: a profile whose busy time matches the device median, in a launch-bound case,
    says why the wall median is longer (seen on an H100: ONNX Runtime's conv_l4 forward,
    busy 0.122 ms against a 0.24 ms wall median, and no reason in the row)."""
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock, raising=False)
    prepared = SimulatedPrepared(fake, kernel_ns=100_000, gap_ns=400_000)
    wall = run_job(tmp_path, prepared, ["gradient", "fingerprint"], phase="wall")
    wall_median = wall["gradient"]["timing"]["median_ms"]
    device = run_job(tmp_path, prepared, ["device_time", "profile"], phase="device",
                     device_measures=("gradient",), recorded={"gradient": [wall_median, None]})
    check = device["profile"]["profile"]["kernel_check"]
    assert check["timed_reference"] == "device_median_ms"
    assert check["kernel_busy_ratio"] == pytest.approx(1.0)
    assert "busy matches the device median; the wall median is" in check["note"]
    assert "launch gaps, host work" in check["note"]


def test_without_any_device_clock_the_device_time_row_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_DEVICE_CLOCK", "off")
    fake = install(monkeypatch, FakeCupti())
    rows = run_job(tmp_path, SimulatedPrepared(fake), ["device_time"], phase="device",
                   device_measures=("forward",))
    assert rows["device_time"]["status"] == "failed"
    assert "DLBENCH_DEVICE_CLOCK=off" in rows["device_time"]["reason"]


def test_the_report_joins_device_time_onto_the_wall_rows():
    from reports.pipeline.load import Loaded, RawRow
    from reports.pipeline.tidy import tidy
    from tests import report_fixtures as fx

    forward = fx.make_row("sae_ae1", 64, "forward", "torch", "gpu", 0.80)
    forward["timing"]["device_median_ms"] = 0.75       # CUDA events, in the wall process
    gradient = fx.make_row("sae_ae1", 64, "gradient", "torch", "gpu", 1.00)
    device = fx.make_row("sae_ae1", 64, "device_time", "torch", "gpu", 1.0)
    device["timing"] = None
    device["case_id"] = device["case_id"].replace("/gradient/", "/device_time/")
    device["device_times"] = {"method": "separate process", "measures": {
        "forward": {"device_median_ms": 0.03, "device_span_median_ms": 0.12,
                    "device_time_kind": "CUPTI activity records"},
        "gradient": {"unsupported": "no"}}}
    loaded = Loaded(tuple(RawRow("f", i + 1, i, r) for i, r in
                          enumerate((forward, gradient, device))), ("f",), ())
    frame = tidy(loaded).frame.set_index("measure")
    assert "device_time" not in frame.index
    assert frame.loc["forward", "device_median_ms"] == pytest.approx(0.03)
    assert frame.loc["forward", "device_span_median_ms"] == pytest.approx(0.12)
    assert frame.loc["forward", "host_overhead_ms"] == pytest.approx(0.77)
    assert bool(frame.loc["forward", "launch_bound"]) is True
    assert frame.loc["forward", "device_time_kind"] == "CUPTI activity records"
    assert frame.loc["gradient", "device_median_ms"] != frame.loc["gradient", "device_median_ms"]
    assert json.loads(json.dumps(device))     # the row is plain JSON


def test_a_case_two_suites_timed_keeps_each_measures_device_time():
    # default-gpu times AlexNet's forward and transfer; float64-gpu, later in the same run,
    # times its forward again and takes device time for that measure only. Each suite's
    # forward keeps its own suite's device time, the tables show the later forward, and
    # the transfer keeps default-gpu's device time (published/h100: JAX's and
    # TensorFlow's transfers had lost theirs).
    from reports.pipeline.load import Loaded, RawRow
    from reports.pipeline.tidy import tidy
    from tests import report_fixtures as fx

    def device_row(suite, started, measures):
        row = fx.make_row("alexnet", 16, "device_time", "jax", "gpu", 1.0, suite=suite,
                          started=started)
        row["timing"] = None
        row["device_times"] = {"method": "separate process", "measures": {
            m: {"device_median_ms": v, "device_time_kind": "CUPTI"} for m, v in measures}}
        return row

    early, late = "2026-01-10T10:00:00", "2026-01-10T11:00:00"
    rows = (fx.make_row("alexnet", 16, "forward", "jax", "gpu", 1.00, suite="default-gpu",
                        started=early),
            fx.make_row("alexnet", 16, "transfer", "jax", "gpu", 2.00, suite="default-gpu",
                        started=early),
            device_row("default-gpu", early, [("forward", 0.90), ("transfer", 1.80)]),
            fx.make_row("alexnet", 16, "forward", "jax", "gpu", 1.02, suite="float64-gpu",
                        started=late),
            device_row("float64-gpu", late, [("forward", 0.91)]))
    loaded = Loaded(tuple(RawRow("f", i + 1, i, r) for i, r in enumerate(rows)), ("f",), ())
    merged = tidy(loaded)
    frame = merged.frame.set_index("measure")
    assert sorted(frame.index) == ["forward", "transfer"]
    assert frame.loc["forward", "suite"] == "float64-gpu"
    assert frame.loc["forward", "device_median_ms"] == pytest.approx(0.91)
    assert frame.loc["transfer", "device_median_ms"] == pytest.approx(1.80)
    assert merged.superseded == 0                 # two suites' forwards: no rerun
    assert merged.not_shown == 1                  # the earlier forward, kept beside
    every = merged.measurements.set_index("suite")
    assert every.loc["default-gpu"].query("measure == 'forward'")[
        "device_median_ms"].tolist() == [pytest.approx(0.90)]


class IdleTransfer(SimulatedPrepared):
    """A step that does nothing on the device, as TensorFlow's pageable transfer did once
    eager TensorFlow had kept the input's GPU copy beside its handle."""

    def __init__(self, cupti, idle=("transfer",)):
        super().__init__(cupti, kernel_ns=100_000, gap_ns=100_000)
        self.idle = idle

    def step(self, measure: str):
        if measure in self.idle:
            return lambda: self.cupti.idle(50_000)
        return super().step(measure)


def test_a_step_that_did_no_device_work_is_marked_beside_measures_that_did(monkeypatch,
                                                                          tmp_path):
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock, raising=False)
    rows = run_job(tmp_path, IdleTransfer(fake), ["device_time"], phase="device",
                   device_measures=("forward", "transfer"))
    measures = rows["device_time"]["device_times"]["measures"]
    assert measures["forward"]["device_median_ms"] == pytest.approx(0.1)
    assert "no_device_work" not in measures["forward"]
    transfer = measures["transfer"]
    assert transfer["no_device_work"] is True and transfer["recorded_nothing"] is True
    assert "did no work on the GPU" in transfer["reason"]
    assert "0 records received" in transfer["reason"]


def test_when_cupti_saw_nothing_of_the_job_no_step_is_blamed(monkeypatch, tmp_path):
    fake = install(monkeypatch, FakeCupti())
    monkeypatch.setattr("suites.stats.timer.host_clock", fake.host_clock, raising=False)
    rows = run_job(tmp_path, IdleTransfer(fake, idle=("forward", "transfer")),
                   ["device_time"], phase="device", device_measures=("forward", "transfer"))
    for entry in rows["device_time"]["device_times"]["measures"].values():
        assert entry["recorded_nothing"] is True and "no_device_work" not in entry


def _device_row(measures: dict) -> dict:
    from tests import report_fixtures as fx

    device = fx.make_row("li_conv1", 128, "device_time", "tf", "gpu", 1.0)
    device["timing"] = None
    device["device_times"] = {"method": "device phase", "measures": measures}
    return device


@pytest.mark.parametrize("recorded", ["marked by the device phase", "an older row's reason"])
def test_the_report_makes_a_wall_row_that_timed_no_device_work_an_error(recorded):
    from models.measures import NO_DEVICE_WORK
    from reports.pipeline.load import Loaded, RawRow
    from reports.pipeline.tidy import tidy
    from tests import report_fixtures as fx

    received = ("CUPTI recorded no kernel, copy or set in the device block (0 records "
                "received, 0 outside the window)")
    transfer = ({"reason": f"{NO_DEVICE_WORK} ({received})", "recorded_nothing": True,
                 "no_device_work": True}
                if recorded == "marked by the device phase" else {"reason": received})
    rows = (fx.make_row("li_conv1", 128, "forward", "tf", "gpu", 3.9),
            fx.make_row("li_conv1", 128, "transfer", "tf", "gpu", 0.044),
            _device_row({"forward": {"device_median_ms": 3.2, "device_time_kind": "CUPTI"},
                         "transfer": transfer}))
    loaded = Loaded(tuple(RawRow("f", i + 1, i, r) for i, r in enumerate(rows)), ("f",), ())
    frame = tidy(loaded).frame.set_index("measure")
    assert frame.loc["forward", "status"] == "ok"
    assert frame.loc["forward", "device_median_ms"] == pytest.approx(3.2)
    assert frame.loc["transfer", "status"] == "error"
    assert "did no work on the GPU" in frame.loc["transfer", "reason"]
    assert "0 records received" in frame.loc["transfer", "reason"]


def test_the_report_blames_no_step_where_cupti_recorded_none_of_the_job():
    from reports.pipeline.load import Loaded, RawRow
    from reports.pipeline.tidy import tidy
    from tests import report_fixtures as fx

    nothing = {"reason": "CUPTI recorded no kernel, copy or set in the device block "
                         "(0 records received, 0 outside the window)"}
    rows = (fx.make_row("li_conv1", 128, "forward", "tf", "gpu", 3.9),
            fx.make_row("li_conv1", 128, "transfer", "tf", "gpu", 0.9),
            _device_row({"forward": dict(nothing), "transfer": dict(nothing)}))
    loaded = Loaded(tuple(RawRow("f", i + 1, i, r) for i, r in enumerate(rows)), ("f",), ())
    frame = tidy(loaded).frame.set_index("measure")
    assert (frame["status"] == "ok").all()


def test_the_report_leaves_out_a_device_time_above_the_wall_median():
    """The device phase rebuilt TensorFlow's conv_l1 on an H200 and CUPTI saw 7.79 ms of
    busy time per forward against a wall median of 3.12 ms: not the wall samples' kernels.
    The wall row keeps no device figure and says why; one within the limit is joined, a
    CUDA-event figure of the wall process stays, and a transfer is never judged so."""
    from reports.pipeline.load import Loaded, RawRow
    from reports.pipeline.tidy import tidy
    from tests import report_fixtures as fx

    gradient = fx.make_row("li_conv1", 128, "gradient", "tf", "gpu", 6.45)
    events = fx.make_row("li_conv1", 128, "grad_input", "tf", "gpu", 3.8)
    events["timing"]["device_median_ms"] = 3.0
    rows = (fx.make_row("li_conv1", 128, "forward", "tf", "gpu", 3.12), gradient, events,
            fx.make_row("li_conv1", 128, "transfer", "tf", "gpu", 0.7),
            _device_row({"forward": {"device_median_ms": 7.79, "device_time_kind": "CUPTI"},
                         "gradient": {"device_median_ms": 6.7, "device_time_kind": "CUPTI"},
                         "grad_input": {"device_median_ms": 4.5, "device_time_kind": "CUPTI"},
                         "transfer": {"device_median_ms": 1.4, "device_time_kind": "CUPTI"}}))
    loaded = Loaded(tuple(RawRow("f", i + 1, i, r) for i, r in enumerate(rows)), ("f",), ())
    frame = tidy(loaded).frame.set_index("measure")
    assert (frame["status"] == "ok").all()
    assert pd.isna(frame.loc["forward", "device_median_ms"])
    assert "busy time (7.79 ms) exceeds this row's wall median (3.12 ms)" in \
        frame.loc["forward", "device_time_reason"]
    assert frame.loc["gradient", "device_median_ms"] == pytest.approx(6.7)   # 1.04x: joined
    assert frame.loc["grad_input", "device_median_ms"] == pytest.approx(3.0)  # events stay
    assert frame.loc["transfer", "device_median_ms"] == pytest.approx(1.4)
