"""Small llvmlite helpers shared by the emitters: types, constants that work for scalars and
vectors alike, intrinsic declarations, and control-flow context managers."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

from llvmlite import ir

from metasched.errors import CodegenError
from metasched.ir.limits import INT64_MAX, MAX_BUFFER_BYTES, fits_int64
from metasched.ir.stmt import Buffer

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_DTYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "int64": I64, "bool": I1}
ELEMENT_BYTES = {"float32": 4, "float64": 8, "int64": 8}


def llvm_type(dtype: str, lanes: Optional[int] = None) -> ir.Type:
    """The LLVM type of one element of ``dtype``, or of ``lanes`` of them."""
    try:
        scalar = _DTYPES[dtype]
    except KeyError:
        raise CodegenError(f"unsupported dtype {dtype!r}") from None
    return scalar if lanes is None else ir.VectorType(scalar, lanes)


def lanes_of(value: ir.Value) -> Optional[int]:
    """Lane count of a vector value, None for a scalar."""
    return value.type.count if isinstance(value.type, ir.VectorType) else None


def mangle(t: ir.Type) -> str:
    """The overload suffix LLVM intrinsics use for a type (``f32``, ``v16f32``, ``p0``...)."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{mangle(t.element)}"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.PointerType):
        return "p0"
    raise ValueError(f"cannot mangle {t}")


def const(t: ir.Type, value) -> ir.Constant:
    """``value`` as a constant of type ``t``; a vector type gets it in every lane."""
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [value] * t.count)
    return ir.Constant(t, value)


# Generated code does all index, extent and size arithmetic in signed 64-bit integers (i64).
# llvmlite prints any Python int into the IR and LLVM then wraps it modulo 2**64, so every
# integer must be checked before it becomes a constant: a wrapped extent or offset would run
# silently wrong (e.g. a loop of 2**63 iterations would run none). The layers above refuse
# such values with better messages; this is the last line (limits in metasched.ir.limits).
def check_i64(value: int, what: str = "integer constant") -> int:
    """``value`` when it fits in i64, else ``CodegenError`` naming ``what`` it is."""
    if not fits_int64(value):
        raise CodegenError(f"{what} {value} does not fit in the signed 64-bit integers of "
                           f"generated code (limit {INT64_MAX})")
    return value


def i64(value: int, what: str = "integer constant") -> ir.Constant:
    """``value`` as an i64 constant; ``CodegenError`` (naming ``what``) when it does not fit."""
    return ir.Constant(I64, check_i64(value, what))


def i64_vector(values: Sequence[int], what: str = "integer constant") -> ir.Constant:
    """A vector of i64 constants, each checked like ``i64``'s."""
    return ir.Constant(ir.VectorType(I64, len(values)), [check_i64(v, what) for v in values])


def check_buffer(buffer: Buffer) -> None:
    """Refuse a buffer whose dimensions or byte size the generated code cannot index."""
    for extent in buffer.shape:
        if not 0 <= extent <= INT64_MAX:
            raise CodegenError(f"buffer {buffer.name!r} has shape {tuple(buffer.shape)}: "
                               f"dimension {extent} is outside 0..{INT64_MAX}")
    # 8 bytes (the widest element) for a dtype that ``llvm_type`` or a store will refuse.
    size_bytes = buffer.size * ELEMENT_BYTES.get(buffer.dtype, 8)
    if size_bytes >= MAX_BUFFER_BYTES:
        raise CodegenError(f"buffer {buffer.name!r} of shape {tuple(buffer.shape)} "
                           f"({buffer.dtype}) takes {size_bytes} bytes; the generated code "
                           f"indexes buffers below 2**62 bytes")


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """A vector with the scalar ``value`` in each of ``lanes`` lanes."""
    if isinstance(value, ir.Constant) and not isinstance(value.type, ir.VectorType):
        return ir.Constant(ir.VectorType(value.type, lanes), [value.constant] * lanes)
    vec_type = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vec_type, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vec_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def stack_alloca(builder: ir.IRBuilder, t: ir.Type, name: str = "",
                 align: Optional[int] = None) -> ir.AllocaInstr:
    """``alloca t`` typed as an opaque ``ptr`` (llvmlite would print a typed ``t*``, which LLVM
    no longer parses)."""
    slot = builder.alloca(t, name=name)
    slot.type = PTR
    slot.align = align
    return slot


def lane_ids(lanes: int) -> ir.Constant:
    """``<0, 1, ..., lanes-1>`` as i64."""
    return i64_vector(range(lanes))


class ModuleContext:
    """The module being built and what every function emitter shares: declarations of
    intrinsics and external functions (each declared once), and unique names."""

    def __init__(self, name: str, vector_math: bool = True, poison: bool = False) -> None:
        self.module = ir.Module(name=name)
        self.vector_math = vector_math  # vector exp/log/... through libmvec when available
        self.poison = poison  # fill scratch buffers with NaN when they are allocated
        self._names: dict[str, int] = {}

    def declare(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        """The function ``name``, declared on first use."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, list(args)), name=name)

    def intrinsic(self, base: str, ret: ir.Type, args: Sequence[ir.Type],
                  overloads: Sequence[ir.Type]) -> ir.Function:
        """An overloaded intrinsic, e.g. ``intrinsic("llvm.exp", t, [t], [t])`` declares
        ``llvm.exp.v16f32`` for a 16-lane float vector ``t``."""
        name = ".".join([base] + [mangle(t) for t in overloads])
        return self.declare(name, ret, args)

    def unique(self, stem: str) -> str:
        """``stem``, then ``stem.1``, ``stem.2``... for module-level names."""
        n = self._names.get(stem, 0)
        self._names[stem] = n + 1
        return stem if n == 0 else f"{stem}.{n}"


@contextmanager
def for_range(builder: ir.IRBuilder, start: ir.Value, stop: ir.Value,
              name: str = "loop") -> Iterator[ir.Value]:
    """``for index in range(start, stop)`` with an i64 phi counter; the body is emitted inside
    the ``with`` block, and the builder is left after the loop."""
    function = builder.function
    header = function.append_basic_block(f"{name}.header")
    body = function.append_basic_block(f"{name}.body")
    done = function.append_basic_block(f"{name}.exit")
    before = builder.block
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, done)
    builder.position_at_end(body)
    yield index
    following = builder.add(index, i64(1), flags=("nuw", "nsw"))
    index.add_incoming(following, builder.block)
    builder.branch(header)
    builder.position_at_end(done)


def branch_value(builder: ir.IRBuilder, cond: ir.Value, if_true: Callable[[], ir.Value],
                 if_false: Callable[[], ir.Value]) -> ir.Value:
    """``if_true()`` where ``cond`` holds, else ``if_false()``, through real branches so that
    the untaken side's instructions (loads that may be out of bounds) never run."""
    with builder.if_else(cond) as (then, otherwise):
        with then:
            true_value = if_true()
            true_block = builder.block
        with otherwise:
            false_value = if_false()
            false_block = builder.block
    if true_value.type != false_value.type:
        raise TypeError(f"branches disagree on type: {true_value.type} vs {false_value.type}")
    merged = builder.phi(true_value.type)
    merged.add_incoming(true_value, true_block)
    merged.add_incoming(false_value, false_block)
    return merged
