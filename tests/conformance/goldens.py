"""Gradient goldens: per-parameter gradient norms and losses of the tiny models that
at least two frameworks agree on.

    python -m tests.conformance.goldens --framework torch

computes this framework's values and merges them into tests/goldens/gradients.json: a
model with no golden yet gets this framework's (``agreed_by: [torch]``, provisional);
a model whose golden this framework matches within tolerance gains the framework in
``agreed_by``; a mismatch is reported and leaves the file unchanged for that model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "gradients.json"
BATCH = 4
RTOL_NORM = 1e-3   # fp32 reductions in different orders; norms agree far closer in practice
RTOL_LOSS = 1e-4


def load() -> dict:
    return json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {"models": {}}


def agree(golden: dict, loss: float, norms: dict[str, float]) -> str | None:
    """None when ``loss`` and ``norms`` match ``golden``, else the first difference."""
    if set(golden["grad_norms"]) != set(norms):
        return f"parameters differ: {sorted(set(golden['grad_norms']) ^ set(norms))}"
    if not np.isclose(loss, golden["loss"], rtol=RTOL_LOSS, atol=1e-7):
        return f"loss {loss:.8g} != golden {golden['loss']:.8g}"
    for name, value in golden["grad_norms"].items():
        if not np.isclose(norms[name], value, rtol=RTOL_NORM, atol=1e-7):
            return f"{name}: gradient norm {norms[name]:.8g} != golden {value:.8g}"
    return None


def compute(framework: str) -> dict[str, tuple[float, dict[str, float]]]:
    from adapters.base import CaseConfig, Fingerprint, RunConfig, Unsupported
    from adapters.registry import load_registry
    from models.inputs import make_batch
    from models.weights import canonical_weights
    from models.zoo import TINY, get_model

    adapter = load_registry()[framework].load()(RunConfig("cpu", 2, 1))
    values = {}
    for name in TINY:
        model = get_model(name)
        prepared = adapter.prepare(model, canonical_weights(model), make_batch(model, BATCH),
                                   CaseConfig())
        try:
            loss, grads = prepared.loss_and_gradients()
        except Unsupported:
            continue
        finally:
            prepared.close()
        norms = Fingerprint.from_arrays(np.zeros(1), loss, grads).grad_norms
        values[name] = (loss, norms)
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--framework", required=True)
    args = parser.parse_args(argv)
    data = load()
    problems = 0
    for name, (loss, norms) in compute(args.framework).items():
        golden = data["models"].get(name)
        if golden is None:
            data["models"][name] = {"loss": loss, "grad_norms": norms,
                                    "agreed_by": [args.framework]}
            print(f"{name}: new golden from {args.framework} (provisional)")
            continue
        difference = agree(golden, loss, norms)
        if difference:
            problems += 1
            print(f"{name}: {args.framework} disagrees: {difference}")
        elif args.framework not in golden["agreed_by"]:
            golden["agreed_by"].append(args.framework)
            print(f"{name}: {args.framework} agrees with {golden['agreed_by'][:-1]}")
    GOLDENS.parent.mkdir(parents=True, exist_ok=True)
    GOLDENS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
