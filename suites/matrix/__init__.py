"""Every framework × suite in one command: the plan and its estimates, lanes over several
GPUs, the compilation caches and the cost log."""
