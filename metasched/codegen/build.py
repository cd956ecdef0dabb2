"""``compile_func``: PrimFunc → LLVM IR → optimised module → JIT ``Kernel``."""
from __future__ import annotations

import re
import time
from typing import Optional

import llvmlite.binding as llvm
from llvmlite import ir

from metasched.codegen.emit import FunctionEmitter
from metasched.codegen.kernel import Kernel
from metasched.codegen.llvmutil import PTR, VOID, ModuleContext, check_buffer
from metasched.codegen.options import CodegenOptions
from metasched.codegen.runtime import Launcher, make_launcher
from metasched.codegen.target import (
    LLVM_LOCK, ensure_llvm, host_cpu, host_target_machine, jit, optimize,
)
from metasched.ir.stmt import PrimFunc
from metasched.errors import CodegenError


def emit_module(func: PrimFunc, launcher: Optional[Launcher], data_layout: str = "",
                vector_math: bool = True, poison: bool = False) -> tuple[ir.Module, str]:
    """The unoptimised LLVM module of ``func`` and the name of its entry function."""
    names = [b.name for b in func.params]
    if len(set(names)) != len(names):
        raise CodegenError(f"{func.name} has repeated parameter names {names}")
    # Prefixed so that a kernel called e.g. "erf" cannot capture libm's erf.
    symbol = "ms_" + re.sub(r"[^A-Za-z0-9_]", "_", func.name)
    ctx = ModuleContext(symbol, vector_math, poison)
    ctx.module.triple = host_cpu()[0]
    ctx.module.data_layout = data_layout
    function = ir.Function(ctx.module, ir.FunctionType(VOID, [PTR] * len(names)), name=symbol)
    function.attributes.add("nounwind")
    emitter = FunctionEmitter(ctx, function, launcher, in_parallel=False)
    for buffer, arg in zip(func.params, function.args):
        check_buffer(buffer)
        arg.name = buffer.name
        arg.add_attribute("noalias")  # the Kernel refuses outputs overlapping other arguments
        emitter.buffers[buffer.name] = (buffer, arg)
    emitter.stmt(func.body)
    emitter.finish()
    return ctx.module, symbol


def compile_func(func: PrimFunc, options: Optional[CodegenOptions] = None) -> Kernel:
    """Compile a loop program for the host CPU.

    The kernel's IR (``llvm_ir``, before optimisation) is verified, optimised with the new pass
    manager at ``options.opt_level`` and JIT-compiled with MCJIT; ``compile_seconds`` is the
    wall time of all of it.
    """
    options = options or CodegenOptions()
    start = time.perf_counter()
    ensure_llvm()
    launcher = make_launcher(options)
    machine = host_target_machine(options.opt_level)
    module_ir, symbol = emit_module(func, launcher, str(machine.target_data),
                                    options.vector_math, options.poison)
    llvm_ir = str(module_ir)
    with LLVM_LOCK:
        module = llvm.parse_assembly(llvm_ir)
        module.verify()
        optimize(module, machine, options.opt_level)
        optimized_ir = str(module)
        engine = jit(module, machine)
        address = engine.get_function_address(symbol)
    return Kernel(func, engine, address, llvm_ir, optimized_ir, time.perf_counter() - start,
                  options, threading=launcher.name if launcher else "serial",
                  num_threads=launcher.threads if launcher else 1)
