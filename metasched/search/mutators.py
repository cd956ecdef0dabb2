"""Mutators: how evolutionary search changes a measured program into its next candidates
(MetaSchedule's ``src/meta_schedule/mutator``).

A mutator picks one sampling instruction of a trace and returns the trace with that decision
changed (``Trace.with_decision``), or None when it finds nothing to change; it never edits an
instruction. Whether the mutant is still a program is for replay to say: ``apply_mutant``
replays the mutant's sampling part and runs the space's postprocessors again, and a
``ScheduleError`` drops it. Map of this file:

* ``Mutator``, the extension point;
* ``MutateTileSize``: a factor moved between two tiles of a ``sample_perfect_tile``, or
  the innermost tile of a ``sample_imperfect_tile`` changed;
* ``MutateUnroll``, ``MutateParallel``: another candidate of the ``sample_categorical`` that an
  unroll or parallel annotation takes its value from (``_annotation_samples``); the parallel
  one keeps only limits that parallelise other loops (``_parallel_plans``);
* ``MutateComputeLocation``: another legal location of a ``sample_compute_location``;
* ``MutatorSet`` picks one by probability; ``default_mutators``, MetaSchedule's CPU mix;
* ``apply_mutant``: a mutant to a post-processed schedule, or None.

The mutators that need the schedule's state at a sampling instruction (the legal compute
locations, the loops a parallel limit cuts, whether an annotated block still exists) replay the
trace's sampling part on the workload they were made for, as MetaSchedule's do with the module
of their tuning context; free sampling instructions are then drawn with seed 0, as
``apply_mutant`` draws them. Only decided instructions are ever mutated.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule import RV, BlockRV, Schedule, Trace, analysis, replay
from metasched.schedule.analysis import BlockInfo, LoopInfo
from metasched.schedule.instruction import KINDS, Instruction
from metasched.schedule.sampling import repair_compute_location, sample_categorical
from metasched.space import SpaceGenerator
from metasched.space.parallel_vectorize_unroll import PARALLEL, UNROLL_EXPLICIT, UNROLL_IMPLICIT, VECTORIZE
from metasched.space.postprocs import KEYS


class Mutator(abc.ABC):
    """Changes one decision of a trace. Subclasses are frozen dataclasses (their fields are
    their arguments) and implement ``apply``."""

    @abc.abstractmethod
    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        """``trace`` with the decision of one sampling instruction changed to another value,
        drawn from ``rng`` alone (one trace and one generator state give one mutant), or None
        when this mutator finds no decision to change. Never changes an instruction."""


# -- tile sizes ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MutateTileSize(Mutator):
    """MetaSchedule's ``mutate_tile_size.cc``: in the decision of a ``sample_perfect_tile``
    chosen uniformly, divide one factor by a divisor ``d > 1`` of it and multiply another by
    ``d``, so the product (the loop's extent) stays; the innermost factor never grows past
    ``max_innermost_factor``.

    MetaSchedule draws the two positions, then ``d``, and draws the positions again while
    the innermost one cannot take any ``d`` (giving up at once for two factors). Drawing the
    pair uniformly among those that can move a factor is that distribution without retries,
    and never gives up while a move exists; a decision that has none is never chosen.

    A ``sample_imperfect_tile`` (not in MetaSchedule) is chosen alongside them. Its outer
    factors tile ``ceil(extent / innermost)`` perfectly and move as above among themselves;
    its innermost factor changes to another value from 1 to ``max_innermost_factor``, drawn
    uniformly as the sampler draws it, with the chance a pair of positions has to involve
    the innermost one (``2 / n`` of ``n`` factors), or always when the outer ones cannot
    move. Replay repairs the outer factors to the new innermost
    (``sampling.repair_imperfect_tile``)."""

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        choices = []
        for index, decision in trace.decisions.items():
            inst = trace[index]
            if inst.kind == "SamplePerfectTile" and _has_move(decision, _attr(inst, "max_innermost_factor")):
                choices.append((index, decision, _attr(inst, "max_innermost_factor")))
            elif inst.kind == "SampleImperfectTile" and (_has_move(decision[:-1], 0) or _can_change_innermost(
                    decision, _innermost_bound(decision, _attr(inst, "max_innermost_factor")))):
                choices.append((index, decision, _attr(inst, "max_innermost_factor")))
        if not choices:
            return None
        index, tiles, max_innermost_factor = choices[rng.integers(len(choices))]
        if trace[index].kind == "SampleImperfectTile":
            return trace.with_decision(index, _imperfect_mutant(tiles, max_innermost_factor, rng))
        return trace.with_decision(index, _moved(tiles, tile_moves(tiles, max_innermost_factor), rng))


def _moved(tiles: tuple[int, ...], moves: tuple, rng: np.random.Generator) -> list[int]:
    """``tiles`` after one of ``moves`` (``tile_moves``), drawn uniformly, with a divisor
    drawn uniformly."""
    source, target, divisors = moves[rng.integers(len(moves))]
    factor = divisors[rng.integers(len(divisors))]
    mutated = list(tiles)
    mutated[source] //= factor
    mutated[target] *= factor
    return mutated


def _imperfect_mutant(tiles: tuple[int, ...], max_innermost_factor: int, rng: np.random.Generator) -> list[int]:
    """A ``sample_imperfect_tile`` decision mutated (see ``MutateTileSize``)."""
    outer, innermost = tiles[:-1], tiles[-1]
    bound = _innermost_bound(tiles, max_innermost_factor)
    outer_moves = tile_moves(outer, 0) if len(outer) >= 2 else ()
    if _can_change_innermost(tiles, bound) and (not outer_moves or rng.random() < 2 / len(tiles)):
        if innermost > bound:
            return [*outer, int(rng.integers(1, bound + 1))]
        other = int(rng.integers(1, bound))  # uniform over 1..bound but the current value
        return [*outer, other + (other >= innermost)]
    return [*_moved(outer, outer_moves, rng), innermost]


def _innermost_bound(tiles: tuple[int, ...], max_innermost_factor: int) -> int:
    """The largest innermost factor of a ``sample_imperfect_tile``: ``max_innermost_factor``,
    or with no limit (0 or less) the most the loop can have (the product of the factors)."""
    return max_innermost_factor if max_innermost_factor > 0 else math.prod(tiles)


def _can_change_innermost(tiles: tuple[int, ...], bound: int) -> bool:
    """Whether the innermost factor has another value to take: two values within the bound,
    or a recorded one beyond it (written by hand) that the bound brings back."""
    return bound >= 2 or tiles[-1] > bound


@functools.lru_cache(maxsize=4096)
def tile_moves(tiles: tuple[int, ...], max_innermost_factor: int) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Each way to move a factor between two tiles: ``(source, target, divisors)``, where
    dividing ``tiles[source]`` by any of ``divisors`` (all > 1) and multiplying
    ``tiles[target]`` by it keeps the innermost tile within ``max_innermost_factor`` (no
    limit when that is 0 or less)."""
    innermost = len(tiles) - 1
    moves = []
    for source, tile in enumerate(tiles):
        if tile <= 1:
            continue
        divisors = _divisors(tile)[1:]
        for target in range(len(tiles)):
            if target == source:
                continue
            fitting = divisors
            if target == innermost and max_innermost_factor > 0:
                fitting = tuple(d for d in divisors if d * tiles[target] <= max_innermost_factor)
            if fitting:
                moves.append((source, target, fitting))
    return tuple(moves)


def _has_move(tiles: tuple[int, ...], max_innermost_factor: int) -> bool:
    """Whether ``tile_moves`` finds any, without listing them: the innermost tile can always
    give a factor away, and an outer one can move to another outer one; with two tiles the
    outer one's smallest factor must fit into the innermost."""
    if len(tiles) < 2:
        return False
    if tiles[-1] > 1:
        return True
    if len(tiles) >= 3:
        return any(t > 1 for t in tiles)
    outer = tiles[0]
    return outer > 1 and (max_innermost_factor <= 0 or _divisors(outer)[1] * tiles[-1] <= max_innermost_factor)


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n``, ascending (trial division: ``n`` is a tile of a loop's extent)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


# -- unroll depth and parallel limit -------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MutateUnroll(Mutator):
    """MetaSchedule's ``mutate_unroll.cc``: a ``sample_categorical`` whose value annotates a
    block with ``meta_schedule.unroll_explicit`` or ``unroll_implicit`` (the unroll depth
    ``ParallelizeVectorizeUnroll`` draws), chosen uniformly, takes another candidate, drawn
    with the probabilities of the others.

    Unlike MetaSchedule, it replays the trace's sampling part on ``workload`` and leaves out
    the annotations of blocks that a later rule inlined (matmul_relu's ReLU, folded into the
    copy-out of its cache): changing those changes no program."""

    workload: Workload

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        samples = _annotation_samples(trace, (UNROLL_EXPLICIT, UNROLL_IMPLICIT))
        if not samples:
            return None
        sch = _sampling_part(self.workload, trace)
        alive = set(analysis.blocks(sch))
        replayed = sch.trace
        decisions = trace.decisions
        choices = [index for index, annotate in samples if _annotated_block(sch, replayed[annotate]) in alive
                   and _others(_attr(trace[index], "probs"), decisions[index])]
        if not choices:
            return None
        index = choices[rng.integers(len(choices))]
        others = _others(_attr(trace[index], "probs"), decisions[index])
        return trace.with_decision(index, others[sample_categorical(rng, [p for _, p in others])][0])


@dataclasses.dataclass(frozen=True)
class MutateParallel(Mutator):
    """MetaSchedule's ``mutate_parallel.cc``: a ``sample_categorical`` whose value annotates a
    block with ``meta_schedule.parallel`` (the parallel limit ``ParallelizeVectorizeUnroll``
    draws), chosen uniformly, takes a candidate that parallelises other loops.

    MetaSchedule rewrites the annotation's constant; here the limit is a decision. As
    MetaSchedule does, it replays the trace's sampling part on ``workload`` and groups the
    candidate limits by their *plan*: for each block at the root that takes its limits from
    this annotation (the block, and the blocks rules made for it), how many of its outer
    loops the postprocessor would fuse into the parallel loop (``_parallel_plans``). The
    plan of the current limit is left out; one of the others is chosen uniformly, and the
    largest limit that gives it becomes the decision. None when every candidate gives the
    current plan (the outer loops are too short to tell the limits apart, or the block was
    inlined)."""

    workload: Workload

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        samples = _annotation_samples(trace, (PARALLEL,))
        if not samples:
            return None
        sch = _sampling_part(self.workload, trace)
        infos = {name: analysis.block(sch, sch.get_block(name)) for name in analysis.blocks(sch)}
        replayed = sch.trace
        decisions = trace.decisions
        choices = []
        for index, annotate in samples:
            name = _annotated_block(sch, replayed[annotate])
            if name in infos:
                inst = trace[index]
                plans = _parallel_plans(infos, name, _attr(inst, "candidates"), _attr(inst, "probs"),
                                        decisions[index])
                if plans:
                    choices.append((index, plans))
        if not choices:
            return None
        index, plans = choices[rng.integers(len(choices))]
        return trace.with_decision(index, plans[rng.integers(len(plans))])


def _parallel_plans(infos: Mapping[str, BlockInfo], name: str, candidates: Sequence[int], probs: Sequence[float],
                    decision: int) -> list[int]:
    """For each plan the candidate limits give other than the current decision's, the index
    of the largest candidate that gives it (candidates of probability 0 left out).

    A plan holds, per block at the root that takes its limits from block ``name``, how many
    outer loops ``RewriteParallelVectorizeUnroll`` fuses into its parallel loop: of those it
    may fuse (``_prefix_products``), up to and including the first whose product of extents
    exceeds the limit, none when that product is 1. A block whose loops could all fuse and
    together exceed the vector limit is left out: the postprocessor fuses and splits all
    of them whatever the limit (its fuse-split form, taken when the block's store is
    contiguous throughout, as it is for the untiled element-wise blocks of the default
    space). So limits with one plan parallelise the same loops, and limits with different
    plans mostly different ones: only the program's accesses tell where the vector run
    takes some of them."""
    vectorize = infos[name].annotations.get(VECTORIZE, 0)
    products = []
    for block, info in infos.items():
        if info.attached_to is None and _limits_source(infos, block) == name:
            fuse_split = vectorize > 1 and all(_fusable(loop) for loop in info.loops) and \
                math.prod(loop.extent for loop in info.loops) > vectorize
            if not fuse_split:
                products.append(_prefix_products(info.loops))

    def fused(prods: list[int], limit: int) -> int:
        count = min(sum(p <= limit for p in prods) + 1, len(prods))
        return count if count and prods[count - 1] > 1 else 0

    def plan(limit: int) -> tuple[int, ...]:
        return tuple(fused(prods, limit) for prods in products)

    current = plan(candidates[decision])
    best: dict[tuple[int, ...], int] = {}
    for index, (limit, prob) in enumerate(zip(candidates, probs)):
        key = plan(limit)
        if prob > 0 and key != current and (key not in best or limit > candidates[best[key]]):
            best[key] = index
    return sorted(best.values())


def _prefix_products(loops: Sequence[LoopInfo]) -> list[int]:
    """The products of the extents of the outer loops the postprocessor may fuse into a
    parallel loop (spatial, serial, unannotated, up to and including the first that holds
    another block), outermost first (MetaSchedule's ``AnalyzeParallel``)."""
    products, product = [], 1
    for loop in loops:
        if loop.is_reduction or loop.kind != "serial" or loop.annotations:
            break
        product *= loop.extent
        products.append(product)
        if loop.attached:
            break
    return products


def _fusable(loop: LoopInfo) -> bool:
    """A loop the postprocessor may fuse with others: spatial, serial, unannotated, holding no
    other block."""
    return not loop.is_reduction and loop.kind == "serial" and not loop.annotations and not loop.attached


def _limits_source(infos: Mapping[str, BlockInfo], name: str) -> Optional[str]:
    """The block whose annotations block ``name`` follows in the postprocessor: its own, else
    its nearest annotated consumer's (breadth first); None when there is none."""
    frontier, seen = [name], {name}
    while frontier:
        found = next((block for block in frontier if any(key in infos[block].annotations for key in KEYS)), None)
        if found is not None:
            return found
        frontier = [c for block in frontier for c in infos[block].consumers if c not in seen]
        seen.update(frontier)
    return None


def _annotation_samples(trace: Trace, keys: Sequence[str]) -> list[tuple[int, int]]:
    """``(sampling, annotate)`` instruction indices for each decided ``sample_categorical``
    of more than one candidate whose value an annotation with one of ``keys`` takes, in the
    trace's sampling part."""
    decisions = trace.decisions
    made: dict[RV, int] = {}  # the output of a sampling -> its index
    found = []
    for index, inst in enumerate(trace):
        if inst.kind == "EnterPostproc":
            break
        if inst.kind == "SampleCategorical" and index in decisions and len(_attr(inst, "candidates")) > 1:
            made[inst.outputs[0]] = index
        elif inst.kind == "Annotate" and _attr(inst, "key") in keys and _input(inst, "value") in made:
            found.append((made[_input(inst, "value")], index))
    return found


def _others(probs: Sequence[float], decision: int) -> list[tuple[int, float]]:
    """The other candidates' indices and probabilities, those of probability 0 left out."""
    return [(index, prob) for index, prob in enumerate(probs) if index != decision and prob > 0]


def _annotated_block(sch: Schedule, annotate: Instruction) -> Optional[str]:
    """The name of the block an annotate instruction of ``sch``'s trace annotates (None for
    a loop)."""
    target = _input(annotate, "block_or_loop")
    return sch.get(target) if isinstance(target, BlockRV) else None


# -- compute location ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MutateComputeLocation(Mutator):
    """MetaSchedule's ``mutate_compute_location.cc``: replays the trace's sampling part on
    ``workload``, asking at each decided ``sample_compute_location`` which locations are
    legal there (``analysis.compute_locations``); one such instruction with a legal location
    other than its own is chosen uniformly, and one of those locations, uniformly. Later
    instructions may still fail with it: replay says so."""

    workload: Workload

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        decisions = trace.decisions
        decided = [index for index in decisions if trace[index].kind == "SampleComputeLocation"]
        if not decided:
            return None
        choices: list[tuple[int, list[int]]] = []

        def ask(sch: Schedule, index: int, inst: Instruction, inputs: list, decision: object) -> object:
            if index in decisions and inst.kind == "SampleComputeLocation":
                candidates = analysis.compute_locations(sch, inputs[0])
                current = repair_compute_location(decision, candidates)  # the location replay takes
                others = [c for c in candidates if c != current]
                if others:
                    choices.append((index, others))
            return decision

        last = max(decided)
        prefix = Trace(trace.insts[:last + 1], {i: d for i, d in decisions.items() if i <= last})
        replay(self.workload, prefix, decision_provider=ask)
        if not choices:
            return None
        index, others = choices[rng.integers(len(choices))]
        return trace.with_decision(index, others[rng.integers(len(others))])


# -- choosing a mutator --------------------------------------------------------------------
@dataclasses.dataclass
class MutatorSet:
    """Mutators with their probabilities (weights: they need not sum to 1)."""

    probabilities: Mapping[Mutator, float]

    def __post_init__(self) -> None:
        weights = list(self.probabilities.values())
        if not weights or not all(isinstance(m, Mutator) for m in self.probabilities) or \
                not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"a MutatorSet needs Mutators with finite, non-negative probabilities, "
                             f"not all zero; got {dict(self.probabilities)!r}")

    def mutate(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        """The mutant of one mutator drawn by probability; when it returns None, another is
        drawn from those not tried (their probabilities renormalised), until one gives a
        mutant. None when none does."""
        mutators = list(self.probabilities)
        weights = [float(w) for w in self.probabilities.values()]
        while sum(weights) > 0:
            chosen = sample_categorical(rng, weights)
            mutant = mutators[chosen].apply(trace, rng)
            if mutant is not None:
                return mutant
            weights[chosen] = 0.0
        return None


def default_mutators(workload: Workload) -> MutatorSet:
    """MetaSchedule's mutators for CPUs with its probabilities (``Mutator::DefaultLLVM``)."""
    return MutatorSet({
        MutateTileSize(): 0.90,
        MutateComputeLocation(workload): 0.05,
        MutateUnroll(workload): 0.03,
        MutateParallel(workload): 0.02,
    })


def apply_mutant(workload: Workload, trace: Trace, space: SpaceGenerator) -> Optional[Schedule]:
    """The program a mutant of a sampled trace stands for: its sampling part replayed on
    ``workload`` (what its postprocessors did before no longer holds) and post-processed again
    by ``space``, as ``space.sample`` does; None when replay or a postprocessor raises
    ``ScheduleError`` (a dropped mutant)."""
    try:
        return space.postprocess(_sampling_part(workload, trace))
    except ScheduleError:
        return None


# -- reading instructions ------------------------------------------------------------------
def _sampling_part(workload: Workload, trace: Trace) -> Schedule:
    return replay(workload, trace, remove_postproc=True)


@functools.lru_cache(maxsize=None)
def _positions(kind: str, role: str) -> dict[str, int]:
    """Parameter name -> its position among the attributes (``role="attr"``) or inputs
    (``"input"``) of an instruction of ``kind``."""
    names = [p.name for p in KINDS[kind].params if p.role == role]
    return {name: position for position, name in enumerate(names)}


def _attr(inst: Instruction, name: str) -> object:
    return inst.attrs[_positions(inst.kind, "attr")[name]]


def _input(inst: Instruction, name: str) -> object:
    return inst.inputs[_positions(inst.kind, "input")[name]]
