"""The report's data pipeline: load rows, tidy them into one frame with each measurement's
identity, and judge it (rankings, ratios, equivalence, float64 truth, peaks)."""
