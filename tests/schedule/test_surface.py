"""The surface search plugs into: primitives defined once, replay in one place, read-only
analysis."""
import dataclasses
import inspect

import numpy as np
import pytest

from metasched import Schedule, ScheduleError, Trace, replay, workloads
from metasched.schedule import analysis
from metasched.schedule.instruction import KINDS, KINDS_BY_METHOD, BlockRV, ExprRV, Instruction, LoopRV

SMALL = dict(M=16, N=24, K=8)


def every_kind(wl):
    """A schedule of matmul_relu that uses every primitive once at least."""
    sch = Schedule(wl, seed=3)
    c = sch.get_block("C")
    d = sch.get_block("D")
    sch.get_producers(d)
    sch.get_consumers(c)
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=8)
    i0, i1 = sch.split(i, ti)
    j0, j1 = sch.split(j, sch.sample_imperfect_tile(j, n=2, max_innermost_factor=6))
    sch.reorder(i0, j0, i1, j1)
    partial = sch.rfactor(k, 0)
    cache = sch.cache_read(partial, 0, "global")
    sch.compute_inline(cache)
    copy = sch.cache_write(c, 0, "local")
    sch.reverse_compute_inline(d)
    sch.reverse_compute_at(copy, sch.get_loops(c)[0])
    a_cache = sch.cache_read(partial, 1, "global")
    where = sch.sample_compute_location(a_cache)
    sch.compute_at(a_cache, where)
    sch.transform_layout(a_cache, [1, 0])
    step = sch.sample_categorical([0, 16], [0.5, 0.5])
    sch.annotate(c, "unroll_step", step)
    sch.annotate(c, "note", 1)
    sch.unannotate(c, "note")
    outer = sch.fuse(*sch.get_loops(partial)[:2])
    sch.parallel(outer)
    sch.vectorize(sch.get_loops(copy)[-1])
    inner = sch.get_loops(partial)[-1]
    sch.unroll(inner)
    sch.enter_postproc()
    return sch


def test_every_kind_is_derived_from_its_method():
    for kind in KINDS.values():
        method = getattr(Schedule, kind.method)
        params = [p for p in list(inspect.signature(method).parameters.values())[1:]]
        assert [p.name for p in params if p.name != "decision"] == [p.name for p in kind.params], kind.name
        for param, derived in zip([p for p in params if p.name != "decision"], kind.params):
            assert derived.keyword == (param.kind is inspect.Parameter.KEYWORD_ONLY), (kind.name, param.name)
        assert kind.sampling == ("decision" in inspect.signature(method).parameters), kind.name
        assert KINDS_BY_METHOD[kind.method] is kind
    assert {k.name for k in KINDS.values() if k.sampling} == {
        "SamplePerfectTile", "SampleImperfectTile", "SampleCategorical", "SampleComputeLocation"}


def test_a_trace_using_every_kind_round_trips_through_text_json_and_replay():
    wl = workloads.get("matmul_relu", **SMALL)
    sch = every_kind(wl)
    trace = sch.trace
    assert {inst.kind for inst in trace} == set(KINDS)
    assert Trace.parse(str(trace)) == trace
    assert Trace.from_json(trace.to_json()) == trace
    again = replay(wl, trace)
    assert again.trace == trace and str(again) == str(sch)


def test_a_primitive_records_what_it_was_given_and_nothing_when_it_fails():
    sch = Schedule(workloads.get("matmul", **SMALL))
    c = sch.get_block("C")
    with pytest.raises(ScheduleError):
        sch.split(sch.get_loops(c)[0], [None, 1000])
    assert [inst.kind for inst in sch.trace] == ["GetBlock", "GetLoops"]
    sch.sample_categorical([1, 2], [1, 3])  # lists are recorded as tuples
    assert sch.trace[-1].attrs == ((1, 2), (1, 3))


def test_replay_keeps_the_names_a_person_gave():
    wl = workloads.get("matmul", **SMALL)
    text = 'blk = sch.get_block("C")\nrow, col, red = sch.get_loops(blk)\nouter, inner = sch.split(row, [None, 4])\n'
    trace = Trace.parse(text)
    assert replay(wl, trace).trace == trace
    sch = replay(wl, trace)
    more = sch.fuse(*sch.get_loops(sch.get_block("C"))[:2])
    assert more.name not in {"blk", "row", "col", "red", "outer", "inner"}


def test_replay_records_the_instructions_it_replays_and_their_handles_stay_usable():
    wl = workloads.get("matmul_relu", **SMALL)
    trace = every_kind(wl).trace
    again = replay(wl, trace)
    assert all(a is b for a, b in zip(again.trace.insts, trace.insts))  # shared, not copied
    block = again.trace[0].outputs[0]  # a handle of the schedule that recorded the trace
    assert again.get(block) == "C" and again.get_loops(block)
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        Schedule(wl).get_loops(block)  # a schedule that did not replay it


def _handle_made_at(count: int) -> bytes:
    """In a spawned process whose schedule count is at ``count``: a pickled block handle."""
    import itertools
    import pickle

    from metasched.schedule import schedule as schedule_module

    schedule_module._uids = itertools.count(count)
    return pickle.dumps(Schedule(workloads.get("matmul_relu", **SMALL)).get_block("C"))


