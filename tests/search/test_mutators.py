"""The mutators: each changes one decision and no instruction, into a value that differs and
that replay accepts as it is; the set draws them in MetaSchedule's proportions; the same trace
and seed give the same mutant; and mutants of every built-in workload, post-processed, compute
the reference."""
import collections
import dataclasses
import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import SMALL_PARAMS, with_imperfect_rows
from metasched import Schedule, replay, workloads
from metasched.schedule import Trace, analysis
from metasched.schedule.annotations import PARALLEL, UNROLL_EXPLICIT, UNROLL_IMPLICIT
from metasched.search.mutator import (MutateComputeLocation, MutateParallel, MutateTileSize, MutateUnroll, Mutator,
                                      MutatorSet, apply_mutant, default_mutators)
from metasched.space import PostOrderApply, Postproc, cpu_default
from metasched.testing import assert_equivalent

SIX = ["batch_matmul", "conv2d_bias_relu", "dense_bias_relu", "matmul_relu", "reduce_cols", "softmax"]
PACKED = {"batch_matmul", "dense_bias_relu", "matmul_relu"}  # a panel packed at j_0 (MultiLevelTiling)
MIX = {"tile": 0.90, "compute_location": 0.05, "unroll": 0.03, "parallel": 0.02}


def host_free_space():
    """The default space with 2 cores, so that the traces do not depend on the machine."""
    space = cpu_default()
    space.rules = [dataclasses.replace(r, num_cores=2) if hasattr(r, "num_cores") else r for r in space.rules]
    return space


SPACE = host_free_space()


@lru_cache(maxsize=None)
def workload(name: str, small: bool = True):
    return workloads.get(name, **SMALL_PARAMS[name]) if small else workloads.get(name)


@lru_cache(maxsize=None)
def traces(name: str, count: int = 6, small: bool = True) -> tuple[Trace, ...]:
    rng = np.random.default_rng(0)
    return tuple(SPACE.sample(workload(name, small), rng).trace for _ in range(count))


def mutators(wl) -> dict[str, Mutator]:
    return {"tile": MutateTileSize(), "compute_location": MutateComputeLocation(wl),
            "unroll": MutateUnroll(wl), "parallel": MutateParallel(wl)}


def changed(parent: Trace, mutant: Trace) -> int:
    """The one instruction whose decision the mutant changed (asserting that it is one and that
    the instructions are the parent's)."""
    assert mutant.insts == parent.insts
    before, after = parent.decisions, mutant.decisions
    assert before.keys() == after.keys()
    indices = [i for i in before if before[i] != after[i]]
    assert len(indices) == 1, indices
    return indices[0]


def role(trace: Trace, index: int) -> str:
    """What the sampling instruction ``index`` decides: a tile, a compute location, or the value
    of an unroll or parallel annotation."""
    inst = trace[index]
    if inst.kind != "SampleCategorical":
        return {"SamplePerfectTile": "tile", "SampleImperfectTile": "tile",
                "SampleComputeLocation": "compute_location"}[inst.kind]
    keys = {later.attrs[0] for later in trace.insts[index + 1:]
            if later.kind == "Annotate" and later.inputs[1] == inst.outputs[0]}
    assert len(keys) == 1
    key = keys.pop()
    return "parallel" if key == PARALLEL else "unroll" if key in (UNROLL_EXPLICIT, UNROLL_IMPLICIT) else key


def annotated_block(trace: Trace, sample: int) -> str:
    """The name ``get_block`` gave the block whose annotation takes the value of ``sample``."""
    annotate = next(inst for inst in trace.insts[sample + 1:]
                    if inst.kind == "Annotate" and inst.inputs[1] == trace[sample].outputs[0])
    return next(inst.attrs[0] for inst in trace if inst.kind == "GetBlock" and inst.outputs[0] == annotate.inputs[0])


def mutants(name: str, which: str, seeds=range(3), small: bool = True, parents=None):
    """(parent, mutant, index changed) of mutator ``which`` on ``parents`` (default: the sampled
    traces of ``name``)."""
    wl = workload(name, small)
    mutator = mutators(wl)[which]
    for parent in parents or traces(name, small=small):
        for seed in seeds:
            mutant = mutator.apply(parent, np.random.default_rng(seed))
            if mutant is not None:
                index = changed(parent, mutant)
                assert role(parent, index) == which
                yield parent, mutant, index


