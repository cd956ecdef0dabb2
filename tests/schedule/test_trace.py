"""Traces as values: the text and JSON forms and their errors, simplified, diff, with_decision."""
import ast
import json

import numpy as np
import pytest
from hypothesis import given

from metasched.errors import TraceError
from metasched.schedule.instruction import KINDS, BlockRV, ExprRV, Instruction, LoopRV
from metasched.schedule.trace import JSON_VERSION, Trace, diff

from trace_strategies import traces

EXAMPLE = """\
b0 = sch.get_block("C")
l1, l2, l3 = sch.get_loops(b0)
v4, v5 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=16, decision=[16, 32])
l6, l7 = sch.split(l1, [v4, v5])
sch.reorder(l6, l2, l7)
b8 = sch.cache_write(b0, 0, "local")
sch.reverse_compute_at(b8, l6)
v9 = sch.sample_categorical([0, 16, 64], [0.25, 0.25, 0.5], decision=2)
sch.annotate(l6, "pragma_auto_unroll_max_step", v9)
l10 = sch.sample_compute_location(b0, decision=-1)
l11, l12 = sch.split(l2, [None, 4])
b13, = sch.get_producers(b0)
sch.get_consumers(b13)"""


@pytest.fixture
def example():
    return Trace.parse(EXAMPLE)


# ------------------------------------------------------------------------------- round trips

@given(traces())
def test_text_round_trip(trace):
    assert Trace.parse(str(trace)) == trace


@given(traces())
def test_text_is_python(trace):
    ast.parse(str(trace))  # `a, = ...` and a bare call for an empty list are valid Python too


@given(traces())
def test_json_round_trip(trace):
    assert Trace.from_json(json.loads(json.dumps(trace.to_json()))) == trace


def test_example_prints_as_written(example):
    assert str(example) == EXAMPLE
    assert len(example) == 13 and repr(example) == "<Trace of 13 instructions>"
    assert example.decisions == {2: (16, 32), 7: 2, 9: -1}


def test_parsed_rvs_take_the_class_of_their_definition(example):
    split = example.insts[3]
    assert split.kind == "Split" and split.inputs == (LoopRV("l1"), ExprRV("v4"), ExprRV("v5"))
    assert split.outputs == (LoopRV("l6"), LoopRV("l7"))
    assert example.insts[5].inputs == (BlockRV("b0"),) and example.insts[5].attrs == (0, "local")
    assert example.insts[9].outputs == (LoopRV("l10"),)
    assert example.insts[10].inputs == (LoopRV("l2"), None, 4)


def test_comments_blank_lines_single_quotes_and_crlf():
    text = ("# a schedule\r\n\r\nb0 = sch.get_block('C')  # the matmul\r\n"
            "   # more\r\nl1, = sch.get_loops(b0)\r\n")
    assert str(Trace.parse(text)) == 'b0 = sch.get_block("C")\nl1, = sch.get_loops(b0)'


def test_literals_round_trip():
    text = ('b0 = sch.get_block("a\\"b\\\\c\\n\\u00e9\\x01")\n'
            'sch.annotate(b0, "k", [-3, 2.5e-07, None, True, False, [], [[1], "x"]])')
    trace = Trace.parse(text)
    assert trace.insts[0].attrs == ('a"b\\c\né\x01',)
    assert trace.insts[1].inputs[1] == (-3, 2.5e-07, None, True, False, (), ((1,), "x"))
    assert Trace.parse(str(trace)) == trace


def test_empty_text_is_the_empty_trace():
    assert Trace.parse("") == Trace() == Trace.parse("\n# nothing\n\n")
    assert str(Trace()) == ""


def test_decision_none_leaves_the_sampling_free():
    trace = Trace.parse('b0 = sch.get_block("C")\nl1 = sch.sample_compute_location(b0, decision=None)')
    assert trace.decisions == {}


# ------------------------------------------------------------------------------ parse errors

