"""Several frameworks on one host, in counterbalanced blocks, so that slow drift (a GPU
warming up, another tenant's load) does not line up with one framework:
``python -m suites interleave SUITE --frameworks torch jax --device gpu``.

The suite's jobs are dealt into ``blocks`` blocks (every k-th job, so each block spans the
suite's models), and the blocks run in ABBA order: torch block 1, jax block 1, jax block 2,
torch block 2, ... With two blocks, a drift linear in time falls on every framework alike
(a counterbalanced design); each block costs one more worker start per framework. Every
framework needs to be importable by this interpreter (a GPU host with the frameworks
installed, ``nox --no-venv``); results go to the same files as separate runs.
"""

from __future__ import annotations

from suites.harness.runner import Runner, RunRequest


def block_order(frameworks: list[str], blocks: int) -> list[tuple[int, str]]:
    """(block, framework) in run order: forward in even blocks, reversed in odd ones."""
    order = []
    for block in range(blocks):
        names = frameworks if block % 2 == 0 else list(reversed(frameworks))
        order += [(block, name) for name in names]
    return order


def run_interleaved(requests: list[RunRequest], blocks: int = 2) -> int:
    runners = {request.framework: Runner(request) for request in requests}
    every = {name: list(runner.pending) for name, runner in runners.items()}
    for block, name in block_order(list(runners), blocks):
        runner = runners[name]
        runner.pending = every[name][block::blocks]
        if not runner.pending:
            continue
        code = runner.run()
        if code:
            return code
    return 0
