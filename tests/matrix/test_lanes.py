"""A matrix on several GPUs (``--gpus``, suites/matrix/lane_plan.py and suites/matrix/lanes.py): which
CPUs each lane gets, which tasks wait for which, the order lanes take them in, and a run
over two stand-in GPUs (tests/fake_framework.py: each CUDA_VISIBLE_DEVICES entry a GPU of
its own that admits one process at a time) that ends with the rows of a one-GPU run.
Nothing here asserts a duration."""

from __future__ import annotations

import collections
import json
import os
import subprocess
from pathlib import Path

import pytest

from suites.harness.spec import SuiteError
from suites.matrix.lane_plan import (
    Task,
    choose_gpus,
    cpu_list_text,
    gpu_cpu_affinity,
    make_lanes,
    parse_cpu_list,
    priorities,
    sibling_groups,
    simulate,
)
from tests.harness.test_gpu_passes import (
    ROOT,
    all_rows,
    kill_at_the_hang,
    matrix,
    matrix_command,
    write_suites,
)

# nvidia-smi topo -m of a 4-GPU host with a NIC: two GPUs per NUMA node, hyperthreads
# n and n + 32.
TOPOLOGY = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tPXB\t0-15,32-47\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-15,32-47\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\tSYS\t16-31,48-63\t1\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \tSYS\t16-31,48-63\t1\t\tN/A
NIC0\tPXB\tSYS\tSYS\tSYS\t X \t\t\t\t

Legend:
  X    = Self
