"""What reaches generated code must fit, and what is random must be reproducible: split
factors that overflow or overshoot are refused (by the API, in a trace's text and in its JSON
form), every draw comes from an explicit seed, and replay is deterministic."""
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import metasched
from metasched import Schedule, ScheduleError, Trace, TraceError, replay, workloads
from metasched.handwritten import sampled_matmul
from metasched.testing import assert_equivalent

HUGE = [2**63, 10**26, 2**64 + 8, 2**63 - 1]


@pytest.fixture
def matmul():
    return workloads.get("matmul", M=32, N=24, K=16)


def split_i(sch):
    return sch.get_loops(sch.get_block("C"))[0]


@pytest.mark.parametrize("factor", HUGE)
def test_huge_factors_are_refused_by_the_api(matmul, factor):
    sch = Schedule(matmul)
    i = split_i(sch)
    before = sch.trace
    with pytest.raises(ScheduleError, match=f"factor {factor} is larger than the extent 32"):
        sch.split(i, [None, factor])
    assert sch.trace == before  # a refused primitive changes nothing


@pytest.mark.parametrize("factors", [[10**6, 10**6], [32, 32], [1, 32, 32], [2, 4, 8], [8, None, 8]])
def test_overshooting_factors_are_refused(matmul, factors):
    # Each would run iterations that do nothing; [10**6, 10**6] would run 10**12 of them.
    sch = Schedule(matmul)
    with pytest.raises(ScheduleError, match="split: factor"):
        sch.split(split_i(sch), factors)


@pytest.mark.parametrize("factors", [[None, 32], [None, 5], [5, 7], [7, 5], [3, 2, 6], [None, 3, 3], [4, None, 4]])
def test_imperfect_but_tight_splits_are_accepted_and_correct(matmul, factors):
    sch = Schedule(matmul)
    loops = sch.split(split_i(sch), factors)
    assert assert_equivalent(sch) is None
    extents = [sch.get(lp).extent for lp in loops]
    assert math.prod(extents) < 2 * 32


@given(extent=st.integers(1, 200), data=st.data())
def test_split_accepts_exactly_the_factors_that_waste_no_iteration(extent, data):
    factors = data.draw(st.lists(st.integers(1, extent + 3), min_size=2, max_size=3))
    wl = metasched.parse(f"workload w(N = {extent}) {{\n  input X: float32[N]\n  output Y[i] = X[i]\n}}")
    sch = Schedule(wl)
    (i,) = sch.get_loops(sch.get_block("Y"))
    # The rule, written independently: an iteration of loop k (outer loops at their first
    # iteration) does work when its first index is below the extent.
    inside = [math.prod(factors[k + 1:]) for k in range(len(factors))]
    legal = math.prod(factors) >= extent and all((f - 1) * p < extent for f, p in zip(factors, inside))
    if legal:
        sch.split(i, factors)
        assert math.prod(factors) < 2 * extent  # the bound the README promises
    else:
        with pytest.raises(ScheduleError):
            sch.split(i, factors)


def test_a_split_written_in_trace_text_with_a_huge_factor_is_refused(matmul):
    text = 'b0 = sch.get_block("C")\nl1, l2, l3 = sch.get_loops(b0)\nl4, l5 = sch.split(l1, [None, {}])\n'
    for factor in (2**63, 10**26, 2**64 + 8):
        with pytest.raises(TraceError) as err:
            Trace.parse(text.format(factor))
        assert (err.value.line, err.value.column) == (3, 31)
        assert "does not fit in 64 bits" in str(err.value)
    # Within 64 bits the text parses, and replay refuses the factor, naming the instruction.
    trace = Trace.parse(text.format(2**63 - 1))
    with pytest.raises(ScheduleError, match=r"instruction 2 `l4, l5 = sch.split\(l1, \[None, 9223372036854775807\]\)`: "
                                            r"split: factor 9223372036854775807 is larger than the extent 32"):
        replay(matmul, trace)


