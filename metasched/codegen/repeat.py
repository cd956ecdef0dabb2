"""Back-to-back runs in machine code: ``repeater(arity)`` calls a kernel's entry ``n`` times
with the same pointers, so that a timing holds no Python between a kernel's runs, as TVM's
``time_evaluator`` runs its loop in C++. A call through ctypes costs about a microsecond,
which is a quarter of a 4 us kernel. One small module per arity, compiled once a process."""
from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
from llvmlite import ir

from metasched.codegen.llvmutil import I64, PTR, VOID, for_range
from metasched.codegen.target import LLVM_LOCK, ensure_llvm, host_cpu, host_target_machine, jit


class Repeater:
    """``repeater(entry, n, *pointers)``: ``entry(*pointers)`` ``n`` times in a row, where
    ``entry`` is the address of a function taking ``arity`` pointers and returning nothing."""

    def __init__(self, arity: int) -> None:
        module = ir.Module(name=f"ms_repeat_{arity}")
        module.triple = host_cpu()[0]
        kernel_type = ir.FunctionType(VOID, [PTR] * arity)
        # The entry's pointer typed with its function's type, as llvmlite needs to call it
        # (it prints as an opaque ``ptr``).
        signature = ir.FunctionType(VOID, [kernel_type.as_pointer(), I64] + [PTR] * arity)
        function = ir.Function(module, signature, name="ms_repeat")
        entry, count, *pointers = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        with for_range(builder, ir.Constant(I64, 0), count, "run"):
            builder.call(entry, pointers)
        builder.ret_void()
        ensure_llvm()
        with LLVM_LOCK:
            parsed = llvm.parse_assembly(str(module))
            parsed.verify()
            # Not optimised: LLVM must keep every call, and the loop is three instructions.
            self._engine = jit(parsed, host_target_machine(0))  # holds the code
            address = self._engine.get_function_address("ms_repeat")
        self._function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64,
                                          *[ctypes.c_void_p] * arity)(address)

    def __call__(self, entry: int, n: int, *pointers: int) -> None:
        self._function(entry, n, *pointers)


@functools.cache
def repeater(arity: int) -> Repeater:
    """The process's ``Repeater`` of kernels taking ``arity`` pointers."""
    return Repeater(arity)
