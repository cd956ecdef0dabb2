"""Hypothesis strategies for random small loop programs: element-wise maps, reductions and
staged (Allocate) programs over small buffers, with random loop kinds, splits and guards."""
from __future__ import annotations

from hypothesis import strategies as st_

from metasched.ir import Allocate, Expr, ForKind, IfThenElse, Neg, PrimFunc, Select, seq

from codegen_builders import Cast, buf, call, f, func, ld, loop, op, st, v

KINDS = st_.sampled_from(list(ForKind))
# A reduction axis must not be parallel (threads would race on the accumulator); vectorizing
# it is allowed: codegen must notice and fall back to a serial loop.
REDUCTION_KINDS = st_.sampled_from([ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED])


def _leaves(draw, A, B, i: Expr, j: Expr, M: int, N: int, dtype: str) -> list[Expr]:
    return [
        ld(A, i, j),
        ld(B, j),
        ld(A, i, op("-", N - 1, j)),                                   # reversed: stride -1
        ld(A, op("%", op("+", i, 1), M), j),                           # another row
        ld(B, op("min", op("+", j, 1), N - 1)),                        # non-linear index
        Select(op(">=", j, 1), ld(A, i, op("-", j, 1)), f(0.25, dtype)),  # left padding
        Select(op("<", op("+", j, 2), N), ld(B, op("+", j, 2)), f(-1.0, dtype)),  # right padding
        Cast(dtype, op("-", op("//", op("-", j, 3), 2), op("%", op("*", i, 5), 3))),
        f(draw(st_.sampled_from([0.5, -2.0, 3.0])), dtype),
    ]


def _value(draw, leaves: list[Expr], depth: int, i: Expr, j: Expr) -> Expr:
    if depth == 0 or draw(st_.integers(0, 3)) == 0:
        return draw(st_.sampled_from(leaves))
    form = draw(st_.integers(0, 4))
    a = _value(draw, leaves, depth - 1, i, j)
    if form == 0:
        fn = draw(st_.sampled_from(["abs", "tanh", "sigmoid", "sqrt", "exp", "neg"]))
        if fn == "neg":
            return Neg(a)
        if fn == "sqrt":
            return call("sqrt", call("abs", a))
        if fn == "exp":
            return call("exp", call("tanh", a))
        return call(fn, a)
    b = _value(draw, leaves, depth - 1, i, j)
    if form == 1:
        cond = op(draw(st_.sampled_from(["<", ">=", "=="])), op("%", op("+", i, j), 3), 1)
        return Select(cond, a, b)
    return op(draw(st_.sampled_from(["+", "-", "*", "max", "min"])), a, b)


def _j_loops(draw, N: int, body_of, name: str = "j", kinds=KINDS):
    """A loop over j in 0..N: plain, or split by a factor with a guard when it does not divide."""
    if draw(st_.booleans()):
        j = v(name)
        return loop(name, N, draw(kinds), body_of(j))
    factor = draw(st_.sampled_from([2, 4, 8, 16]))
    outer, inner = v(name + "o"), v(name + "i")
    j = op("+", op("*", outer, factor), inner)
    body = body_of(j)
    if N % factor:
        body = IfThenElse(op("<", j, N), body)
    inner_loop = loop(name + "i", factor, draw(kinds), body)
    return loop(name + "o", -(-N // factor), draw(kinds), inner_loop)


@st_.composite
def loop_programs(draw) -> PrimFunc:
    """A random PrimFunc over A (M, N) and B (N,) writing C (M, N) or D (M,)."""
    M, N = draw(st_.integers(1, 5)), draw(st_.integers(1, 37))
    dtype = draw(st_.sampled_from(["float32", "float32", "float64"]))
    A, B = buf("A", M, N, dtype=dtype), buf("B", N, dtype=dtype)
    shape = draw(st_.sampled_from(["map", "map_transposed", "reduce", "reduce_inner_i", "staged"]))
    i = v("i")

    def value_at(ii: Expr, jj: Expr) -> Expr:
        return _value(draw, _leaves(draw, A, B, ii, jj, M, N, dtype), 3, ii, jj)

    if shape in ("map", "map_transposed"):
        C = buf("C", M, N, dtype=dtype)
        def store(j: Expr):
            if draw(st_.booleans()):
                return st(C, (i, j), value_at(i, j))
            # a guard on both variables (a lane mask under vectorize) or on i alone (uniform)
            cond = draw(st_.sampled_from([op("<", op("%", op("+", i, j), 3), 1), op("<", i, 2)]))
            return IfThenElse(cond, st(C, (i, j), value_at(i, j)), st(C, (i, j), value_at(i, j)))

        if shape == "map":
            body = loop("i", M, draw(KINDS), _j_loops(draw, N, store))
        else:
            body = _j_loops(draw, N, lambda j: loop("i", M, draw(KINDS), store(j)))
        return func("map", [A, B], [C], body)
    D = buf("D", M, dtype=dtype)
    if shape in ("reduce", "reduce_inner_i"):
        combine = draw(st_.sampled_from(["+", "max", "min"]))
        init = {"+": 0.0, "max": float("-inf"), "min": float("inf")}[combine]
        update = lambda r: st(D, (i,), op(combine, ld(D, i), value_at(i, r)))  # noqa: E731
        if shape == "reduce":
            body = loop("i", M, draw(KINDS), st(D, (i,), f(init, dtype)),
                        _j_loops(draw, N, update, "r", REDUCTION_KINDS))
        else:
            body = loop("z", 1, ForKind.SERIAL,
                        loop("i", M, draw(KINDS), st(D, (i,), f(init, dtype))),
                        _j_loops(draw, N, lambda r: loop("i", M, draw(KINDS), update(r)), "r",
                                 REDUCTION_KINDS))
        return func("reduce", [A, B], [D], body)
    T, C = buf("T", N, dtype=dtype), buf("C", M, N, dtype=dtype)
    stage = _j_loops(draw, N, lambda j: st(T, (j,), value_at(i, j)))
    use = _j_loops(draw, N, lambda j: st(C, (i, j), op("+", ld(T, op("-", N - 1, j)), ld(A, i, j))))
    body = loop("i", M, draw(KINDS), Allocate(T, seq(stage, use)))
    return func("staged", [A, B], [C], body)
