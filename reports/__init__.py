"""The report stage: result rows in; Markdown tables in the seeds' formats, one
self-contained HTML page with plots, a tidy CSV and a plain-text summary out.

``pipeline`` (load → tidy → judge) → ``sections`` (one module per table group) →
``render`` (markdown, html, text, driven by ``render.build``). Tools at this level:
``compare`` (a run beside a published reference), ``publish``, ``readme_tables``, ``gap``.
No ML framework is imported here: pandas and matplotlib only.
"""

SUPPORTED_SCHEMA = 1
