"""Data-parallel scaling (``python -m parallel run SUITE``): one training step over N devices on
each framework's own engine, weak or strong scaling; its rows' keys live in suites.rows.scaling."""
