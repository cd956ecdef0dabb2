"""metasched: find fast CPU kernels for small tensor programs by search.

A workload (``parse``, ``load``, ``workloads.get``) is the starting program; a ``Schedule``
transforms its loops; ``build`` compiles the result with llvmlite into a ``Kernel`` that runs
on numpy arrays. ``tune`` searches for a fast schedule, measuring candidates in worker
processes and keeping every result in a ``Database``; ``tune_tasks`` tunes many workloads
under one trial budget.

The names below load their modules when first used (PEP 562), so that ``import metasched``
costs nothing and the command line can load them where Ctrl-C is handled (``__main__``).
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each public name -> the module that defines it.
_EXPORTS = {
    "workloads": "metasched.workloads",
    "build": "metasched.build",
    "CodegenOptions": "metasched.codegen", "Kernel": "metasched.codegen",
    "Database": "metasched.database",
    "ClusterError": "metasched.errors",
    "DatabaseError": "metasched.errors", "KernelArgumentError": "metasched.errors", "ModelError": "metasched.errors",
    "MetaschedError": "metasched.errors", "MismatchError": "metasched.errors", "ParseError": "metasched.errors",
    "ScheduleError": "metasched.errors", "TraceError": "metasched.errors", "WarmStartError": "metasched.errors",
    "Workload": "metasched.lang", "assert_outputs_close": "metasched.lang", "load": "metasched.lang",
    "parse": "metasched.lang",
    "BlockRV": "metasched.schedule", "ExprRV": "metasched.schedule", "Instruction": "metasched.schedule",
    "LoopRV": "metasched.schedule", "Schedule": "metasched.schedule", "Trace": "metasched.schedule",
    "replay": "metasched.schedule",
    "diff": "metasched.schedule.trace",
    "TasksResult": "metasched.tune", "TuneResult": "metasched.tune", "TuneTask": "metasched.tune",
    "tune": "metasched.tune", "tune_tasks": "metasched.tune",
    "Network": "metasched.network", "compile_network": "metasched.network", "tune_network": "metasched.network", "load_network": "metasched.network", "import_onnx": "metasched.graph",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'metasched' has no attribute {name!r}")
    value = importlib.import_module(module)
    if name != "workloads":
        value = getattr(value, name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """This package's module. Python sets a package's attribute to each submodule it loads,
    and two submodules are named as the functions they define: ``metasched.tune`` and
    ``metasched.build`` stay the functions, whenever their modules load."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and name != "workloads" and _EXPORTS.get(name) == value.__name__:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and editors, which do not run __getattr__
    from metasched import workloads
    from metasched.build import build
    from metasched.codegen import CodegenOptions, Kernel
    from metasched.database import Database
    from metasched.errors import (
        DatabaseError, KernelArgumentError, MetaschedError, MismatchError, ModelError, ParseError, ScheduleError,
        TraceError, WarmStartError,
    )
    from metasched.graph import import_onnx
    from metasched.lang import Workload, assert_outputs_close, load, parse
    from metasched.network import Network, compile_network, load_network, tune_network
    from metasched.schedule import BlockRV, ExprRV, Instruction, LoopRV, Schedule, Trace, replay
    from metasched.schedule.trace import diff
    from metasched.tune import TasksResult, TuneResult, TuneTask, tune, tune_tasks
