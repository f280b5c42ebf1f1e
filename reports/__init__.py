"""The report stage: rows in; tables in the seeds' formats, an HTML page, a tidy CSV and a summary
out, by pipeline → sections → render. No framework, parallel/ or harness (tests/test_layering.py)."""

SUPPORTED_SCHEMA = 1
