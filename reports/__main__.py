"""``python -m reports [DIR ...] [--out DIR]``: read every ``*.jsonl`` and ``*.jsonl.gz``
under the given directories (default ``results/``) and write the report to ``--out`` (default ``report/``):
report.md, report.html, summary.txt, results_tidy.csv, ratios.json, plots/.
Prints the plain-text summary on stdout. Bad input: one line on stderr, exit code 2.

A published folder among the inputs (``python -m reports results published/<folder>``), or a
directory named with ``--reference`` (then it alone, so that one published folder can be
compared with another), is the reference: the report adds a section with your
rows beside its rows, their ratios and the settings that differ (reports/compare.py).
``--pages`` writes only report.md and plots/ (a published folder's checked-in report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.pipeline.load import InputError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    parser.add_argument("inputs", nargs="*", type=Path, default=[Path("results")],
                        metavar="DIR", help="directories (or files) of result rows")
    parser.add_argument("--out", type=Path, default=Path("report"), help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no summary table on stdout")
    parser.add_argument("--reference", type=Path, action="append", default=[], metavar="DIR",
                        help="compare the other inputs with this directory's rows (then only "
                             "it is the reference; without this flag, a published folder "
                             "among the inputs is)")
    parser.add_argument("--pages", action="store_true",
                        help="write only report.md and plots/*.png (for a published folder)")
    args = parser.parse_args(argv)
    from reports.compare import is_published
    from reports.render.build import build  # after argparse: --help stays fast

    inputs = list(args.inputs) + [p for p in args.reference if p not in args.inputs]
    # An explicit --reference decides alone, so one published folder can be compared with
    # another (a second GPU's folder against the first's); without it, published inputs are.
    reference = tuple(dict.fromkeys(args.reference)) if args.reference else \
        tuple(p for p in args.inputs if is_published(p))
    if reference and len(reference) == len(inputs):
        reference = ()   # the published folder alone: its own report, nothing to compare
    try:
        report, written = build(inputs, args.out, reference, args.pages)
    except InputError as exc:
        print(f"reports: error: {exc}", file=sys.stderr)
        return 2
    for warning in report.warnings:
        print(warning, file=sys.stderr)
    if not args.quiet:
        from reports.sections.text import render

        sys.stdout.write(render(report))
        for section in report.sections:
            if section.key == "compare":   # the reference comparison's summary, as text
                print("\n" + "\n".join(section.paragraphs))
                for table in section.tables[:1]:
                    print("  ".join(table.columns))
                    for row in table.rows:
                        print("  ".join(c.text for c in row))
    print(f"wrote {len(written)} files to {args.out}/ ("
          + ("report.md, plots/" if args.pages else "report.html, report.md, results_tidy.csv, ...")
          + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
