"""Malformed workloads: each error is a ParseError at the exact line and column of the offending
token, says what is wrong, and renders as ``file:line:col: message``, the line and a caret."""
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metasched import workloads
from metasched.errors import ParseError
from metasched.lang import parse

HEAD = ["workload t(M = 4, N = 5, K = 6) {", "    input A: float32[M, K]", "    input B: float32[K, N]"]


def wl(*body: str) -> str:
    """A workload whose body lines start at line 4."""
    return "\n".join(HEAD + list(body) + ["}"]) + "\n"


MATMUL = "    output C[i, j] += A[i, k] * B[k, j]"

# (id, text, overrides, line, column, a regular expression the message must match)
CASES = [
    ("syntax_error", wl("    output C[i, j] += A[i, k] ** B[k, j]"), {}, 4, 32,
     r"unexpected '\*'; expected a name, a number, '\(' or '-'"),
    ("unknown_tensor", wl("    output C[i, j] += A[i, k] * Q[k, j]"), {}, 4, 33, r"unknown tensor 'Q'"),
    ("rank_mismatch", wl("    output C[i, j] += A[i, k] * B[k, j, 0]"), {}, 4, 33,
     r"B has 2 dimension\(s\) but B\[k, j, 0\] gives 3 index"),
    ("unranged_variable", wl("    output C[i] += A[i, k + q]"), {}, 4, 25,
     r"cannot infer the range of variable 'k'.*where k in"),
    ("conflicting_ranges", wl("    output C[i, j] += A[i, k] * B[j, k]"), {}, 4, 38,
     r"variable 'k' ranges over 0..5 in B\[j, k\] but over 0..6 in A\[i, k\] \(line 4, column 28\)"),
    ("unguarded_out_of_bounds", wl("    output C[i, j] += A[i, k + 1] * B[k, j]"), {}, 4, 23,
     r"A\[i, k \+ 1\] may read outside A: index 2 \(k \+ 1\) runs over 1..6 but the dimension holds 0..5"),
    ("guard_does_not_protect", wl("    output C[i, j] += (A[i, k + 1] if k > 0 else 0.0) * B[k, j]"), {},
     4, 24, r"may read outside A.*even where its condition holds"),
    ("or_guard_proves_nothing", wl("    output C[i, k] = A[i, k - 1] if k > 0 or i > 2 else 0.0 where k in 0..K"), {},
     4, 22, r"A\[i, k - 1\] may read outside A: index 2 \(k - 1\) runs over -1..4"),
    ("duplicate_parameter_and_let", wl("    let M = 3", MATMUL), {}, 4, 9,
     r"'M' is already the parameter M \(line 1\)"),
    ("duplicate_input", wl("    input A: float32[M]", MATMUL), {}, 4, 11, r"'A' is already the input A \(line 2\)"),
    ("variable_named_like_a_let", wl("    let i = 2", "    output C[i, k] = A[i, k]"), {}, 5, 14,
     r"left side must index with variables, and 'i' is the let i \(line 4\)"),
    ("variable_reuses_a_tensor_name", wl("    output C[i, j] += A[i, B] * B[B, j]"), {}, 4, 28,
     r"'B' is the input B \(line 3\): a tensor is read with indices"),
    ("where_variable_reuses_a_parameter", wl("    output C[i] += A[i, k] where M in 0..3"), {}, 4, 34,
     r"'M' is the parameter M \(line 1\); a variable may not reuse its name"),
    ("unknown_dtype", "workload t(N = 4) {\n    input A: float16[N]\n    output B[i] = A[i]\n}\n", {}, 2, 14,
     r"unknown dtype 'float16': the dtypes are float32 and float64"),
    ("mixed_input_dtypes", wl("    input D: float64[M]", MATMUL), {}, 4, 14,
     r"input D is float64 but A is float32: all inputs of a workload share one dtype"),
    ("non_affine_index", wl("    output C[i, j] += A[i, k * j] * B[k, j]"), {}, 4, 30,
     r"an index must be affine in the variables, but 'k \* j' multiplies two of them"),
    ("floordiv_by_a_variable", wl("    output C[i, j] += A[i, k // j] * B[k, j]"), {}, 4, 30,
     r"'//' needs a positive constant divisor, not 'j'"),
    ("modulo_by_zero_parameter", wl("    output C[i, j] += A[i, k % (M - 4)] * B[k, j]"), {}, 4, 30,
     r"'%' needs a positive divisor, but M - 4 is 0"),
    ("failed_require", wl("    require M % 3 == 0", MATMUL), {}, 4, 13, r"requirement failed: M % 3 == 0 \(M = 4\)"),
    ("unknown_function", wl("    output C[i, j] += foo(A[i, k]) * B[k, j]"), {}, 4, 23,
     r"unknown function 'foo'; the functions are abs, erf, exp, log, max, min, pow"),
    ("wrong_argument_count", wl("    output C[i, j] += exp(A[i, k], 1.0) * B[k, j]"), {}, 4, 23,
     r"exp takes 1 argument, got 2"),
    ("max_needs_two_arguments", wl("    output C[i] max= max(A[i, k])"), {}, 4, 22, r"max takes 2 arguments, got 1"),
    ("left_side_repeats_a_variable", wl("    output C[i, i] += A[i, k] * B[k, i]"), {}, 4, 17,
     r"variable 'i' appears twice on the left side"),
    ("left_side_compound_index", wl("    output C[i + 1, j] += A[i, k] * B[k, j]"), {}, 4, 14,
     r"left side must index with distinct bare variables; 'i \+ 1' is not a variable"),
    ("unterminated_bracket", wl("    output C[i, j] += A[i, k * B[k, j]", "    output D[i, j] = B[i, j]"), {},
     4, 24, r"'\[' was never closed"),
    ("unterminated_parenthesis_at_end_of_file", "\n".join(HEAD) + "\n    output C[i, k] = exp(A[i, k]\n", {},
     4, 25, r"'\(' was never closed"),
    ("missing_closing_brace", "\n".join(HEAD + [MATMUL]) + "\n", {}, 4, 40,
     r"unexpected end of file; expected a name, .* '}' or"),
    ("bad_where_syntax", wl("    output C[i] += A[i, k + 0] where k = 0..K"), {}, 4, 40,
     r"unexpected '='; expected 'in'"),
    ("where_without_range", wl("    output C[i] += A[i, k + 0] where k in 0, K"), {}, 4, 44,
     r"unexpected ','; expected '..'$"),
    ("float_division_in_an_index", wl("    output C[i, j] += A[i, k / 2] * B[k, j]"), {}, 4, 30,
     r"'/' divides values; an index divides with '//'"),
    ("assignment_to_an_input", wl("    output A[i, k] = B[k, i]"), {}, 4, 12,
     r"cannot assign to the input A \(line 2\): inputs are read-only"),
    ("redefinition_of_a_tensor", wl("    C[i, j] += A[i, k] * B[k, j]", "    output C[i, j] = B[i, j]"), {},
     5, 12, r"tensor C is already defined at line 4"),
    ("use_before_definition", wl("    output D[i, j] = C[i, j]", "    C[i, j] += A[i, k] * B[k, j]"), {},
     4, 22, r"'C' is used before its definition at line 5"),
    ("use_in_its_own_definition", wl("    output C[i, k] = C[i, k] + A[i, k]"), {}, 4, 22,
     r"'C' is used in its own definition"),
    ("empty_workload", "workload empty(N = 4) {\n}\n", {}, 1, 10, r"workload empty has no statements"),
    ("no_output", wl("    C[i, j] += A[i, k] * B[k, j]"), {}, 1, 10,
     r"workload t has no output: mark a statement with 'output'"),
    ("empty_text", "# nothing here\n", {}, 1, 1, r"no workload here"),
    ("element_wise_statement_with_a_free_variable", wl("    output C[i] = A[i, k]"), {}, 4, 24,
     r"variable 'k' is not on the left side: to combine over it use '\+='"),
    ("reduction_without_reduction_variable", wl("    output C[i, k] += A[i, k]"), {}, 4, 20,
     r"'\+=' combines over the variables that are not on the left side, and there are none"),
    ("left_variable_range_not_from_zero", wl("    output C[i, k] = A[i, k] where i in 1..M"), {}, 4, 36,
     r"'i' indexes the left side, so its range must start at 0, not 1"),
    ("where_ranges_an_unused_variable", wl("    output C[i, k] = A[i, k] where q in 0..M"), {}, 4, 36,
     r"the where clause ranges 'q', which the statement does not use"),
    ("empty_where_range", wl("    output C[i] += A[i, k] where k in 3..3"), {}, 4, 34, r"the range k in 3..3 is empty"),
    ("float_index", wl("    output C[i] = A[i, 1.0]"), {}, 4, 24, r"an index must be an integer, not 1.0"),
    ("condition_used_as_a_value", wl("    output C[i, k] = A[i, k] < 1"), {}, 4, 22,
     r"the condition 'A\[i, k\] < 1' is not a value"),
    ("condition_reads_a_tensor", wl("    output C[i, k] = 1.0 if A[i, k] > 0 else 0.0"), {}, 4, 29,
     r"a condition cannot read a tensor \(A\[i, k\]\)"),
    ("indirect_indexing", wl("    output C[i, k] = A[i, B[0, k] + 0]"), {}, 4, 27, r"an index cannot read a tensor"),
    ("floor_division_of_values", wl("    output C[i, k] = A[i, k] // 2.0"), {}, 4, 30,
     r"'//' is for integer indices; values divide with '/'"),
    ("unexpected_character", wl("    output C[i, j] += A[i, k] * B[k, j] & 1"), {}, 4, 41,
     r"unexpected character '&' \(write 'and'\)"),
    ("zero_dimension", wl("    input Z: float32[M - 4]", MATMUL), {}, 4, 22,
     r"dimension 1 of Z is 0 \(M - 4\); a dimension must be at least 1"),
    ("float_division_in_a_shape", wl("    input Z: float32[M / 2]", MATMUL), {}, 4, 24,
     r"'/' divides values; integer expressions divide with '//'"),
    ("integer_division_by_zero", wl("    let L = K // (M - 4)", MATMUL), {}, 4, 15, r"'//' by zero \(M - 4 is 0\)"),
    ("unknown_name_in_a_shape", wl("    input Z: float32[Q]", MATMUL), {}, 4, 22,
     r"unknown name 'Q': integer expressions use parameters and lets"),
    ("float_parameter_default", "workload f(N = 1.5) {\n}\n", {}, 1, 16, r"unexpected number 1.5; expected an integer"),
    ("missing_closing_parenthesis", "workload f(N = 4 {\n}\n", {}, 1, 18, r"unexpected '\{'; expected ',' or '\)'"),
    ("max_reduction_with_a_space", wl("    output C[i] max = A[i, k]"), {}, 4, 17,
     r"unexpected name 'max'; expected '=', 'max=', 'min=', '\+=' or '\*='"),
    ("statement_cut_at_end_of_line", wl("    input Z: float32", MATMUL), {}, 4, 21,
     r"unexpected end of line; expected '\['"),
    ("duplicate_workload_name", wl(MATMUL) + wl(MATMUL), {}, 6, 10,
     r"a second workload named t \(the first is at line 1\)"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error_position_and_message(case):
    _, text, overrides, line, column, message = case
    with pytest.raises(ParseError) as info:
        parse(text, file="bad.tensor", **overrides)
    e = info.value
    assert (e.line, e.column) == (line, column), str(e)
    assert re.search(message, e.message), e.message
    assert e.file == "bad.tensor"
    # The rendering: where and what, then the line, then a caret under the column.
    rendered = str(e).split("\n")
    assert rendered[0] == f"bad.tensor:{line}:{column}: {e.message}"
    source_line = text.split("\n")[line - 1]
    assert rendered[1] == "    " + source_line
    assert rendered[2] == "    " + " " * (column - 1) + "^"


# Overrides come from the caller, not from the text: their errors have no position (line 0)
# and name the parameter. (id, overrides, a regular expression the message must match)
OVERRIDE_CASES = [
    ("unknown_parameter", {"Q": 3}, r"^workload t has no parameter 'Q'; its parameters: M, N, K$"),
    ("float", {"M": 2.5}, r"^parameter M must be an integer, got 2.5$"),
    ("integral_float", {"M": 4.0}, r"^parameter M must be an integer, got 4.0$"),
    ("bool", {"M": True}, r"^parameter M must be an integer, got True$"),
    ("str", {"N": "5"}, r"^parameter N must be an integer, got '5'$"),
    ("none", {"K": None}, r"^parameter K must be an integer, got None$"),
    ("huge", {"M": 10**21}, r"^parameter M \(given as an override\) is 1000000000000000000000, too large: "
                            r"integers in a workload must lie strictly between -2\*\*62 and 2\*\*62"),
    ("huge_negative", {"K": -2**62}, r"^parameter K \(given as an override\) is -4611686018427387904, too large"),
    ("astronomical", {"N": 10**5000}, r"^parameter N \(given as an override\) is an integer of about 5000 digits"),
]


@pytest.mark.parametrize("case", OVERRIDE_CASES, ids=[c[0] for c in OVERRIDE_CASES])
def test_a_bad_override_names_the_parameter_without_a_position(case):
    _, overrides, message = case
    with pytest.raises(ParseError) as info:
        parse(wl(MATMUL), file="bad.tensor", **overrides)
    e = info.value
    assert (e.line, e.column) == (0, 0)
    assert re.search(message, e.message), e.message
    assert str(e) == f"bad.tensor: {e.message}"


def test_an_override_may_be_any_integral_number():
    import numpy as np

    assert parse(wl(MATMUL), M=np.int64(3), N=np.uint8(2)).params == {"M": 3, "N": 2, "K": 6}


def test_there_are_many_distinct_error_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 25


def test_choosing_among_several_workloads():
    text = wl(MATMUL) + wl(MATMUL).replace("workload t(", "workload u(")
    assert parse(text, "u").name == "u"
    with pytest.raises(ParseError, match=r"^f.tensor: this text holds several workloads \(t, u\); pick one by name$"):
        parse(text, file="f.tensor")
    with pytest.raises(ParseError, match=r"no workload named 'v'; this text holds: t, u"):
        parse(text, "v")


def test_a_failed_require_after_an_override_names_the_condition():
    text = wl("    let L = N - 2", "    require M % 2 == 0 and L > 0", MATMUL)
    parse(text)
    with pytest.raises(ParseError, match=r"requirement failed: M % 2 == 0 and L > 0 \(M = 3, L = 3\)"):
        parse(text, M=3)


def test_load_names_the_file_in_errors(tmp_path):
    from metasched.lang import load

    path = tmp_path / "broken.tensor"
    path.write_text(wl("    output C[i, j] += A[i, k] * Q[k, j]"))
    with pytest.raises(ParseError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}:4:33: unknown tensor 'Q'")


_EDITS = st.sampled_from(list("[](){},:=+-*/%<>.#\n 0aZ_") + ["//", "..", "if", "else", "where", "max=", "\r\n"])


@given(st.sampled_from(workloads.names()), st.data())
def test_any_edit_of_a_valid_workload_parses_or_is_a_parse_error(name, data):
    """No text, however mangled, gets a Python traceback out of the parser."""
    text = workloads.source(name)
    start = data.draw(st.integers(0, len(text)))
    stop = data.draw(st.integers(start, min(len(text), start + 8)))
    edited = text[:start] + data.draw(_EDITS) + text[stop:]
    try:
        parse(edited)
    except ParseError as e:
        assert e.message and e.line >= 0 and e.column >= 0
