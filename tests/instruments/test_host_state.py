"""The host CPU's state while sampling (steal, load, clock) and the host's identity from
its GPUs, with stand-ins for psutil, NVML and nvidia-smi."""

from __future__ import annotations

import hashlib
import sys
import types
from collections import namedtuple

import pytest

from suites.instruments import environment
from suites.instruments.host_probe import ProbeReading
from suites.instruments.host_state import (
    HostMonitor,
    HostReading,
    merge_host_fields,
    read_host,
    steal_shares,
    summarise_host,
)

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
Freq = namedtuple("Freq", "current min max")
CPU_CLOCK = Freq(2450.0, 0, 0)


class FakePsutil:
    def __init__(self, steal_per_reading=2.0, freq=CPU_CLOCK):
        self.count = 0
        self.steal_per_reading = steal_per_reading
        self.freq = freq

    def cpu_times(self):
        self.count += 1
        # 100 s of CPU time per reading, of which steal_per_reading stolen; guest time is
        # already inside user time and must not count twice.
        n = self.count
        return Times(50.0 * n, 0, 20.0 * n, 30.0 * n - self.steal_per_reading * n, 0, 0, 0,
                     self.steal_per_reading * n, 40.0 * n, 0)

    def cpu_freq(self):
        return self.freq


def test_steal_is_the_share_of_all_cpu_time_between_readings():
    source = FakePsutil(steal_per_reading=2.0)
    readings = [read_host(lambda: 0.0, source) for _ in range(3)]
    assert steal_shares(readings) == pytest.approx([2.0, 2.0])
    summary = summarise_host([readings])
    assert summary["host_steal_pct_median"] == pytest.approx(2.0)
    assert summary["host_cpu_mhz_median"] == 2450.0 and summary["host_readings"] == 3
    assert summary["host_load_1m"] is not None and summary["host_state_reason"] == ""


def test_unreadable_figures_are_none_with_the_reason():
    class NoSteal(FakePsutil):
        def cpu_times(self):
            return namedtuple("T", "user system idle")(1.0, 1.0, 1.0)

        def cpu_freq(self):
            return None
    readings = [read_host(lambda: 0.0, NoSteal()) for _ in range(2)]
    summary = summarise_host([readings])
    assert summary["host_steal_pct_median"] is None and summary["host_cpu_mhz_median"] is None
    assert "steal time" in summary["host_state_reason"]
    assert "CPU frequency" in summary["host_state_reason"]
    assert summarise_host([])["host_state_reason"].startswith("no host reading")


def test_readings_too_close_for_the_kernels_ticks_say_so():
    same = [HostReading(0.0, 100.0, 1.0, 1.0, 2000.0)] * 2
    assert "too close" in summarise_host([same])["host_state_reason"]


def test_steal_is_not_taken_across_the_gap_between_repetitions():
    def reading(total, steal):
        return HostReading(0.0, total, steal, 1.0, 2000.0)
    first = [reading(100, 0), reading(200, 1)]
    second = [reading(1000, 500), reading(1100, 503)]      # a busy gap in between
    assert summarise_host([first, second])["host_steal_pct_max"] == pytest.approx(3.0)


def test_a_cpu_run_reads_before_and_after_sampling_only():
    monitor = HostMonitor(periodic=False, read=lambda: HostReading(0.0, 1.0, 0.0, 0.1, 1.0))
    monitor.start_sampling()
    assert monitor._thread is None
    assert len(monitor.stop_sampling()) == 2


def test_a_gpu_run_samples_in_the_background():
    import threading
    read = threading.Semaphore(0)

    def reading():
        read.release()
        return HostReading(0.0, 1.0, 0.0, 0.1, 1.0)
    monitor = HostMonitor(periodic=True, read=reading, period_s=0.001)
    monitor.start_sampling()
    for _ in range(3):          # the start reading and two from the thread
        assert read.acquire(timeout=30)
    readings = monitor.stop_sampling()
    assert len(readings) >= 4 and monitor._thread is None


