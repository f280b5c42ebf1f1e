"""How TensorFlow's data-parallel engine starts (framework-free: the launcher reads it).

One process drives all local devices (``MirroredStrategy``); across hosts, one process per
host with a TF_CONFIG cluster spec (``MultiWorkerMirroredStrategy``). It runs a
TensorFlow graph without XLA: nothing is compiled to keep between processes.
"""

from adapters.base import EngineLaunch

LAUNCH = EngineLaunch(process_per_device=False, tf_config=True)
