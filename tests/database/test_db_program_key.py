"""``program_key`` writes the canonical text of a trace directly (``records._canonical_text``)
and keeps what it wrote for sampling parts it sees again; the text must stay exactly the one
its definition gives (``records._canonical_text_as_defined``), since keys are stored in
databases. Compared here on samples and mutants of every built-in workload, on random traces,
and on the hand-built traces the direct writer leaves to the definition."""
import pathlib
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metasched import workloads
from metasched.database import program_key
from metasched.database import records
from metasched.schedule import Schedule, Trace, replay
from metasched.schedule.instruction import BlockRV, ExprRV, Instruction, LoopRV
from metasched.search.mutator import apply_mutant, default_mutators
from metasched.space import cpu_default

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "schedule"))
from trace_strategies import traces  # noqa: E402

from conftest import SMALL_PARAMS  # noqa: E402


def _same_text(trace: Trace) -> None:
    """The direct writer and the definition agree, also on what they raise."""
    try:
        expected = records._canonical_text_as_defined(trace)
    except Exception as err:  # the direct writer must raise the same
        with pytest.raises(type(err)):
            records._canonical_text(trace)
        return
    assert records._canonical_text(trace) == expected
    assert records._canonical_text(trace) == expected  # again, from the cache


def _candidates(name: str, rng: np.random.Generator) -> list[Trace]:
    """Samples of ``name`` (small sizes), their mutants post-processed as the search does, the
    mutants themselves and the design spaces."""
    wl, space = workloads.get(name, **SMALL_PARAMS[name]), cpu_default()
    mutators = default_mutators(wl)
    found = [design.trace for design in space.generate(wl)]
    for _ in range(4):
        sample = space.sample(wl, rng).trace
        found.append(sample)
        for _ in range(4):
            mutant = mutators.mutate(sample, rng)
            if mutant is None:
                continue
            found.append(mutant)
            sch = apply_mutant(wl, mutant, space)
            if sch is not None:
                found.append(sch.trace)
    return found


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_samples_and_mutants_of_every_workload_get_the_defined_text(name):
    for trace in _candidates(name, np.random.default_rng(1)):
        _same_text(trace)
        _same_text(Trace.parse(str(trace)))  # the same trace made of new objects
        _same_text(trace.simplified())
        _same_text(trace.without_decisions())


@given(traces(max_instructions=12))
def test_random_traces_get_the_defined_text(trace):
    _same_text(trace)


_MARK = Instruction("EnterPostproc", (), (), ())


@given(traces(max_instructions=14), st.data())
def test_random_traces_that_share_a_sampling_part_get_the_defined_text(trace, data):
    # The first ``cut`` instructions become a sampling part, written once and then found in
    # the cache by the traces that hold the same instruction objects: the whole trace, and
    # the trace without each of the instructions after the mark in turn.
    cut = data.draw(st.integers(0, len(trace)))
    decisions = {i + (i >= cut): d for i, d in trace.decisions.items()}
    marked = Trace(trace.insts[:cut] + (_MARK,) + trace.insts[cut:], decisions)
    _same_text(marked)
    for left_out in range(cut + 1, len(marked)):
        insts = marked.insts[:left_out] + marked.insts[left_out + 1:]
        kept = {i - (i > left_out): d for i, d in decisions.items() if i != left_out}
        _same_text(Trace(insts, kept))


def _sampled() -> Trace:
    """b0 = get_block("C"); l1, l2, l3 = get_loops(b0); v4, v5 = sample_perfect_tile(l1, ...);
    l6, l7 = split(l1, [v4, v5]); b8 = get_block("D"); enter_postproc()"""
    sch = Schedule(workloads.get("matmul_relu", **SMALL_PARAMS["matmul_relu"]))
    block = sch.get_block("C")
    i, _, _ = sch.get_loops(block)
    sch.split(i, sch.sample_perfect_tile(i, n=2, decision=[2, 3]))
    sch.get_block("D")  # a pure lookup nothing in the sampling part uses
    sch.enter_postproc()
    return sch.trace


@pytest.mark.parametrize("again", ["b8", "b0"])
def test_a_postprocessor_reading_what_the_sampling_part_did_not_use(again, monkeypatch):
    # The lookup b8 = get_block("D") is dropped from the sampling part alone; named b0 (the
    # name of the block the sampling part uses), it defines b0 again.
    trace = _with(_sampled(), 4, outputs=(BlockRV(again),))
    assert trace[4].kind == "GetBlock"
    _same_text(trace)
    reading = Trace(trace.insts + (Instruction("ComputeInline", (BlockRV(again),), (), ()),), trace.decisions)
    expected = records._canonical_text_as_defined(reading)
    monkeypatch.setattr(records, "_canonical_text_as_defined", None)  # the direct writer copes alone
    assert records._canonical_text(reading) == expected  # the sampling part is cached without the lookup
    assert '"kind":"GetBlock"' in expected.rsplit('"kind":"Split"')[1]  # which now counts


def _with(trace: Trace, index: int, **fields) -> Trace:
    inst = trace[index]
    changed = Instruction(fields.get("kind", inst.kind), fields.get("inputs", inst.inputs),
                          fields.get("attrs", inst.attrs), fields.get("outputs", inst.outputs))
    return Trace(trace.insts[:index] + (changed,) + trace.insts[index + 1:], trace.decisions)


@pytest.mark.parametrize("change", [
    lambda t: _with(t, 0, attrs=(np.str_("C"),)),  # a numpy string: the definition writes it
    lambda t: _with(t, 0, attrs=(["C"],)),  # a list where a tuple belongs
    lambda t: _with(t, 2, attrs=(2, np.int64(16))),  # a numpy integer
    lambda t: _with(t, 3, inputs=(LoopRV("l1"), (ExprRV("v4"), ExprRV("v5")))),  # a tuple holding handles
    lambda t: _with(t, 1, inputs=(LoopRV("b0"),)),  # a name given to two classes
    # an output of a dropped lookup read as another class: the definition drops the lookup
    lambda t: Trace(t.insts + (Instruction("Parallel", (LoopRV("b8"),), (), ()),), t.decisions),
    lambda t: _with(t, 1, inputs=(BlockRV("nowhere"),)),  # a name nothing defines: a KeyError
    lambda t: _with(t, 1, outputs=(LoopRV("b0"), LoopRV("l2"), LoopRV("l3"))),  # a name defined twice
    lambda t: Trace(t.insts, {**t.decisions, 2: (np.int64(2), 3)}),  # a numpy decision
    lambda t: Trace(t.insts, {**t.decisions, 2: (float("nan"), float("inf"), -float("inf"), -0.0)}),
    lambda t: _with(t, 0, kind="NoSuchKind"),
])
def test_unusual_hand_built_traces_get_the_defined_text(change):
    _same_text(change(_sampled()))


def test_the_cache_of_sampling_parts_stays_small():
    for _ in range(2 * records._WRITTEN_LIMIT):
        program_key(Trace.parse(str(_sampled())))  # new objects each time
    assert len(records._WRITTEN) <= records._WRITTEN_LIMIT


def test_replayed_candidates_share_their_sampling_part():
    wl = workloads.get("matmul_relu", **SMALL_PARAMS["matmul_relu"])
    space = cpu_default()
    sample = space.sample(wl, 3).trace
    again = space.postprocess(replay(wl, sample, remove_postproc=True)).trace
    end = [inst.kind for inst in sample].index("EnterPostproc")
    assert all(a is b for a, b in zip(sample.insts[:end], again.insts[:end]))
    assert program_key(again) == program_key(sample)