def test_a_split_in_trace_json_with_a_huge_factor_is_refused(matmul):
    sch = Schedule(matmul)
    sch.split(split_i(sch), [None, 8])
    obj = json.loads(json.dumps(sch.trace.to_json()))
    for factor in (2**63, 10**26, 2**64 + 8):
        obj["insts"][2]["inputs"][2] = factor
        with pytest.raises(TraceError, match="instruction 2 \\(Split\\).*does not fit in 64 bits"):
            Trace.from_json(obj)
    obj["insts"][2]["inputs"][2] = 10**6
    with pytest.raises(ScheduleError, match="instruction 2 .*factor 1000000 is larger than the extent 32"):
        replay(matmul, Trace.from_json(obj))


def test_huge_literals_are_refused_wherever_a_trace_holds_them(matmul):
    sch = Schedule(matmul)
    with pytest.raises(ScheduleError, match="64-bit"):
        sch.annotate(sch.get_block("C"), "k", 2**64)
    with pytest.raises(ScheduleError, match="64-bit"):
        sch.sample_categorical([1, 2**63], [0.5, 0.5])
    with pytest.raises(TraceError, match="line 1, column 58"):
        Trace.parse("v0 = sch.sample_categorical([1, 2], [0.5, 0.5], decision=-99999999999999999999)")


def test_rfactor_refuses_a_partial_buffer_too_large_for_memory_offsets():
    # Every tensor of this matmul fits, but its partial results over k would take
    # M * N * K * 4 = 2**63 bytes.
    sch = Schedule(workloads.get("matmul", M=2**20, N=2**20, K=2**21))
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="rfactor: the partial results of block C .* bytes, beyond the"):
        sch.rfactor(k, 0)


def test_fuse_refuses_a_loop_longer_than_a_64_bit_counter():
    # Z fits (32767**4 floats are just under 2**62 bytes), but each axis split as [2, 32766]
    # runs almost twice its extent, and the four fused together would count past 2**63.
    wl = metasched.parse("workload t(E = 32767) {\n  input X: float32[E]\n"
                         "  output Z[a, b, c, d] = X[a] + X[b] + X[c] + X[d]\n}")
    sch = Schedule(wl)
    loops = [part for axis in sch.get_loops(sch.get_block("Z")) for part in sch.split(axis, [None, 32766])]
    with pytest.raises(ScheduleError, match="fuse: the fused loop would run 18442240886382264576 iterations"):
        sch.fuse(*loops)
    sch.fuse(*loops[:6])  # three of them fit


# --------------------------------------------------------------------------------- determinism

def test_a_trace_with_free_decisions_replays_to_the_same_program_every_time(matmul):
    free = sampled_matmul(matmul, seed=3).trace
    free = Trace(free.insts)  # every sampling decision removed
    first, second = replay(matmul, free), replay(matmul, free)
    assert first.trace == second.trace and str(first) == str(second)
    assert replay(matmul, free, rng=7).trace == replay(matmul, free, rng=7).trace
    assert replay(matmul, free, rng=np.random.default_rng(7)).trace == replay(matmul, free, rng=7).trace
    seen = {replay(matmul, free, rng=s).trace for s in range(8)}
    assert len(seen) > 1  # the seed really drives the draws


def test_the_default_seed_is_fixed(matmul):
    assert sampled_matmul(matmul).trace == sampled_matmul(matmul).trace
    assert Schedule(matmul).rng.integers(2**32) == Schedule(matmul, seed=0).rng.integers(2**32)


@pytest.mark.parametrize("seed", [-1, "abc", 1.5, True, None, [1]])
def test_a_bad_seed_is_a_clear_error(matmul, seed):
    with pytest.raises(ScheduleError, match="seed must be a non-negative integer or a numpy.random.Generator"):
        Schedule(matmul, seed=seed)
    with pytest.raises(ScheduleError, match="seed must be"):
        replay(matmul, Trace(), rng=seed)


# ---------------------------------------------------------------------------- other refusals

