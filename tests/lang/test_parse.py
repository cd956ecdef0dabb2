"""Parsing: the built-in suite at several sizes, and every construct of docs/language.md."""
import dataclasses
import time

import pytest

from conftest import SMALL_PARAMS
from metasched import workloads
from metasched.ir.expr import BinOp, Cast, FloatImm, IntImm, Load, Select, Var
from metasched.lang import Axis, TensorDecl, load, parse

# name -> (output shapes, flops), as functions of the parameters.
EXPECTED = {
    "batch_matmul": lambda p: ([(p["BATCH"], p["M"], p["N"])], 2 * p["BATCH"] * p["M"] * p["N"] * p["K"]),
    "conv2d_bias_relu": lambda p: (
        [(p["N"], p["F"], p["H"], p["W"])],
        2 * p["N"] * p["F"] * p["H"] * p["W"] * (p["C"] * p["R"] * p["S"] + 1)),
    "dense_bias_relu": lambda p: ([(p["M"], p["N"])], 2 * p["M"] * p["N"] * (p["K"] + 1)),
    "depthwise_conv2d": lambda p: (
        [(p["N"], p["C"], p["H"], p["W"])], 2 * p["N"] * p["C"] * p["H"] * p["W"] * p["R"] * p["S"]),
    # total (1 add), sq (mul, add), Y (12 operations) per element
    "layernorm": lambda p: ([(p["M"], p["N"])], 15 * p["M"] * p["N"]),
    "matmul": lambda p: ([(p["M"], p["N"])], 2 * p["M"] * p["N"] * p["K"]),
    "matmul_relu": lambda p: ([(p["M"], p["N"])], 2 * p["M"] * p["N"] * p["K"] + p["M"] * p["N"]),
    "reduce_cols": lambda p: ([(p["N"],)], p["M"] * p["N"]),
    # max, subtract and exp, add, divide
    "softmax": lambda p: ([(p["M"], p["N"])], 5 * p["M"] * p["N"]),
    "transpose_add": lambda p: ([(p["M"], p["N"])], p["M"] * p["N"]),
}


