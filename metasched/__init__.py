"""metasched: find fast CPU kernels for small tensor programs by search.

A workload (``parse``, ``load``, ``workloads.get``) is the starting program; a ``Schedule``
transforms its loops; ``build`` compiles the result with llvmlite into a ``Kernel`` that runs
on numpy arrays. ``tune`` searches for a fast schedule, measuring candidates in worker
processes and keeping every result in a ``Database``.
"""
from metasched import workloads
from metasched.build import build
from metasched.codegen import CodegenOptions, Kernel
from metasched.database import Database
from metasched.errors import (
    DatabaseError,
    KernelArgumentError,
    MetaschedError,
    MismatchError,
    ParseError,
    ScheduleError,
    TraceError,
    WarmStartError,
)
from metasched.lang import Workload, assert_outputs_close, load, parse
from metasched.schedule import BlockRV, ExprRV, Instruction, LoopRV, Schedule, Trace, replay
from metasched.schedule.trace import diff
from metasched.tune import TuneResult, tune

__version__ = "0.1.0"

__all__ = [
    "BlockRV", "CodegenOptions", "Database", "DatabaseError", "ExprRV", "Instruction", "Kernel",
    "KernelArgumentError", "LoopRV", "MetaschedError", "MismatchError", "ParseError", "Schedule",
    "ScheduleError", "Trace", "TraceError", "TuneResult", "WarmStartError", "Workload", "assert_outputs_close",
    "build", "diff", "load", "parse", "replay", "tune", "workloads",
]
