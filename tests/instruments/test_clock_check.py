"""The clock-overhead check (``python -m suites.instruments.clock_check``) on a simulated GPU and, as
a smoke test, its command line without CUPTI (what a CPU host or CI has)."""

from __future__ import annotations

import pytest

from adapters.base import DeviceClock
from suites.instruments import clock_check
from suites.instruments.cupti_clock import CuptiClock
from suites.instruments.kernel_trace import unavailable_reason
from tests.fake_cupti import FakeCupti, install
from tests.fake_worker import SimulatedPrepared


class EventClock(DeviceClock):
    kind = "CUDA events (stand-in)"

    def elapsed(self):
        return 0.0012


def test_the_check_alternates_traced_and_plain_blocks_after_an_untraced_baseline(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    prepared = SimulatedPrepared(fake, kernel_ns=100_000, gap_ns=400_000)
    baseline_launches = []

    def cupti_clock():
        # Asked for only after the baseline: nothing so far ran under CUPTI.
        baseline_launches.append(fake.launches_while_enabled)
        return CuptiClock(fake), ""

    check = clock_check.run_check(prepared.step("forward"), prepared.sync, blocks=3, rounds=2,
                                  cupti_clock=cupti_clock, event_clock=EventClock(),
                                  clock=fake.host_clock)
    assert baseline_launches == [0]
    inner = check.inner_loops                                 # 2 ms blocks of 0.5 ms
    assert inner in (4, 5) and check.wall_before_ms == pytest.approx(0.5)
    assert check.wall_after_ms == pytest.approx((0.5, 0.5))
    assert check.traced_wall_ms == pytest.approx((0.5, 0.5))
    assert check.cupti_busy_ms == pytest.approx((0.1, 0.1))
    assert check.cupti_span_ms == pytest.approx(((inner * 0.5 - 0.4) / inner,) * 2)
    assert check.event_ms == pytest.approx((1.2 / inner,) * 2)   # 1.2 ms per block
    assert fake.launches_while_enabled == 2 * 3 * inner         # the traced blocks only
    assert "+0.0% from before CUPTI" in clock_check.render(check)


def test_a_cpu_run_prints_why_it_measures_no_device_clock(monkeypatch, capsys):
    fake = FakeCupti()
    monkeypatch.setattr(clock_check, "build_case", lambda args: SimulatedPrepared(fake))
    assert clock_check.main(["--framework", "torch", "--device", "cpu", "--blocks", "2",
                             "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "CUPTI clock not measured: a CPU run has no device clock" in out
    assert "@@clock_check" in out


@pytest.mark.skipif(unavailable_reason() is None, reason="CUPTI is installed here")
def test_without_cupti_the_gpu_check_says_why(monkeypatch, capsys):
    monkeypatch.setattr(clock_check, "build_case", lambda args: SimulatedPrepared(FakeCupti()))
    assert clock_check.main(["--framework", "jax", "--blocks", "2", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "CUPTI clock not measured: CUPTI device clock unavailable" in out
    assert "the framework offers no device clock" in out


def test_a_framework_that_cannot_start_is_one_line(capsys):
    assert clock_check.main(["--framework", "torch", "--model", "no_such_model"]) == 2
    assert "cannot prepare torch no_such_model" in capsys.readouterr().out


def test_detach_runs_after_every_traced_round_and_says_when_it_cannot(monkeypatch):
    fake = install(monkeypatch, FakeCupti())
    prepared = SimulatedPrepared(fake, kernel_ns=100_000, gap_ns=400_000)
    detached = []

    def detach():
        detached.append(fake.launches_while_enabled)
        return ""

    check = clock_check.run_check(prepared.step("forward"), prepared.sync, blocks=2, rounds=3,
                                  cupti_clock=lambda: (CuptiClock(fake), ""), event_clock=None,
                                  clock=fake.host_clock, detach=detach)
    assert len(detached) == 3 and detached == sorted(detached)
    assert "CUPTI detached (cuptiFinalize) after each traced round" in check.notes
    # The traced rounds after a detach still time the device: CUPTI attaches again.
    assert check.cupti_busy_ms == pytest.approx((0.1, 0.1, 0.1))
    refused = clock_check.run_check(prepared.step("forward"), prepared.sync, blocks=2,
                                    rounds=1, cupti_clock=lambda: (CuptiClock(fake), ""),
                                    event_clock=None, clock=fake.host_clock,
                                    detach=lambda: "this cupti-python has no finalize()")
    assert any("no finalize()" in note for note in refused.notes)


def test_detach_calls_cupti_finalize_or_says_why_not():
    from suites.instruments.cupti_window import detach

    class WithFinalize:
        finalized = 0

        def finalize(self):
            self.finalized += 1

    class Broken:
        def finalize(self):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    cupti = WithFinalize()
    assert detach(cupti) == "" and cupti.finalized == 1
    assert detach(object()) == "this cupti-python has no finalize()"
    assert "CUPTI_ERROR_NOT_INITIALIZED" in detach(Broken())


def test_processes_check_rotates_roles_and_compares_the_cycles_after_a_device_block():
    from suites.instruments import clock_processes
    assert clock_processes.order(2) == ["plain", "traced", "detached",
                                        "traced", "detached", "plain"]
    results = [{"role": "plain", "wall_ms": [9.0, 1.0, 1.0]},
               {"role": "plain", "wall_ms": [9.0, 1.2, 1.2]},
               {"role": "traced", "wall_ms": [1.0, 1.6, 1.6]},
               {"role": "traced", "wall_ms": [1.0, 1.7, 1.7], "problem": ""},
               {"role": "detached", "wall_ms": [1.0, 1.1], "problem": "no finalize()"}]
    lines = clock_processes.summarise(results)
    # The first cycle (before any device block) is left out of every role.
    assert lines[0].startswith("plain     wall median 1.1000 ms")
    assert "1.500 x plain" in lines[1]
    assert "1.000 x plain" in lines[2]
    assert lines[-1] == "detached: no finalize()"
