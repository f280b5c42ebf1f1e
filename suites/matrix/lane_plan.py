"""Several GPUs of one host for one matrix (``python -m suites matrix --gpus N``): which
GPUs and CPUs each lane gets, the plan's work cut into tasks that may run side by side,
and the order a lane takes them in. Pure planning; ``suites/matrix/lanes.py`` runs it.

* **Lanes**: one per GPU. Each lane's processes see only its GPU (``CUDA_VISIBLE_DEVICES``)
  and run on CPUs of their own: the GPU's NUMA node's cores (``nvidia-smi topo -m``'s CPU
  affinity), shared out among the lanes on that node, whole cores at a time so that no two
  lanes share a core's hyperthreads, and as many to each lane, so that every lane's jobs
  are the same cases (a GPU job's thread count is its process's CPUs). A lane is thus
  one GPU with its own host cores, as a one-GPU host is; on a 4-GPU, 64-core host each
  lane has 16 CPUs, as the 16-core one-GPU hosts of the published runs have.
* **Tasks**: one framework on one suite, both passes (the wall pass, then the device pass
  in the same worker, as the one-GPU matrix runs them). A suite whose cases a later suite
  copies (``suites/harness/reuse.py``) must finish first, so a task waits for the tasks of the
  suites it copies from; it is handed those suites too, already done, so that its plan
  sees the rows to copy. Without reuse, every task is free.
* **Order**: when a lane is free it takes, among the tasks whose suites to copy from are
  done, the one with the longest estimated path to the end (the task and the tasks that
  wait on it, longest chain), so that the long chains (JAX's ``li2016`` after its
  ``default-gpu``) start first (Graham's list scheduling with critical-path priority). The
  plan simulates the same rule on the estimates to state how long the lanes should take.
"""

from __future__ import annotations

import heapq
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from parallel.topology import gpu_count
from suites.harness.spec import SuiteError
from suites.matrix.plan import Item, Plan

CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


@dataclass(frozen=True)
class Lane:
    gpu: str                  # this lane's CUDA_VISIBLE_DEVICES: an index or a GPU UUID
    cpus: tuple[int, ...]     # the CPUs its processes run on

    @property
    def name(self) -> str:
        return f"gpu{self.gpu}" if self.gpu.isdigit() else self.gpu[:12]


@dataclass(frozen=True)
class Task:
    framework: str
    suite: str                        # the suite's name
    sources: tuple[str, ...]          # the suites to hand the lane's matrix: those it copies
                                      # from (transitively), then its own, in matrix order
    needs: tuple[int, ...]            # the tasks that must be done first (their indices)
    seconds: float                    # estimated: cases and worker starts
    cases: int                        # cases to run or copy
    unknown: int                      # cases to run without an estimate

    @property
    def label(self) -> str:
        return f"{self.suite} {self.framework}"


@dataclass(frozen=True)
class Schedule:
    """The simulated run: each lane's tasks in order, and when the last one ends."""

    lanes: tuple[tuple[int, ...], ...]
    seconds: float


# --- which GPUs ------------------------------------------------------------------------------

def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries where it is set, else
    every GPU nvidia-smi lists (as indices)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip()]
    return [str(index) for index in range(gpu_count())]


def choose_gpus(spec: str, visible: list[str]) -> list[str]:
    """``--gpus``: a count (the first N visible GPUs) or a comma-separated list of visible
    GPUs (indices or UUIDs)."""
    spec = spec.strip()
    if spec.isdigit():
        count = int(spec)
        if count < 1:
            raise SuiteError(f"--gpus must be at least 1, got {spec}")
        if count > len(visible):
            raise SuiteError(f"--gpus {count}: this host shows {len(visible)} GPU"
                             f"{'' if len(visible) == 1 else 's'}"
                             + (f" ({', '.join(visible)})" if visible else ""))
        return visible[:count]
    chosen = [entry.strip() for entry in spec.split(",") if entry.strip()]
    unknown = [entry for entry in chosen if entry not in visible]
    if not chosen or unknown:
        raise SuiteError(f"--gpus {spec}: no visible GPU "
                         f"{', '.join(unknown) or repr(spec)} (visible: {', '.join(visible) or 'none'})")
    if len(set(chosen)) != len(chosen):
        raise SuiteError(f"--gpus {spec} names a GPU twice")
    return chosen


