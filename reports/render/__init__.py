"""Rendering: builds report.md, the self-contained report.html with its plots, summary.txt
and the CSV from the sections' tables."""
