"""The report stage: result rows (JSON Lines) in; Markdown tables in the seeds' formats,
one self-contained HTML page with plots, a tidy CSV and a plain-text summary
out.

Pipeline (one module per step, frozen dataclasses between them):
``load`` → ``tidy`` → ``peaks`` (TFLOP/s) → ``equivalence`` / ``ratios`` → ``tables_*`` /
``historical`` / ``plots`` → ``markdown`` / ``html`` / ``text``, driven by ``build``;
``compare`` puts a run beside a published reference, ``publish`` makes a published folder.

No ML framework is imported here (DESIGN.md: reports/ may import pandas and plotting only).
"""

SUPPORTED_SCHEMA = 1
