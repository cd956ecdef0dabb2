"""The limits of docs/language.md ("Limits"): expressions of any length but bounded nesting, and
integers that fit the 64-bit code they reach. Whatever is accepted compiles; whatever is not is a
ParseError at the line and column of the offending text."""
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import metasched
from metasched.errors import ParseError
from metasched.ir.expr import BinOp, Load
from metasched.lang import parse
from metasched.lang.limits import CHAIN_RUN, INT_LIMIT, MAX_DEPTH, ir_depth

BIG = 3 * 10**18  # fits int64 and the 2**62 rule, but three of them do not


def one_statement(body: str, *, params: str = "N = 4", inputs: str = "input X: float32[N]",
                  where: str = "") -> str:
    """A workload whose statement (line 3) is ``output Y[i] = body``."""
    return (f"workload t({params}) {{\n    {inputs}\n    output Y[i] = {body}{where}\n}}\n")


def error_of(text: str, **params) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, **params)
    return info.value


def assert_error(text: str, line: int, column: int, pattern: str, **params) -> ParseError:
    e = error_of(text, **params)
    assert (e.line, e.column) == (line, column), str(e)
    assert re.search(pattern, e.message), e.message
    return e


def compiles_and_matches(wl) -> None:
    inputs = wl.random_inputs(0)
    metasched.assert_outputs_close(wl, metasched.build(wl)(*inputs), wl.reference(*inputs))


# ---- long expressions ----------------------------------------------------------------------

def test_a_sum_of_500_terms_parses_compiles_and_matches():
    wl = parse(one_statement(" + ".join(["X[i]"] * 500)))
    assert ir_depth(wl.statements[0].body) < 20  # built as a balanced tree
    compiles_and_matches(wl)


def test_a_long_chain_of_distinct_terms_compiles_and_matches():
    for op in (" + ", " - ", " * "):
        terms = op.join(f"X[i, {k}]" for k in range(600))
        compiles_and_matches(parse(one_statement(terms, inputs="input X: float32[N, 600]")))


def test_very_long_chains_parse():
    text = one_statement(" - ".join(["X[i]"] * 5000))
    assert ir_depth(parse(text).statements[0].body) <= 22


def test_long_chains_in_every_kind_of_expression():
    count = 3000
    ones = " + ".join(["1"] * count)
    text = (f"workload t(N = 4) {{\n"
            f"    input X: float32[N + {' + '.join(['0'] * count)}]\n"
            f"    let L = {ones}\n"
            f"    require {' and '.join(['N > 0'] * count)}\n"
            f"    output Y[i] = X[i + {' - '.join(['0'] * count)}] * {' * '.join(['1.0'] * count)}"
            f" if {' or '.join(['i < 2'] * count)} else 0.0 where i in 0..N\n"
            f"    output Z[j] += X[j] + k where k in 0..{ones}\n"
            f"}}\n")
    wl = parse(text)
    assert wl.statement("Z").reduce_axes[0].extent == count
    compiles_and_matches(wl)


def test_a_chain_regroups_only_beyond_eight_operands():
    short = parse(one_statement(" - ".join(["X[i]"] * CHAIN_RUN))).statements[0].body
    while isinstance(short, BinOp):  # left to right, exactly as written
        assert short.op == "-" and isinstance(short.b, Load)
        short = short.a
    long = parse(one_statement(" - ".join(["X[i]"] * (CHAIN_RUN + 1)))).statements[0].body
    assert not isinstance(long.b, Load)


_SIGNS = st.lists(st.tuples(st.sampled_from(["+", "-"]), st.integers(0, 7)), min_size=1, max_size=60)
_FACTORS = st.lists(st.tuples(st.sampled_from(["*", "/"]), st.integers(0, 7)), min_size=1, max_size=60)


@given(st.one_of(_SIGNS, _FACTORS))
def test_a_regrouped_chain_computes_what_is_written(links):
    """The reference evaluates the regrouped tree; Python evaluates the text left to right."""
    text = "X[i, 0]" + "".join(f" {op} X[i, {k}]" for op, k in links)
    wl = parse(one_statement(text, params="N = 3", inputs="input X: float64[N, 8]"))
    x = np.random.default_rng(0).uniform(1.0, 2.0, size=(3, 8))  # no cancellation, no overflow
    want = [eval(text.replace("X[i, ", "x[r, "), {"x": x, "r": r}) for r in range(3)]
    np.testing.assert_allclose(wl.reference(x)[0], want, rtol=1e-12)


