"""The numpy reference: hand-computed cases, a scalar interpreter as a second opinion, the memory
bound of chunked evaluation, and its argument checks."""
import itertools
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given

from metasched import workloads
from metasched.errors import KernelArgumentError
from metasched.ir.expr import BinOp, Call, Cast, FloatImm, IntImm, Load, Neg, Not, Select, Var
from metasched.lang import evaluate, parse
from workload_strategies import workload_texts

ROWS = """
workload rows(M = 2, N = 3) {
    input X: float64[M, N]
    output S[i] += X[i, j]
    output P[i] *= X[i, j]
    output HI[i] max= X[i, j]
    output LO[i] min= X[i, j]
    output E[i, j] = X[i, j] * 2.0 - j
}
"""


def test_every_reduction_kind_by_hand():
    x = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    s, p, hi, lo, e = evaluate(parse(ROWS), [x])
    assert s.tolist() == [2.0, 3.5]
    assert p.tolist() == [-6.0, -2.0]
    assert hi.tolist() == [3.0, 4.0]
    assert lo.tolist() == [-2.0, -1.0]
    assert e.tolist() == [[2.0, -5.0, 4.0], [1.0, 7.0, -4.0]]


def test_zero_padding_and_a_shifted_reduction_by_hand():
    wl = parse("""
workload pad(N = 4, PAD = 1) {
    input X: float32[N]
    P[h] = X[h - PAD] if h >= PAD and h < N + PAD else 0.0
        where h in 0..N + 2 * PAD
    output Y[y] += P[y + r - 1] * r
        where y in 0..N, r in 1..4
}
""")
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    (y,) = evaluate(wl, [x])
    # P = [0, 1, 2, 3, 4, 0]; Y[y] = 1*P[y] + 2*P[y+1] + 3*P[y+2]
    assert y.dtype == np.float32
    assert y.tolist() == [8.0, 14.0, 20.0, 11.0]


def test_a_load_in_the_untaken_branch_is_never_an_error():
    wl = parse("""
workload edge(N = 3) {
    input X: float64[N]
    output Y[i] = X[i + 5] if i > 10 else -X[N - 1 - i]
        where i in 0..N
}
""")
    (y,) = evaluate(wl, [np.array([1.0, 2.0, 3.0])])
    assert y.tolist() == [-3.0, -2.0, -1.0]


def test_math_functions_and_casts():
    wl = parse("""
workload fns(N = 3) {
    input X: float64[N]
    output Y[i] = exp(X[i]) + log(X[i] + 2.0) + sqrt(X[i] + 1.0) + rsqrt(X[i] + 1.0) + tanh(X[i]) +
        sigmoid(X[i]) + abs(X[i]) + erf(X[i]) + pow(X[i] + 1.0, 1.5) + max(X[i], 0.25) +
        min(X[i], 0.25) + i / N
}
""")
    x = np.array([-0.5, 0.0, 0.75])
    (y,) = evaluate(wl, [x])
    want = [math.exp(v) + math.log(v + 2) + math.sqrt(v + 1) + 1 / math.sqrt(v + 1) + math.tanh(v)
            + 1 / (1 + math.exp(-v)) + abs(v) + math.erf(v) + (v + 1) ** 1.5 + max(v, 0.25)
            + min(v, 0.25) + i / 3 for i, v in enumerate(x)]
    np.testing.assert_allclose(y, want, rtol=1e-14)


def _naive(workload, inputs):
    """A second opinion: loops over every point, a conditional evaluates only its taken branch."""
    env = {t.name: np.asarray(a, dtype=np.float64) for t, a in zip(workload.inputs, inputs)}
    init = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}
    combine = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
    with np.errstate(all="ignore"):
        for s in workload.statements:
            out = np.empty(s.shape)
            for point in itertools.product(*(range(a.extent) for a in s.axes)):
                scope = dict(zip((a.name for a in s.axes), point))
                if s.reduce_op is None:
                    out[point] = _scalar(s.body, scope, env)
                    continue
                acc = np.float64(init[s.reduce_op])
                for inner in itertools.product(*(range(a.extent) for a in s.reduce_axes)):
                    scope.update(zip((a.name for a in s.reduce_axes), inner))
                    acc = combine[s.reduce_op](acc, _scalar(s.body, scope, env))
                out[point] = acc
            env[s.name] = out
    return [env[s.name].astype(workload.dtype) for s in workload.statements if s.is_output]


_SCALAR_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "//": np.floor_divide,
               "%": np.mod, "max": np.maximum, "min": np.minimum, "<": np.less, "<=": np.less_equal,
               ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}
_SCALAR_CALLS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v),
                 "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "abs": np.abs,
                 "erf": math.erf, "pow": np.power}


