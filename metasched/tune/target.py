"""The ``Target`` a kernel is tuned for: the runner's CPU and the threads its kernels use."""
from __future__ import annotations

from typing import Optional

from metasched.codegen import CodegenOptions
from metasched.database import Target
from metasched.measure.machine import Machine


def host_target(options: Optional[CodegenOptions] = None) -> Target:
    """This CPU (LLVM's name and features) and the thread count of kernels built with
    ``options``: records measured elsewhere or with other threads are not comparable."""
    return machine_target(Machine.here(), options)


def machine_target(machine: Machine, options: Optional[CodegenOptions] = None) -> Target:
    """``machine``'s CPU and the thread count of kernels built for it with ``options`` (0
    threads: every core a process there may run on)."""
    options = options or CodegenOptions()
    threads = 1 if options.threading == "serial" else (options.num_threads or machine.cores)
    return Target(cpu=machine.cpu, features=machine.features, num_threads=threads)