# ----------------------------------------------------------------------------- one decision each
@pytest.mark.parametrize("name", SIX)
def test_each_mutator_changes_one_decision_of_its_kind_and_no_instruction(name):
    applied = collections.Counter(which for which in MIX for _ in mutants(name, which))
    # Every sample has tiles and an unroll depth (each workload has a reduction). Softmax and
    # conv2d (its padding stage) have blocks whose location is sampled. The matmuls' packed
    # panel of B has a fixed place, j_0, the loop that ends their tiled block's parallel
    # prefix whatever the limit: that limit changes nothing, no other block's does in these
    # samples, and the mutator leaves them alone.
    assert applied["tile"] == 18 and applied["unroll"] == 18
    assert (applied["parallel"] > 0) == (name not in PACKED)
    assert (applied["compute_location"] > 0) == (name in ("conv2d_bias_relu", "softmax"))


def test_a_trace_without_decisions_has_nothing_to_mutate():
    wl = workload("softmax")
    sketch = SPACE.generate(wl)[0].trace.without_decisions()
    for mutator in mutators(wl).values():
        assert mutator.apply(sketch, np.random.default_rng(0)) is None
    assert default_mutators(wl).mutate(sketch, np.random.default_rng(0)) is None


# ----------------------------------------------------------------------------- tile sizes
@pytest.mark.parametrize("name", SIX)
def test_tile_mutants_keep_the_extent_and_the_innermost_bound(name):
    for parent, mutant, index in mutants(name, "tile", range(5)):
        before, after = parent.decisions[index], mutant.decisions[index]
        limit = parent[index].attrs[1]
        if parent[index].kind == "SamplePerfectTile":
            assert math.prod(after) == math.prod(before) and after != before
            assert sum(a != b for a, b in zip(before, after)) == 2  # one factor moved
            assert limit <= 0 or after[-1] <= max(limit, before[-1])
        elif after[-1] == before[-1]:  # a factor moved between the outer tiles
            assert math.prod(after) == math.prod(before) and sum(a != b for a, b in zip(before, after)) == 2
        else:  # another innermost tile, within the bound; replay repairs the outer ones
            assert after[:-1] == before[:-1] and 1 <= after[-1] <= limit


@pytest.mark.parametrize("name", ["batch_matmul", "conv2d_bias_relu", "dense_bias_relu", "matmul_relu"])
def test_the_rows_of_a_tiled_block_are_mutated_both_ways(name):
    """In a space whose tiled blocks have imperfect rows (every spatial loop but the last),
    the mutator moves their outer factors and changes their innermost ones."""
    space, rng = with_imperfect_rows(host_free_space()), np.random.default_rng(0)
    parents = [space.sample(workload(name), rng).trace for _ in range(6)]
    ways = collections.Counter()
    for parent, mutant, index in mutants(name, "tile", range(30), parents=parents):
        if parent[index].kind == "SampleImperfectTile":
            ways["innermost" if mutant.decisions[index][-1] != parent.decisions[index][-1] else "outer"] += 1
    assert ways["innermost"] > 0 and ways["outer"] > 0, ways


@given(extent=st.integers(1, 720), n=st.integers(2, 4), limit=st.sampled_from([0, 1, 2, 6, 16]),
       seed=st.integers(0, 2**32 - 1))
