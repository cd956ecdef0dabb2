"""``MutateTileSize``: a factor moved between two tiles of a ``sample_perfect_tile``, or the
innermost tile of a ``sample_imperfect_tile`` changed (MetaSchedule's ``mutate_tile_size.cc``)."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import numpy as np

from metasched.schedule import Trace
from metasched.search.mutator.mutator import Mutator
from metasched.search.mutator.trace_reading import attr

__all__ = ["MutateTileSize", "tile_moves"]


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
            if inst.kind == "SamplePerfectTile" and _has_move(decision, attr(inst, "max_innermost_factor")):
                choices.append((index, decision, attr(inst, "max_innermost_factor")))
            elif inst.kind == "SampleImperfectTile" and (_has_move(decision[:-1], 0) or _can_change_innermost(
                    decision, _innermost_bound(decision, attr(inst, "max_innermost_factor")))):
                choices.append((index, decision, attr(inst, "max_innermost_factor")))
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