def test_long_integer_chains_are_exact():
    text = one_statement(f"X[{' * '.join(['1'] * 50)} * i + {' - '.join(['5'] * 50)} + 240]",
                         where=" where i in 0..N")
    wl = parse(text)
    x = np.arange(4, dtype=np.float32)
    assert wl.reference(x)[0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_many_brackets_around_one_operand_do_not_nest():
    compiles_and_matches(parse(one_statement("(" * 1000 + "X[i]" + ")" * 1000)))


@pytest.mark.parametrize("body, column", [
    ("-" * 150 + "X[i]", 19),
    ("tanh(" * 150 + "X[i]" + ")" * 150, 19),
    ("".join(f"X[i] + (" for _ in range(150)) + "X[i]" + ")" * 150, 19),
    ("X[i] if i > 0 else " * 150 + "X[i]", 19),
    ("X[" + "-(" * 150 + "i" + ")" * 150 + "]", 19),
], ids=["unary_minus", "calls", "nested_sums", "conditionals", "index"])
def test_deep_nesting_is_refused_at_the_expression(body, column):
    e = assert_error(one_statement(body), 3, column, rf"this expression nests \d+ levels deep; the limit is {MAX_DEPTH}")
    assert "a long chain such as a + b + c + ... is fine" in e.message


def test_deep_nesting_is_refused_in_every_place_of_a_workload():
    deep = "-" * 150 + "1"
    cases = [
        (f"workload t(N = 4) {{\n    input X: float32[{deep}]\n    output Y[i] = X[i]\n}}\n", 2, 22),
        (f"workload t(N = 4) {{\n    let L = {deep}\n    input X: float32[N]\n    output Y[i] = X[i]\n}}\n", 2, 13),
        (f"workload t(N = 4) {{\n    require {deep} < 0\n    input X: float32[N]\n    output Y[i] = X[i]\n}}\n", 2, 13),
        (one_statement("X[i]", where=f" where i in {deep}..N"), 3, 35),
    ]
    for text, line, column in cases:
        assert_error(text, line, column, r"levels deep; the limit is 100")


def test_a_long_chain_of_floor_divisions_is_refused_not_regrouped():
    ranged = " where i in 0..N"
    assert_error(one_statement("X[i" + " // 1" * 200 + "]", where=ranged), 3, 21, r"nests \d+ levels deep")
    parse(one_statement("X[i" + " // 1" * 50 + "]", where=ranged))


def test_the_deepest_accepted_expression_compiles_with_any_schedule():
    body = "X[i]"
    for _ in range(MAX_DEPTH - 2):
        body = f"tanh({body})"
    wl = parse(one_statement(body, params="N = 37"))
    assert ir_depth(wl.statements[0].body) == MAX_DEPTH
    sch = metasched.Schedule(wl)
    outer, inner = sch.split(sch.get_loops(sch.get_block("Y"))[0], [None, 8])
    sch.parallel(outer)
    sch.vectorize(inner)
    inputs = wl.random_inputs(0)
    metasched.assert_outputs_close(wl, metasched.build(sch)(*inputs), wl.reference(*inputs))
    with pytest.raises(ParseError, match=r"nests 101 levels deep"):
        parse(one_statement(f"tanh({body})"))


def three_stages(depth: int) -> str:
    """A -> B -> C, each ``depth`` calls deep around its load of the one before."""
    def calls(inner: str) -> str:
        return "tanh(" * depth + inner + ")" * depth
    return ("workload t(N = 8) {\n    input X: float32[N]\n"
            f"    A[i] = {calls('X[i]')}\n    B[i] = {calls('A[i]')}\n    output C[i] = {calls('B[i]')}\n}}\n")


def test_the_depth_counts_what_a_schedule_may_inline():
    text = three_stages(40)
    assert_error(text, 5, 19, r"^this expression nests 1\d\d levels deep counting the element-wise tensor B "
                              r"\(line 4\) that it reads, which a schedule may inline into it; the limit is 100")
    # An output is never inlined: the count starts again after it.
    parse(text.replace("    B[i] =", "    output B[i] ="))
    wl = parse(three_stages(30))
    sch = metasched.Schedule(wl)
    sch.compute_inline(sch.get_block("A"))
    sch.compute_inline(sch.get_block("B"))
    inputs = wl.random_inputs(0)
    metasched.assert_outputs_close(wl, metasched.build(sch)(*inputs), wl.reference(*inputs))


def test_an_error_message_may_quote_a_long_chain():
    e = error_of(one_statement(" + ".join(["X[i]"] * 3000) + " < 1.0"))
    assert e.message.startswith("the condition 'X[i] + X[i] + ")


# ---- integers that reach 64-bit code ---------------------------------------------------------

WHY = r"too large: integers in a workload must lie strictly between -2\*\*62 and 2\*\*62"


@pytest.mark.parametrize("text, line, column, pattern", [
    (one_statement("X[i]", params="N = 4611686018427387904"), 1, 16,
     rf"^parameter N is 4611686018427387904, {WHY}"),
    (one_statement("X[i + 4611686018427387904 - 4611686018427387904]", where=" where i in 0..N"), 3, 25,
     rf"^the integer 4611686018427387904 is {WHY}"),
    (one_statement("X[i] * 10000000000000000000"), 3, 26, rf"^the integer 10000000000000000000 is {WHY}"),
    (one_statement("X[i]", params="N = " + "9" * 5000), 1, 16, r"^parameter N is an integer of about 5000 digits"),
    (one_statement("X[i]", inputs="input X: float32[N * " + "7" * 5000 + "]"), 2, 26,
     r"^the integer an integer of about 5000 digits is too large"),
    (one_statement("X[i] * 1e39"), 3, 26, r"^the number 1e\+39 is too large for float32 \(the largest is 3.4028235e\+38\)"),
    (one_statement("X[i] * 1e400", inputs="input X: float64[N]"), 3, 26,
     r"^the number inf is too large for float64"),
    ("workload t(N = 4) {\n    let L = N * 2000000000000000000\n    input X: float32[N]\n    output Y[i] = X[i]\n}\n",
     2, 13, rf"^let L is 8000000000000000000, {WHY}"),
    (one_statement("X[i]", inputs="input X: float32[N * 2000000000000000000]"), 2, 22,
     rf"^dimension 1 of X \(N \* 2000000000000000000\) is 8000000000000000000, {WHY}"),
    (one_statement("X[0] where k in -N * 2000000000000000000..N", params="N = 4").replace("Y[i] =", "Y[i] +="),
     3, 36, rf"^the bound -N \* 2000000000000000000 of k is -8000000000000000000, {WHY}"),
    (one_statement(f"X[i * {BIG} // {BIG}]", where=" where i in 0..N"), 3, 21,
     rf"^an index 'i \* {BIG} // {BIG}' can reach beyond 64-bit integers \(its part i \* {BIG} runs over "
     rf"0..{3 * BIG}\): integers in a workload"),
    (one_statement(f"X[i] if i * {BIG} > 0 else 0.0"), 3, 27,
     rf"^a condition 'i \* {BIG}' can reach beyond 64-bit integers: "),
], ids=["parameter", "index_literal", "value_literal", "long_parameter", "long_literal", "float32_literal",
        "float64_literal", "let", "dimension", "where_bound", "index_part", "condition"])
def test_an_integer_too_large_for_64_bit_code(text, line, column, pattern):
    assert_error(text, line, column, pattern)


def test_the_largest_integers_are_accepted():
    top = INT_LIMIT - 1
    wl = parse(one_statement(f"X[i] + {top}", params=f"N = 4, M = {top}",
                             where=f" where i in 0..N").replace("input X", f"let L = M - {top} + 1\n    input X"))
    assert wl.params["M"] == top
    parse(one_statement(f"X[i * {BIG // 4} // {BIG // 4}]", where=" where i in 0..N"))  # parts < 2**62
    parse(one_statement("X[i] * 3.4e38"))
    parse(one_statement("X[i] * 1e300", inputs="input X: float64[N]"))


def test_a_tensor_must_be_smaller_than_2_to_the_62_bytes():
    elements = 2**60  # of 4 bytes: 2**62 bytes
    e = assert_error(one_statement("X[i]", inputs=f"input X: float32[{elements}]"), 2, 5,
                     r"^tensor X is too large: 1152921504606846976 = 1152921504606846976 elements of 4 bytes "
                     r"= 4611686018427387904 bytes; a tensor must be smaller than 2\*\*62 bytes")
    assert "64-bit" in e.message
    parse(one_statement("X[i]", inputs=f"input X: float32[{elements - 1}]"))
    assert_error(one_statement("X[i]", inputs=f"input X: float64[{elements // 2}]"), 2, 5,
                 r"^tensor X is too large: 576460752303423488 = 576460752303423488 elements of 8 bytes = "
                 r"4611686018427387904 bytes")
    # A computed tensor too: its shape comes from the ranges of its variables.
    assert_error(one_statement("1.0", where=f" where i in 0..{elements}"), 3, 5, r"^tensor Y is too large")
    assert_error(one_statement("X[i]", params=f"N = {2**31}").replace("Y[i] = X[i]", "Y[i, j] = X[i] + X[j]"),
                 3, 5,
                 r"^tensor Y is too large: 2147483648 x 2147483648 = ")


def test_an_iteration_domain_must_be_smaller_than_2_to_the_62():
    text = ("workload mm(M = 2097152, N = 2097152, K = 2097152) {\n"
            "    input A: float32[M, K]\n    input B: float32[K, N]\n"
            "    output C[i, j] += A[i, k] * B[k, j]\n}\n")
    assert_error(text, 4, 5, r"^statement C iterates over 9223372036854775808 points \(i: 2097152, j: 2097152, "
                             r"k: 2097152\), too many: .* smaller than 2\*\*62, so that its loops fused into one")
    parse(text, K=1024)


def test_a_dimension_must_be_positive():
    assert_error(one_statement("X[i]"), 2, 22, r"^dimension 1 of X is -3 \(N\); a dimension must be at least 1",
                 N=-3)
    assert_error(one_statement("X[i]"), 2, 22, r"^dimension 1 of X is 0", N=0)