PRELUDE = 'b0 = sch.get_block("C")\nl1, l2 = sch.get_loops(b0)\n'
MISTAKES = [  # (the third line, column, part of the message)
    ("sch.splt(l1, [2, 4])", 5, "unknown instruction sch.splt; did you mean sch.split?"),
    ("x = foo(b0)", 5, "foo(...) is not an instruction"),
    ('s.get_block("C")', 1, "did you mean sch.get_block(...)?"),
    ("l3, l4 = sch.split(l1, [2, 4], factor=3)", 32, "split has no keyword argument factor"),
    ("l3, l4 = sch.split(l1, [2, 4], 7)", 32, "split takes 2 positional arguments, not 3"),
    ('b3 = sch.cache_read(b0, 0)', 10, "cache_read is missing scope"),
    ('b3 = sch.cache_read(b0, read_index=0, read_index=1, scope="x")', 39, "two values for read_index"),
    ('b3 = sch.cache_read(b0, scope="x", 0)', 36, "positional argument follows a keyword"),
    ("l3, l4, l5 = sch.split(l1, [2, 4])", 1, "split here makes 2 LoopRVs, but 3 names are given"),
    ("v3, v4 = sch.sample_perfect_tile(l1, n=3, max_innermost_factor=0)", 1, "makes 3 ExprRVs"),
    ("l3 = sch.split(l1, [2, 4])", 1, "split returns a list: unpack it"),
    ("sch.fuse(l1, l2)", 5, "fuse returns one value"),
    ("x = sch.reorder(l1, l2)", 1, "reorder returns nothing"),
    ("sch.reorder(l9, l1)", 13, "l9 is not defined by an earlier instruction"),
    ("l1 = sch.fuse(l1, l2)", 1, "l1 is already defined (line 2)"),
    ("l3, l3 = sch.split(l1, [2, 4])", 5, "l3 is already defined"),
    ("sch.parallel(l1, decision=3)", 18, "parallel is not a sampling instruction"),
    ("v3, v4 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=16, decision=[16])", 77,
     "one integer per output: 2 here, not 1"),
    ("v3 = sch.sample_categorical([1, 2], [0.5, 0.5], decision=[1])", 58, "is one integer, not [1]"),
    ("v3 = sch.sample_categorical([1, 2], [0.5, 0.5], decision=1, decision=0)", 61, "two decisions"),
    ("b3 = sch.get_block(l1)", 20, "must be a constant"),
    ("l3, l4 = sch.split(l1, 4)", 24, "factors of split is a list"),
    ("sch.reorder(loops=l1)", 13, "reorder has no keyword argument loops"),
    ('b3 = sch.get_block("C\\q")', 22, "unknown escape sequence"),
    ("l3, l4 = sch.split(l1, [2 4])", 27, "unexpected '4'; expected ',' or ']'"),
    ("l3, l4 = sch.split(l1, [2, 4]", 30, "unexpected end of text; expected ')' or ','"),
    ("sch.reorder(l1, l2) $", 21, "unexpected character '$'"),
    ("sch.reorder(l1, l2) = 3", 21, "unexpected '='"),
]


@pytest.mark.parametrize("line, column, message", MISTAKES)
def test_parse_errors_point_at_the_mistake(line, column, message):
    with pytest.raises(TraceError) as info:
        Trace.parse(PRELUDE + line)
    assert (info.value.line, info.value.column) == (3, column)
    assert message in info.value.message


def test_parse_error_shows_the_line_and_a_caret():
    with pytest.raises(TraceError) as info:
        Trace.parse(PRELUDE + "sch.reorder(l9, l1)\n")
    assert str(info.value) == ("line 3, column 13: l9 is not defined by an earlier instruction\n"
                               "    sch.reorder(l9, l1)\n"
                               "                ^")


def test_a_name_defined_later_is_not_yet_defined():
    with pytest.raises(TraceError, match="l1 is not defined") as info:
        Trace.parse('b0 = sch.get_block("C")\nsch.parallel(l1)\nl1, = sch.get_loops(b0)')
    assert info.value.line == 2


# -------------------------------------------------------------------------------- JSON form

def test_json_form_is_stable():
    trace = Trace.parse('b0 = sch.get_block("C")\nl1, = sch.get_loops(b0)\n'
                        'v2, v3 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=4, decision=[4, 2])\n'
                        'l4, l5 = sch.split(l1, [None, v3])')
    assert trace.to_json() == {"version": 1, "insts": [
        {"kind": "GetBlock", "inputs": [], "attrs": ["C"], "outputs": ["b0"]},
        {"kind": "GetLoops", "inputs": [{"rv": "b0"}], "attrs": [], "outputs": ["l1"]},
        {"kind": "SamplePerfectTile", "inputs": [{"rv": "l1"}], "attrs": [2, 4], "outputs": ["v2", "v3"]},
        {"kind": "Split", "inputs": [{"rv": "l1"}, None, {"rv": "v3"}], "attrs": [], "outputs": ["l4", "l5"]},
    ], "decisions": {"2": [4, 2]}}
    assert JSON_VERSION == 1


def _json(*insts, decisions=None):
    return {"version": 1, "insts": list(insts), "decisions": decisions or {}}


GET_BLOCK = {"kind": "GetBlock", "inputs": [], "attrs": ["C"], "outputs": ["b0"]}
BAD_JSON = [
    ({"version": 2, "insts": [], "decisions": {}}, "unknown trace version 2"),
    ([], "an object with a \"version\""),
    ({"version": 1, "insts": []}, "missing ['decisions']"),
    (_json({"kind": "Splt", "inputs": [], "attrs": [], "outputs": []}), "unknown kind 'Splt'"),
    (_json({"kind": "GetBlock", "inputs": [], "attrs": ["C"]}), "missing ['outputs']"),
    (_json({**GET_BLOCK, "attrs": []}), "do not fit get_block(name)"),
    (_json({**GET_BLOCK, "outputs": ["b0", "b1"]}), "makes 1 outputs, not 2"),
    (_json({**GET_BLOCK, "outputs": ["1b"]}), "must be an identifier"),
    (_json(GET_BLOCK, GET_BLOCK), "defines b0 again"),
    (_json({"kind": "Parallel", "inputs": [{"rv": "l9"}], "attrs": [], "outputs": []}),
     "not a random variable made by an earlier instruction"),
    (_json({**GET_BLOCK, "attrs": [{"x": 1}]}), "must be a number, a string, null or a list"),
    (_json(GET_BLOCK, decisions={"0": 1}), "get_block is not a sampling instruction"),
    (_json(GET_BLOCK, decisions={"7": 1}), "not the index of an instruction"),
]


