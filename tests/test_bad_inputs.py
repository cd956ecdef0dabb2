"""Bad input of every kind a user can give to the Python API, in one table: each case must end
in metasched's own error, and where the input is a text, the error must point at its line and
column. (The command line's half of the table, run as real ``metasched`` subprocesses that
must exit with code 2 and a one-line message without a traceback, is ``CASES`` in
``tests/test_cli.py``.)

A case is ``(id, action, error type, line, column, pattern)``: ``action()`` must raise the
error type (``line``/``column`` checked when not None) with a message matching ``pattern``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import metasched
from metasched import (KernelArgumentError, MetaschedError, ParseError, Schedule, ScheduleError, Trace,
                       TraceError, replay, workloads)

SCALE = "workload scale(N = 8) {\n    input X: float32[N]\n    output Y[i] = X[i] * 2.0\n}\n"


def matmul():
    return workloads.get("matmul", M=16, N=8, K=4)


def on_loop_i(primitive):
    """An action applying ``primitive(sch, i)`` to the first loop of matmul's block C."""
    def action():
        sch = Schedule(matmul())
        return primitive(sch, sch.get_loops(sch.get_block("C"))[0])
    return action


def on_schedule(primitive):
    def action():
        sch = Schedule(matmul())
        return primitive(sch)
    return action


def trace_json(edit):
    """An action decoding matmul's split trace's JSON form after ``edit(obj)``."""
    def action():
        sch = Schedule(matmul())
        sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 4])
        obj = json.loads(json.dumps(sch.trace.to_json()))
        edit(obj)
        return Trace.from_json(obj)
    return action


def kernel_call(make_args):
    def action():
        wl = matmul()
        kernel = metasched.build(wl)
        a, b = wl.random_inputs(0)
        args = make_args(a, b)
        return kernel.run(*args) if len(args) == 3 else kernel(*args)
    return action


def overlapping(a, b):
    """Inputs and an output where input A is a view of the output's memory."""
    out = np.zeros((16, 8), np.float32)
    view = out.reshape(-1)[:a.size].reshape(a.shape)
    view[...] = a
    return view, b, out


def read_only(array):
    array.flags.writeable = False
    return array


