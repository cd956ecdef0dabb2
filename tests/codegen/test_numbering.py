"""Value numbering: shared arithmetic is emitted once, and never reused where it does not
dominate (a value made in a closed branch must be made again after it)."""
import numpy as np
from llvmlite import ir

from metasched.codegen import compile_func
from metasched.codegen.numbering import ValueTable
from metasched.ir import IfThenElse

from codegen_builders import S, U, V, Select, buf, f, func, ld, loop, op, st, v

rng = np.random.default_rng(7)


def test_a_value_lives_while_its_region_is_open():
    table = ValueTable()
    builder = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.IntType(64)]),
                                       "f").append_basic_block())
    x = builder.function.args[0]
    emitted = []

    def emit(k: int):
        def make():
            emitted.append(k)
            return builder.add(x, ir.Constant(x.type, k))
        return make

    outer = table.numbered("+", (x, ir.Constant(x.type, 1)), emit(1))
    with table.region():
        # An outer value is reused inside; a constant is known by its value, not its object.
        assert table.numbered("+", (x, ir.Constant(x.type, 1)), emit(1)) is outer
        inner = table.numbered("+", (x, ir.Constant(x.type, 2)), emit(2))
        assert table.numbered("+", (x, ir.Constant(x.type, 2)), emit(2)) is inner
    # The region closed: its value no longer dominates and is emitted again.
    again = table.numbered("+", (x, ir.Constant(x.type, 2)), emit(2))
    assert again is not inner and emitted == [1, 2, 2]
    # Another operation on the same operands is another value.
    assert table.numbered("-", (x, ir.Constant(x.type, 1)), emit(3)) is not outer


def test_unrolled_copies_share_their_index_arithmetic():
    # B[k // 3, i] = A[k // 3, i] * 2 with i unrolled: one floor division for all 8 copies of
    # both accesses (each copy used to emit its own).
    A, B = buf("A", 2, 8), buf("B", 2, 8)
    k, i = v("k"), v("i")
    row = op("//", k, 3)
    body = loop("k", 6, S, loop("i", 8, U, st(B, (row, i), op("*", ld(A, row, i), f(2.0)))))
    kernel = compile_func(func("shared", [A], [B], body))
    assert kernel.llvm_ir.count(" sdiv ") == 1
    a = rng.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(kernel(a)[0], 2 * a)


def test_arithmetic_of_a_closed_branch_is_emitted_again_after_it():
    # (j * 5) % 7 is first needed inside an if, then after it: reusing the first would use a
    # value that does not dominate its use (LLVM's verifier refuses the module).
    A, B, C = buf("A", 7), buf("B", 7), buf("C", 7)
    j = v("j")
    spread = op("%", op("*", j, 5), 7)
    body = loop("j", 7, S,
                IfThenElse(op("<", j, 3), st(B, (spread,), ld(A, spread))),
                st(C, (spread,), op("+", ld(A, spread), f(1.0))))
    kernel = compile_func(func("branches", [A], [B, C], body))
    a = rng.standard_normal(7).astype(np.float32)
    b, c = kernel(a)
    rows = [(j * 5) % 7 for j in range(3)]
    np.testing.assert_array_equal(b[rows], a[rows])
    np.testing.assert_array_equal(c, a + 1)


def test_arithmetic_of_a_select_arm_is_emitted_again_after_it():
    # A select whose arm loads runs through real branches; the arm's address arithmetic must
    # not leak out of it. Unrolled and vectorized forms take the same paths.
    A, B = buf("A", 8, 16), buf("B", 8, 16)
    i, j = v("i"), v("j")
    shifted = op("%", op("+", j, 3), 16)
    guarded = Select(op(">", i, 2), ld(A, i, shifted), f(0.0))
    for kind in (S, U, V):
        body = loop("i", 8, U, loop("j", 16, kind,
                                    st(B, (i, j), op("+", guarded, ld(A, i, shifted)))))
        kernel = compile_func(func("arms", [A], [B], body))
        a = rng.standard_normal((8, 16)).astype(np.float32)
        rolled = np.roll(a, -3, axis=1)
        expected = rolled + np.where(np.arange(8)[:, None] > 2, rolled, 0)
        np.testing.assert_array_equal(kernel(a)[0], expected)
