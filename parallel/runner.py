"""Runs a scaling suite with one framework: one launch per device count N on one host (the
cases of that N in turn in the same processes), one row per case.

Cases run in order of N, so each N = 1 case (the framework's one-device step, on the same
engine) is recorded before the cases compared with it. Efficiency:
weak (fixed per-device batch b)  = t₁(b) / t_N(b);
strong (fixed global batch B)    = t₁(B) / (N · t_N(B/N)).
A case whose processes crash, hang or exceed the deadline becomes a ``failed`` or
``timeout`` row and the suite goes on.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from parallel.engines import collective_settings, engine_launch, plan, processes
from parallel.launch import launch
from parallel.plan import MEASURE, PUBLISHED, plan_line
from parallel.rank import done_marker
from parallel.spec import RankSpec, ScalingCase, ScalingSuite
from parallel.topology import gpu_count, interconnect
from suites.instruments.environment import cpu_model, host_environment, host_id, nvidia_smi
from suites.matrix.compile_cache import cache_env, cache_root, cache_view, record_host
from suites.matrix.estimate import minutes
from suites.rows.results import SCHEMA_VERSION, read_rows

OTHER_DEVICES = 2   # CPU: logical devices the engines make (a CPU run checks the path)


@dataclass(frozen=True)
class ScalingRequest:
    suite: ScalingSuite
    framework: str
    device: str
    out: Path
    resume: bool = False
    seed: int = 0
    max_devices: int | None = None   # cap N (default: the GPUs present, or 2 on a CPU)
    hosts: int = 1                   # >1: processes stand in for hosts (multi-host path)
    fault_case: int = -1             # tests: the case (index) whose last rank is killed
    models: list[str] | None = None  # only these models of the suite
    precisions: list[str] | None = None  # only these precisions of the suite
    device_counts: list[int] | None = None  # these N instead of the suite's (and N = 1)
    plan_only: bool = False          # print the plan and stop
    history: tuple[Path, ...] = (PUBLISHED,)   # earlier rows the plan estimates from
    # The persistent compilation cache (suites/matrix/compile_cache.py): a folder, "" for the
    # default (~/.cache/dlbench/compile), "off" for none. The command line's default is "".
    compile_cache: str = "off"


def available_devices(device: str) -> int:
    return gpu_count() if device == "gpu" else OTHER_DEVICES


def efficiency(case: ScalingCase, median_ms: float, baseline_ms: float | None) -> float | None:
    if not baseline_ms or not median_ms:
        return None
    if case.mode == "weak":
        return baseline_ms / median_ms
    return baseline_ms / (case.devices * median_ms)


class ScalingRunner:
    def __init__(self, request: ScalingRequest):
        self.request = request
        # The same host identity as the single-device runner's (suites/instruments/environment.py).
        self.path = request.out / request.suite.name / host_id() / \
            f"{request.framework}_{request.device}.jsonl"
        self.baselines: dict[tuple[str, int, str], float] = {}
        self.cache_state = None   # the compile cache as the current launch met it

    def case_id(self, case: ScalingCase) -> str:
        r = self.request
        return case.case_id(r.suite.name, r.framework, r.device)

    def _existing(self) -> dict[str, dict[str, Any]]:
        return read_rows(self.path)

    def run(self, echo=print) -> int:
        r = self.request
        present = available_devices(r.device)
        limit = present if r.max_devices is None else min(present, r.max_devices)
        if limit < 1:
            echo(f"error: no {r.device.upper()} devices present")
            return 3
        absent = sorted(n for n in (r.device_counts or ()) if n > limit)
        if absent:
            echo(f"not run: N = {', '.join(map(str, absent))} (only {limit} "
                 f"{r.device.upper()} device{'s' if limit != 1 else ''} here)")
        counts = tuple(r.device_counts) if r.device_counts else None
        cases = [c for c in r.suite.cases(limit, counts)
                 if (not r.models or c.model in r.models)
                 and (not r.precisions or c.precision in r.precisions)]
        existing = self._existing() if r.resume else {}
        pending = [c for c in cases
                   if (existing.get(self.case_id(c)) or {}).get("status") != "ok"]
        device_name = nvidia_smi("name") if r.device == "gpu" else cpu_model()
        echo(plan_line(pending, len(cases), r.framework, r.device, device_name,
                       (r.out, *r.history)))
        if r.plan_only:
            return 0
        started = time.perf_counter()
        self.path.parent.mkdir(parents=True, exist_ok=True)

        def emit(index: int, row: dict[str, Any]) -> None:
            case = cases[index]
            self._remember(case, row)
            with self.path.open("a") as handle:
                handle.write(json.dumps(row, default=str) + "\n")
            eff = row["scaling"].get("efficiency")
            echo(f"[{index + 1}/{len(cases)}] {self.case_id(case)}: {row['status']}"
                 + (f" {row['timing']['median_ms']:.2f} ms" if row["status"] == "ok" else
                    f" ({row['reason'][:200]})")
                 + (f", efficiency {eff:.1%}" if eff is not None else ""))

        # One N at a time, in order: every N = 1 baseline is known before the cases set
        # against it are written.
        for _, same_n in itertools.groupby(enumerate(cases), key=lambda item: item[1].devices):
            todo = []
            for index, case in same_n:
                done = existing.get(self.case_id(case))
                if done and done.get("status") == "ok":
                    self._remember(case, done)
                else:
                    todo.append((index, case))
            self.measure(todo, emit)
        echo(f"took {minutes(time.perf_counter() - started)}; results: {self.path}")
        return 0

    def _remember(self, case: ScalingCase, row: dict[str, Any]) -> None:
        if case.devices == 1 and row.get("status") == "ok":
            self.baselines[(case.model, case.base_batch, case.precision)] = \
                row["timing"]["median_ms"]

    def spec(self, case: ScalingCase, result: Path, fault: bool) -> RankSpec:
        r = self.request
        suite = r.suite
        return RankSpec(r.framework, r.device, case.model, case.per_device_batch, case.devices,
                        case.mode, suite.warmup, suite.samples, r.seed, case.precision,
                        str(result), "time", processes(r.framework, case.devices, r.hosts),
                        fault_step=2 if fault else -1)

    def measure(self, todo: list[tuple[int, ScalingCase]],
                emit: Callable[[int, dict[str, Any]], None]) -> None:
        """Rows for ``todo`` (cases of one N, with their indices), each emitted as soon as
        its result is written. On one host the cases share one launch: the steps were
        11–14% of a launch's time on 4× H200 (commit d337fd6, one launch per case), the rest the
        processes' start, the framework's import, the collective group, the build and the
        first call, of which a shared launch pays the first three once. A launch that
        fails leaves its unfinished cases to launches of their own, so a crash or hang
        is the row of the case that caused it. Launches across hosts stay one per case
        (TensorFlow's MultiWorkerMirroredStrategy is made once per process)."""
        together = self.request.hosts == 1 and len(todo) > 1
        for group in [todo] if together else [[item] for item in todo]:
            for item in self._launch(group, emit):
                self._launch([item], emit)

    def _launch(self, group: list[tuple[int, ScalingCase]],
                emit: Callable[[int, dict[str, Any]], None]) -> list[tuple[int, ScalingCase]]:
        """One launch of ``group``; emits a row per case and returns the cases a failed
        launch of several left without one."""
        r = self.request
        devices = group[0][1].devices
        hosts = r.hosts if devices % r.hosts == 0 else 1
        emitted: set[int] = set()
        last = [time.perf_counter(), datetime.now(UTC).isoformat(timespec="seconds")]
        with tempfile.TemporaryDirectory(prefix="dlbench-dp-") as scratch:
            results: dict[int, Path] = {}
            specs: list[RankSpec] = []
            paths: list[str] = []
            for index, case in group:
                folder = Path(scratch) / f"case{index}"
                folder.mkdir()
                results[index] = folder / "result.json"
                specs.append(self.spec(case, results[index], index == r.fault_case))
                specs[-1].to_file(folder / "spec.json")
                paths.append(str(folder / "spec.json"))
            cache = cache_env(r.framework, r.device, r.compile_cache) \
                if engine_launch(r.framework).compile_cache else {}
            # Whether the cache held files as this launch starts: its first calls may then
            # load what an earlier launch compiled (the rows say so).
            self.cache_state = cache_view(cache, host_id(), r.framework)
            record_host(cache, host_id(), r.framework)
            launch_plan = plan(specs[0], paths, hosts, cache)
            ranks = processes(r.framework, devices, hosts)
            shared = len(group) > 1

            def finished(index: int) -> bool:
                """Rank 0 wrote the result (whole) and, in a shared launch, every rank is
                through the case (a launch of one case answers that by its outcome)."""
                return results[index].exists() and (not shared or all(
                    done_marker(results[index], rank).exists() for rank in range(ranks)))

            def collect() -> None:
                # A row as soon as a case is finished, so a run stopped during a launch
                # keeps the cases it finished.
                for index, case in group:
                    if index not in emitted and finished(index):
                        emitted.add(index)
                        data = json.loads(results[index].read_text())
                        now = time.perf_counter()
                        emit(index, self.row(case, "ok", "", data, last[1], now - last[0],
                                             hosts, launch_plan))
                        last[:] = [now, datetime.now(UTC).isoformat(timespec="seconds")]

            outcome = launch(launch_plan.commands, launch_plan.envs,
                             r.suite.timeout_s * len(group), Path(scratch) / "logs",
                             cwd=Path(__file__).resolve().parent.parent,
                             watch=collect if shared else None)
            if shared or outcome.status == "ok":
                collect()
        missing = [(index, case) for index, case in group if index not in emitted]
        if len(group) > 1 and outcome.status != "ok":
            return missing
        status, reason = (("failed", "rank 0 wrote no result") if outcome.status == "ok"
                          else (outcome.status, outcome.reason))
        for index, case in missing:
            emit(index, self.row(case, status, reason, None, last[1],
                                 time.perf_counter() - last[0], hosts, launch_plan))
        return []

    def row(self, case: ScalingCase, status: str, reason: str, data: dict[str, Any] | None,
            started: str, wall_s: float, hosts: int, launch_plan) -> dict[str, Any]:
        """One case's row. ``wall_s``: the time since the launch started or the previous
        case of the same launch finished, so a launch's start is its first case's cost."""
        r = self.request
        if data is not None and "unsupported" in data:
            # The engine refused the case (ONNX Runtime at bf16): a row with the reason.
            status, reason, data = "unsupported", data["unsupported"], None
        from models.analysis import analyse
        from models.zoo import get_model
        stats = analyse(get_model(case.model))
        pools = (data or {}).get("threads", {})
        row: dict[str, Any] = {
            "schema": SCHEMA_VERSION, "case_id": self.case_id(case), "suite": r.suite.name,
            "model": case.model, "batch": case.global_batch, "measure": MEASURE,
            "settings": {"framework": r.framework, "device": r.device,
                         "precision": case.precision,
                         # N and mode in the variant: rows of one model and global batch at
                         # different N are different settings, never merged.
                         "variant": f"{MEASURE}-n{case.devices}-{case.mode}",
                         # Each rank's pools (0: no rank reported them).
                         "threads": pools.get("intra", 0),
                         "interop_threads": pools.get("inter", 0),
                         "execution": (data or {}).get("engine", ""), "compile_cache": ""},
            "status": status, "reason": reason,
            "timing": (data or {}).get("timing"), "memory": (data or {}).get("memory"),
            "model_info": {"family": get_model(case.model).family, "params": stats.params,
                           "flops_per_example": stats.flops},
            "env": {**(data or {}).get("env", {}), "interconnect": interconnect()
                    if r.device == "gpu" else None,
                    "collectives": collective_settings(launch_plan.envs[0]),
                    "compile_cache": self.compile_cache_fields()},
            "started_at": started, "wall_s": round(wall_s, 3),
            "scaling": self.scaling_fields(case, data, hosts, launch_plan),
        }
        if status != "ok":
            # No rank reported its environment: the host's, so that a refused or failed
            # case still names its machine and commit.
            row["env"] = {**host_environment(0, []), **row["env"]}
            if r.device == "gpu":
                row["env"].setdefault("gpu_model", nvidia_smi("name"))
        return row

    def compile_cache_fields(self) -> dict[str, Any] | None:
        """The persistent compilation cache the launch used (None: none), and whether it
        held files when the launch started."""
        view = self.cache_state
        if view is None:
            return None
        return {"dir": str(cache_root(self.request.compile_cache, self.request.device)),
                "kept_at_launch": view.kept}

    def scaling_fields(self, case: ScalingCase, data, hosts: int, launch_plan) -> dict[str, Any]:
        fields: dict[str, Any] = {
            **asdict(case), "global_batch": case.global_batch,
            # torchrun starts a host's processes itself: one command per host.
            "processes": case.devices if engine_launch(self.request.framework).torchrun
            else len(launch_plan.commands), "hosts": hosts,
            "engine": (data or {}).get("engine"), "backend": (data or {}).get("backend"),
            "step": (data or {}).get("step"),
        }
        if data is None:
            return fields
        median = data["timing"]["median_ms"]
        baseline = self.baselines.get((case.model, case.base_batch, case.precision))
        if case.devices == 1:
            baseline = median
        fields.update({
            "images_per_s": case.global_batch / (median / 1e3) if median else None,
            "baseline_ms": baseline,
            "efficiency": efficiency(case, median, baseline),
            "communication_share": data.get("communication_share"),
            "communication_method": data.get("communication_method"),
            "communication_kernels": data.get("communication_kernels"),
            "communication_kernels_reason": data.get("communication_kernels_reason"),
        })
        return fields
