"""Framework-neutral model definitions: the IR, its ops' shapes, FLOPs and float64 references,
the zoo, weights and inputs. numpy and the standard library only (tests/test_layering.py)."""
