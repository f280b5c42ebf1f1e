"""dlbench tests."""
