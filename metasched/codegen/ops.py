"""Arithmetic of the IR's operators on LLVM values. Every function here works on scalars and
on vectors alike (constants are splatted to the operand's type), so the scalar and the vector
emitters share one definition of each operator's meaning."""
from __future__ import annotations

from typing import Callable, Optional

from llvmlite import ir

from metasched.codegen.llvmutil import (
    I1, I32, ModuleContext, check_i64, const, lanes_of, llvm_type,
)
from metasched.codegen.vecmath import vector_math_call
from metasched.ir.expr import COMPARE_OPS, INDEX, LOGIC_OPS, BinOp
from metasched.errors import CodegenError

# `contract` lets LLVM fuse a*b+c into an FMA; reassociation flags are deliberately absent
# because they would change results (and reduction order) behind the schedule's back.
FLOAT_FLAGS = ("contract",)

def _is_float(t: ir.Type) -> bool:
    element = t.element if isinstance(t, ir.VectorType) else t
    return isinstance(element, (ir.FloatType, ir.DoubleType))


def convert(builder: ir.IRBuilder, value: ir.Value, to_dtype: str) -> ir.Value:
    """``value`` (int64, bool or float, scalar or vector) converted to ``to_dtype``."""
    target = llvm_type(to_dtype, lanes_of(value))
    source = value.type
    if source == target:
        return value
    source_element = source.element if isinstance(source, ir.VectorType) else source
    if to_dtype in ("float32", "float64"):
        if source_element == I1:
            return builder.uitofp(value, target)
        if isinstance(source_element, ir.IntType):
            return builder.sitofp(value, target)
        width = {"float32": 32, "float64": 64}
        from_width = 32 if isinstance(source_element, ir.FloatType) else 64
        if from_width < width[to_dtype]:
            return builder.fpext(value, target)
        return builder.fptrunc(value, target)
    if to_dtype == "int64" and source_element == I1:
        return builder.zext(value, target)
    raise TypeError(f"codegen: cannot convert {source} to {to_dtype}")


