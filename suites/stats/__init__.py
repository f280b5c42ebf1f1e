"""Statistics of timed samples: the timer, repetitions and intervals, spread across runs and
the comparison of two runs. Imports no harness code."""
