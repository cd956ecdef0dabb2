"""Vector transcendental functions from glibc's libmvec.

LLVM scalarises ``llvm.exp.v16f32`` and friends into one libm call per lane. glibc's libmvec
has vector versions (``_ZGVeN16v_expf``: x86 vector-function ABI, ISA letter ``b`` SSE,
``d`` AVX2, ``e`` AVX-512; ``N<lanes>``; ``v`` per argument) accurate to 4 ulp. When it is
present and ``CodegenOptions.vector_math`` is on, vector calls of exp, log, tanh, erf and pow
are split into the widest pieces the CPU runs and sent there; otherwise ``ops.math_call``
uses intrinsics and libm lane by lane.
"""
from __future__ import annotations

import ctypes.util
import functools
from typing import Optional

import llvmlite.binding as llvm
from llvmlite import ir

from metasched.codegen.llvmutil import I32, ModuleContext, lanes_of
from metasched.codegen.target import ensure_llvm, host_cpu

LIBMVEC_FUNCTIONS = {"exp": 1, "log": 1, "tanh": 1, "erf": 1, "pow": 2}
# ISA letter, register width in bits, the CPU feature it needs; widest first.
_ISAS = (("e", 512, "+avx512f"), ("d", 256, "+avx2"), ("b", 128, "+sse4.1"))


@functools.cache
def libmvec_isas() -> tuple[tuple[str, int], ...]:
    """(ISA letter, bits) of the libmvec variants this process can call, widest first."""
    ensure_llvm()
    path = ctypes.util.find_library("mvec")
    if path is None:
        return ()
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return ()
    features = set(host_cpu()[2].split(","))
    return tuple((letter, bits) for letter, bits, feature in _ISAS
                 if feature in features
                 and llvm.address_of_symbol(f"_ZGV{letter}N{bits // 32}v_expf") is not None)


def vector_math_call(ctx: ModuleContext, builder: ir.IRBuilder, func: str,
                     args: list[ir.Value]) -> Optional[ir.Value]:
    """``func`` on vector ``args`` through libmvec, or None when that is not possible."""
    lanes = lanes_of(args[0])
    isas = libmvec_isas()
    if func not in LIBMVEC_FUNCTIONS or lanes is None or not isas:
        return None
    element = args[0].type.element
    element_bits, suffix = (32, "f") if isinstance(element, ir.FloatType) else (64, "")
    pieces, offset = [], 0
    while offset < lanes:
        remaining = lanes - offset
        fitting = [(letter, bits // element_bits) for letter, bits in isas
                   if bits // element_bits <= remaining]
        # A tail narrower than every variant runs in the narrowest one with padding lanes.
        letter, width = fitting[0] if fitting else (isas[-1][0], isas[-1][1] // element_bits)
        piece_type = ir.VectorType(element, width)
        name = f"_ZGV{letter}N{width}{'v' * len(args)}_{func}{suffix}"
        fn = ctx.declare(name, piece_type, [piece_type] * len(args))
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
        parts = [_lanes(builder, a, offset, width) for a in args]
        pieces.append((offset, builder.call(fn, parts)))
        offset += width
    result = ir.Constant(args[0].type, ir.Undefined)
    for start, piece in pieces:
        for k in range(min(lanes_of(piece), lanes - start)):
            lane = builder.extract_element(piece, ir.Constant(I32, k))
            result = builder.insert_element(result, lane, ir.Constant(I32, start + k))
    return result


def _lanes(builder: ir.IRBuilder, value: ir.Value, start: int, width: int) -> ir.Value:
    """Lanes ``start .. start+width-1`` of ``value`` (undefined past its end)."""
    lanes = lanes_of(value)
    if start == 0 and width == lanes:
        return value
    undefined = ir.Constant(value.type, ir.Undefined)
    # Mask index `lanes` picks lane 0 of the undefined second operand: a padding lane.
    mask = [start + k if start + k < lanes else lanes for k in range(width)]
    return builder.shuffle_vector(value, undefined, ir.Constant(ir.VectorType(I32, width), mask))