def _halved(name):
    return {k: max(1, v // 2) for k, v in workloads.get(name).params.items()}


def test_the_suite_is_the_tensor_files():
    assert workloads.names() == sorted(EXPECTED) == sorted(SMALL_PARAMS)


@pytest.mark.parametrize("size", ["default", "halved", "small"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_workloads_parse_with_the_right_shapes_and_flops(name, size):
    params = {"default": {}, "halved": _halved(name), "small": SMALL_PARAMS[name]}[size]
    wl = workloads.get(name, **params)
    assert wl.name == name
    assert {k: wl.params[k] for k in params} == params
    shapes, flops = EXPECTED[name](wl.params)
    assert [t.shape for t in wl.outputs] == shapes
    assert wl.flops == flops
    assert wl.dtype == "float32" and all(s.dtype == "float32" for s in wl.statements)


def test_nbytes_counts_every_tensor_at_its_dtype():
    wl = workloads.get("softmax", M=3, N=5)  # X, mx, e, s, Y
    assert wl.nbytes == 4 * (15 + 3 + 15 + 3 + 15)
    wide = parse("workload w(N = 6) {\n    input X: float64[N, 2]\n    output Y[i] += X[i, k]\n}\n")
    assert wide.nbytes == 8 * (12 + 6)
    assert workloads.get("matmul").nbytes == 3 * 512 * 512 * 4


def test_matmul_512_has_two_n_cubed_flops():
    assert workloads.get("matmul").flops == 2 * 512**3
    assert workloads.get("matmul").max_reduce_length == 512


def test_conv2d_statements():
    wl = workloads.get("conv2d_bias_relu")
    assert wl.inputs == (TensorDecl("X", (1, 64, 56, 56), "float32"), TensorDecl("Wt", (64, 64, 3, 3), "float32"),
                         TensorDecl("bias", (64,), "float32"))
    p, y, z = wl.statements
    assert p.axes == (Axis("n", 1), Axis("c", 64), Axis("h", 58), Axis("w", 58)) and not p.is_output
    assert isinstance(p.body, Select) and p.reduce_op is None
    assert p.body.true_value == Load("X", (Var("n"), Var("c"), Var("h") - 1, Var("w") - 1), "float32")
    assert p.body.false_value == FloatImm(0.0, "float32")
    # reduction axes in order of first appearance in the body
    assert y.reduce_axes == (Axis("c", 64), Axis("r", 3), Axis("s", 3)) and y.reduce_op == "sum"
    assert y.reads() == ["P", "Wt"]
    assert z.is_output and z.line == 10 and [s.line for s in wl.statements] == [6, 8, 10]


def test_softmax_reductions_and_intermediates():
    wl = workloads.get("softmax", M=4, N=6)
    assert [(s.name, s.reduce_op) for s in wl.statements] == [("mx", "max"), ("e", None), ("s", "sum"), ("Y", None)]
    assert [t.name for t in wl.intermediates] == ["mx", "e", "s"]
    assert wl.statement("s").shape == (4,)


def test_every_reduction_kind():
    wl = parse("""
workload kinds(N = 3, K = 4) {
    input X: float64[N, K]
    output S[i] += X[i, k]
    output P[i] *= X[i, k]
    output HI[i] max= X[i, k]
    output LO[i] min= X[i, k]
}
""")
    assert [s.reduce_op for s in wl.statements] == ["sum", "prod", "max", "min"]
    assert all(s.reduce_axes == (Axis("k", 4),) for s in wl.statements)
    assert wl.dtype == "float64" and wl.outputs[0] == TensorDecl("S", (3,), "float64")


LET_REQUIRE = """
workload grouped(C = 8, G = 2, H = 7) {
    let CG = C // G     # channels per group
    let OH = H - 2
    require C % G == 0 and OH > 0
    input X: float32[C, H]
    output Y[c, h] += X[c // CG * CG + q, h + r]
        where c in 0..C, h in 0..OH, q in 0..CG, r in 0..3
}
"""


def test_let_and_require():
    wl = parse(LET_REQUIRE)
    (y,) = wl.statements
    assert y.shape == (8, 5) and y.reduce_axes == (Axis("q", 4), Axis("r", 3))
    assert parse(LET_REQUIRE, G=4).statements[0].reduce_axes[0] == Axis("q", 2)
    assert wl.params == {"C": 8, "G": 2, "H": 7}  # lets are not parameters


def test_continuation_lines_comments_and_where_on_the_next_line():
    one_line = """workload w(M = 3, N = 4) {
    input A: float32[M, N]
    input B: float32[N]
    P[i, j] = A[i, j - 1] if j >= 1 and not i == 2 else 0.0 where i in 0..M, j in 0..N
    output C[i] += P[i, j] * B[j] + max(A[i, j], 1.0)
}
"""
    spread = """# comment before the workload

workload w(
    M = 3,   # rows
    N = 4,
) {
    input A: float32[
        M, N]
    input B:
        float32[N]

    # a comment between statements
    P[i, j] = A[i, j - 1] if
        j >= 1 and
        not i == 2 else
        0.0
        where i in 0..M,
              j in 0..N
    output C[i] +=
        P[i, j] *
        B[j] + max(A[i, j],
                   1.0)   # trailing comment
}
"""
    a, b = parse(one_line), parse(spread)
    assert [dataclasses.replace(s, line=0) for s in a.statements] == \
           [dataclasses.replace(s, line=0) for s in b.statements]
    assert [s.line for s in b.statements] == [13, 19]
    assert a.inputs == b.inputs and a.params == b.params
    assert parse(spread.replace("\n", "\r\n")).statements == b.statements


def test_several_where_clauses_and_a_shifted_reduction_variable():
    wl = parse("""
workload shifted(N = 6) {
    input X: float32[N]
    output Y[y] += X[y + r] where y in 0..N - 3
        where r in 1..4
}
""")
    (y,) = wl.statements
    assert y.axes == (Axis("y", 3),) and y.reduce_axes == (Axis("r", 3),)
    # r runs over 1..4 in the text; the axis runs from 0 and the body adds the 1
    assert y.body == Load("X", (BinOp("+", BinOp("+", Var("r"), Var("y")), IntImm(1)),), "float32")


def test_parameters_and_variables_as_values():
    wl = parse("""
workload ramp(N = 5) {
    input X: float64[N]
    output Y[i] = X[i] * N + i - -3
}
""")
    body = wl.statements[0].body
    assert body == BinOp("-", BinOp("+", BinOp("*", Load("X", (Var("i"),), "float64"), FloatImm(5.0, "float64")),
                                    Cast("float64", Var("i"))), FloatImm(-3.0, "float64"))


def test_conditionals_bind_loosest():
    wl = parse("""
workload cond(N = 4) {
    input X: float32[N]
    output Y[i] = (X[i] if i < 2 or i == 3 else 0.0) * 2.0 + (1.0 if not i != 1 else -1.0)
}
""")
    body = wl.statements[0].body
    assert body.op == "+" and body.a.op == "*" and isinstance(body.a.a, Select)
    assert body.a.a.cond == BinOp("or", BinOp("<", Var("i"), IntImm(2)), BinOp("==", Var("i"), IntImm(3)))


def test_several_workloads_in_one_file(tmp_path):
    text = workloads.source("matmul") + "\n" + workloads.source("softmax")
    assert parse(text, "softmax").name == "softmax"
    assert parse(text, "matmul", M=8).statements[0].shape == (8, 512)
    path = tmp_path / "two.tensor"
    path.write_text(text)
    wl = load(path, "softmax", N=8)
    assert wl.file == str(path) and wl.source == text and wl.outputs[0].shape == (1024, 8)


def test_overrides_accept_numpy_integers():
    import numpy as np

    assert workloads.get("matmul", M=np.int64(64)).params["M"] == 64


def test_builtin_workload_helpers():
    assert workloads.source("matmul").startswith("# C = A @ B")
    assert str(workloads.path("matmul")).endswith("matmul.tensor")
    with pytest.raises(KeyError, match="no built-in workload 'nope'; the built-in workloads are: batch_matmul"):
        workloads.get("nope")


def test_parsing_is_fast():
    text = workloads.source("conv2d_bias_relu")
    parse(text)  # builds the parser once
    start = time.perf_counter()
    for _ in range(50):
        parse(text)
    assert (time.perf_counter() - start) / 50 < 0.02
