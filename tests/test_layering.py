"""Import layering, read from every module's imports (ast, lazy imports inside functions
included): the lower layers never reach up, so each can be read, tested and changed
without the ones above it (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("torch", "tensorflow", "jax", "jaxlib", "flax", "onnxruntime", "keras")
HARNESS = ("suites.harness", "suites.matrix")
# (package folder, module prefixes it must not import, prefixes allowed inside those)
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("models", (*FRAMEWORKS, "suites", "adapters", "reports", "parallel"), ()),
    ("suites/stats", HARNESS, ()),
    ("suites/instruments", HARNESS, ()),
    ("suites/truth", ("suites.matrix",), ()),
    ("suites/rows", (*HARNESS, "suites.stats", "suites.truth"), ()),
    # registry.toml is read as data: the one module of adapters/ that reports/ may import.
    ("reports", (*FRAMEWORKS, "parallel", "suites.harness", "adapters"), ("adapters.registry",)),
)


def imported(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in ``path``; ``from a import b`` gives ``a.b``
    (b may be a module), a relative import is resolved against the module's package."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(root: Path) -> list[str]:
    found = []
    for folder, forbidden, allowed in RULES:
        for path in sorted((root / folder).rglob("*.py")):
            for line, name in imported(path, root):
                if _under(name, forbidden) and not _under(name, allowed):
                    found.append(f"{path.relative_to(root)}:{line} imports {name}")
    return found


def test_every_layer_imports_only_below_itself():
    assert violations(REPO) == []


def test_the_checker_flags_a_module_that_reaches_up(tmp_path):
    def module(relative: str, text: str) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    module("models/bad.py", "import numpy\n\ndef f():\n    import torch.nn\n")
    module("suites/stats/bad.py", "from ..harness import runner\n")
    module("suites/rows/bad.py", "from suites.truth.check import judgeable_now\n")
    module("reports/bad.py", "from adapters import registry\nfrom adapters.torch import adapter\n"
                             "from parallel.plan import row_key\n")
    assert violations(tmp_path) == [
        "models/bad.py:4 imports torch.nn",
        "suites/stats/bad.py:1 imports suites.harness.runner",
        "suites/rows/bad.py:1 imports suites.truth.check.judgeable_now",
        "reports/bad.py:2 imports adapters.torch.adapter",
        "reports/bad.py:3 imports parallel.plan.row_key",
    ]