@pytest.mark.parametrize("obj, message", BAD_JSON)
def test_from_json_rejects_malformed_forms(obj, message):
    with pytest.raises(TraceError) as info:
        Trace.from_json(obj)
    assert message in str(info.value)


# -------------------------------------------------------------------------------- simplified

def test_simplified_drops_unused_pure_instructions_and_keeps_decisions(example):
    simple = example.simplified()
    assert str(simple) == "\n".join(EXAMPLE.splitlines()[:9] + [EXAMPLE.splitlines()[10]])
    assert simple.decisions == {2: (16, 32), 7: 2}


def test_simplified_follows_chains_of_unused_values():
    trace = Trace.parse('b0 = sch.get_block("C")\nl1, l2 = sch.get_loops(b0)\n'
                        'v3, v4 = sch.sample_perfect_tile(l2, n=2, max_innermost_factor=0, decision=[2, 3])\n'
                        'b5 = sch.get_block("D")\nsch.parallel(l1)')
    assert str(trace.simplified()) == 'b0 = sch.get_block("C")\nl1, l2 = sch.get_loops(b0)\nsch.parallel(l1)'
    assert Trace.parse('b0 = sch.get_block("C")').simplified() == Trace()


@given(traces())
def test_simplified_is_idempotent_and_drops_only_pure_instructions(trace):
    simple = trace.simplified()
    assert simple.simplified() == simple
    assert all(KINDS[i.kind].pure for i in trace.insts if i not in simple.insts)
    assert Trace.parse(str(simple)) == simple


# ------------------------------------------------------------------------------------- diff

def test_diff_of_equal_traces(example):
    assert diff(example, Trace.parse(EXAMPLE)) == "traces are identical"


def test_diff_names_a_changed_decision(example):
    changed = example.with_decision(2, [8, 64]).with_decision(9, None)
    assert diff(example, changed) == (
        "decision of instruction 2 (`v4, v5 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=16)`): "
        "[16, 32] -> [8, 64]\n"
        "decision of instruction 9 (`l10 = sch.sample_compute_location(b0)`): -1 -> none")


def test_diff_shows_instructions_only_in_one_trace(example):
    reordered = "sch.reorder(l2, l6, l7)\nsch.parallel(l2)"
    other = Trace.parse(EXAMPLE.replace("sch.reorder(l6, l2, l7)", reordered))
    assert diff(example, other) == ("- 4: sch.reorder(l6, l2, l7)\n"
                                    "+ 4: sch.reorder(l2, l6, l7)\n"
                                    "+ 5: sch.parallel(l2)")


# ---------------------------------------------------------------------------- with_decision

def test_with_decision_replaces_one_decision(example):
    changed = example.with_decision(2, [np.int64(8), 64])
    assert changed.decisions == {**example.decisions, 2: (8, 64)}
    assert example.decisions[2] == (16, 32)  # the original is a value: unchanged
    assert example.with_decision(7, 0).decisions[7] == 0
    assert 9 not in example.with_decision(9, None).decisions


@pytest.mark.parametrize("index, decision, message", [
    (3, [2, 2], "instruction 3 (`l6, l7 = sch.split(l1, [v4, v5])`): split is not a sampling instruction"),
    (2, [2, 2, 2], "one integer per output: 2 here, not 3"),
    (2, 4, "is a list of integers, not 4"),
    (7, 1.5, "is one integer, not 1.5"),
    (7, True, "is one integer, not True"),
    (5, None, "cache_write is not a sampling instruction"),
    (13, 0, "no instruction 13: the trace has 13"),
    (-1, 0, "no instruction -1"),
])
def test_with_decision_checks_the_instruction_and_the_shape(example, index, decision, message):
    with pytest.raises(TraceError) as info:
        example.with_decision(index, decision)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


# ----------------------------------------------------------------------------- equality, hash

def test_equality_and_hash_are_by_value(example):
    again = Trace.from_json(example.to_json())
    assert again == example and hash(again) == hash(example) and len({again, example}) == 1
    assert example.with_decision(2, [8, 64]) != example
    assert example != EXAMPLE


def test_rv_class_is_part_of_equality():
    block = Trace((Instruction("Parallel", (BlockRV("x"),), (), ()),))
    loop = Trace((Instruction("Parallel", (LoopRV("x"),), (), ()),))
    assert block != loop and str(block) == str(loop)
