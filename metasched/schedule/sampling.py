"""The distributions of the sampling instructions, and the repairs of stale decisions.

Pure functions: every draw comes from the ``numpy.random.Generator`` passed in, so one seed
gives one result. A *repair* maps a recorded decision that no longer fits (a mutation upstream
changed a loop's extent, or the candidate loops of a compute location) to one that does, with
MetaSchedule's rules, so that replaying a mutated trace keeps as much of each decision as it can.
"""
from __future__ import annotations

import bisect
import functools
import math
from typing import Sequence

import numpy as np


def sample_perfect_tile(rng: np.random.Generator, extent: int, n: int,
                        max_innermost_factor: int = 0) -> list[int]:
    """``n`` positive factors whose product is ``extent``, the last (innermost) one at most
    ``max_innermost_factor`` (no limit when that is 0 or less).

    Every such tiling is equally likely: the distribution of MetaSchedule's unconstrained
    sampler (each prime's exponent spread over the ``n`` positions as a uniform composition)
    conditioned on the innermost bound, which is what retrying until the innermost factor fits
    would give. Rather than retry (slow for a large extent and a tight bound), the innermost
    factor is drawn first, each divisor ``d <= max_innermost_factor`` weighted by the number of
    tilings of ``extent / d`` into ``n - 1`` factors, and the rest is spread as above.
    (MetaSchedule draws the innermost divisor uniformly instead, which favours large innermost
    factors; this sampler keeps every tiling equally likely, and found faster conv2d_bias_relu
    kernels: bench/README.md, Design history.)

    Raises ``ValueError`` when ``extent`` or ``n`` is below 1, or when ``n == 1`` and
    ``extent`` exceeds the bound (one factor must be the whole extent)."""
    if extent < 1 or n < 1:
        raise ValueError(f"sample_perfect_tile needs extent >= 1 and n >= 1, got extent={extent}, n={n}")
    if max_innermost_factor <= 0 or extent <= max_innermost_factor:
        return _spread_all(rng, _factorize(extent), n)
    if n == 1:
        raise ValueError(f"one factor must be the whole extent {extent}, "
                         f"which exceeds max_innermost_factor={max_innermost_factor}")
    divisors, cumulative = _innermost_choices(extent, n, max_innermost_factor)
    innermost = divisors[_draw_index(rng, cumulative)]
    return _spread_all(rng, _factorize(extent // innermost), n - 1) + [innermost]


@functools.lru_cache(maxsize=1024)
def _innermost_choices(extent: int, n: int, max_innermost_factor: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The divisors of ``extent`` that may be the innermost of ``n`` factors, and the
    cumulative distribution (``_cumulative``) of their probabilities (the share of the
    tilings that have each innermost). Cached: a design space tiles the same few loops over
    and over."""
    divisors = tuple(d for d in _divisors(_factorize(extent)) if d <= max_innermost_factor)
    weights = np.array([_count_tilings(_factorize(extent // d), n - 1) for d in divisors], dtype=float)
    return divisors, _cumulative(weights / weights.sum())


def repair_perfect_tile(extent: int, decision: Sequence[int]) -> list[int]:
    """``decision`` made to fit a loop of ``extent`` (MetaSchedule's rule).

    Walk from the innermost factor out to the second: a factor that divides what is left of
    the extent stays and divides it; one that does not becomes all of what is left (so every
    factor further out becomes 1). The outermost factor takes what is left at the end. A
    decision that still fits comes back unchanged, and a repaired one fits, so repairing twice
    is repairing once."""
    factors = [int(f) for f in decision]
    if extent < 1 or not factors or min(factors) < 1:
        raise ValueError(f"cannot repair tile {factors} for extent {extent}: "
                         "need extent >= 1 and at least one factor, all positive")
    left = extent
    for i in range(len(factors) - 1, 0, -1):
        if left % factors[i]:
            factors[i] = left
        left //= factors[i]
    factors[0] = left
    return factors


def sample_imperfect_tile(rng: np.random.Generator, extent: int, n: int,
                          max_innermost_factor: int = 0) -> list[int]:
    """``n >= 2`` positive factors that cover ``extent`` with at most one partial tile: the
    innermost ``f`` drawn uniformly from 1 to ``max_innermost_factor`` (to ``extent`` when
    that is 0 or less, or smaller), the outer ``n - 1`` a perfect tiling of
    ``ceil(extent / f)`` drawn as ``sample_perfect_tile`` draws one (every tiling equally
    likely, no bound). Where ``f`` divides ``extent`` the tiling is perfect; otherwise the
    product overshoots by less than ``f`` and ``split`` guards the last tile.

    What a perfect tiling cannot express: a register tile of 6 rows of a 512-row matrix.

    Raises ``ValueError`` when ``extent`` is below 1 or ``n`` below 2."""
    if extent < 1 or n < 2:
        raise ValueError(f"sample_imperfect_tile needs extent >= 1 and n >= 2, got extent={extent}, n={n}")
    bound = extent if max_innermost_factor <= 0 else min(max_innermost_factor, extent)
    innermost = int(rng.integers(1, bound + 1))
    return _spread_all(rng, _factorize(-(-extent // innermost)), n - 1) + [innermost]


def repair_imperfect_tile(extent: int, decision: Sequence[int]) -> list[int]:
    """``decision`` made to fit a loop of ``extent`` as ``sample_imperfect_tile`` tiles it: the
    innermost factor stays (cut to ``extent`` if larger) and the outer ones are repaired
    (``repair_perfect_tile``) to tile ``ceil(extent / innermost)``. A decision that fits
    comes back unchanged, and repairing twice is repairing once."""
    factors = [int(f) for f in decision]
    if extent < 1 or len(factors) < 2 or min(factors) < 1:
        raise ValueError(f"cannot repair tile {factors} for extent {extent}: "
                         "need extent >= 1 and at least two factors, all positive")
    innermost = min(factors[-1], extent)
    return repair_perfect_tile(-(-extent // innermost), factors[:-1]) + [innermost]


def sample_categorical(rng: np.random.Generator, probs: Sequence[float]) -> int:
    """The index of one of ``probs``, drawn with those weights (they need not sum to exactly 1).

    Raises ``ValueError`` for an empty list, a negative or non-finite weight, or all zeros."""
    return _draw_index(rng, _categorical_cumulative(tuple(probs)))


@functools.lru_cache(maxsize=1024)
def _categorical_cumulative(probs: tuple[float, ...]) -> tuple[float, ...]:
    """``probs`` checked, normalised to sum to 1 and made cumulative (``_cumulative``).
    Cached: search draws from the same few lists of probabilities (one per
    ``sample_categorical`` of a design space) over and over."""
    weights = np.asarray(probs, dtype=float)
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError(f"sample_categorical needs a non-empty list of probabilities, got {list(probs)}")
    total = weights.sum()
    # A sum too large for a float would normalise every weight to 0 (``choice`` refused that).
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or not 0 < total < np.inf:
        raise ValueError(f"probabilities must be finite, non-negative, not all zero and of a finite sum, "
                         f"got {list(probs)}")
    return _cumulative(weights / total)


def _cumulative(probabilities: np.ndarray) -> tuple[float, ...]:
    """The cumulative distribution of ``probabilities`` (which sum to 1), computed as
    ``Generator.choice(n, p=probabilities)`` computes it: the running sums divided by the
    last one."""
    cumulative = probabilities.cumsum()
    cumulative /= cumulative[-1]
    return tuple(cumulative.tolist())


def _draw_index(rng: np.random.Generator, cumulative: Sequence[float]) -> int:
    """An index drawn with the probabilities whose cumulative distribution is ``cumulative``
    (``_cumulative``), exactly as ``rng.choice(len(cumulative), p=probabilities)`` draws it:
    one uniform double from ``rng``, searched for on the right in the cumulative
    distribution. ``choice`` checks ``p`` and sums it again on every call, which took most
    of a sampling instruction's time; here that is done once per distribution."""
    return bisect.bisect_right(cumulative, rng.random())


def repair_compute_location(decision: int, candidates: Sequence[int]) -> int:
    """``decision`` made one of ``candidates`` (sorted; -2 is inline, -1 the root, ``i >= 0`` the
    ``i``-th candidate loop), MetaSchedule's rule: the decision if it is a candidate, else the
    largest candidate below it, else -1 (the root)."""
    at = bisect.bisect_right(candidates, decision)
    return candidates[at - 1] if at else -1


def _factorize(m: int) -> dict[int, int]:
    """Prime -> exponent. Trial division: extents are loop lengths, far below 2**40."""
    primes: dict[int, int] = {}
    p = 2
    while p * p <= m:
        while m % p == 0:
            primes[p] = primes.get(p, 0) + 1
            m //= p
        p += 1 if p == 2 else 2
    if m > 1:
        primes[m] = primes.get(m, 0) + 1
    return primes


def _divisors(primes: dict[int, int]) -> list[int]:
    divisors = [1]
    for p, e in primes.items():
        divisors = [d * p**k for d in divisors for k in range(e + 1)]
    return sorted(divisors)


def _count_tilings(primes: dict[int, int], n: int) -> int:
    """Ordered ways to write the number as ``n`` positive factors: a composition of each
    exponent into ``n`` parts, independently per prime."""
    return math.prod(math.comb(e + n - 1, n - 1) for e in primes.values())


def _spread_all(rng: np.random.Generator, primes: dict[int, int], n: int) -> list[int]:
    factors = [1] * n
    for p, e in primes.items():
        for i, share in enumerate(_composition(rng, e, n)):
            factors[i] *= p**share
    return factors


def _composition(rng: np.random.Generator, total: int, n: int) -> list[int]:
    """``n`` non-negative parts summing to ``total``, each composition equally likely (stars and
    bars: ``n - 1`` bars placed among ``total + n - 1`` slots)."""
    if n == 1:
        return [total]
    bars = sorted(rng.choice(total + n - 1, size=n - 1, replace=False).tolist())
    edges = [-1, *bars, total + n - 1]
    return [edges[i + 1] - edges[i] - 1 for i in range(n)]
