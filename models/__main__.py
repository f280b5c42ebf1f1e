"""``python -m models [--json] [--tiny] [NAME ...]``: the zoo with input shapes,
parameter counts and forward GFLOPs per example."""

from __future__ import annotations

import argparse
import json
import sys

from models.analysis import ModelError, analyse
from models.zoo import UnknownModel, get_model, names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models", description=__doc__)
    parser.add_argument("names", nargs="*", help="models to show (default: the whole zoo)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--tiny", action="store_true", help="include the tiny test variants")
    parser.add_argument("--layers", action="store_true", help="per-layer breakdown")
    args = parser.parse_args(argv)
    rows = []
    try:
        for name in args.names or names(include_tiny=args.tiny):
            model = get_model(name)
            stats = analyse(model)
            rows.append({
                "name": model.name, "family": model.family,
                "input_shape": list(stats.input_shape), "params": stats.params,
                "trainable_params": stats.trainable_params,
                "gflops_per_example": stats.flops / 1e9,
                "description": model.description, "source": model.source,
                **({"layers": [{"name": layer.name, "kind": layer.kind,
                                "out_shape": list(layer.out_shape), "params": layer.params,
                                "flops": layer.flops}
                               for layer in stats.layers]} if args.layers else {}),
            })
    except (UnknownModel, ModelError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'model':<22} {'input':<14} {'params':>13} {'GFLOPs/ex':>10}  description")
    for row in rows:
        shape = "x".join(map(str, row["input_shape"]))
        print(f"{row['name']:<22} {shape:<14} {row['params']:>13,} "
              f"{row['gflops_per_example']:>10.4f}  {row['description']}")
        for layer in row.get("layers", []):
            out = "x".join(map(str, layer["out_shape"]))
            print(f"    {layer['name']:<30} {layer['kind']:<13} {out:<14} "
                  f"{layer['params']:>11,} {layer['flops'] / 1e9:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
