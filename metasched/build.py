"""``build``: a workload, a schedule or a loop program -> a compiled ``Kernel``."""
from __future__ import annotations

from typing import Optional, Union

from metasched.codegen import CodegenOptions, Kernel, compile_func
from metasched.ir.stmt import PrimFunc
from metasched.lang.workload import Workload
from metasched.schedule import Schedule


def build(target: Union[Workload, Schedule, PrimFunc], options: Optional[CodegenOptions] = None) -> Kernel:
    """Compile ``target`` to machine code for this CPU. A workload compiles unscheduled (its
    statements' loops as written); a schedule compiles the loop program it describes."""
    if isinstance(target, Workload):
        func = Schedule(target).lower()
    elif isinstance(target, Schedule):
        func = target.lower()
    elif isinstance(target, PrimFunc):
        func = target
    else:
        raise TypeError(f"build takes a Workload, a Schedule or a PrimFunc, got {type(target).__name__}")
    return compile_func(func, options)
