"""How PyTorch's data-parallel engine starts (framework-free: the launcher reads it).

One process per device, started by ``torch.distributed.run`` (torchrun) as a module, so
no console script is needed; several hosts are several torchrun invocations meeting at a
c10d rendezvous. DDP runs PyTorch eager: nothing is compiled to keep between processes.
"""

from adapters.base import EngineLaunch

LAUNCH = EngineLaunch(
    process_per_device=True, torchrun=True,
    # Every rank of a launch here is on this host (the multi-host test stands hosts in
    # with local processes), so gloo pairs over loopback. Left to itself gloo binds the
    # address the hostname resolves to, an external interface on most VMs, whose firewall
    # and resets a single-host launch has no reason to depend on (a gloo connection fault
    # aborts the rank with SIGABRT).
    env_defaults={"cpu": {"GLOO_SOCKET_IFNAME": "lo"}})
