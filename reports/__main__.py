"""``python -m reports [DIR ...] [--out DIR]``: read every ``*.jsonl`` under the given
directories (default ``results/``) and write the report to ``--out`` (default ``report/``):
report.md, report.html, summary.txt, results_tidy.csv, ratios.json, plots/.
Prints the plain-text summary on stdout. Bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.load import InputError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    parser.add_argument("inputs", nargs="*", type=Path, default=[Path("results")],
                        metavar="DIR", help="directories (or files) of result rows")
    parser.add_argument("--out", type=Path, default=Path("report"), help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no summary table on stdout")
    args = parser.parse_args(argv)
    from reports.build import build  # after argparse: --help stays fast

    try:
        report, written = build(list(args.inputs), args.out)
    except InputError as exc:
        print(f"reports: error: {exc}", file=sys.stderr)
        return 2
    for warning in report.warnings:
        print(warning, file=sys.stderr)
    if not args.quiet:
        from reports.text import render

        sys.stdout.write(render(report))
    print(f"wrote {len(written)} files to {args.out}/ (report.html, report.md, "
          "results_tidy.csv, ...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
