"""How parallel loops run: the thread launchers the generated code calls.

An outlined parallel body is a *task* ``void task(ptr context, i64 thread_id, i64 threads)``
that runs its share of the iterations. A ``Launcher`` emits the code that runs a task on a
team of threads and returns once all are done (fork-join):

* ``GompLauncher`` — libgomp's ``GOMP_parallel(fn, data, threads, 0)``, the entry point GCC
  emits for ``#pragma omp parallel``; its thread pool forks and joins in about 5 µs.
* ``PthreadLauncher`` — the fallback when libgomp is absent: the generated code calls libc's
  ``pthread_create`` for each extra worker, runs share 0 on the calling thread, then
  ``pthread_join``s (tens of µs per loop: threads are created each time). A worker that cannot
  be created has its share run on the calling thread, so the result never depends on it.

``make_launcher`` resolves ``CodegenOptions.threading`` ("auto" prefers gomp, then pthread);
``"serial"`` (or nothing available) means no launcher: parallel loops become serial loops.
libgomp hangs in a child forked after its pool started, so "auto" picks pthread there (see
``enter_gomp``).
``probe_threads`` runs a task through a launcher and reports which OS threads ran it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import warnings
from abc import ABC, abstractmethod
from typing import Callable, Optional

import llvmlite.binding as llvm
from llvmlite import ir

from metasched.codegen.llvmutil import I32, I64, PTR, VOID, ModuleContext, i64, stack_alloca
from metasched.codegen.options import CodegenOptions
from metasched.codegen.target import LLVM_LOCK, enabled_features, ensure_llvm, host_cpu, host_target_machine, jit

TASK_TYPE = ir.FunctionType(VOID, [PTR, I64, I64])
Alloca = Callable[[ir.Type], ir.Value]


@functools.cache
def gomp_available() -> bool:
    """Load libgomp into the process (once) so that JIT code can call it."""
    ensure_llvm()
    path = ctypes.util.find_library("gomp")
    if path is None:
        return False
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    return llvm.address_of_symbol("GOMP_parallel") is not None


# libgomp cannot run parallel regions in a process forked after its thread pool started: the
# child waits forever for pool threads that were not copied. We cannot see inside machine code,
# so a gomp kernel being called counts as "started"; a child forked after that gets pthread
# kernels from "auto" and a clear error (not a hang) from calling a gomp kernel it inherited.
# (Another library that ran libgomp in the parent, e.g. PyTorch, is beyond what we can see.)
_gomp_started = False
_gomp_forked_after_start = False


def _after_fork_in_child() -> None:
    global _gomp_forked_after_start
    _gomp_forked_after_start = _gomp_forked_after_start or _gomp_started


os.register_at_fork(after_in_child=_after_fork_in_child)


def gomp_usable() -> bool:
    """libgomp is loaded and this process is not a fork of one that started its threads."""
    return gomp_available() and not _gomp_forked_after_start


def enter_gomp() -> None:
    """Called before a gomp kernel runs: raises in a forked child where it would hang."""
    global _gomp_started
    if _gomp_forked_after_start:
        raise RuntimeError("this kernel uses libgomp, which hangs in a process forked after it "
                           "started its threads; compile the kernel in this process (threading "
                           "'auto' then picks pthread) or start workers with 'spawn'")
    _gomp_started = True


@functools.cache
def pthread_available() -> bool:
    """Make libc's ``pthread_create``/``pthread_join`` (libpthread's on old glibc) visible."""
    ensure_llvm()
    for name in ("c", "pthread"):
        path = ctypes.util.find_library(name)
        if path is None:
            continue
        library = ctypes.CDLL(path)
        if hasattr(library, "pthread_create") and hasattr(library, "pthread_join"):
            for symbol in ("pthread_create", "pthread_join", "pthread_self"):
                address = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
                llvm.add_symbol(symbol, address)
            return True
    return False


def available_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Launcher(ABC):
    """Emits a fork-join of a task; ``threads`` is the most a parallel loop may use."""

    name: str

    def __init__(self, threads: int) -> None:
        self.threads = threads

    @abstractmethod
    def launch(self, ctx: ModuleContext, builder: ir.IRBuilder, alloca: Alloca,
               task: ir.Function, context: ir.Value, threads: int) -> None:
        """At ``builder``, run ``task(context, id, threads)`` for ids ``0..threads-1``
        concurrently and wait for all; ``alloca`` makes a stack slot in the entry block."""


class GompLauncher(Launcher):
    name = "gomp"

    def launch(self, ctx: ModuleContext, builder: ir.IRBuilder, alloca: Alloca,
               task: ir.Function, context: ir.Value, threads: int) -> None:
        entry = ir.Function(ctx.module, ir.FunctionType(VOID, [PTR]), name=f"{task.name}.gomp")
        entry.linkage = "internal"
        inner = ir.IRBuilder(entry.append_basic_block("entry"))
        thread_id = inner.call(ctx.declare("omp_get_thread_num", I32, []), [])
        team = inner.call(ctx.declare("omp_get_num_threads", I32, []), [])
        inner.call(task, [entry.args[0], inner.sext(thread_id, I64), inner.sext(team, I64)])
        inner.ret_void()
        gomp_parallel = ctx.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        builder.call(gomp_parallel,
                     [entry, context, ir.Constant(I32, threads), ir.Constant(I32, 0)])


class PthreadLauncher(Launcher):
    name = "pthread"
    # What each worker receives: the shared context, its thread id, the team size.
    ARG_TYPE = ir.LiteralStructType([PTR, I64, I64])

    def launch(self, ctx: ModuleContext, builder: ir.IRBuilder, alloca: Alloca,
               task: ir.Function, context: ir.Value, threads: int) -> None:
        entry = ir.Function(ctx.module, ir.FunctionType(PTR, [PTR]), name=f"{task.name}.thread")
        entry.linkage = "internal"
        inner = ir.IRBuilder(entry.append_basic_block("entry"))
        fields = [inner.load(inner.gep(entry.args[0], [i64(0), ir.Constant(I32, k)],
                                       source_etype=self.ARG_TYPE), typ=t)
                  for k, t in enumerate(self.ARG_TYPE.elements)]
        inner.call(task, fields)
        inner.ret(ir.Constant(PTR, None))

        create = ctx.declare("pthread_create", I32, [PTR, PTR, PTR, PTR])
        join = ctx.declare("pthread_join", I32, [I64, PTR])
        args_type, handles_type = ir.ArrayType(self.ARG_TYPE, threads), ir.ArrayType(I64, threads)
        args, handles = alloca(args_type), alloca(handles_type)
        created = []
        # Thread counts are small compile-time constants: the fork and the join are unrolled.
        for worker in range(threads):
            arg = builder.gep(args, [i64(0), i64(worker)], source_etype=args_type)
            for k, value in enumerate((context, i64(worker), i64(threads))):
                builder.store(value, builder.gep(arg, [i64(0), ir.Constant(I32, k)],
                                                 source_etype=self.ARG_TYPE))
        for worker in range(1, threads):
            handle = builder.gep(handles, [i64(0), i64(worker)], source_etype=handles_type)
            arg = builder.gep(args, [i64(0), i64(worker)], source_etype=args_type)
            status = builder.call(create, [handle, ir.Constant(PTR, None), entry, arg])
            failed = builder.icmp_signed("!=", status, ir.Constant(I32, 0))
            with builder.if_then(failed, likely=False):
                builder.call(entry, [arg])  # no thread: run this share here
            created.append((handle, failed))
        builder.call(entry, [builder.gep(args, [i64(0), i64(0)], source_etype=args_type)])
        for handle, failed in created:
            with builder.if_then(builder.not_(failed), likely=True):
                builder.call(join, [builder.load(handle, typ=I64), ir.Constant(PTR, None)])


def make_launcher(options: CodegenOptions) -> Optional[Launcher]:
    """The launcher ``options.threading`` asks for; None runs parallel loops serially."""
    threads = options.num_threads or available_cores()
    choice = options.threading
    if choice == "serial":
        return None
    if choice in ("auto", "gomp") and gomp_usable():
        return GompLauncher(threads)
    if choice == "gomp":
        raise RuntimeError("threading='gomp' but libgomp cannot be loaded (or this process was "
                           "forked after it started); use 'pthread' or 'auto'")
    if pthread_available():
        return PthreadLauncher(threads)
    if choice == "pthread":
        raise RuntimeError("threading='pthread' but pthread_create cannot be found")
    warnings.warn("neither libgomp nor pthread_create is available: parallel loops run serially",
                  RuntimeWarning, stacklevel=3)
    return None


def probe_threads(launcher: Launcher, threads: int) -> list[int]:
    """Run a task through ``launcher`` on ``threads`` threads; each writes ``pthread_self()``
    into its slot. Returns the slots: distinct values mean distinct OS threads ran the shares."""
    pthread_available()
    ctx = ModuleContext("probe")
    task = ir.Function(ctx.module, TASK_TYPE, name="probe.task")
    builder = ir.IRBuilder(task.append_basic_block("entry"))
    slot = builder.gep(task.args[0], [task.args[1]], source_etype=I64)
    builder.store(builder.call(ctx.declare("pthread_self", I64, []), []), slot)
    builder.ret_void()
    main = ir.Function(ctx.module, ir.FunctionType(VOID, [PTR]), name="probe")
    builder = ir.IRBuilder(main.append_basic_block("entry"))
    launcher.launch(ctx, builder, lambda t: stack_alloca(builder, t), task, main.args[0], threads)
    builder.ret_void()
    machine = host_target_machine()
    with LLVM_LOCK:
        module = llvm.parse_assembly(str(ctx.module))
        module.verify()
        engine = jit(module, machine)
    if isinstance(launcher, GompLauncher):
        enter_gomp()
    slots = (ctypes.c_uint64 * threads)()
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address("probe"))(
        ctypes.addressof(slots))
    return list(slots)


def host_description() -> str:
    """One line saying what kernels are compiled for, for benchmark reports."""
    _, cpu, features = host_cpu()
    enabled = enabled_features(features)
    shown = [f for f in ("avx512f", "avx2", "fma") if f in enabled]
    launcher = make_launcher(CodegenOptions())
    major, minor, patch = llvm.llvm_version_info
    return (f"{cpu} ({available_cores()} cores; {' '.join(shown) or 'no avx'}), "
            f"LLVM {major}.{minor}.{patch}, parallel loops via {launcher.name if launcher else 'serial'}")
