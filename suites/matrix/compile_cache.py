"""The frameworks' persistent compilation caches, as the matrix and the scaling runner
point their processes at them: one folder per device under ``~/.cache/dlbench/compile``
(``$DLBENCH_COMPILE_CACHE``, or a folder named by the caller; ``off`` for none), and each
framework's variables from ``adapters/registry.toml`` (``[<framework>.compile_cache]``).

Why on by default: JAX's compile on a GPU is mostly XLA's autotuning (README, "Where JAX's
first calls go"), and where a persistent cache is set jax also keeps XLA's per-fusion
autotuning results there, so a process that meets a program, or fusions, compiled before on
this host loads them instead of autotuning again. Rows say where a first call loaded.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from adapters.registry import load_registry
from suites.matrix.estimate import CacheView

OFF = "off"
# In a device's cache folder, one file per framework: the hosts whose runs pointed that
# framework's processes at it, one per line. The folder may move between hosts (a volume
# that outlives a rented machine, a copy); the plan then knows which hosts' earlier rows
# were compiled into it (CacheView).
HOSTS_FILE = "hosts-{framework}"


def cache_root(setting: str, device: str) -> Path | None:
    """The cache folder of ``device``'s runs: ``setting`` is a folder, "" for the default,
    or ``off`` (None)."""
    if setting == OFF:
        return None
    base = setting or os.environ.get("DLBENCH_COMPILE_CACHE") or \
        Path.home() / ".cache" / "dlbench" / "compile"
    return (Path(base) / device).resolve()


def cache_env(framework: str, device: str, setting: str = "") -> dict[str, str]:
    """The environment that points ``framework``'s persistent compilation cache at the
    folder (empty for a framework that keeps none, or with ``off``)."""
    root = cache_root(setting, device)
    if root is None:
        return {}
    entry = load_registry()[framework]
    env = {name: value.replace("{dir}", str(root))
           for name, value in entry.compile_cache_env.items()}
    return {**env, "DLBENCH_PERSISTENT_CACHE": str(root)} if env else {}


def cache_view(env: dict[str, str], host: str, framework: str) -> CacheView | None:
    """The framework's persistent compilation cache as this run meets it (None for a
    framework that keeps none, or with ``off``): whether the folders its ``env`` points at
    already hold files (suites/matrix/estimate.py prefers history of that state)."""
    root = env.get("DLBENCH_PERSISTENT_CACHE")
    if not root:
        return None
    folders = [Path(value[value.index(root):]) for name, value in env.items()
               if name != "DLBENCH_PERSISTENT_CACHE" and root in value]
    kept = any(p.is_file() for folder in folders if folder.is_dir() for p in folder.rglob("*"))
    return CacheView(host, kept, filled_by(Path(root), framework))


def filled_by(root: Path, framework: str) -> frozenset[str]:
    """The hosts whose runs of ``framework`` wrote into the cache folder ``root`` (none
    where not known)."""
    try:
        text = (root / HOSTS_FILE.format(framework=framework)).read_text()
    except OSError:
        return frozenset()
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


def record_host(env: dict[str, str], host: str, framework: str) -> None:
    """Add ``host`` to the hosts of the cache folder that ``env`` points ``framework`` at,
    before a run of this host writes into it. A folder that cannot be written is left as it
    is: the framework then keeps no cache there either, and the plan only loses a warm
    estimate."""
    root = env.get("DLBENCH_PERSISTENT_CACHE")
    if not root or host in filled_by(Path(root), framework):
        return
    with contextlib.suppress(OSError):
        Path(root).mkdir(parents=True, exist_ok=True)
        with (Path(root) / HOSTS_FILE.format(framework=framework)).open("a") as out:
            out.write(f"{host}\n")
