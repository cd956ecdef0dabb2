"""Hypothesis strategies for the workload language: small random workloads, as text.

Every drawn text is a valid workload (all loads in bounds or guarded, every variable ranged), so
a test may parse it and compare evaluators. Line breaks are put after operators and before
``where`` at random, to exercise line continuation.
"""
from __future__ import annotations

from hypothesis import strategies as st

# Inputs: A[M, K], B[K, N], U[M, N], V[N]. Statement variables: i in 0..M, j in 0..N, and the
# reduction variable k in 0..K (or LO..K, shifted).
_SPATIAL_LEAVES = [
    "U[i, j]", "V[j]", "U[i, N - 1 - j]", "(U[i, j - 1] if j >= 1 else 0.25)", "j", "M", "0.5",
    "-2.0", "3", "(V[j + 1] if j + 1 < N and not i == 1 else U[i, j])",
    "(U[i // 2, j] if M > 1 else 1.5)", "U[i, j % 2 * (N - 1)]",
]
_REDUCE_LEAVES = [
    "A[i, k]", "B[k, j]", "(A[i, k + 1] if k + 1 < K else -1.0)", "k",
    "(B[k - 1, j] if not k < 1 else A[i, k])", "(0.5 if k == 0 else B[k, N - 1 - j])",
]
_CONDITIONS = ["i < M // 2", "j >= 1 and i != 0", "not (k > 1) or j == 0", "2 * j + 1 > N"]
_UNARY = ["tanh({})", "sigmoid({})", "abs({})", "erf({})", "sqrt(abs({}))", "log(1.0 + abs({}))",
          "exp(min({}, 3.0))", "rsqrt(1.0 + {} * {})", "pow(abs({}) + 1.0, 0.5)", "-{}"]
_BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / (2.0 + {} * {})", "max({}, {})", "min({}, {})"]


def _join(template: str, parts: list[str], breaks: bool) -> str:
    text = template.format(*parts)
    # A line may break after a binary operator; the next line continues the statement.
    return text.replace(" + ", " +\n            ", 1) if breaks and " + " in text else text


@st.composite
def value_exprs(draw, reduce: bool, depth: int = 3) -> str:
    """A value expression over i, j (and k when ``reduce``)."""
    leaves = _SPATIAL_LEAVES + (_REDUCE_LEAVES if reduce else [])
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["unary", "binary", "binary", "cond"]))
    if kind == "unary":
        inner = draw(value_exprs(reduce, depth - 1))
        template = draw(st.sampled_from(_UNARY))
        return "(" + template.format(*[inner] * template.count("{}")) + ")"
    if kind == "binary":
        a, b = draw(value_exprs(reduce, depth - 1)), draw(value_exprs(reduce, depth - 1))
        template = draw(st.sampled_from(_BINARY))
        parts = [a, b, b] if template.count("{}") == 3 else [a, b]
        return "(" + _join(template, parts, draw(st.booleans())) + ")"
    conditions = _CONDITIONS if reduce else [c for c in _CONDITIONS if "k" not in c]
    cond = draw(st.sampled_from(conditions))
    a, b = draw(value_exprs(reduce, depth - 1)), draw(value_exprs(reduce, depth - 1))
    return f"({a} if {cond} else {b})"


@st.composite
def workload_texts(draw) -> str:
    """A whole workload: one statement (element-wise or a reduction of any kind), sometimes
    consumed by a second one, with small parameters."""
    m, n, k = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(["float64", "float64", "float32"]))
    op = draw(st.sampled_from(["=", "+=", "*=", "max=", "min="]))
    reduce = op != "="
    body = draw(value_exprs(reduce))
    if reduce:
        # k must occur in the body; add it as a term when the drawn body lacks it.
        body = f"{body} + A[i, k] * 0.125" if "k" not in body.replace("K", "") else body
    wheres = ["i in 0..M", "j in 0..N"]  # i and j may only appear in compound indices
    if reduce:
        lo = draw(st.integers(0, k - 1))
        wheres.append(f"k in {lo}..K")
    where = ", ".join(wheres)
    separator = draw(st.sampled_from([" ", "\n        "]))
    consumer = draw(st.booleans())
    lines = [
        f"workload random(M = {m}, N = {n}, K = {k}) {{",
        f"    input A: {dtype}[M, K]",
        f"    input B: {dtype}[K, N]",
        f"    input U: {dtype}[M, N]   # a comment",
        f"    input V: {dtype}[N]",
        f"    {'' if consumer else 'output '}T[i, j] {op} {body}{separator}where {where}",
    ]
    if consumer:
        lines.append("    output W[i, j] = T[i, j] * 2.0 + V[j]")
    lines.append("}")
    return "\n".join(lines) + "\n"
