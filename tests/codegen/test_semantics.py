"""Hand-built loop programs against numpy: arithmetic, reductions, indexing, conditions."""
import math

import numpy as np
import pytest

from metasched.codegen import CodegenOptions, compile_func
from metasched.codegen.vecmath import libmvec_isas
from metasched.ir import Neg, Not

from codegen_builders import (
    P, S, U, V, Cast, IfThenElse, Select, buf, call, f, func, ld, loop, op, st, v,
)

rng = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("kinds", [(S, S), (P, V), (U, S), (S, V), (V, U), (P, P)])
def test_elementwise_all_loop_kinds(kinds):
    A, B, C = buf("A", 13, 37), buf("B", 13, 37), buf("C", 13, 37)
    i, j = v("i"), v("j")
    value = op("max", op("*", ld(A, i, j), ld(B, i, j)), f(0.0))
    k = compile_func(func("ew", [A, B], [C], loop("i", 13, kinds[0], loop("j", 37, kinds[1],
                                                                        st(C, (i, j), value)))))
    a, b = rand(13, 37), rand(13, 37)
    np.testing.assert_allclose(k(a, b)[0], np.maximum(a * b, 0), rtol=1e-6)


@pytest.mark.parametrize("kind", [S, V, U])
def test_reduction_with_init(kind):
    A, D = buf("A", 8, 45), buf("D", 8)
    i, r = v("i"), v("r")
    body = loop("i", 8, P, st(D, (i,), f(-math.inf)),
                loop("r", 45, kind, st(D, (i,), op("max", ld(D, i), ld(A, i, r)))))
    k = compile_func(func("rmax", [A], [D], body))
    a = rand(8, 45)
    np.testing.assert_array_equal(k(a)[0], a.max(axis=1))


@pytest.mark.parametrize("order", ["ijk", "ikj", "kij", "jki"])
def test_matmul_loop_orders(order):
    n, m, kk = 19, 33, 23
    A, B, C = buf("A", n, kk), buf("B", kk, m), buf("C", n, m)
    i, j, k = v("i"), v("j"), v("k")
    extents = {"i": n, "j": m, "k": kk}
    # The innermost loop is vectorized: over j it is a contiguous vector loop, over i a
    # strided (gather/scatter) one, over k a reduction (falls back to a serial loop).
    body = st(C, (i, j), op("+", ld(C, i, j), op("*", ld(A, i, k), ld(B, k, j))))
    for depth, name in enumerate(reversed(order)):
        body = loop(name, extents[name], V if depth == 0 else S, body)
    init = loop("i", n, S, loop("j", m, V, st(C, (i, j), f(0.0))))
    kern = compile_func(func("mm", [A, B], [C], loop("z", 1, S, init, body)))
    a, b = rand(n, kk), rand(kk, m)
    np.testing.assert_allclose(kern(a, b)[0], a @ b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [S, V, U])
