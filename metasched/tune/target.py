"""The ``Target`` a kernel is tuned for: this machine's CPU and the threads its kernels use."""
from __future__ import annotations

from typing import Optional

from metasched.codegen import CodegenOptions, available_cores
from metasched.codegen.target import host_cpu
from metasched.database import Target


def host_target(options: Optional[CodegenOptions] = None) -> Target:
    """This CPU (LLVM's name and features) and the thread count of kernels built with
    ``options``: records measured elsewhere or with other threads are not comparable."""
    options = options or CodegenOptions()
    _, cpu, features = host_cpu()
    threads = 1 if options.threading == "serial" else (options.num_threads or available_cores())
    return Target(cpu=cpu, features=features, num_threads=threads)
