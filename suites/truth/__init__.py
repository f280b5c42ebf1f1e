"""The float64 truth: each case's reference outputs and gradients computed from the model
definition, the pool that computes them in parallel, and the check of a row's errors."""
