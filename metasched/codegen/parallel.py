"""Parallel loops: outline the body into a task and fork-join it through the launcher.

For ``for v in parallel(extent): body`` inside function F this emits
  * ``F.parN``: ``void (ptr noalias buf..., ptr status, i64 captured var..., i64 tid,
    i64 threads)`` running the static contiguous share ``[tid*extent/threads,
    (tid+1)*extent/threads)`` of the iterations. Buffers come in as separate ``noalias``
    parameters, not fields of a struct, so LLVM keeps knowing they do not overlap (it may then
    keep accumulators in registers);
  * ``F.parN.task``: the launcher's ``void (ptr context, i64 tid, i64 threads)`` that unpacks
    the context struct (the captured pointers, the kernel's status word and loop-variable
    values) and calls ``F.parN``;
  * in F: the context struct filled on F's stack, then the launcher's fork-join.
A parallel loop inside a parallel region, or with no launcher, runs as a serial loop.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from metasched.codegen.llvmutil import I32, I64, PTR, VOID, check_i64, i64
from metasched.codegen.runtime import TASK_TYPE
from metasched.ir.access import used_names
from metasched.ir.stmt import For

if TYPE_CHECKING:
    from metasched.codegen.emit import FunctionEmitter


def emit_parallel(fe: FunctionEmitter, loop: For) -> None:
    """Emit ``loop`` (kind PARALLEL) at ``fe``'s builder."""
    launcher = fe.launcher
    threads = 0 if launcher is None else min(launcher.threads, loop.extent)
    if fe.in_parallel or threads <= 1:
        fe.serial_loop(loop)
        return
    # A share's bounds are computed as (thread_id + 1) * extent / threads: the product must fit.
    check_i64(threads * loop.extent,
              f"parallel loop {loop.var!r}: extent x threads ({loop.extent} x {threads}) =")
    used_buffers, used_vars = used_names(loop.body)
    buffers = sorted(name for name in used_buffers if name in fe.buffers)
    variables = sorted(name for name in used_vars if name in fe.variables and name != loop.var)

    body = _outline_body(fe, loop, buffers, variables)
    context_type = ir.LiteralStructType([PTR] * (len(buffers) + 1) + [I64] * len(variables))
    task = _task(fe, body, context_type)

    context = fe.alloca(context_type, name=f"{loop.var}.context")
    values = ([fe.buffers[name][1] for name in buffers] + [fe.status]
              + [fe.variables[name] for name in variables])
    for k, value in enumerate(values):
        field = fe.builder.gep(context, [i64(0), ir.Constant(I32, k)], source_etype=context_type)
        fe.builder.store(value, field)
    launcher.launch(fe.ctx, fe.builder, fe.alloca, task, context, threads)


def _outline_body(fe: FunctionEmitter, loop: For, buffers: list[str],
                  variables: list[str]) -> ir.Function:
    params = [PTR] * (len(buffers) + 1) + [I64] * len(variables) + [I64, I64]
    function = ir.Function(fe.ctx.module, ir.FunctionType(VOID, params),
                           name=fe.ctx.unique(f"{fe.function.name}.par"))
    function.linkage = "internal"
    status = function.args[len(buffers)]
    status.name = "ms.status"
    inner = fe.spawn(function, status)
    for name, arg in zip(buffers, function.args):
        arg.name = name
        arg.add_attribute("noalias")
        inner.buffers[name] = (fe.buffers[name][0], arg)
    for name, arg in zip(variables, function.args[len(buffers) + 1:]):
        arg.name = name
        inner.variables[name] = arg
    thread_id, threads = function.args[-2], function.args[-1]
    thread_id.name, threads.name = "thread_id", "threads"
    b = inner.builder
    # Static contiguous shares whose sizes differ by at most one iteration.
    begin = b.sdiv(b.mul(thread_id, i64(loop.extent)), threads)
    end = b.sdiv(b.mul(b.add(thread_id, i64(1)), i64(loop.extent)), threads)
    inner.serial_loop(loop, begin, end)
    inner.finish()
    return function


def _task(fe: FunctionEmitter, body: ir.Function,
          context_type: ir.LiteralStructType) -> ir.Function:
    task = ir.Function(fe.ctx.module, TASK_TYPE, name=f"{body.name}.task")
    task.linkage = "internal"
    b = ir.IRBuilder(task.append_basic_block("entry"))
    context, thread_id, threads = task.args
    fields = [b.load(b.gep(context, [i64(0), ir.Constant(I32, k)], source_etype=context_type),
                     typ=t)
              for k, t in enumerate(context_type.elements)]
    b.call(body, fields + [thread_id, threads])
    b.ret_void()
    return task
