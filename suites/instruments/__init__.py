"""Device and host probes that a timed case carries: environment, NVML device state, host
state, the CUPTI device clock and kernel tracer, Nsight Compute counters. No harness code."""
