"""Serving workers kept alive between suites, so that ``python -m suites matrix`` starts
one per key and not one per suite (a TensorFlow worker takes 13-15 s to start on an H100,
PyTorch's about 7 s).

A key is everything a worker fixes when it starts: the interpreter, the framework, the
device, the thread settings, the phase (suites/harness/runner.py phases()), the environment it
was started with and the round (suites/harness/rounds.py). The pool holds idle workers only: the
runner takes one, sends it a plan, and gives it back once the plan is done. A worker
that died, ran past a case's time limit, was stopped by the budget or interrupted is
killed and never given back, so the next plan of its key starts a fresh one.

One live GPU worker at a time: before a worker of one GPU key is handed out or started,
and before a process of its own (a compile-cache job) starts on the GPU, every idle GPU
worker of another key is closed. An idle process keeps GPU memory: TensorFlow's BFC
pool never returns what it took to the device (memory growth only delays taking it),
JAX's pool keeps what it grew (no preallocation changes only the start), and a PyTorch
process keeps its CUDA context, its libraries' workspaces and whatever its caching
allocator holds (the adapter empties the cache after each job). A case that needs most
of the GPU (li2016's batch-512 layers, practice-gpu's batch sweep up to out-of-memory)
would then fail, or find its knee elsewhere, according to what ran before it. Idle CPU
workers stay: they hold no device. The matrix orders its work so that the rule costs few
starts (suites/matrix/run.py: each framework's wall pass over every suite, then its device
pass).

The device phase goes on in the wall phase's idle worker: a device key with no idle
worker of its own takes the idle worker of the same key in the "wall" phase, which from
then on serves that device key only (it is given back under it, and a worker refuses a
wall plan once it ran a device plan: suites/harness/worker.py). CUPTI then loads in a process
after its last wall sample, never before one, which is all that suites/harness/device_pass.py
asks; and the device phase finds there the jobs the wall phase kept built for it
(suites/harness/kept_jobs.py), and for a job built again the framework's in-process caches warm
(cuDNN's algorithm search in PyTorch, JAX's compiled executables), where a fresh process
searched again: TensorFlow's li2016 device pass on an H100 spent about 280 of its 423 s
building jobs again in a process of its own.

Not for a framework whose registry entry says ``own_device_process``: its device phase
always starts a process. No framework says so now; TensorFlow did until a whole wall phase
followed by its device phase in one worker was measured against a process of its own
(adapters/registry.toml gives the figures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from suites.harness.process import WorkerProcess

GPU = "gpu"
WALL, DEVICE = "wall", "device"     # suites/harness/runner.py phases()


@dataclass(frozen=True)
class WorkerKey:
    python: str
    framework: str
    device: str
    threads: int
    interop_threads: int
    phase: str
    env: tuple[tuple[str, str], ...] = ()     # the worker_env it was started with, sorted
    # Rounds measure a case in separate processes: round k of every suite shares round
    # k's worker, never another round's.
    round: int = 0
    # A precision whose jobs share no process with other jobs (suites/harness/runner.py
    # process_group), "" for the rest.
    precision_group: str = ""
    # The framework's device phase never takes the wall phase's worker (the docstring).
    own_device_process: bool = False


class WorkerPool:
    def __init__(self) -> None:
        self.idle: dict[WorkerKey, WorkerProcess] = {}

    def holder(self, key: WorkerKey) -> WorkerKey | None:
        """The idle key whose worker would serve ``key``: its own, else for a device key
        the wall phase's of the same setting, unless the key's framework keeps its device
        phase apart (the module's docstring); None where no live worker waits (the next
        plan starts a process)."""
        shares = key.phase == DEVICE and not key.own_device_process
        for candidate in (key, *([replace(key, phase=WALL)] if shares else [])):
            worker = self.idle.get(candidate)
            if worker is not None and worker.alive():
                return candidate
        return None

    def has(self, key: WorkerKey) -> bool:
        """Whether a live worker waits for this key (the next plan starts no process)."""
        return self.holder(key) is not None

    def take(self, key: WorkerKey) -> WorkerProcess | None:
        """The worker that serves ``key`` (``holder``), now the caller's; None where there
        is none alive (the caller starts one). For a GPU key, every other idle GPU worker
        is closed first."""
        held = self.holder(key) or key
        if key.device == GPU:
            self.close_gpu_workers(keep=held)
        worker = self.idle.pop(held, None)
        if worker is not None and not worker.alive():
            worker.kill()       # reaps it, and any process it left behind
            return None
        return worker

    def close_gpu_workers(self, keep: WorkerKey | None = None) -> None:
        """Close every idle GPU worker but ``keep``'s: a process of another key, or one of
        its own, is about to use the GPU (the module's docstring says why)."""
        for key in [k for k in self.idle if k.device == GPU and k != keep]:
            self.idle.pop(key).close()

    def give_back(self, key: WorkerKey, worker: WorkerProcess) -> None:
        """A worker that finished its plan, kept for the key's next one."""
        older = self.idle.pop(key, None)
        if older is not None:
            older.close()
        self.idle[key] = worker

    def close(self) -> None:
        """End every idle worker (stdin at EOF, killed if it lingers)."""
        while self.idle:
            _, worker = self.idle.popitem()
            worker.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