def set_key(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def long_sum(terms: int) -> str:
    return ("workload s(N = 4) {\n    input X: float32[N]\n    output Y[i] = "
            + " + ".join(["X[i]"] * terms) + "\n}\n")


TRACE = 'b0 = sch.get_block("C")\nl1, l2, l3 = sch.get_loops(b0)\n'

CASES = [
    # ---- workload text
    ("text_none", lambda: metasched.parse(None), ParseError, None, None, r"needs the workload's text as a str"),
    ("text_bytes", lambda: metasched.parse(SCALE.encode()), ParseError, None, None, r"decode"),
    ("text_number", lambda: metasched.parse(42), ParseError, None, None, r"as a str"),
    ("text_syntax", lambda: metasched.parse(SCALE.replace("* 2.0", "** 2.0")), ParseError, 3, 25,
     r"unexpected '\*'"),
    ("text_unclosed", lambda: metasched.parse(SCALE.replace("X[i] *", "(X[i] *")), ParseError, 3, 19,
     r"'\(' was never closed"),
    ("text_huge_dimension", lambda: metasched.parse(SCALE.replace("N = 8", "N = 100000000000000000000")),
     ParseError, 1, 20, r"too large|does not fit"),
    ("text_huge_tensor", lambda: metasched.parse(SCALE.replace("float32[N]", "float32[N, N, N]")
                                                  .replace("N = 8", "N = 2000000").replace("X[i]", "X[i, 0, 0]")),
     ParseError, 2, 5, r"bytes|too large"),
    ("text_huge_literal", lambda: metasched.parse(SCALE.replace("X[i] * 2.0", "X[i + 100000000000000000000 - "
                                                                            "100000000000000000000] where i in 0..N")),
     ParseError, 3, 25, r"the integer 100000000000000000000 is too large"),
    ("text_unknown_name", lambda: metasched.parse(SCALE, "nothere"), ParseError, None, None, r"no workload named"),
    # ---- parameters
    ("param_unknown", lambda: metasched.parse(SCALE, Q=3), ParseError, None, None, r"no parameter 'Q'"),
    ("param_zero", lambda: metasched.parse(SCALE, N=0), ParseError, None, None, r"N"),
    ("param_negative", lambda: metasched.parse(SCALE, N=-3), ParseError, None, None, r"N"),
    ("param_huge", lambda: metasched.parse(SCALE, N=10**21), ParseError, None, None, r"N"),
    ("param_float", lambda: metasched.parse(SCALE, N=2.5), ParseError, None, None, r"N"),
    ("param_str", lambda: metasched.parse(SCALE, N="8"), ParseError, None, None, r"N"),
    ("param_builtin_unknown", lambda: workloads.get("nosuch"), MetaschedError, None, None, r"the built-in workloads are"),
    # ---- schedule primitives
    ("split_int", on_loop_i(lambda s, i: s.split(i, 4)), ScheduleError, None, None, r"factors must be a list"),
    ("split_overflow", on_loop_i(lambda s, i: s.split(i, [None, 2**63])), ScheduleError, None, None,
     r"factor 9223372036854775808 is larger than the extent 16"),
    ("split_overflow_more", on_loop_i(lambda s, i: s.split(i, [None, 2**64 + 8])), ScheduleError, None, None,
     r"larger than the extent"),
    ("split_hang", on_loop_i(lambda s, i: s.split(i, [10**6, 10**6])), ScheduleError, None, None,
     r"factor 1000000 is larger than the extent 16"),
    ("split_overshoot", on_loop_i(lambda s, i: s.split(i, [1, 8, 4])), ScheduleError, None, None,
     r"factor 8 at position 1 .* so 4 cover the loop and 4 more would do nothing"),
    ("split_zero", on_loop_i(lambda s, i: s.split(i, [None, 0])), ScheduleError, None, None, r"positive integers"),
    ("split_two_nones", on_loop_i(lambda s, i: s.split(i, [None, None])), ScheduleError, None, None, r"at most one"),
    ("tile_n1", on_loop_i(lambda s, i: s.sample_perfect_tile(i, n=1, max_innermost_factor=4)), ScheduleError,
     None, None, r"with n=1 the one factor is the whole extent 16"),
    ("tile_bad_decision", on_loop_i(lambda s, i: s.sample_perfect_tile(i, n=2, decision=5)), ScheduleError,
     None, None, r"decision 5 is not 2 positive integers"),
    ("seed_negative", lambda: Schedule(matmul(), seed=-1), ScheduleError, None, None, r"seed must be a non-negative"),
    ("seed_text", lambda: Schedule(matmul(), seed="abc"), ScheduleError, None, None, r"seed must be"),
    ("schedule_of_text", lambda: Schedule(SCALE), ScheduleError, None, None, r"needs a Workload"),
    ("vectorize_reduction", on_schedule(lambda s: s.vectorize(s.get_loops(s.get_block("C"))[2])), ScheduleError,
     None, None, r"is a reduction loop"),
    ("get_block_unknown", on_schedule(lambda s: s.get_block("Z")), ScheduleError, None, None, r"no block named 'Z'"),
    ("annotate_huge", on_schedule(lambda s: s.annotate(s.get_block("C"), "k", 2**70)), ScheduleError, None, None,
     r"64-bit"),
    ("categorical_bad_probs", on_schedule(lambda s: s.sample_categorical([1, 2], None)), ScheduleError, None, None,
     r"probs a list of numbers"),
    ("replay_other_workload", lambda: replay(workloads.get("batch_matmul", BATCH=2, M=4, N=4, K=4), Trace.parse(TRACE)),
     ScheduleError, None, None,
     r"instruction 1 `l1, l2, l3 = sch.get_loops\(b0\)`.*another workload or with other parameters"),
    # ---- trace text
    ("trace_none", lambda: Trace.parse(None), TraceError, None, None, r"needs the trace's text as a str"),
    ("trace_bytes", lambda: Trace.parse(TRACE.encode()), TraceError, None, None, r"decode"),
    ("trace_syntax", lambda: Trace.parse(TRACE + "l4 = sch.split(l1, [None, 4]"), TraceError, 3, 29,
     r"unexpected end of text; expected '\)' or ','"),
    ("trace_unknown_method", lambda: Trace.parse(TRACE + "sch.splt(l1, [None, 4])"), TraceError, 3, 5,
     r"unknown instruction sch.splt; did you mean sch.split"),
    ("trace_huge_factor", lambda: Trace.parse(TRACE + "l4, l5 = sch.split(l1, [None, 18446744073709551624])"),
     TraceError, 3, 31, r"does not fit in 64 bits"),
    ("trace_undefined", lambda: Trace.parse(TRACE + "sch.parallel(l9)"), TraceError, 3, 14, r"l9 is not defined"),
    ("trace_split_too_large_on_replay",
     lambda: replay(matmul(), Trace.parse(TRACE + "l4, l5 = sch.split(l1, [None, 1000000])")), ScheduleError, None, None, r"instruction 2 `l4, l5 = sch.split\(l1, \[None, 1000000\]\)`"),
    # ---- trace JSON
    ("json_not_object", lambda: Trace.from_json([1, 2]), TraceError, None, None, r"object with a \"version\""),
    ("json_version", trace_json(lambda o: set_key(o, ["version"], 99)), TraceError, None, None,
     r"unknown trace version 99"),
    ("json_huge_factor", trace_json(lambda o: set_key(o, ["insts", 2, "inputs", 2], 10**26)), TraceError, None, None,
     r"instruction 2 \(Split\).*does not fit in 64 bits"),
    ("json_unknown_kind", trace_json(lambda o: set_key(o, ["insts", 1, "kind"], "Explode")), TraceError, None, None,
     r"unknown kind 'Explode'"),
    ("json_dangling_rv", trace_json(lambda o: set_key(o, ["insts", 2, "inputs", 0], {"rv": "l99"})), TraceError,
     None, None, r"not a random variable made by an earlier instruction"),
    # ---- kernel arguments
    ("kernel_count", kernel_call(lambda a, b: (a,)), KernelArgumentError, None, None, r"takes 2 inputs"),
    ("kernel_dtype", kernel_call(lambda a, b: (a.astype(np.float64), b)), KernelArgumentError, None, None,
     r"must have dtype float32"),
    ("kernel_shape", kernel_call(lambda a, b: (a, b.T.copy())), KernelArgumentError, None, None, r"must have shape"),
    ("kernel_list", kernel_call(lambda a, b: (a.tolist(), b)), KernelArgumentError, None, None,
     r"must be a numpy.ndarray"),
    ("kernel_strided", kernel_call(lambda a, b: (np.repeat(a, 2, axis=1)[:, ::2], b)), KernelArgumentError, None, None,
     r"C-contiguous"),
    ("kernel_output_overlaps", kernel_call(lambda a, b: overlapping(a, b)), KernelArgumentError, None, None,
     r"output 'C' \(argument 2\) overlaps argument 0"),
    ("kernel_readonly_output", kernel_call(lambda a, b: (a, b, read_only(np.empty((16, 8), np.float32)))),
     KernelArgumentError, None, None, r"is read-only"),
]


@pytest.mark.parametrize("case_id, action, error, line, column, pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(case_id, action, error, line, column, pattern):
    with pytest.raises(error, match=pattern) as info:
        action()
    assert isinstance(info.value, MetaschedError)
    if line is not None:
        assert info.value.line == line
    if column is not None:
        assert info.value.column == column


def test_a_sum_of_500_terms_compiles_and_matches():
    wl = metasched.parse(long_sum(500))
    inputs = wl.random_inputs(0)
    metasched.assert_outputs_close(wl, metasched.build(wl)(*inputs), wl.reference(*inputs))