def test_an_imperfect_tile_mutant_replays_to_a_tiling_that_covers_the_loop(extent, n, limit, seed):
    sch = Schedule(workloads.get("reduce_cols", M=1, N=extent), seed)
    loop = sch.get_loops(sch.get_block("S"))[0]
    sch.split(loop, sch.sample_imperfect_tile(loop, n=n, max_innermost_factor=limit))
    parent = sch.trace
    (index, tiles), = parent.decisions.items()
    mutant = MutateTileSize().apply(parent, np.random.default_rng(seed))
    if mutant is None:  # nothing else to be: one iteration, or one innermost value and one outer tile
        assert extent == 1 or (n == 2 and limit == 1)
        return
    again = replay(sch.workload, mutant).trace.decisions[index]
    inner = again[-1]
    assert math.prod(again[:-1]) == -(-extent // inner) and inner <= (limit if limit > 0 else extent)
    assert again != tiles or mutant.decisions[index][-1] > extent  # a change, unless cut back to the extent


def tilings(extent: int, n: int):
    """Every way to write ``extent`` as ``n`` ordered positive factors."""
    if n == 1:
        yield (extent,)
        return
    for d in range(1, extent + 1):
        if extent % d == 0:
            for rest in tilings(extent // d, n - 1):
                yield (d, *rest)


@given(extent=st.integers(1, 720), n=st.integers(1, 4), limit=st.sampled_from([0, 1, 2, 3, 4, 16, 64]),
       seed=st.integers(0, 2**32 - 1))
def test_a_tile_mutant_exists_exactly_when_another_tiling_fits(extent, n, limit, seed):
    assume(not (n == 1 and 0 < limit < extent))  # no tiling at all
    sch = Schedule(workloads.get("reduce_cols", M=1, N=extent), seed)
    sch.sample_perfect_tile(sch.get_loops(sch.get_block("S"))[0], n=n, max_innermost_factor=limit)
    parent = sch.trace
    (index, tiles), = parent.decisions.items()
    others = (t for t in tilings(extent, n) if t != tiles and (limit <= 0 or t[-1] <= limit))
    mutant = MutateTileSize().apply(parent, np.random.default_rng(seed))
    if mutant is None:
        assert next(others, None) is None
        return
    after = mutant.decisions[index]
    assert math.prod(after) == extent and after != tiles and (limit <= 0 or after[-1] <= limit)
    assert replay(sch.workload, mutant).trace.decisions[index] == after  # replay takes it as it is


# ----------------------------------------------------------------------------- unroll depth
def test_unroll_mutants_pick_another_depth_of_a_block_that_still_exists():
    found = 0
    for name in SIX:
        for parent, mutant, index in mutants(name, "unroll", range(4)):
            before, after = parent.decisions[index], mutant.decisions[index]
            assert after != before and 0 <= after < len(parent[index].attrs[0])
            assert annotated_block(parent, index) in analysis.blocks(replay(workload(name), parent))
            found += 1
    assert found == 6 * 6 * 4
    # matmul_relu's ReLU (D) is annotated first, then folded into C's cache: its depth
    # changes no program, and the check above shows it is never chosen.
    parent = traces("matmul_relu")[0]
    assert any(role(parent, i) == "unroll" and annotated_block(parent, i) == "D" for i in parent.decisions)


# ----------------------------------------------------------------------------- parallel limit
def test_parallel_mutants_pick_another_limit_that_parallelises_other_loops():
    same = total = 0
    for name in sorted(set(SIX) - PACKED):
        wl = workload(name)
        for parent, mutant, index in mutants(name, "parallel", range(3)):
            before, after = parent.decisions[index], mutant.decisions[index]
            assert after != before and parent[index].attrs[1][after] > 0
            sch = apply_mutant(wl, mutant, SPACE)
            assert sch is not None
            total += 1
            same += str(sch) == str(replay(wl, parent))
    assert total >= 30 and same <= 0.1 * total, (same, total)


def test_parallel_mutator_leaves_out_limits_that_change_nothing():
    # softmax 512 x 1024 at default size: every block's outer loop has 512 or more iterations,
    # more than any limit (2 to 32 with 2 cores), so every limit parallelises that loop alone.
    wl = workload("softmax", small=False)
    for parent in traces("softmax", count=3, small=False):
        assert MutateParallel(wl).apply(parent, np.random.default_rng(0)) is None


# ----------------------------------------------------------------------------- compute location
def test_compute_location_mutants_take_another_legal_location():
    wl = workload("softmax")
    found = replayed = 0
    for parent, mutant, index in mutants("softmax", "compute_location", range(4)):
        before, after = parent.decisions[index], mutant.decisions[index]
        assert after != before
        legal = []

        def ask(sch, at, inst, inputs, decision):
            if at == index:
                legal.append(analysis.compute_locations(sch, inputs[0]))
            return decision

        replay(wl, mutant, remove_postproc=True, decision_provider=ask)
        assert after in legal[0]  # legal where it is sampled: replay does not repair it
        found += 1
        sch = apply_mutant(wl, mutant, SPACE)  # a later instruction or a postprocessor may refuse it
        if sch is not None:
            replayed += 1
            assert sch.trace.decisions[index] == after
    assert found >= 12 and replayed >= found // 2


# ----------------------------------------------------------------------------- the set
def test_the_set_draws_mutators_in_metaschedules_proportions():
    wl = workload("softmax")
    parent = next(t for t in traces("softmax", count=12)
                  if all(m.apply(t, np.random.default_rng(0)) is not None for m in mutators(wl).values()))
    rng = np.random.default_rng(1)
    draws = 2000
    counts = collections.Counter(role(parent, changed(parent, default_mutators(wl).mutate(parent, rng)))
                                 for _ in range(draws))
    for which, p in MIX.items():
        assert abs(counts[which] / draws - p) <= 4 * math.sqrt(p * (1 - p) / draws) + 0.002, counts


def test_the_set_tries_another_mutator_when_the_drawn_one_finds_nothing():
    wl = workload("reduce_cols")  # no compute location to change
    mostly_nothing = MutatorSet({MutateComputeLocation(wl): 0.99, MutateTileSize(): 0.01})
    for seed in range(10):
        parent = traces("reduce_cols")[seed % 6]
        assert role(parent, changed(parent, mostly_nothing.mutate(parent, np.random.default_rng(seed)))) == "tile"


@pytest.mark.parametrize("probabilities", [{}, {MutateTileSize(): -1.0}, {MutateTileSize(): 0.0},
                                           {MutateTileSize(): float("nan")}, {"tile": 1.0}])
def test_a_set_needs_mutators_with_probabilities(probabilities):
    with pytest.raises(ValueError):
        MutatorSet(probabilities)


def test_default_mutators_are_metaschedules():
    wl = workload("softmax")
    defaults = default_mutators(wl).probabilities
    assert {type(m).__name__: p for m, p in defaults.items()} == {
        "MutateTileSize": 0.90, "MutateComputeLocation": 0.05, "MutateUnroll": 0.03, "MutateParallel": 0.02}


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", SIX)
def test_the_same_trace_and_seed_give_the_same_mutant(name):
    wl = workload(name)
    distinct = set()
    for parent in traces(name, count=3):
        first = [default_mutators(wl).mutate(parent, np.random.default_rng(seed)) for seed in range(8)]
        again = [default_mutators(wl).mutate(parent, np.random.default_rng(seed)) for seed in range(8)]
        assert first == again
        distinct.update(first)
        for mutator in mutators(wl).values():
            assert mutator.apply(parent, np.random.default_rng(5)) == mutator.apply(parent, np.random.default_rng(5))
    assert len(distinct) > 3  # and other seeds, other mutants


# ----------------------------------------------------------------------------- replaying mutants
class Refuse(Postproc):
    def apply(self, sch):
        return False


def test_apply_mutant_post_processes_again_or_drops_the_mutant():
    wl = workload("matmul_relu")
    redone = 0
    for parent, mutant, _ in mutants("matmul_relu", "tile"):
        sch = apply_mutant(wl, mutant, SPACE)
        cut = [inst.kind for inst in sch.trace].index("EnterPostproc")
        assert sch.trace.insts[:cut] == mutant.insts[:cut]
        assert sch.trace.decisions.keys() == mutant.decisions.keys()
        for i, decision in mutant.decisions.items():
            if mutant[i].kind == "SampleComputeLocation":
                # The packed panel's location: where the new tiles made its loop a unit loop,
                # replay repairs it to the nearest candidate below (MetaSchedule's rule).
                assert sch.trace.decisions[i] <= decision
            else:
                assert sch.trace.decisions[i] == decision
        redone += sch.trace.insts[cut:] != parent.insts[cut:]  # the postprocessors ran on the new tiles
        assert str(replay(wl, sch.trace)) == str(sch)  # what the builder replays
    assert redone
    assert apply_mutant(wl, mutant, PostOrderApply(postprocs=[Refuse()])) is None
    assert apply_mutant(workload("softmax"), mutant, SPACE) is None  # does not replay there


@pytest.mark.parametrize("name", SIX)
def test_mutants_of_every_workload_compute_the_reference(name):
    wl = workload(name)
    checked = 0
    for parent in traces(name, count=2):
        for which, mutator in mutators(wl).items():
            mutant = mutator.apply(parent, np.random.default_rng(checked))
            sch = None if mutant is None else apply_mutant(wl, mutant, SPACE)
            if sch is not None:
                assert_equivalent(sch)
                checked += 1
    assert checked >= 4