def test_a_handle_from_another_process_does_not_belong_to_a_schedule_here():
    # Schedules are numbered per process; a handle keeps its number when it is pickled. One
    # made in a worker whose count met this schedule's was taken for this schedule's own.
    import multiprocessing
    import pickle

    from metasched.schedule import schedule as schedule_module

    count = next(schedule_module._uids) + 1  # the count the next schedule here takes
    mine = Schedule(workloads.get("matmul_relu", **SMALL))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        foreign = pickle.loads(pool.apply(_handle_made_at, (count,)))
    assert mine.get_loops(mine.get_block("C"))
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        mine.get_loops(foreign)


def test_replaying_a_hand_built_trace_records_what_the_calls_record():
    wl = workloads.get("matmul", **SMALL)
    block, loops = BlockRV("b0"), [LoopRV("l1"), LoopRV("l2"), LoopRV("l3")]
    odd = Trace((Instruction("GetBlock", (), ("C",), (block,)),
                 Instruction("GetLoops", (block,), (), tuple(loops)),
                 Instruction("Split", (loops[0], None, np.int64(4)), (), (LoopRV("l4"), LoopRV("l5"))),
                 Instruction("SampleCategorical", (), ([1, 2], (0.5, np.float64(0.5))), (ExprRV("v6"),))),
                {3: 1})
    sch = Schedule(wl)
    b0 = sch.get_block("C")
    l1, _, _ = sch.get_loops(b0)
    sch.split(l1, [None, np.int64(4)])
    sch.sample_categorical([1, 2], [0.5, np.float64(0.5)], decision=1)
    replayed = replay(wl, odd).trace
    assert replayed == sch.trace and str(replayed) == str(sch.trace)
    assert [type(v) for v in replayed[2].inputs] == [LoopRV, type(None), int]
    assert replayed[3].attrs == ((1, 2), (0.5, 0.5)) and type(replayed[3].attrs[1][1]) is float


def test_remove_postproc_stops_at_the_mark():
    wl = workloads.get("matmul_relu", **SMALL)
    trace = every_kind(wl).trace
    full = replay(wl, trace)
    full.annotate(full.get_block("C"), "after_the_mark", 1)
    cut = replay(wl, full.trace, remove_postproc=True)
    assert [inst.kind for inst in cut.trace] == [inst.kind for inst in trace][:-1]
    assert replay(wl, full.trace).trace == full.trace


def test_a_decision_provider_sees_the_schedule_and_chooses_the_decision():
    wl = workloads.get("matmul_relu", **SMALL)
    sch = Schedule(wl)
    d = sch.get_block("C")
    where = sch.sample_compute_location(d, decision=-1)
    sch.compute_at(d, where)
    seen = []

    def provider(s, index, inst, inputs, decision):
        candidates = analysis.compute_locations(s, inputs[0])
        seen.append((index, inst.kind, decision, candidates))
        return candidates[-1]

    # C is a reduction with one consumer (D): root or any loop of D, never inline.
    again = replay(wl, sch.trace, decision_provider=provider)
    assert seen == [(1, "SampleComputeLocation", -1, (-1, 0, 1))]
    assert again.trace.decisions[1] == 1
    free = replay(wl, sch.trace, rng=5, decision_provider=lambda *args: None)
    assert free.trace.decisions[1] in (-1, 0, 1)


def test_replay_names_the_failing_instruction():
    wl = workloads.get("matmul", **SMALL)
    with pytest.raises(ScheduleError, match=r"instruction 1 `l1, l2 = sch.get_loops\(b0\)`"):
        replay(wl, Trace.parse('b0 = sch.get_block("C")\nl1, l2 = sch.get_loops(b0)'))
    with pytest.raises(ScheduleError, match="replay needs a Trace"):
        replay(wl, "b0 = sch.get_block('C')")


def test_analysis_facts():
    sch = Schedule(workloads.get("matmul_relu", **SMALL))
    c, d = sch.get_block("C"), sch.get_block("D")
    fc, fd = analysis.block(sch, c), analysis.block(sch, d)
    assert (fc.is_reduction, fc.has_data_reuse, fc.is_elementwise, fc.is_output) == (True, True, False, False)
    assert (fd.is_reduction, fd.has_data_reuse, fd.is_elementwise, fd.is_output) == (False, False, True, True)
    assert fc.consumers == ("D",) and fd.producers == ("C",) and fc.reads == ("A", "B")
    assert [ax.name for ax in fc.spatial] == ["i", "j"] and [ax.name for ax in fc.reduction] == ["k"]
    assert [(lp.extent, lp.is_reduction) for lp in fc.loops] == [(16, False), (24, False), (8, True)]
    assert fc.accesses[0].axes == ("i", "k") and fc.innermost_axis == "j"
    assert analysis.blocks(sch) == ("D", "C")
    cols = Schedule(workloads.get("reduce_cols", M=8, N=8))
    assert not analysis.block(cols, cols.get_block("S")).has_data_reuse


def test_answers_are_frozen_and_do_not_follow_the_schedule():
    sch = Schedule(workloads.get("matmul", **SMALL))
    i = sch.get_loops(sch.get_block("C"))[0]
    info = sch.get(i)
    assert info == analysis.loop(sch, i) and info.extent == 16 and info.kind == "serial"
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.extent = 4
    with pytest.raises(TypeError):
        info.annotations["x"] = 1
    sch.parallel(i)
    assert info.kind == "serial" and sch.get(i).kind == "parallel"
    block = analysis.block(sch, sch.get_block("C"))
    assert block.loops[0].kind == "parallel"
