"""``MutateParallel``: another parallel limit for a block, by changing the decision of the
``sample_categorical`` its parallel annotation takes its value from, to one that parallelises
other loops (MetaSchedule's ``mutate_parallel.cc``)."""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from metasched.lang.workload import Workload
from metasched.schedule import Trace, analysis
from metasched.schedule.analysis import BlockInfo, LoopInfo
from metasched.schedule.annotations import PARALLEL, PARALLEL_VECTORIZE_UNROLL, VECTORIZE
from metasched.search.mutator.mutator import Mutator
from metasched.search.mutator.trace_reading import annotated_block, annotation_samples, attr, sampling_part

__all__ = ["MutateParallel"]


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
        samples = annotation_samples(trace, (PARALLEL,))
        if not samples:
            return None
        sch = sampling_part(self.workload, trace)
        infos = {name: analysis.block(sch, sch.get_block(name)) for name in analysis.blocks(sch)}
        replayed = sch.trace
        decisions = trace.decisions
        choices = []
        for index, annotate in samples:
            name = annotated_block(sch, replayed[annotate])
            if name in infos:
                inst = trace[index]
                plans = _parallel_plans(infos, name, attr(inst, "candidates"), attr(inst, "probs"),
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
        found = next((block for block in frontier
                      if any(key in infos[block].annotations for key in PARALLEL_VECTORIZE_UNROLL)), None)
        if found is not None:
            return found
        frontier = [c for block in frontier for c in infos[block].consumers if c not in seen]
        seen.update(frontier)
    return None
