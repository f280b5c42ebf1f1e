"""Serving under MLPerf LoadGen (issue 61): a framework's ``Prepared.serve`` answers the
queries of LoadGen's scenarios, its latency percentiles or throughput become ``serve`` rows."""
