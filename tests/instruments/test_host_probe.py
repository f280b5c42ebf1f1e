"""The host probes (suites/instruments/host_probe.py): what they return and what they leave behind."""

from __future__ import annotations

import os
import threading

import pytest

from suites.instruments.host_probe import (
    ProbeReading,
    core_ms,
    core_workload,
    probe_summary,
    run_probes,
    wakeup_us,
)


def test_the_core_probe_times_one_window_of_a_fixed_workload():
    ticks = iter([1.0, 1.005])
    assert core_ms(clock=lambda: next(ticks), workload=lambda: None) == pytest.approx(5.0)
    assert core_workload(steps=20) == core_workload(steps=20)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_the_wake_up_probe_restores_the_callers_cpus_and_leaves_no_thread():
    mask = os.sched_getaffinity(0)
    threads = threading.active_count()
    cpus = sorted(mask)[:2]
    assert wakeup_us(cpus, round_trips=20) > 0
    assert os.sched_getaffinity(0) == mask and threading.active_count() == threads


def test_one_cpu_gives_no_wake_up_figure():
    assert wakeup_us([0]) is None and wakeup_us([]) is None


def test_run_probes_gives_both_figures_within_the_workers_cpus():
    reading = run_probes()
    assert reading.core_ms > 0
    assert (reading.wakeup_us is None) == (len(os.sched_getaffinity(0)) < 2)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_a_thread_that_cannot_be_pinned_gives_no_figure_and_no_hang(monkeypatch):
    mask = os.sched_getaffinity(0)
    real = os.sched_setaffinity
    caller = threading.get_ident()

    def refuse_for_other_threads(pid, cpus):
        if threading.get_ident() != caller:
            raise OSError("not allowed here")
        real(pid, cpus)
    monkeypatch.setattr(os, "sched_setaffinity", refuse_for_other_threads)
    assert wakeup_us(sorted(mask)[:2], round_trips=5) is None
    assert os.sched_getaffinity(0) == mask


def test_a_serving_rows_probe_is_the_median_of_its_readings():
    readings = iter([ProbeReading(3.0, 40.0), ProbeReading(1.0, None), ProbeReading(2.0, 20.0)])
    assert probe_summary(3, lambda: next(readings)) == {"core_ms": 2.0, "wakeup_us": 30.0,
                                                         "readings": 3}
    alone = iter([ProbeReading(1.5, None)] * 2)
    assert probe_summary(2, lambda: next(alone))["wakeup_us"] is None
