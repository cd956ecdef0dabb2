"""Scalar emission: one ``FunctionEmitter`` per LLVM function (the kernel, or the outlined body
of a parallel loop) turns statements and expressions into IR.

Map: ``FunctionEmitter`` state and helpers (scopes, allocas, addresses) · statement emitters
(``_STMT``) · loop kinds (``_FOR``) · expression emitters (``_EXPR``). Parallel loops are
delegated to ``parallel.py`` and vectorized loops to ``vector.py``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

from llvmlite import ir

from metasched.codegen import ops
from metasched.errors import CodegenError
from metasched.codegen.llvmutil import (
    ELEMENT_BYTES, PTR, VOID, I8, I32, I64, ModuleContext, branch_value, check_buffer, check_i64, for_range,
    i64, llvm_type, stack_alloca,
)
from metasched.codegen.numbering import ValueTable
from metasched.codegen.parallel import emit_parallel
from metasched.codegen.runtime import Launcher
from metasched.codegen.vector import emit_vectorized
from metasched.ir.access import flat_index, sub_stmts
from metasched.ir.analysis import loads
from metasched.ir.expr import (
    INDEX, BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Neg, Not, Select, Var,
)
from metasched.ir.stmt import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store


# Scratch buffers up to this size live on the stack (where LLVM can keep them in registers);
# larger ones on the heap, because a worker thread's stack may be as small as 2 MiB.
MAX_STACK_BUFFER_BYTES = 256 * 1024
# Scratch buffers start on a cache line (64 bytes; also the widest vector, AVX-512's).
BUFFER_ALIGN = 64
# What a kernel stores in its status word (its last argument) when a heap scratch buffer
# cannot be allocated; the word is left alone otherwise.
OUT_OF_MEMORY = 1


def buffer_bytes(buffer: Buffer) -> int:
    """The bytes ``buffer`` takes."""
    return buffer.size * ELEMENT_BYTES[buffer.dtype]


def heap_buffers(func: PrimFunc) -> list[Buffer]:
    """The scratch buffers of ``func`` that its kernel allocates on the heap (with malloc)."""
    return [s.buffer for s in sub_stmts(func.body)
            if isinstance(s, Allocate) and buffer_bytes(s.buffer) > MAX_STACK_BUFFER_BYTES]


class FunctionEmitter:
    """Emits statements into one LLVM function.

    ``variables`` maps loop variables in scope to i64 values, ``buffers`` maps buffer names to
    their ``Buffer`` and base pointer, ``status`` is the kernel's status word (an ``i32``
    pointer, see ``OUT_OF_MEMORY``). Allocas go to the entry block (``alloca_builder``) so
    that LLVM promotes and frees them as stack slots; ``finish`` links entry to the body.
    Pure arithmetic is emitted once and reused (``values``, see ``numbering``): control flow is
    therefore opened only through ``loop``, ``if_then``, ``if_else`` and ``choose``.
    """

    def __init__(self, ctx: ModuleContext, function: ir.Function, launcher: Optional[Launcher],
                 in_parallel: bool, status: ir.Value) -> None:
        self.ctx = ctx
        self.function = function
        self.launcher = launcher
        self.in_parallel = in_parallel
        self.status = status
        entry = function.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        self.builder = ir.IRBuilder(function.append_basic_block("body"))
        self.variables: dict[str, ir.Value] = {}
        self.buffers: dict[str, tuple[Buffer, ir.Value]] = {}
        # Stack slots of finished Allocates, reusable by later ones of the same dtype and size
        # (an Allocate inside an unrolled loop then takes one slot, not one per copy).
        self._free_slots: dict[tuple[str, int], list[ir.Value]] = {}
        self.values = ValueTable()

    def finish(self) -> None:
        """Close the function: entry falls through to the body, the body returns."""
        self.alloca_builder.branch(self.function.blocks[1])
        self.builder.ret_void()

    # --- scopes and memory -------------------------------------------------------------------
    @contextmanager
    def bind(self, name: str, value: ir.Value) -> Iterator[None]:
        """``name`` means ``value`` while the block runs (shadowing restored after)."""
        previous = self.variables.get(name)
        self.variables[name] = value
        try:
            yield
        finally:
            if previous is None:
                del self.variables[name]
            else:
                self.variables[name] = previous

    def buffer(self, name: str) -> tuple[Buffer, ir.Value]:
        try:
            return self.buffers[name]
        except KeyError:
            raise CodegenError(f"buffer {name!r} is neither a parameter nor allocated "
                             f"here") from None

    def stack_slot(self, buffer: Buffer) -> ir.Value:
        free = self._free_slots.get((buffer.dtype, buffer.size))
        if free:
            return free.pop()
        return self.alloca(ir.ArrayType(llvm_type(buffer.dtype), buffer.size), buffer.name,
                           BUFFER_ALIGN)

    def _heap_buffer(self, size: int, name: str) -> ir.Value:
        """``size`` bytes from malloc, and then some: the pointer to free, which may be null.
        Not aligned_alloc: glibc returned its memory to the system on every free, which cost
        10 page faults per call of a matmul kernel."""
        malloc = self.ctx.declare("malloc", PTR, [I64])
        return self.builder.call(malloc, [i64(size + BUFFER_ALIGN - 1)], name=f"{name}.raw")

    def _aligned(self, raw: ir.Value, name: str) -> ir.Value:
        """The first cache line boundary in the (non-null) memory at ``raw``."""
        address = self.builder.ptrtoint(raw, I64)
        skip = self.builder.and_(self.builder.sub(i64(0), address), i64(BUFFER_ALIGN - 1))
        return self.builder.gep(raw, [skip], inbounds=True, source_etype=I8, name=name)

    def alloca(self, t: ir.Type, name: str = "", align: Optional[int] = None) -> ir.Value:
        """A stack slot in the entry block (allocas elsewhere would grow the stack in loops)."""
        return stack_alloca(self.alloca_builder, t, name, align)

    def address(self, buffer_name: str, indices: tuple[Expr, ...]) -> tuple[Buffer, ir.Value]:
        """Pointer to one element; ``inbounds`` because scalar code only forms addresses of
        accesses it performs."""
        buffer, base = self.buffer(buffer_name)
        offset = self.expr(flat_index(buffer, indices))
        return buffer, self.builder.gep(base, [offset], inbounds=True,
                                        source_etype=llvm_type(buffer.dtype))

    # --- control flow (each branch a region of ``values``) --------------------------------------
    @contextmanager
    def loop(self, start: ir.Value, stop: ir.Value, name: str) -> Iterator[ir.Value]:
        """``for index in range(start, stop)``; the body is emitted inside the ``with`` block."""
        with for_range(self.builder, start, stop, name=name) as index, self.values.region():
            yield index

    @contextmanager
    def if_then(self, cond: ir.Value) -> Iterator[None]:
        with self.builder.if_then(cond), self.values.region():
            yield

    def if_else(self, cond: ir.Value, then: Callable[[], None],
                otherwise: Callable[[], None]) -> None:
        """``then()`` where ``cond`` holds, else ``otherwise()``."""
        with self.builder.if_else(cond) as (then_block, else_block):
            with then_block, self.values.region():
                then()
            with else_block, self.values.region():
                otherwise()

    def choose(self, cond: ir.Value, if_true: Callable[[], ir.Value],
               if_false: Callable[[], ir.Value]) -> ir.Value:
        """``if_true()`` where ``cond`` holds, else ``if_false()``, through real branches (the
        untaken side's loads may be out of bounds)."""
        def in_region(side: Callable[[], ir.Value]) -> Callable[[], ir.Value]:
            def emit() -> ir.Value:
                with self.values.region():
                    return side()
            return emit
        return branch_value(self.builder, cond, in_region(if_true), in_region(if_false))

    # --- statements --------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        try:
            emitter = _STMT[type(s)]
        except KeyError:
            raise TypeError(f"codegen: not a statement: {s!r}") from None
        emitter(self, s)

    def _store(self, s: Store) -> None:
        buffer, pointer = self.address(s.buffer, s.indices)
        value = ops.convert(self.builder, self.expr(s.value), buffer.dtype)
        self.builder.store(value, pointer, align=ELEMENT_BYTES[buffer.dtype])

    def _seq(self, s: Seq) -> None:
        for child in s.stmts:
            self.stmt(child)

    def _if(self, s: IfThenElse) -> None:
        cond = self.expr(s.cond)
        if s.else_body is None:
            with self.if_then(cond):
                self.stmt(s.then_body)
            return
        else_body = s.else_body
        self.if_else(cond, lambda: self.stmt(s.then_body), lambda: self.stmt(else_body))

    def _allocate(self, s: Allocate) -> None:
        if s.buffer.name in self.buffers:
            raise CodegenError(f"Allocate of {s.buffer.name!r} shadows a buffer in scope")
        check_buffer(s.buffer)
        size = buffer_bytes(s.buffer)
        if size <= MAX_STACK_BUFFER_BYTES:  # as heap_buffers decides
            slot = self.stack_slot(s.buffer)
            self._allocated(s, slot)
            self._free_slots.setdefault((s.buffer.dtype, s.buffer.size), []).append(slot)
            return
        # A big region (a block computed at an outer loop) would overflow a worker thread's
        # stack: it lives on the heap for the body's duration instead. Where malloc fails,
        # the body is skipped and the status word says so (the Kernel then raises).
        raw = self._heap_buffer(size, s.buffer.name)

        def allocated() -> None:
            self._allocated(s, self._aligned(raw, s.buffer.name))
            self.builder.call(self.ctx.declare("free", VOID, [PTR]), [raw])

        self.if_else(self.builder.icmp_unsigned("==", raw, ir.Constant(PTR, None)),
                     self.out_of_memory, allocated)

    def _allocated(self, s: Allocate, slot: ir.Value) -> None:
        """``s``'s body with its buffer at ``slot`` (NaN-filled first when poisoning)."""
        if self.ctx.poison:
            nan = ir.Constant(llvm_type(s.buffer.dtype), float("nan"))
            with self.loop(i64(0), i64(s.buffer.size), name="poison") as index:
                self.builder.store(nan, self.builder.gep(slot, [index], source_etype=llvm_type(s.buffer.dtype)))
        self.buffers[s.buffer.name] = (s.buffer, slot)
        try:
            self.stmt(s.body)
        finally:
            del self.buffers[s.buffer.name]

    def out_of_memory(self) -> None:
        """Set the status word to ``OUT_OF_MEMORY`` (atomically: every thread of a parallel
        loop may)."""
        self.builder.atomic_rmw("or", self.status, ir.Constant(I32, OUT_OF_MEMORY), "monotonic")

    def _for(self, s: For) -> None:
        # Checked before any kind's emitter: an unrolled loop would otherwise start copying
        # out 2**63 bodies, the others would wrap the extent.
        check_i64(s.extent, f"extent of loop {s.var!r}")
        _FOR[s.kind](self, s)

    # --- loop kinds --------------------------------------------------------------------------
    def serial_loop(self, s: For, start: Optional[ir.Value] = None,
                    stop: Optional[ir.Value] = None) -> None:
        """``for var in range(start, stop)`` (default ``range(extent)``) one after another."""
        start = i64(0) if start is None else start
        stop = i64(s.extent) if stop is None else stop
        with self.loop(start, stop, name=s.var) as index, self.bind(s.var, index):
            self.stmt(s.body)

    def _unrolled(self, s: For) -> None:
        # The body is copied once per iteration with the variable a constant: no loop remains.
        for iteration in range(s.extent):
            with self.bind(s.var, i64(iteration)):
                self.stmt(s.body)

    def spawn(self, function: ir.Function, status: ir.Value) -> "FunctionEmitter":
        """An emitter for another function of this module (an outlined parallel body, given
        the status word as ``status``), which runs inside a parallel region."""
        return FunctionEmitter(self.ctx, function, self.launcher, in_parallel=True, status=status)

    # --- expressions -------------------------------------------------------------------------
    def expr(self, e: Expr) -> ir.Value:
        try:
            emitter = _EXPR[type(e)]
        except KeyError:
            raise TypeError(f"codegen: not an expression: {e!r}") from None
        return emitter(self, e)

    def _int_imm(self, e: IntImm) -> ir.Value:
        return i64(e.value)

    def _float_imm(self, e: FloatImm) -> ir.Value:
        return ir.Constant(llvm_type(e.dtype), float(e.value))

    def _var(self, e: Var) -> ir.Value:
        try:
            return self.variables[e.name]
        except KeyError:
            raise CodegenError(f"variable {e.name!r} is not bound by an enclosing "
                             f"loop") from None

    def _load(self, e: Load) -> ir.Value:
        buffer, pointer = self.address(e.buffer, e.indices)
        value = self.builder.load(pointer, align=ELEMENT_BYTES[buffer.dtype],
                                  typ=llvm_type(buffer.dtype))
        return ops.convert(self.builder, value, e.dtype)

    def _binop(self, e: BinOp) -> ir.Value:
        if e.op == "+" and e.dtype == INDEX:
            return self.index_sum(_summands(e))
        a, b = self.expr(e.a), self.expr(e.b)
        return self.values.numbered((e.op, e.dtype, e.a.dtype, e.b.dtype), (a, b),
                                    lambda: ops.binop_value(self.ctx, self.builder, e, a, b))

    def index_sum(self, terms: Sequence[Expr]) -> ir.Value:
        """The sum of index expressions, with the terms that are constants here (an unrolled
        loop's variable) added last: every copy of an unrolled body then shares the sum of the
        other terms and adds its own constant."""
        total: Optional[ir.Value] = None
        constant = 0
        for term in terms:
            value = self.expr(term)
            known = ops.known_int(value)
            if known is not None:
                constant += known
            elif total is None:
                total = value
            else:
                total = self.index_add(total, value)
        constant_value = i64(constant, "index constant")
        return constant_value if total is None else self.index_add(total, constant_value)

    def index_add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.values.numbered(("+", INDEX), (a, b),
                                    lambda: ops.int_arith(self.builder, "+", a, b))

    def _neg(self, e: Neg) -> ir.Value:
        a = self.expr(e.a)
        return self.values.numbered("neg", (a,), lambda: ops.negate(self.builder, a))

    def _not(self, e: Not) -> ir.Value:
        a = self.expr(e.a)
        return self.values.numbered("not", (a,), lambda: self.builder.not_(a))

    def _cast(self, e: Cast) -> ir.Value:
        value = self.expr(e.value)
        return self.values.numbered(("cast", e.dtype), (value,),
                                    lambda: ops.convert(self.builder, value, e.dtype))

    def _call(self, e: Call) -> ir.Value:
        args = [ops.convert(self.builder, self.expr(a), e.dtype) for a in e.args]
        return ops.math_call(self.ctx, self.builder, e.func, args)

    def _select(self, e: Select) -> ir.Value:
        cond = self.expr(e.cond)
        dtype = e.dtype

        def side(x: Expr) -> Callable[[], ir.Value]:
            return lambda: ops.convert(self.builder, self.expr(x), dtype)

        if loads(e.true_value) or loads(e.false_value):
            # A branch's load may be out of bounds when it is not taken (padding): branch.
            return self.choose(cond, side(e.true_value), side(e.false_value))
        return self.builder.select(cond, side(e.true_value)(), side(e.false_value)())


def _summands(e: BinOp) -> list[Expr]:
    """The terms of a tree of index ``+``, left to right."""
    terms: list[Expr] = []
    stack: list[Expr] = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, BinOp) and node.op == "+" and node.dtype == INDEX:
            stack.append(node.b)
            stack.append(node.a)
        else:
            terms.append(node)
    return terms


_STMT = {
    Store: FunctionEmitter._store,
    Seq: FunctionEmitter._seq,
    IfThenElse: FunctionEmitter._if,
    Allocate: FunctionEmitter._allocate,
    For: FunctionEmitter._for,
}
_FOR = {
    ForKind.SERIAL: FunctionEmitter.serial_loop,
    ForKind.UNROLLED: FunctionEmitter._unrolled,
    ForKind.PARALLEL: emit_parallel,
    ForKind.VECTORIZED: emit_vectorized,
}
_EXPR = {
    IntImm: FunctionEmitter._int_imm,
    FloatImm: FunctionEmitter._float_imm,
    Var: FunctionEmitter._var,
    Load: FunctionEmitter._load,
    BinOp: FunctionEmitter._binop,
    Neg: FunctionEmitter._neg,
    Not: FunctionEmitter._not,
    Cast: FunctionEmitter._cast,
    Call: FunctionEmitter._call,
    Select: FunctionEmitter._select,
}
