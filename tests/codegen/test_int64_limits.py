"""Integers the generated code cannot hold are refused at compile time, never wrapped.

Generated code computes extents, sizes and offsets in signed 64-bit integers; LLVM would wrap a
larger constant modulo 2**64 (a loop of 2**63 iterations ran none and returned garbage). Layers
above refuse such programs with their own messages; these hand-built programs check codegen's
backstop.
"""
import numpy as np
import pytest

from metasched.codegen import CodegenOptions, compile_func
from metasched.codegen.runtime import gomp_available, pthread_available
from metasched.errors import CodegenError
from metasched.ir import Allocate, Buffer

from codegen_builders import P, S, U, V, IfThenElse, IntImm, buf, f, func, ld, loop, op, st, v

A, B = buf("A", 4), buf("B", 4)
i = v("i")
LAUNCHERS = [t for t, ok in (("gomp", gomp_available()), ("pthread", pthread_available())) if ok]


def copy_into(body_around_copy=lambda s: s, extent=4, kind=S, inputs=(A,), workspaces=()):
    """B[i % 4] = A[i % 4] for i in range(extent), optionally wrapped in another statement."""
    wrapped = op("%", i, 4)
    body = loop("i", extent, kind, st(B, (wrapped,), ld(A, wrapped)))
    return func("limits", list(inputs), [B], body_around_copy(body), workspaces)


@pytest.mark.parametrize("kind", [S, V, U, P], ids=lambda k: k.value)
def test_loop_extent_of_2_to_the_63_is_refused(kind):
    with pytest.raises(CodegenError, match=r"extent of loop 'i' 9223372036854775808 does not "
                                           r"fit in the signed 64-bit"):
        compile_func(copy_into(extent=2**63, kind=kind))


def test_largest_extent_compiles():
    # 2**63 - 1 fits: the loop is emitted (it is never run here).
    kernel = compile_func(copy_into(extent=2**63 - 1))
    assert "9223372036854775807" in kernel.llvm_ir


@pytest.mark.skipif(not LAUNCHERS, reason="no thread launcher")
def test_parallel_share_bounds_must_fit():
    # Shares are (thread_id + 1) * extent / threads: 2 x 2**62 would wrap.
    options = CodegenOptions(threading=LAUNCHERS[0], num_threads=2)
    with pytest.raises(CodegenError, match=r"parallel loop 'i': extent x threads "
                                           r"\(4611686018427387904 x 2\)"):
        compile_func(copy_into(extent=2**62, kind=P), options)
    compile_func(copy_into(extent=2**62 - 1, kind=P), options)


@pytest.mark.parametrize("role", ["input", "workspace", "allocate"])
def test_buffer_of_2_to_the_62_bytes_is_refused(role):
    huge = Buffer("H", (2**30, 2**30), "float32")  # 2**60 elements of 4 bytes
    if role == "input":
        program = copy_into(inputs=(A, huge))
    elif role == "workspace":
        program = copy_into(workspaces=(huge,))
    else:
        program = copy_into(lambda body: Allocate(huge, body))
    with pytest.raises(CodegenError, match=r"buffer 'H' of shape \(1073741824, 1073741824\) "
                                           r"\(float32\) takes 4611686018427387904 bytes"):
        compile_func(program)


def test_buffer_just_below_2_to_the_62_bytes_compiles():
    below = Buffer("H", (2**62 // 8 - 1,), "float64")
    compile_func(copy_into(inputs=(A, below)))  # compiled, not run: nothing is allocated


def test_dimension_beyond_i64_is_refused_even_when_the_size_is_zero():
    empty = Buffer("H", (0, 2**64), "float32")  # 0 bytes, but its first stride is 2**64
    with pytest.raises(CodegenError, match=r"buffer 'H' .* dimension 18446744073709551616"):
        compile_func(copy_into(inputs=(A, empty)))


@pytest.mark.parametrize("limit, message", [
    (IntImm(2**63), r"integer constant 9223372036854775808 does not fit"),
    (IntImm(-2**63 - 1), r"integer constant -9223372036854775809 does not fit"),
    # A constant the emitter folds from two that fit.
    (op("*", 2**40, 2**40), r"index constant 1099511627776 \* 1099511627776 = "
                            r"1208925819614629174706176 does not fit"),
], ids=["2**63", "-2**63-1", "folded 2**80"])
@pytest.mark.parametrize("kind", [S, V], ids=lambda k: k.value)
def test_constants_beyond_i64_are_refused(limit, message, kind):
    guarded = loop("i", 4, kind, IfThenElse(op("<", i, limit), st(B, (i,), ld(A, i))))
    with pytest.raises(CodegenError, match=message):
        compile_func(func("limits", [A], [B], guarded))


def test_vector_index_steps_beyond_i64_are_refused():
    # Lane k of a gather reads offset k * 2**61 (masked off except lane 0): lane 4's would wrap.
    C = buf("C", 2**58)
    body = loop("i", 16, V, IfThenElse(op("<", i, 1), st(B, (i,), ld(C, op("*", i, 2**61)))))
    with pytest.raises(CodegenError, match=r"index step 9223372036854775808 does not fit"):
        compile_func(func("limits", [C], [B], body))


def test_extreme_constants_that_fit_compute_exactly():
    # -2**63 and 2**63 - 1 themselves are fine: every lane of B passes both comparisons.
    lo, hi = IntImm(-2**63), IntImm(2**63 - 1)
    body = loop("i", 4, V, IfThenElse(op("and", op(">", i, lo), op("<", i, hi)),
                                      st(B, (i,), op("+", ld(A, i), f(1.0)))))
    kernel = compile_func(func("limits", [A], [B], body))
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(kernel(a)[0], a + 1)