def test_replay_on_another_workload_shows_the_instruction_and_a_hint():
    trace = sampled_matmul(workloads.get("matmul", M=32, N=32, K=32), seed=0).trace
    with pytest.raises(ScheduleError) as err:
        replay(workloads.get("batch_matmul", BATCH=2, M=8, N=8, K=8), trace)
    message = str(err.value)
    assert "instruction 2 `l1, l2, l3 = sch.get_loops(b0)`" in message
    assert "another workload or with other parameters" in message


def test_split_wants_a_list_of_factors(matmul):
    sch = Schedule(matmul)
    with pytest.raises(ScheduleError, match=r"factors must be a list .* as in split\(l1, \[None, 4\]\); got 4"):
        sch.split(split_i(sch), 4)


def test_sample_perfect_tile_with_one_factor_above_the_bound_says_what_to_do(matmul):
    sch = Schedule(matmul)
    with pytest.raises(ScheduleError, match="with n=1 the one factor is the whole extent 32 .* ask for n >= 2"):
        sch.sample_perfect_tile(split_i(sch), n=1, max_innermost_factor=16)
    with pytest.raises(ScheduleError, match="n must be an integer from 1 to 64"):
        sch.sample_perfect_tile(split_i(sch), n=10**9)


def test_trace_is_a_sequence_of_instructions(matmul):
    trace = sampled_matmul(matmul, seed=0).trace
    assert len(trace) == len(trace.insts) and list(trace) == list(trace.insts)
    assert trace[0].kind == "GetBlock" and trace[-1] == trace.insts[-1] and trace[1:3] == trace.insts[1:3]


@pytest.mark.parametrize("text", [None, b"b0 = sch.get_block(\"C\")", 42])
def test_trace_parse_wants_text(text):
    with pytest.raises(TraceError, match="Trace.parse needs the trace's text as a str"):
        Trace.parse(text)


def test_sample_imperfect_tile_refuses_bad_arguments_and_decisions(matmul):
    sch = Schedule(matmul)
    with pytest.raises(ScheduleError, match="sample_imperfect_tile: n must be an integer from 2 to 64, got 1"):
        sch.sample_imperfect_tile(split_i(sch), n=1)
    with pytest.raises(ScheduleError, match="max_innermost_factor must be an integer"):
        sch.sample_imperfect_tile(split_i(sch), n=2, max_innermost_factor=6.5)
    with pytest.raises(ScheduleError, match=r"decision \[6\] is not 2 positive integers"):
        sch.sample_imperfect_tile(split_i(sch), n=2, decision=[6])
    with pytest.raises(ScheduleError, match=r"decision \[0, 6\] is not 2 positive integers"):
        sch.sample_imperfect_tile(split_i(sch), n=2, decision=[0, 6])


@given(m=st.integers(1, 40), n=st.integers(2, 4), bound=st.sampled_from([0, 3, 6, 16]), seed=st.integers(0, 2**32 - 1))
def test_split_by_an_imperfect_tile_is_accepted_and_computes_the_reference(m, n, bound, seed):
    wl = workloads.get("matmul", M=m, N=6, K=5)
    sch = Schedule(wl, seed)
    i = split_i(sch)
    factors = sch.sample_imperfect_tile(i, n=n, max_innermost_factor=bound)
    loops = sch.split(i, factors)
    sch.unroll(loops[-1])
    innermost = sch.get(factors[-1])
    assert math.prod(sch.get(f) for f in factors) - m < innermost  # one partial tile at most
    assert_equivalent(sch, seed % 1000)


def test_a_stale_imperfect_tile_is_repaired_on_replay():
    sch = Schedule(workloads.get("matmul", M=512, N=8, K=8))
    i = split_i(sch)
    sch.split(i, sch.sample_imperfect_tile(i, n=3, max_innermost_factor=16, decision=[2, 43, 6]))
    again = replay(workloads.get("matmul", M=500, N=8, K=8), sch.trace)
    assert list(again.trace.decisions.values()) == [(1, 84, 6)]  # ceil(500 / 6) = 84: 43 no longer divides it
    assert_equivalent(again)
