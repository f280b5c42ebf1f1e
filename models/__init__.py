"""Framework-neutral model definitions: the IR, the zoo, analysis, weights and inputs.

This package imports numpy and the standard library only; a test enforces it.
"""