"""


def smt_cores(cpus: int) -> list[tuple[int, ...]]:
    """Cores of two hyperthreads, n and n + cpus/2."""
    half = cpus // 2
    return [(n, n + half) for n in range(half)]


def test_cpu_lists_read_and_write_as_the_kernel_prints_them():
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert cpu_list_text((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    assert cpu_list_text(parse_cpu_list("5")) == "5"
    for bad in ("", "0-", "a", "3-1", "0,,1"):
        with pytest.raises(SuiteError, match="CPU list"):
            parse_cpu_list(bad)


def test_the_gpus_cpu_affinity_comes_from_the_topology_matrix_past_the_nic_columns():
    assert gpu_cpu_affinity(TOPOLOGY) == {
        "0": parse_cpu_list("0-15,32-47"), "1": parse_cpu_list("0-15,32-47"),
        "2": parse_cpu_list("16-31,48-63"), "3": parse_cpu_list("16-31,48-63")}
    assert gpu_cpu_affinity("no GPUs here") == {}
    # As a 4-GPU host printed it (h200x4-2026-11c (at 2efa0ce)), header underlined.
    underlined = ("\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
                  "GPU0\t X \tNV18\t0-63\t0\t\tN/A\nGPU1\tNV18\t X \t0-63\t0\t\tN/A\n")
    assert gpu_cpu_affinity(underlined) == {"0": tuple(range(64)), "1": tuple(range(64))}


def test_siblings_group_by_the_kernels_thread_siblings_list(tmp_path):
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(siblings + "\n")
    assert sibling_groups((0, 1, 2, 3), tmp_path) == [(0, 2), (1, 3)]
    # CPUs outside the allowed set are not grouped in; unknown CPUs are cores of their own.
    assert sibling_groups((0, 1, 7), tmp_path) == [(0,), (1,), (7,)]


def test_each_lane_gets_whole_cores_of_its_gpus_node_and_as_many_as_every_other_lane():
    allowed = tuple(range(64))
    lanes = make_lanes(["0", "1", "2", "3"], allowed, gpu_cpu_affinity(TOPOLOGY),
                       smt_cores(64))
    assert [cpu_list_text(lane.cpus) for lane in lanes] == [
        "0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"]
    # No two lanes share a CPU, nor a core's two hyperthreads.
    cpus = [set(lane.cpus) for lane in lanes]
    assert all(not (a & b) for i, a in enumerate(cpus) for b in cpus[i + 1:])
    for lane in lanes:
        assert all(((cpu + 32) % 64) in lane.cpus for cpu in lane.cpus)
    # Three lanes on one node of 16 cores: five cores each (splitting the sixteenth would
    # split a core or give lanes different thread counts); the last core is left over.
    node = parse_cpu_list("0-15,32-47")
    three = make_lanes(["0", "1", "2"], allowed, {"0": node, "1": node, "2": node},
                       smt_cores(64))
    assert [cpu_list_text(lane.cpus) for lane in three] == [
        "0-4,32-36", "5-9,37-41", "10-14,42-46"]


def test_without_a_known_affinity_the_lanes_share_out_every_allowed_core():
    lanes = make_lanes(["0", "1"], (0, 1, 2, 3, 4), {}, [(c,) for c in range(5)])
    assert [lane.cpus for lane in lanes] == [(0, 1), (2, 3)]
    # More lanes than cores: hyperthreads one by one; more lanes than CPUs: an error.
    assert [lane.cpus for lane in make_lanes(["0", "1"], (0, 1), {}, [(0, 1)])] == [(0,), (1,)]
    with pytest.raises(SuiteError, match="too few CPUs"):
        make_lanes(["0", "1", "2"], (0, 1), {}, [(0,), (1,)])


def test_gpus_is_a_count_or_a_list_of_visible_gpus():
    assert choose_gpus("2", ["0", "1", "2"]) == ["0", "1"]
    assert choose_gpus("2,0", ["0", "1", "2"]) == ["2", "0"]
    with pytest.raises(SuiteError, match="this host shows 1 GPU"):
        choose_gpus("4", ["0"])
    with pytest.raises(SuiteError, match="no visible GPU 5"):
        choose_gpus("0,5", ["0", "1"])
    with pytest.raises(SuiteError, match="twice"):
        choose_gpus("1,1", ["0", "1"])
    with pytest.raises(SuiteError, match="at least 1"):
        choose_gpus("0", ["0"])


def task(name: str, seconds: float, needs: tuple[int, ...] = ()) -> Task:
    return Task("fw", name, (name,), needs, seconds, 1, 0)


def test_the_longest_chain_starts_first_and_a_task_waits_for_the_suites_it_copies_from():
    # default (5) → li2016 (10), then two short free tasks: on two lanes the chain starts
    # first and ends at 15; the short ones fit beside it.
    tasks = [task("short1", 3), task("default", 5), task("short2", 3),
             task("li2016", 10, needs=(1,))]
    assert priorities(tasks) == [3, 15, 3, 10]
    schedule = simulate(tasks, 2)
    assert schedule.lanes == ((1, 3), (0, 2)) and schedule.seconds == 15
    # Plan order would start the short ones first and end later (a lane waits for the chain).
    assert simulate([task("a", 3), task("b", 3), task("c", 5), task("d", 10, needs=(2,))],
                    1).seconds == 21
    # One lane runs everything in chain order.
    one = simulate(tasks, 1)
    assert one.seconds == 21 and one.lanes[0].index(1) < one.lanes[0].index(3)


def test_a_lane_that_finds_nothing_ready_waits_for_the_chain_it_depends_on():
    tasks = [task("root", 4), task("child", 2, needs=(0,)), task("grandchild", 2, needs=(1,))]
    schedule = simulate(tasks, 3)
    assert schedule.seconds == 8
    assert sorted(n for lane in schedule.lanes for n in lane) == [0, 1, 2]


# --- on stand-in GPUs --------------------------------------------------------------------------

def lane_env(gpus: str = "0,1") -> dict[str, str]:
    """Two stand-in GPUs (tests/fake_framework.py: a lock file per entry)."""
    return {"CUDA_VISIBLE_DEVICES": gpus}


def test_two_lanes_end_with_the_rows_of_a_one_gpu_run_each_gpu_held_by_one_process_at_a_time(
        tmp_path, stand_in_gpu):
    suites = write_suites(tmp_path)
    out = tmp_path / "out"
    done = matrix(suites, out, "--gpus", "2", env=lane_env())
    # The one-GPU run on as many CPUs as a lane has: the same cases (a GPU job's thread
    # count is its CPUs).
    single = tmp_path / "single"
    lane_cpus = {len(json.loads(line)["env"]["cpu_affinity"])
                 for path in out.glob("gpu-a/*/fake_gpu.jsonl")
                 for line in path.read_text().splitlines()}
    assert len(lane_cpus) == 1
    one_lane = cpu_list_text(tuple(sorted(os.sched_getaffinity(0)))[:lane_cpus.pop()])
    assert matrix(suites, single, "--cpus", one_lane,
                  env={"CUDA_VISIBLE_DEVICES": "0"}).returncode == 0
    # A second process on a stand-in GPU is fatal, so 0 says each lane kept to its GPU.
    assert done.returncode == 0, done.stderr
    assert "2 lanes, one per GPU" in done.stderr and "estimated with 2 lanes" in done.stderr
    assert all_rows(out) == all_rows(single)
    rows = [json.loads(line) for path in out.glob("gpu-*/*/*_gpu.jsonl")
            for line in path.read_text().splitlines()]
    assert {row["env"]["cuda_visible_devices"] for row in rows} == {"0", "1"}
    assert {row["env"]["matrix_lanes"] for row in rows} == {2}
    lanes = {tuple(row["env"]["cpu_affinity"]) for row in rows}
    assert len(lanes) == 2 and not set(lanes.pop()) & set(lanes.pop())
    # gpu-b copies lenet_tiny b2 from gpu-a: its task waited for gpu-a's, so the rows
    # were copied, as in the one-GPU run, not measured again.
    def copied(folder: Path) -> collections.Counter:
        return collections.Counter(row["case_id"] for path in folder.glob("gpu-b/*/*_gpu.jsonl")
                                   for row in map(json.loads, path.read_text().splitlines())
                                   if "reused_from" in row)
    assert copied(out) == copied(single) and copied(out)
    # Each task's matrix ran confined to its lane and logged there.
    logs = sorted(p.name for p in out.glob("matrix/*/lane-*.log"))
    assert logs == ["lane-gpu0.log", "lane-gpu1.log"]
    lane_runs = [json.loads(line) for line in next(out.glob("matrix/*/costs-gpu.ndjson"))
                 .read_text().splitlines()]
    runs = [r for r in lane_runs if r["kind"] == "run"]
    assert sum("lanes" in r for r in runs) == 1 and sum("lane" in r for r in runs) == 4


def test_a_kill_of_the_lanes_matrix_takes_its_lanes_down_and_the_same_command_completes_it(
        tmp_path, stand_in_gpu):
    suites = write_suites(tmp_path)
    clean = tmp_path / "clean"
    assert matrix(suites, clean, "--gpus", "2", env=lane_env()).returncode == 0
    out = tmp_path / "out"
    marker = "gpu-a/fake/gpu/lenet_tiny/b3/device_time"
    proc = subprocess.Popen(matrix_command(suites, out, "--gpus", "2"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**os.environ, **lane_env(),
                                 "DLBENCH_INJECT_HANG": marker})
    kill_at_the_hang(proc, marker)
    resumed = matrix(suites, out, "--gpus", "2", env=lane_env())
    assert resumed.returncode == 0, resumed.stderr
    assert all_rows(out) == all_rows(clean)
    # The killed lanes' rows that their matrices could not log are in the cost log now.
    assert "did not log (it was killed)" in resumed.stderr
    measured = sum("reused_from" not in row for path in out.glob("gpu-*/*/*_gpu.jsonl")
                   for row in map(json.loads, path.read_text().splitlines()))
    records = [json.loads(line) for line in next(out.glob("matrix/*/costs-gpu.ndjson"))
               .read_text().splitlines()]
    assert sum(r["measured"] for r in records if r["kind"] == "item") == measured


def test_bad_gpu_requests_get_one_line_and_exit_2(tmp_path, stand_in_gpu):
    suites = write_suites(tmp_path)
    for extra, env, message in (
            (("--gpus", "3"), {"CUDA_VISIBLE_DEVICES": "0,1"}, "--gpus 3: this host shows 2 GPUs"),
            (("--gpus", "0,7"), {"CUDA_VISIBLE_DEVICES": "0,1"}, "no visible GPU 7"),
            (("--cpus", "0-999"), {}, "--cpus 0-999: CPU")):
        failed = matrix(suites, tmp_path / "out", *extra, env=env)
        assert failed.returncode == 2, failed.stderr
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], failed.stderr


def test_a_lane_with_nothing_ready_waits_for_the_task_another_lane_just_took():
    """Lane A takes the root; lane B, asking before A has started it, must wait for it
    and then take a task that needed it, not leave with work still to come."""
    import threading

    from rich.console import Console

    from suites.matrix.lanes import LaneRun
    tasks = [task("root", 4), task("child1", 2, needs=(0,)), task("child2", 2, needs=(0,))]
    run = LaneRun([], tasks, priorities(tasks), lambda *_: [], Path("."), None,
                  lambda text: None, Console(quiet=True))
    assert run.take() == 0
    taken: list[int | None] = []
    second = threading.Thread(target=lambda: taken.append(run.take()))
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive() and not taken      # waiting, not gone
    run.finish(0, 0)
    second.join(timeout=10)
    assert taken == [1]
    assert run.take() == 2
    run.finish(1, 0)
    run.finish(2, 0)
    assert run.take() is None


def test_once_a_task_is_stopped_by_the_budget_no_lane_starts_another():
    """A task stopped by the budget found its next job longer than the time left; the
    tasks still pending wait for the next run, as the one-GPU matrix stops at its first
    such job, and the tasks running go on to their own end."""
    import time

    from rich.console import Console

    from suites.harness.runner import BUDGET_EXIT
    from suites.matrix.lanes import LaneRun
    tasks = [task("a", 4), task("b", 3), task("c", 2), task("d", 1)]
    run = LaneRun([], tasks, priorities(tasks), lambda *_: [], Path("."),
                  time.monotonic() + 3600, lambda text: None, Console(quiet=True))
    assert (run.take(), run.take()) == (0, 1)
    run.finish(0, BUDGET_EXIT)
    assert run.take() is None           # an hour left by the clock, but the budget spoke
    run.finish(1, 0)
    assert run.take() is None
    assert run.pending == {2, 3}
