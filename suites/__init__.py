"""The command line (``python -m suites``) and the suite TOML files beside it. The
subsystems are packages: harness (one run), stats, instruments, truth, matrix, rows."""
