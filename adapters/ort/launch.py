"""How ONNX Runtime's data-parallel engine starts (framework-free: the launcher reads it).

One process and one inference session per GPU, process i seeing only GPU i; the sessions
share nothing and nothing is compiled to keep between processes.
"""

from adapters.base import EngineLaunch

LAUNCH = EngineLaunch(process_per_device=True, gpu_per_process=True)