def _scalar(e, scope, env):
    if isinstance(e, (FloatImm, IntImm)):
        return e.value
    if isinstance(e, Var):
        return scope[e.name]
    if isinstance(e, Cast):
        return np.float64(_scalar(e.value, scope, env))
    if isinstance(e, Load):
        index = tuple(int(_scalar(i, scope, env)) for i in e.indices)
        array = env[e.buffer]
        assert all(0 <= i < n for i, n in zip(index, array.shape)), f"{e} read outside at {index}"
        return array[index]
    if isinstance(e, Neg):
        return -_scalar(e.a, scope, env)
    if isinstance(e, Not):
        return not _scalar(e.a, scope, env)
    if isinstance(e, BinOp) and e.op in ("and", "or"):
        a = _scalar(e.a, scope, env)
        return (a and _scalar(e.b, scope, env)) if e.op == "and" else (a or _scalar(e.b, scope, env))
    if isinstance(e, BinOp):
        return _SCALAR_OPS[e.op](_scalar(e.a, scope, env), _scalar(e.b, scope, env))
    if isinstance(e, Call):
        return _SCALAR_CALLS[e.func](*(_scalar(a, scope, env) for a in e.args))
    if isinstance(e, Select):
        branch = e.true_value if _scalar(e.cond, scope, env) else e.false_value
        return _scalar(branch, scope, env)
    raise TypeError(e)


def _assert_same(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        scale = max(1.0, float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)))
        rtol = 1e-9 if w.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, equal_nan=True)


@given(workload_texts())
def test_reference_matches_a_scalar_interpreter(text):
    wl = parse(text)
    inputs = wl.random_inputs(seed=3)
    want = _naive(wl, inputs)
    _assert_same(evaluate(wl, inputs), want)
    # A budget of a few elements cuts every axis, reduction axes included.
    _assert_same(evaluate(wl, inputs, chunk_bytes=64), want)


@pytest.mark.parametrize("name", ["conv2d_bias_relu", "depthwise_conv2d", "softmax", "layernorm"])
def test_chunked_evaluation_matches_whole_evaluation(name):
    wl = workloads.get(name, **{"conv2d_bias_relu": dict(C=5, H=7, W=6, F=3),
                                "depthwise_conv2d": dict(C=3, H=6, W=5),
                                "softmax": dict(M=5, N=7), "layernorm": dict(M=4, N=9)}[name])
    inputs = wl.random_inputs(seed=1)
    whole = evaluate(wl, inputs)
    for budget in (8, 200, 4096):
        _assert_same(evaluate(wl, inputs, chunk_bytes=budget), whole)


@pytest.mark.parametrize("name", ["conv2d_bias_relu", "dense_bias_relu", "reduce_cols"])
def test_default_sizes_evaluate_within_a_gibibyte(name):
    wl = workloads.get(name)
    inputs = wl.random_inputs(seed=0)
    tracemalloc.start()
    try:
        evaluate(wl, inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**30


def test_the_chunk_budget_bounds_the_temporaries():
    wl = parse("""
workload big(M = 200, N = 200, K = 200) {
    input A: float64[M, K]
    input B: float64[K, N]
    output C[i, j] max= A[i, k] * B[k, j] + A[i, K - 1 - k]
}
""")
    a, b = wl.random_inputs(seed=0)
    tracemalloc.start()
    try:
        (got,) = evaluate(wl, [a, b], chunk_bytes=4 * 2**20)  # the whole domain takes 64 MiB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20
    np.testing.assert_array_equal(got, np.max(a[:, None, :] * b.T[None] + a[:, None, ::-1], axis=2))


def test_a_max_reduction_too_big_for_one_chunk_is_cut_along_its_reduction_axis():
    wl = parse("""
workload wide(M = 3, K = 50000) {
    input X: float64[M, K]
    output Y[i] max= X[i, k] * X[i, K - 1 - k]
}
""")
    (x,) = wl.random_inputs(seed=2)
    want = np.max(x * x[:, ::-1], axis=1)
    np.testing.assert_array_equal(evaluate(wl, [x], chunk_bytes=8 * 1000)[0], want)


def test_every_builtin_workload_evaluates_at_default_size():
    for name in workloads.names():
        wl = workloads.get(name)
        outputs = evaluate(wl, wl.random_inputs(seed=0))
        assert [o.shape for o in outputs] == [t.shape for t in wl.outputs]
        assert all(o.dtype == np.dtype(wl.dtype) and np.all(np.isfinite(o)) for o in outputs)


def test_wrong_inputs_are_a_kernel_argument_error():
    wl = parse(ROWS)
    good = np.zeros((2, 3))
    with pytest.raises(KernelArgumentError, match="takes 1 input"):
        evaluate(wl, [good, good])
    with pytest.raises(KernelArgumentError, match=r"shape \(2, 3\)"):
        evaluate(wl, [np.zeros((3, 2))])
    with pytest.raises(KernelArgumentError, match="float64, got float32"):
        evaluate(wl, [good.astype(np.float32)])
    with pytest.raises(KernelArgumentError, match="numpy array"):
        evaluate(wl, [[[0.0] * 3] * 2])


def test_reference_method_of_the_workload():
    wl = parse(ROWS)
    x = wl.random_inputs(seed=0)[0]
    assert np.array_equal(wl.reference(x)[0], x.sum(axis=1))


def test_random_inputs_are_deterministic_per_seed():
    wl = workloads.get("matmul", M=4, N=5, K=6)
    a1, b1 = wl.random_inputs(seed=7)
    a2, b2 = wl.random_inputs(seed=7)
    a3, _ = wl.random_inputs(seed=8)
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
    assert not np.array_equal(a1, a3)
    assert a1.shape == (4, 6) and b1.shape == (6, 5) and a1.dtype == np.float32
    assert a1.min() >= -1.0 and a1.max() < 1.0
