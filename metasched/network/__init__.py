"""Networks: ``tune_network`` tunes a model's tasks, ``compile_network`` makes one callable of
its tuned kernels."""
from metasched.network.network import Network, compile_network, default_schedule, load_network
from metasched.network.tuning import tune_network

__all__ = ["Network", "compile_network", "default_schedule", "load_network", "tune_network"]