def floor_div(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's ``a // b``: truncating division, minus one where the remainder is non-zero and
    its sign differs from the divisor's."""
    quotient = builder.sdiv(a, b)
    adjust = _needs_adjust(builder, builder.srem(a, b), b)
    return builder.add(quotient, builder.sext(adjust, a.type))


def floor_mod(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's ``a % b``: the remainder takes the divisor's sign."""
    remainder = builder.srem(a, b)
    zero = const(a.type, 0)
    return builder.add(remainder, builder.select(_needs_adjust(builder, remainder, b), b, zero))


def _needs_adjust(builder: ir.IRBuilder, remainder: ir.Value, b: ir.Value) -> ir.Value:
    """Whether the truncated ``remainder`` of a division by ``b`` is non-zero and of the other
    sign than ``b``."""
    zero = const(remainder.type, 0)
    nonzero = builder.icmp_signed("!=", remainder, zero)
    signs_differ = builder.icmp_signed("<", builder.xor(remainder, b), zero)
    return builder.and_(nonzero, signs_differ)


def _int_max(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed(">", a, b), a, b)


def _int_min(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


# Index arithmetic: `nsw` because index values of real programs stay far from 2**63, and it
# lets LLVM's scalar evolution reason about addresses.
_INT_OPS: dict[str, Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]] = {
    "+": lambda b, x, y: b.add(x, y, flags=("nsw",)),
    "-": lambda b, x, y: b.sub(x, y, flags=("nsw",)),
    "*": lambda b, x, y: b.mul(x, y, flags=("nsw",)),
    "//": floor_div,
    "%": floor_mod,
    "max": _int_max,
    "min": _int_min,
}


_FOLD = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
         "//": lambda x, y: x // y, "%": lambda x, y: x % y, "max": max, "min": min}


def int_arith(builder: ir.IRBuilder, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
    """An index operator on i64 values. Scalar constants are folded here (Python's ``//`` and
    ``%`` are the semantics we want), which keeps unrolled code small."""
    if op not in _INT_OPS:
        raise CodegenError(f"operator {op!r} is not defined on index expressions")
    known_a, known_b = known_int(a), known_int(b)
    if known_a is not None and known_b is not None and (known_b != 0 or op not in ("//", "%")):
        folded = _FOLD[op](known_a, known_b)
        return ir.Constant(a.type, check_i64(folded, f"index constant {known_a} {op} {known_b} ="))
    if (op in ("+", "-") and known_b == 0) or (op in ("*", "//") and known_b == 1):
        return a
    if (op == "+" and known_a == 0) or (op == "*" and known_a == 1):
        return b
    return _INT_OPS[op](builder, a, b)


def known_int(value: ir.Value) -> Optional[int]:
    """The value of a scalar integer constant, else None."""
    if isinstance(value, ir.Constant) and isinstance(value.type, ir.IntType):
        return int(value.constant)
    return None


def float_arith(ctx: ModuleContext, builder: ir.IRBuilder, op: str, a: ir.Value,
                b: ir.Value) -> ir.Value:
    """A value operator on float values of one type."""
    if op == "+":
        return builder.fadd(a, b, flags=FLOAT_FLAGS)
    if op == "-":
        return builder.fsub(a, b, flags=FLOAT_FLAGS)
    if op == "*":
        return builder.fmul(a, b, flags=FLOAT_FLAGS)
    if op == "/":
        return builder.fdiv(a, b, flags=FLOAT_FLAGS)
    if op in ("max", "min"):
        # llvm.maximum/minimum propagate NaN like numpy.maximum/minimum do.
        base = "llvm.maximum" if op == "max" else "llvm.minimum"
        return builder.call(ctx.intrinsic(base, a.type, [a.type, a.type], [a.type]), [a, b])
    raise CodegenError(f"operator {op!r} is not defined on float values")


def compare(builder: ir.IRBuilder, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
    """A comparison giving i1 (or a vector of i1)."""
    if _is_float(a.type):
        # Unordered `!=` so that NaN != x holds, as in Python; the rest are ordered.
        if op == "!=":
            return builder.fcmp_unordered("!=", a, b)
        return builder.fcmp_ordered(op, a, b)
    return builder.icmp_signed(op, a, b)


def negate(builder: ir.IRBuilder, a: ir.Value) -> ir.Value:
    if _is_float(a.type):
        return builder.fneg(a)
    return builder.sub(const(a.type, 0), a, flags=("nsw",))


_INTRINSIC_CALLS = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt",
                    "tanh": "llvm.tanh", "abs": "llvm.fabs", "pow": "llvm.pow"}


def math_call(ctx: ModuleContext, builder: ir.IRBuilder, func: str,
              args: list[ir.Value]) -> ir.Value:
    """A math function on float values (all arguments of one type)."""
    t = args[0].type
    if ctx.vector_math and lanes_of(args[0]):
        vectorized = vector_math_call(ctx, builder, func, args)
        if vectorized is not None:
            return vectorized
    if func in _INTRINSIC_CALLS:
        # LLVM lowers intrinsics without a machine instruction (exp, log, tanh, pow) to libm
        # calls, one per lane for vectors.
        fn = ctx.intrinsic(_INTRINSIC_CALLS[func], t, [t] * len(args), [t])
        return builder.call(fn, args)
    one = const(t, 1.0)
    if func == "rsqrt":
        return builder.fdiv(one, math_call(ctx, builder, "sqrt", args), flags=FLOAT_FLAGS)
    if func == "sigmoid":
        denominator = builder.fadd(one, math_call(ctx, builder, "exp", [builder.fneg(args[0])]),
                                   flags=FLOAT_FLAGS)
        return builder.fdiv(one, denominator, flags=FLOAT_FLAGS)
    if func == "erf":
        return _libm_per_lane(ctx, builder, "erf", args[0])
    raise CodegenError(f"unknown math function {func!r}")


def _libm_per_lane(ctx: ModuleContext, builder: ir.IRBuilder, name: str,
                   value: ir.Value) -> ir.Value:
    """A libm function without an LLVM intrinsic (erf), called on each lane."""
    lanes: Optional[int] = lanes_of(value)
    element = value.type.element if lanes else value.type
    symbol = name + "f" if isinstance(element, ir.FloatType) else name
    fn = ctx.declare(symbol, element, [element])
    # No caller reads errno, so the call may be treated as pure (hoisted, merged).
    fn.attributes.add("nounwind")
    fn.attributes.add("readnone")
    if lanes is None:
        return builder.call(fn, [value])
    result = ir.Constant(value.type, ir.Undefined)
    for lane in range(lanes):
        index = ir.Constant(I32, lane)
        lane_value = builder.call(fn, [builder.extract_element(value, index)])
        result = builder.insert_element(result, lane_value, index)
    return result


def binop_value(ctx: ModuleContext, builder: ir.IRBuilder, e: BinOp, a: ir.Value,
                b: ir.Value) -> ir.Value:
    """The value of ``e`` from its operands' values (scalars, or vectors of one width)."""
    if e.op in LOGIC_OPS:
        return builder.and_(a, b) if e.op == "and" else builder.or_(a, b)
    if e.op in COMPARE_OPS:
        if e.a.dtype != e.b.dtype:  # mixed int/float comparison: compare as floats
            dtype = e.a.dtype if e.a.dtype != INDEX else e.b.dtype
            a, b = convert(builder, a, dtype), convert(builder, b, dtype)
        return compare(builder, e.op, a, b)
    if e.dtype == INDEX:
        return int_arith(builder, e.op, a, b)
    a, b = convert(builder, a, e.dtype), convert(builder, b, e.dtype)
    return float_arith(ctx, builder, e.op, a, b)
