"""dlbench tests. A package, so the reference imports as ``tests.reference_numpy``."""
