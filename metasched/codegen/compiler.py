"""Compiling a loop program, in two halves that may run in different processes.

``compile_artifact(func, options)``: ``PrimFunc`` → LLVM IR → optimised module → object code,
in an ``Artifact`` that pickles (a builder worker makes it). ``load_kernel(artifact)``: object
code → machine code linked into this process → ``Kernel`` (a runner worker makes it, in a few
milliseconds). ``compile_func`` does both in one process.
"""
from __future__ import annotations

import ctypes
import functools
import re
import time
from dataclasses import dataclass
from typing import Optional

import llvmlite.binding as llvm
from llvmlite import ir

from metasched.codegen.emit import BUFFER_ALIGN, FunctionEmitter
from metasched.codegen.gate import emit_gate, gate_symbol
from metasched.codegen.kernel import Kernel
from metasched.codegen.llvmutil import PTR, VOID, ModuleContext, check_buffer
from metasched.codegen.options import CodegenOptions
from metasched.codegen.runtime import Launcher, gomp_available, make_launcher, pthread_available
from metasched.codegen.target import LLVM_LOCK, ensure_llvm, host_cpu, host_target_machine, optimize
from metasched.codegen.vecmath import libmvec_isas
from metasched.errors import CodegenError
from metasched.ir.stmt import PrimFunc


@dataclass(frozen=True)
class Artifact:
    """A compiled loop program that can cross a process boundary: what ``load_kernel`` needs
    and nothing that lives in one process (no engine, no function pointer).

    ``host`` is the (triple, CPU name, features) it was compiled for: the object code uses
    that CPU's instructions, so another CPU refuses to load it. ``externals`` are the symbols
    the code calls outside itself (libm, libmvec, libgomp or pthreads, libc), which the loading
    process must be able to resolve.
    """

    func: PrimFunc
    object_code: bytes
    symbol: str
    options: CodegenOptions
    threading: str  # the launcher parallel loops use: gomp, pthread or serial
    num_threads: int
    host: tuple[str, str, str]
    externals: tuple[str, ...]
    llvm_ir: str  # as emitted, before optimisation
    optimized_ir: str
    compile_seconds: float


def emit_module(func: PrimFunc, launcher: Optional[Launcher], data_layout: str = "",
                vector_math: bool = True, poison: bool = False) -> tuple[ir.Module, str]:
    """The unoptimised LLVM module of ``func`` and the name of its entry function (its gate,
    ``gate.emit_gate``, is named ``gate_symbol`` of it)."""
    names = [b.name for b in func.params]
    if len(set(names)) != len(names):
        raise CodegenError(f"{func.name} has repeated parameter names {names}")
    # Prefixed so that a kernel called e.g. "erf" cannot capture libm's erf.
    symbol = "ms_" + re.sub(r"[^A-Za-z0-9_]", "_", func.name)
    ctx = ModuleContext(symbol, vector_math, poison)
    ctx.module.triple = host_cpu()[0]
    ctx.module.data_layout = data_layout
    # The buffers, then the status word (``emit.OUT_OF_MEMORY``).
    function = ir.Function(ctx.module, ir.FunctionType(VOID, [PTR] * (len(names) + 1)), name=symbol)
    status = function.args[-1]
    status.name = "ms.status"  # a dot: no buffer's name
    status.add_attribute("noalias")
    emitter = FunctionEmitter(ctx, function, launcher, in_parallel=False, status=status)
    for buffer, arg in zip(func.params, function.args):
        check_buffer(buffer)
        arg.name = buffer.name
        arg.add_attribute("noalias")  # the Kernel refuses outputs overlapping other arguments
        emitter.buffers[buffer.name] = (buffer, arg)
    emitter.stmt(func.body)
    emitter.finish()
    # Called from the gate, never copied into it: the gate stays small, compiling stays fast.
    function.attributes.add("noinline")
    emit_gate(ctx.module, function, func.inputs, func.outputs, len(func.workspaces), gate_symbol(symbol))
    for defined in ctx.module.functions:
        if not defined.is_declaration:
            # Every function aligns its stack to a cache line, so that spilled vector
            # registers do not straddle two lines: without it a spill slot's alignment was
            # that of the stack pointer the thread happened to have, and one kernel ran in
            # 1.2 or 1.7 ms depending on the process. (llvmlite prints no attribute of a
            # function without a named one; none of ours unwinds.)
            defined.attributes.add("nounwind")
            defined.attributes.alignstack = BUFFER_ALIGN
    return ctx.module, symbol


def compile_artifact(func: PrimFunc, options: Optional[CodegenOptions] = None) -> Artifact:
    """Compile a loop program for the host CPU into object code.

    The kernel's IR is verified, optimised with the new pass manager at ``options.opt_level``
    and compiled to an object file; ``compile_seconds`` is the wall time of all of it.
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
        externals = tuple(sorted(f.name for f in module.functions
                                 if f.is_declaration and not f.name.startswith("llvm.")))
        object_code = machine.emit_object(module)
    return Artifact(func, object_code, symbol, options,
                    threading=launcher.name if launcher else "serial",
                    num_threads=launcher.threads if launcher else 1,
                    host=host_cpu(), externals=externals, llvm_ir=llvm_ir,
                    optimized_ir=optimized_ir, compile_seconds=time.perf_counter() - start)


@functools.cache
def _process_symbols() -> ctypes.CDLL:
    return ctypes.CDLL(None)  # dlsym over everything loaded into this process (libc...)


def _resolvable(symbol: str) -> bool:
    return llvm.address_of_symbol(symbol) is not None or hasattr(_process_symbols(), symbol)


def load_kernel(artifact: Artifact) -> Kernel:
    """Link ``artifact``'s object code into this process and return its ``Kernel``.

    Refuses (``CodegenError``) an artifact compiled for another CPU and one that calls a
    function this process cannot provide, before any of its code is linked: an unresolved call
    would otherwise jump to address 0.
    """
    if artifact.host != host_cpu():
        _, cpu, _ = artifact.host
        raise CodegenError(f"this kernel was compiled for {cpu} ({artifact.host[0]}) with other "
                           f"CPU features than this machine's {host_cpu()[1]}; compile it here")
    ensure_llvm()
    if artifact.threading == "gomp" and not gomp_available():
        raise CodegenError("this kernel runs parallel loops through libgomp, which this process "
                           "cannot load")
    if artifact.threading == "pthread":
        pthread_available()
    if artifact.options.vector_math:
        libmvec_isas()
    missing = [s for s in artifact.externals if not _resolvable(s)]
    if missing:
        raise CodegenError(f"this kernel calls {', '.join(missing)}, which this process cannot "
                           f"resolve")
    with LLVM_LOCK:
        holder = llvm.parse_assembly("")
        holder.triple = artifact.host[0]
        engine = llvm.create_mcjit_compiler(holder, host_target_machine(artifact.options.opt_level))
        engine.add_object_file(llvm.ObjectFileRef.from_data(artifact.object_code))
        engine.finalize_object()
        address = engine.get_function_address(artifact.symbol)
        gate = engine.get_function_address(gate_symbol(artifact.symbol))
    if not address or not gate:
        raise CodegenError(f"the object code defines no function {artifact.symbol} or no gate of it")
    return Kernel(artifact, engine, address, gate)


def compile_func(func: PrimFunc, options: Optional[CodegenOptions] = None) -> Kernel:
    """Compile a loop program for the host CPU and load it into this process: a ``Kernel``
    whose ``compile_seconds`` counts the compilation, not the (much shorter) loading."""
    return load_kernel(compile_artifact(func, options))