def test_the_probes_run_once_per_repetition_and_the_row_keeps_their_medians():
    probes = iter([ProbeReading(5.0, 50.0), ProbeReading(7.0, None), ProbeReading(6.0, 70.0)])
    monitor = HostMonitor(periodic=False, read=lambda: HostReading(0.0, 1.0, 0.0, 0.1, 1.0),
                          probe=lambda: next(probes))
    runs = []
    for _ in range(3):
        monitor.start_sampling()
        runs.append(monitor.stop_sampling())
    # The reading that starts sampling carries the probes; the one that ends it does not.
    assert [run[1].probe for run in runs] == [None] * 3
    summary = summarise_host(runs)
    assert summary["host_core_probe_ms"] == pytest.approx(6.0)
    assert summary["host_wakeup_us"] == pytest.approx(60.0)     # the repetitions that had it


def test_rounds_keep_the_median_of_their_probes():
    timings = [{"host_core_probe_ms": v, "host_wakeup_us": 10 * v} for v in (3, 5, 4)] + [{}]
    merged = merge_host_fields(timings)
    assert merged["host_core_probe_ms"] == 4 and merged["host_wakeup_us"] == 40


# --- the host's identity -------------------------------------------------------------------

@pytest.fixture
def no_machine_id(monkeypatch, tmp_path):
    """A GPU host as the H100 hosts were: empty /etc/machine-id, no firmware UUID."""
    empty = tmp_path / "machine-id"
    empty.write_text("\n")
    monkeypatch.setattr(environment, "MACHINE_ID_FILES", (empty, tmp_path / "missing"))
    monkeypatch.delenv("DLBENCH_HOST_ID", raising=False)
    monkeypatch.setattr(environment.platform, "node", lambda: "vm")
    environment.host_id.cache_clear()
    yield
    environment.host_id.cache_clear()


def fake_pynvml(uuids):
    module = types.ModuleType("pynvml")
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetCount = lambda: len(uuids)
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetUUID = lambda handle: uuids[handle]
    return module


def test_two_gpu_hosts_with_empty_machine_ids_are_told_apart(monkeypatch, no_machine_id):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["GPU-bbbb", "GPU-aaaa"]))
    first = environment.host_id()
    expected = hashlib.sha256(b"GPU-aaaa,GPU-bbbb").hexdigest()[:8]
    assert first == f"vm-{expected}"                      # sorted: order-independent
    environment.host_id.cache_clear()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["GPU-cccc"]))
    assert environment.host_id() not in (first, "vm")
    environment.host_id.cache_clear()
    monkeypatch.setenv("DLBENCH_HOST_ID", "h100 #1")
    assert environment.host_id() == "h100__1"             # the override still wins


def test_nvidia_smi_gives_the_uuids_without_pynvml(monkeypatch, no_machine_id, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)       # import fails
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho GPU-2222\necho GPU-1111\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert environment.gpu_uuids() == ("GPU-1111", "GPU-2222")
    expected = hashlib.sha256(b"GPU-1111,GPU-2222").hexdigest()[:8]
    assert environment.host_id() == f"vm-{expected}"


def test_without_gpus_the_mac_address_is_next(monkeypatch, no_machine_id, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))              # no nvidia-smi
    assert environment.gpu_uuids() == ()
    import uuid
    monkeypatch.setattr(uuid, "getnode", lambda: 0x0242AC110002)
    expected = hashlib.sha256(str(0x0242AC110002).encode()).hexdigest()[:8]
    assert environment.host_id() == f"vm-{expected}"


def test_the_cpu_isa_is_the_widest_vector_extension_its_flags_name():
    """One model name ("AMD EPYC") has come with and without AVX-512: the row records which."""
    def info(flags: str) -> str:
        return f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 {flags}\n\n"
    assert environment.cpu_isa(info("avx avx2 fma avx512f avx512dq")) == "AVX-512"
    assert environment.cpu_isa(info("avx avx2 fma f16c")) == "AVX2"
    assert environment.cpu_isa(info("avx")) == "AVX"
    assert environment.cpu_isa(info("neon")) == ""
    assert environment.cpu_isa("processor\t: 0\n") == ""          # no flags line at all
    assert environment.cpu_isa() in ("AVX-512", "AVX2", "AVX", "")