def test_floor_div_mod_negative_numerators(kind):
    # out[x] = (x - 20) // 7 * 100 + (x - 20) % 7, as float
    O = buf("O", 41)
    x = v("x")
    num = op("-", x, 20)
    value = Cast("float32", op("+", op("*", op("//", num, 7), 100), op("%", num, 7)))
    k = compile_func(func("fdm", [], [O], loop("x", 41, kind, st(O, (x,), value))))
    xs = np.arange(41) - 20
    np.testing.assert_array_equal(k()[0], ((xs // 7) * 100 + xs % 7).astype(np.float32))


@pytest.mark.parametrize("kind", [S, V, U])
def test_int_max_min_and_neg(kind):
    O = buf("O", 30)
    x = v("x")
    value = Cast("float32", op("+", op("max", op("-", x, 10), Neg(x)), op("min", x, 7)))
    k = compile_func(func("mm", [], [O], loop("x", 30, kind, st(O, (x,), value))))
    xs = np.arange(30)
    expected = np.maximum(xs - 10, -xs) + np.minimum(xs, 7)
    np.testing.assert_array_equal(k()[0], expected.astype(np.float32))


def _conv_body(n, kind, X, Y):
    """Y[i] = sum_t (X[i+t-2] if 0 <= i+t-2 < n else 0): a 5-tap box filter, zero padded."""
    i, t = v("i"), v("t")
    pos = op("+", i, op("-", t, 2))
    guarded = Select(op("and", op(">=", pos, 0), op("<", pos, n)), ld(X, pos), f(0.0))
    accumulate = st(Y, (i,), op("+", ld(Y, i), guarded))
    if kind in (V, P):  # the loop over i innermost, so that it really is vectorized
        return loop("z", 1, S, loop("i", n, kind, st(Y, (i,), f(0.0))),
                    loop("t", 5, S, loop("i", n, kind, accumulate)))
    return loop("i", n, kind, st(Y, (i,), f(0.0)), loop("t", 5, U, accumulate))


@pytest.mark.parametrize("kind", [S, V, U, P])
def test_select_padding(kind):
    # X has exactly n elements; the padded positions are only in the untaken branch.
    n = 29
    X, Y = buf("X", n), buf("Y", n)
    k = compile_func(func("conv", [X], [Y], _conv_body(n, kind, X, Y)))
    x = rand(n)
    expected = np.convolve(np.pad(x, 2), np.ones(5, np.float32), mode="valid")
    np.testing.assert_allclose(k(x)[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", [S, V, U])
def test_untaken_branch_load_is_never_performed(kind):
    # Where i % 4 >= 2 the index is pushed 10**12 elements (4 TB) past the buffer: performing
    # that load would fault. Under vectorize only a masked load/gather survives this.
    n = 40
    X, Y = buf("X", n), buf("Y", n)
    i = v("i")
    phase = op("%", i, 4)
    far_index = op("+", i, op("*", op("//", phase, 2), 10**12))
    value = Select(op("<", phase, 2), ld(X, far_index), f(-1.0))
    k = compile_func(func("far", [X], [Y], loop("i", n, kind, st(Y, (i,), value))))
    x = rand(n)
    np.testing.assert_array_equal(k(x)[0], np.where(np.arange(n) % 4 < 2, x, -1).astype(np.float32))


def test_uniform_load_under_lane_mask_is_guarded():
    # The load X[j + 10**12 * (j // 3)] does not depend on the vector variable i, but sits under
    # a condition that does; for j >= 3 it is out of bounds and no lane is active.
    X, Y = buf("X", 3), buf("Y", 6, 16)
    i, j = v("i"), v("j")
    far = op("+", j, op("*", op("//", j, 3), 10**12))
    value = Select(op("<", op("+", i, op("*", j, 16)), 48), ld(X, far), f(7.0))
    k = compile_func(func("uni", [X], [Y], loop("j", 6, S, loop("i", 16, V, st(Y, (j, i), value)))))
    x = rand(3)
    expected = np.full((6, 16), 7.0, np.float32)
    expected[:3] = x[:, None]
    np.testing.assert_array_equal(k(x)[0], expected)
    assert "<16 x float>" in k.llvm_ir


@pytest.mark.parametrize("extent", [37, 16, 5, 1])
def test_guard_with_non_divisible_extent_vectorized(extent):
    # j = jo * 8 + ji split by 8 with a guard; the vectorized ji loop stores under a mask.
    A, B = buf("A", extent), buf("B", extent)
    jo, ji = v("jo"), v("ji")
    j = op("+", op("*", jo, 8), ji)
    body = loop("jo", -(-extent // 8), S, loop("ji", 8, V, IfThenElse(
        op("<", j, extent), st(B, (j,), op("*", ld(A, j), f(3.0))))))
    k = compile_func(func("guard", [A], [B], body))
    a = rand(extent)
    np.testing.assert_allclose(k(a)[0], a * 3, rtol=1e-6)
    assert "llvm.masked.store" in k.llvm_ir and "llvm.masked.load" in k.llvm_ir


def test_if_then_else_with_vector_condition_and_nested_masks():
    A, B = buf("A", 50), buf("B", 50)
    i = v("i")
    body = loop("i", 50, V, IfThenElse(
        op("<", op("%", i, 3), 1),
        st(B, (i,), ld(A, i)),
        IfThenElse(op(">=", i, 20), st(B, (i,), op("*", ld(A, i), f(2.0))),
                   st(B, (i,), f(0.5)))))
    k = compile_func(func("ite", [A], [B], body))
    a, ii = rand(50), np.arange(50)
    expected = np.where(ii % 3 < 1, a, np.where(ii >= 20, 2 * a, 0.5)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], expected)


def test_transposed_access_gathers_under_vectorize():
    A, B = buf("A", 24, 20), buf("B", 20, 24)
    i, j = v("i"), v("j")
    body = loop("i", 20, P, loop("j", 24, V, st(B, (i, j), ld(A, j, i))))
    k = compile_func(func("tr", [A], [B], body))
    a = rand(24, 20)
    np.testing.assert_array_equal(k(a)[0], a.T)
    assert "llvm.masked.gather" in k.llvm_ir


def test_strided_store_scatters():
    A, B = buf("A", 20, 24), buf("B", 24, 20)
    i, j = v("i"), v("j")
    body = loop("j", 20, S, loop("i", 24, V, st(B, (i, j), ld(A, j, i))))
    k = compile_func(func("sc", [A], [B], body))
    a = rand(20, 24)
    np.testing.assert_array_equal(k(a)[0], a.T)
    assert "llvm.masked.scatter" in k.llvm_ir


def test_fused_and_split_loop_is_contiguous():
    # x = xo * 16 + xi over a fused (5, 6, 7) iteration space: the flattened offsets
    # (x // 42) * 42 + ((x // 7) % 6) * 7 + x % 7 simplify to x, so no gather is needed.
    A, C = buf("A", 5, 6, 7), buf("C", 5, 6, 7)
    xo, xi = v("xo"), v("xi")
    x = op("+", op("*", xo, 16), xi)
    idx = (op("//", x, 42), op("%", op("//", x, 7), 6), op("%", x, 7))
    store = st(C, idx, op("+", ld(A, *idx), f(1.0)))
    body = loop("xo", 14, P, loop("xi", 16, V, IfThenElse(op("<", x, 210), store)))
    k = compile_func(func("fused", [A], [C], body))
    a = rand(5, 6, 7)
    np.testing.assert_array_equal(k(a)[0], a + 1)
    assert "gather" not in k.llvm_ir and "llvm.masked.store.v" in k.llvm_ir  # a register's lanes each


def test_non_linear_store_falls_back_to_serial():
    A, B = buf("A", 6, 4), buf("B", 4, 6)
    x = v("x")
    row, col = op("//", x, 4), op("%", x, 4)
    body = loop("x", 24, V, st(B, (col, row), ld(A, row, col)))
    k = compile_func(func("nl", [A], [B], body))
    a = rand(6, 4)
    np.testing.assert_array_equal(k(a)[0], a.T)
    assert "x float>" not in k.llvm_ir


def test_loop_carried_dependence_falls_back_to_serial():
    # A prefix sum marked vectorized: lanes may not run together.
    A, B = buf("A", 33), buf("B", 33)
    i = v("i")
    body = loop("z", 1, S, st(B, (0,), ld(A, 0)), loop("i", 32, V, st(
        B, (op("+", i, 1),), op("+", ld(B, i), ld(A, op("+", i, 1))))))
    k = compile_func(func("scan", [A], [B], body))
    a = rand(33)
    np.testing.assert_allclose(k(a)[0], np.cumsum(a, dtype=np.float32), rtol=1e-5, atol=1e-5)


def test_broadcast_row_and_scalar():
    A, b, s, C = buf("A", 7, 33), buf("b", 33), buf("s", 1), buf("C", 7, 33)
    i, j = v("i"), v("j")
    value = op("+", op("*", ld(A, i, j), ld(s, 0)), ld(b, j))
    body = loop("i", 7, S, loop("j", 33, V, st(C, (i, j), value)))
    k = compile_func(func("bc", [A, b, s], [C], body))
    a, bb, ss = rand(7, 33), rand(33), rand(1)
    np.testing.assert_allclose(k(a, bb, ss)[0], a * ss[0] + bb, rtol=1e-6)


def test_negative_stride_and_logic_ops():
    A, B = buf("A", 21), buf("B", 21)
    i = v("i")
    cond = op("or", op("and", op(">", i, 3), Not(op("==", i, 10))), op("<=", i, 0))
    value = Select(cond, ld(A, op("-", 20, i)), Cast("float32", i))
    for kind in (S, V, U):
        k = compile_func(func("rev", [A], [B], loop("i", 21, kind, st(B, (i,), value))))
        a, ii = rand(21), np.arange(21)
        mask = ((ii > 3) & (ii != 10)) | (ii <= 0)
        np.testing.assert_array_equal(k(a)[0], np.where(mask, a[::-1], ii).astype(np.float32))


_UNARY = {
    "exp": (np.exp, lambda x: x), "log": (np.log, lambda x: np.abs(x) + 0.1),
    "sqrt": (np.sqrt, np.abs), "rsqrt": (lambda x: 1 / np.sqrt(x), lambda x: np.abs(x) + 0.1),
    "tanh": (np.tanh, lambda x: x), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda x: x * 4),
    "abs": (np.abs, lambda x: x), "erf": (np.vectorize(math.erf), lambda x: x),
}


# (loop kind, vector_math): scalar code, vector code through libmvec, vector code lane by lane
MATH_MODES = [(S, True), (V, True), (V, False)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind, vector_math", MATH_MODES)
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_math_calls(name, kind, vector_math, dtype):
    fn, domain = _UNARY[name]
    A, B = buf("A", 35, dtype=dtype), buf("B", 35, dtype=dtype)
    i = v("i")
    body = loop("i", 35, kind, st(B, (i,), call(name, ld(A, i))))
    k = compile_func(func(name, [A], [B], body), CodegenOptions(vector_math=vector_math))
    a = domain(rand(35, dtype=dtype)).astype(dtype)
    rtol = 2e-6 if dtype == "float32" else 1e-13
    expected = fn(a.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(k(a)[0], expected, rtol=rtol, atol=rtol)
    uses_libmvec = "_ZGV" in k.llvm_ir
    assert uses_libmvec == (kind == V and vector_math and bool(libmvec_isas())
                            and name in ("exp", "log", "tanh", "erf", "sigmoid"))


@pytest.mark.parametrize("kind, vector_math", MATH_MODES)
def test_math_calls_at_special_values(kind, vector_math):
    values = np.array([0.0, -0.0, 1e-30, -1e-30, 88.0, 89.0, -104.0, 1e30, -1e30, np.inf, -np.inf,
                       np.nan, -1.0, 20.0, -20.0, 5.0], np.float32)
    A = buf("A", 16)
    outs = {name: buf(name.upper(), 16) for name in ("exp", "log", "tanh", "erf", "sigmoid")}
    i = v("i")
    body = loop("i", 16, kind, *[st(b, (i,), call(name, ld(A, i))) for name, b in outs.items()])
    k = compile_func(func("special", [A], list(outs.values()), body),
                     CodegenOptions(vector_math=vector_math))
    x = values.astype(np.float64)
    with np.errstate(all="ignore"):
        expected = {"exp": np.exp(x), "log": np.log(x), "tanh": np.tanh(x),
                    "erf": np.array([math.erf(t) if t == t else t for t in x]),
                    "sigmoid": 1 / (1 + np.exp(-x))}
    for name, got in zip(outs, k(values)):
        with np.errstate(over="ignore"):
            want = expected[name].astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-37, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind, vector_math", MATH_MODES)
def test_pow(kind, vector_math, dtype):
    A, B, C = buf("A", 21, dtype=dtype), buf("B", 21, dtype=dtype), buf("C", 21, dtype=dtype)
    i = v("i")
    body = loop("i", 21, kind, st(C, (i,), call("pow", ld(A, i), ld(B, i))))
    k = compile_func(func("pow", [A, B], [C], body), CodegenOptions(vector_math=vector_math))
    a, b = np.abs(rand(21, dtype=dtype)) + 0.1, rand(21, dtype=dtype)
    rtol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(k(a, b)[0], np.power(a, b), rtol=rtol)


@pytest.mark.parametrize("kind", [S, V])
def test_float_max_min_with_infinities_and_nan(kind):
    A, B = buf("A", 6), buf("B", 6)
    i = v("i")
    value = op("min", op("max", ld(A, i), f(-math.inf)), f(math.inf))
    k = compile_func(func("mm", [A], [B], loop("i", 6, kind, st(B, (i,), value))))
    a = np.array([1.0, -np.inf, np.inf, np.nan, -0.5, 3e38], np.float32)
    np.testing.assert_array_equal(k(a)[0], a)


def test_float64_kernel_with_cast():
    A, B = buf("A", 9, 17, dtype="float64"), buf("B", 9, 17, dtype="float64")
    i, j = v("i"), v("j")
    value = op("+", op("/", ld(A, i, j), f(3.0, "float64")), Cast("float64", op("*", i, j)))
    k = compile_func(func("f64", [A], [B], loop("i", 9, P, loop("j", 17, V, st(B, (i, j), value)))))
    a = rand(9, 17, dtype="float64")
    np.testing.assert_allclose(k(a)[0], a / 3 + np.outer(np.arange(9), np.arange(17)), rtol=1e-15)
    assert "<8 x double>" in k.llvm_ir


@pytest.mark.parametrize("shift", [0, 3, 11, 20])
def test_masked_loads_and_stores_take_a_vector_register_at_a_time(shift):
    # C[x] = A[x - shift] + 1 where x >= shift, over 42 vectorized lanes: a load and a store
    # under lane masks, all false in the first lanes. LLVM once loaded an all-false half of a
    # wider masked load without its mask (tests/test_ops_suite.py, DEEPLAB_WRONG_KERNEL).
    import re
    from metasched.codegen.target import host_vector_bits
    A, C = buf("A", 42), buf("C", 42)
    x = v("x")
    inside = op(">=", x, shift)
    body = loop("x", 42, V, IfThenElse(inside, st(C, (x,), op("+", ld(A, op("-", x, shift)), f(1.0)))))
    k = compile_func(func("shifted", [A], [C], body))
    a = rand(42)
    out = np.full(42, np.nan, dtype=np.float32)
    k.run(a, out)
    np.testing.assert_array_equal(out[shift:], a[:42 - shift] + 1)
    widths = {int(w) for w in re.findall(r"llvm\.masked\.(?:load|store)\.v(\d+)f32", k.llvm_ir)}
    assert widths and max(widths) <= host_vector_bits() // 32
