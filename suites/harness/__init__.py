"""One run of a suite: the suite spec, the runner that plans its cases, the worker processes
and their pool that build and time them, and the records that cross between them."""