# --- which CPUs ------------------------------------------------------------------------------

def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' → (0, 1, 2, 3, 8, 10, 11)."""
    text = text.strip()
    if not CPU_LIST.match(text):
        raise SuiteError(f"not a CPU list: {text!r} (expected e.g. 0-15,32-47)")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            raise SuiteError(f"not a CPU list: {text!r} ({part} runs backwards)")
        cpus.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cpus))


def cpu_list_text(cpus: tuple[int, ...]) -> str:
    """(0, 1, 2, 3, 8) → '0-3,8'."""
    parts, start = [], None
    for index, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if index + 1 == len(cpus) or cpus[index + 1] != cpu + 1:
            parts.append(f"{start}-{cpu}" if cpu != start else str(cpu))
            start = None
    return ",".join(parts)


def sibling_groups(cpus: tuple[int, ...], root: Path = Path("/sys/devices/system/cpu")
                   ) -> list[tuple[int, ...]]:
    """The CPUs grouped by physical core (hyperthreads together), in order of their first
    CPU; each CPU its own core where sysfs does not say."""
    groups: dict[tuple[int, ...], None] = {}
    for cpu in cpus:
        try:
            text = (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()
            siblings = tuple(c for c in parse_cpu_list(text) if c in cpus) or (cpu,)
        except (OSError, SuiteError):
            siblings = (cpu,)
        groups.setdefault(siblings)
    return sorted(groups, key=min)


def gpu_cpu_affinity(topology: str) -> dict[str, tuple[int, ...]]:
    """GPU index → its CPU affinity, from ``nvidia-smi topo -m``'s matrix (the column
    after the GPU and NIC columns)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", topology)      # it underlines its header
    rows = [line.split() for line in plain.splitlines() if line.strip()]
    header = next((row for row in rows if "CPU" in row and "Affinity" in row), None)
    if header is None:
        return {}
    devices = header.index("CPU")          # the GPU and NIC columns before "CPU Affinity"
    found = {}
    for row in rows:
        if row and re.fullmatch(r"GPU\d+", row[0]) and len(row) > devices + 1:
            text = row[devices + 1]
            if CPU_LIST.match(text):
                found[row[0][3:]] = parse_cpu_list(text)
    return found


def make_lanes(gpus: list[str], allowed: tuple[int, ...], affinity: dict[str, tuple[int, ...]],
               cores: list[tuple[int, ...]]) -> list[Lane]:
    """One lane per GPU, each with whole cores of its own: the cores of the GPU's NUMA
    node (its CPU affinity, where known and within ``allowed``) shared out evenly among
    the lanes on that node, in order; all of ``allowed`` shared out where a GPU's affinity
    is unknown or the nodes' sets overlap."""
    pools: dict[tuple[int, ...], list[int]] = {}
    for index, gpu in enumerate(gpus):
        pool = tuple(c for c in affinity.get(gpu, ()) if c in allowed) or allowed
        pools.setdefault(pool, []).append(index)
    seen: set[int] = set()
    overlapping = False
    for pool in pools:
        overlapping |= bool(seen & set(pool))
        seen |= set(pool)
    if overlapping:
        pools = {allowed: list(range(len(gpus)))}
    shared = {pool: [core for core in cores if set(core) <= set(pool)] for pool in pools}
    # Every lane the same number of cores, so that every lane's jobs run with the same
    # thread count and their rows are the same cases (a GPU job's threads are its
    # process's CPUs: suites/harness/spec.py expand); cores left over stay with the matrix itself.
    each = min(len(shared[pool]) // len(members) for pool, members in pools.items())
    if each < 1:
        # Fewer cores than lanes (a small host): hyperthreads shared out one by one.
        shared = {pool: [(cpu,) for cpu in pool] for pool in pools}
        each = min(len(shared[pool]) // len(members) for pool, members in pools.items())
    if each < 1:
        raise SuiteError(f"--gpus {len(gpus)}: too few CPUs ({cpu_list_text(allowed)}) for "
                         f"{len(gpus)} GPUs; each GPU's lane needs a CPU of its own")
    lanes: list[Lane | None] = [None] * len(gpus)
    for pool, members in pools.items():
        for rank, index in enumerate(members):
            share = shared[pool][rank * each:(rank + 1) * each]
            lanes[index] = Lane(gpus[index], tuple(sorted(c for core in share for c in core)))
    return [lane for lane in lanes if lane is not None]


# --- which work --------------------------------------------------------------------------------

def make_tasks(plan: Plan) -> list[Task]:
    """The plan's items as tasks (one framework on one suite, both passes), with what each
    waits for and its estimate; tasks with nothing to run or copy are left out."""
    order: dict[tuple[str, str], list[Item]] = {}
    for item in plan.items:
        if not item.unavailable:
            order.setdefault((item.framework, item.suite), []).append(item)
    keys = list(order)
    sources = {(item.framework, item.suite): item.source for item in plan.items}
    copies_from: dict[tuple[str, str], set[tuple[str, str]]] = {key: set() for key in keys}
    for key, items in order.items():
        for item in items:
            # The first candidate is the earliest suite that measures the case, and the
            # row the copy takes once it is there (suites/matrix/run.py copy_reused).
            for _, candidates in item.reusable:
                source = (key[0], candidates[0].suite)
                if source in order:
                    copies_from[key].add(source)

    def ancestors(key: tuple[str, str]) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        stack = list(copies_from[key])
        while stack:
            parent = stack.pop()
            if parent not in found:
                found.add(parent)
                stack.extend(copies_from[parent])
        return found

    def work(key: tuple[str, str]) -> int:
        return sum(len(i.to_run) + len(i.reusable) for i in order[key])

    kept = [key for key in keys if work(key)]
    index = {key: n for n, key in enumerate(kept)}
    tasks = []
    for key in kept:
        items = order[key]
        sub = replace(plan, items=tuple(items), truth_pairs=(), truth_seconds=0.0)
        lineage = ancestors(key)
        tasks.append(Task(
            key[0], key[1],
            tuple(sources[k] for k in keys if k in lineage or k == key),
            tuple(sorted(index[k] for k in copies_from[key] if k in index)),
            sub.seconds(), work(key), sum(i.estimate.unknown for i in items)))
    return tasks


def priorities(tasks: list[Task]) -> list[float]:
    """Each task's estimated seconds plus the longest chain of tasks waiting on it."""
    waiting: dict[int, list[int]] = {n: [] for n in range(len(tasks))}
    for n, task in enumerate(tasks):
        for need in task.needs:
            waiting[need].append(n)
    found: dict[int, float] = {}

    def chain(n: int) -> float:
        if n not in found:
            found[n] = tasks[n].seconds + max((chain(m) for m in waiting[n]), default=0.0)
        return found[n]
    return [chain(n) for n in range(len(tasks))]


def next_task(ready: list[int], rank: list[float]) -> int:
    """Which ready task a free lane takes: the longest chain first, then plan order."""
    return min(ready, key=lambda n: (-rank[n], n))


def simulate(tasks: list[Task], lanes: int) -> Schedule:
    """The lanes' run on the estimates, by the rule the run itself follows."""
    rank = priorities(tasks)
    finish: dict[int, float] = {}
    pending = set(range(len(tasks)))
    free = [(0.0, lane) for lane in range(lanes)]
    heapq.heapify(free)
    taken: list[list[int]] = [[] for _ in range(lanes)]
    while pending:
        now, lane = heapq.heappop(free)
        ready = [n for n in pending if all(finish.get(m, float("inf")) <= now
                                           for m in tasks[n].needs)]
        if not ready:
            later = [finish[m] for n in pending for m in tasks[n].needs
                     if m in finish and finish[m] > now]
            heapq.heappush(free, (min(later), lane))
            continue
        chosen = next_task(ready, rank)
        pending.discard(chosen)
        # A task without an estimate still takes a lane for a while.
        finish[chosen] = now + max(tasks[chosen].seconds, 1.0)
        taken[lane].append(chosen)
        heapq.heappush(free, (finish[chosen], lane))
    return Schedule(tuple(map(tuple, taken)), max(finish.values(), default=0.0))
