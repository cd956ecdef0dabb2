"""The sampling distributions and the repairs of stale decisions."""
import collections
import math
import time

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from metasched.schedule.sampling import (repair_compute_location, repair_imperfect_tile, repair_perfect_tile,
                                         sample_categorical, sample_imperfect_tile, sample_perfect_tile)

extents = st.integers(1, 5000)
seeds = st.integers(0, 2**32 - 1)


# ------------------------------------------------------------------------- sample_perfect_tile

@given(seeds, extents, st.integers(1, 5), st.integers(-1, 64))
def test_perfect_tile_multiplies_to_the_extent_within_the_bound(seed, extent, n, max_innermost):
    assume(n > 1 or max_innermost <= 0 or extent <= max_innermost)
    factors = sample_perfect_tile(np.random.default_rng(seed), extent, n, max_innermost)
    assert len(factors) == n and all(type(f) is int and f >= 1 for f in factors)
    assert math.prod(factors) == extent
    assert max_innermost <= 0 or factors[-1] <= max_innermost


@given(seeds, extents, st.integers(1, 5), st.integers(0, 64))
def test_perfect_tile_same_seed_same_tiles(seed, extent, n, max_innermost):
    assume(n > 1 or max_innermost == 0 or extent <= max_innermost)
    first = sample_perfect_tile(np.random.default_rng(seed), extent, n, max_innermost)
    assert sample_perfect_tile(np.random.default_rng(seed), extent, n, max_innermost) == first


def _frequencies(draw, times=6000):
    rng = np.random.default_rng(7)
    return collections.Counter(tuple(draw(rng)) for _ in range(times))


def test_every_tiling_is_equally_likely():
    counts = _frequencies(lambda rng: sample_perfect_tile(rng, 12, 2))
    assert set(counts) == {(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)}
    assert all(800 < c < 1200 for c in counts.values())  # 1000 each expected


def test_every_tiling_within_the_bound_is_equally_likely():
    counts = _frequencies(lambda rng: sample_perfect_tile(rng, 12, 2, max_innermost_factor=4))
    assert set(counts) == {(12, 1), (6, 2), (4, 3), (3, 4)}
    assert all(1300 < c < 1700 for c in counts.values())  # 1500 each expected
    # With three factors, innermost 1 has 6 tilings of 12 above it and innermost 4 has 2.
    counts = _frequencies(lambda rng: sample_perfect_tile(rng, 12, 3, max_innermost_factor=4)[-1:])
    assert 2.4 < counts[(1,)] / counts[(4,)] < 3.6


def test_large_extent_with_a_tight_bound_is_fast():
    start = time.perf_counter()
    factors = sample_perfect_tile(np.random.default_rng(0), 2**30 * 3**4, 6, max_innermost_factor=2)
    assert math.prod(factors) == 2**30 * 3**4 and factors[-1] <= 2
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("extent, n, max_innermost", [(0, 2, 0), (8, 0, 0), (32, 1, 16)])
def test_perfect_tile_rejects_impossible_requests(extent, n, max_innermost):
    with pytest.raises(ValueError):
        sample_perfect_tile(np.random.default_rng(0), extent, n, max_innermost)


# ------------------------------------------------------------------------- repair_perfect_tile

@pytest.mark.parametrize("extent, decision, repaired", [
    (16, [2, 4, 2], [2, 4, 2]),      # still fits: unchanged
    (12, [4, 8], [1, 12]),           # 8 does not divide 12: it takes all of it
    (24, [1, 16, 2], [1, 12, 2]),    # 2 stays, 16 does not divide the 12 left
    (24, [5, 4, 2], [3, 4, 2]),      # only the outermost is off: it takes what is left
    (7, [3, 2, 4], [1, 1, 7]),       # 4 takes all of 7; what is further out becomes 1
    (10, [3], [10]),
])
def test_repair_perfect_tile_examples(extent, decision, repaired):
    assert repair_perfect_tile(extent, decision) == repaired


@given(extents, st.lists(st.integers(1, 64), min_size=1, max_size=5))
def test_repair_is_exact_and_idempotent(extent, decision):
    repaired = repair_perfect_tile(extent, decision)
    assert len(repaired) == len(decision) and math.prod(repaired) == extent
    assert repair_perfect_tile(extent, repaired) == repaired


@given(seeds, extents, st.integers(1, 5))
def test_repair_keeps_a_decision_that_fits(seed, extent, n):
    factors = sample_perfect_tile(np.random.default_rng(seed), extent, n)
    assert repair_perfect_tile(extent, factors) == factors


def test_repair_rejects_non_positive_factors():
    with pytest.raises(ValueError):
        repair_perfect_tile(8, [0, 8])


# ------------------------------------------------------------------------- sample_imperfect_tile

def covers_with_one_partial_tile(extent: int, factors: list[int]) -> bool:
    """The outer factors tile ceil(extent / innermost) perfectly: the product overshoots the
    extent by less than one innermost tile, so only the last tile is partial."""
    innermost = factors[-1]
    return (all(type(f) is int and f >= 1 for f in factors) and innermost <= extent
            and math.prod(factors[:-1]) == -(-extent // innermost))


@given(seeds, extents, st.integers(2, 5), st.integers(-1, 64))
def test_imperfect_tile_covers_the_extent_with_one_partial_tile(seed, extent, n, max_innermost):
    factors = sample_imperfect_tile(np.random.default_rng(seed), extent, n, max_innermost)
    assert len(factors) == n and covers_with_one_partial_tile(extent, factors)
    assert max_innermost <= 0 or factors[-1] <= max_innermost
    assert sample_imperfect_tile(np.random.default_rng(seed), extent, n, max_innermost) == factors


def test_imperfect_tile_draws_every_innermost_equally_and_then_a_perfect_tiling_of_the_rest():
    counts = _frequencies(lambda rng: sample_imperfect_tile(rng, 512, 2, max_innermost_factor=6)[-1:])
    assert set(counts) == {(1,), (2,), (3,), (4,), (5,), (6,)}
    assert all(850 < c < 1150 for c in counts.values())  # 1000 each expected
    # Innermost 6 leaves 86 = 2 x 43: four tilings in two factors, each as likely.
    counts = _frequencies(lambda rng: sample_imperfect_tile(rng, 512, 3, max_innermost_factor=6), times=12000)
    sixes = {t: c for t, c in counts.items() if t[-1] == 6}
    assert set(sixes) == {(86, 1, 6), (43, 2, 6), (2, 43, 6), (1, 86, 6)}
    assert all(380 < c < 620 for c in sixes.values())  # 500 each expected
    # No bound, or one past the extent: up to the extent.
    assert {sample_imperfect_tile(np.random.default_rng(s), 5, 2, bound)[-1] for s in range(200)
            for bound in (0, 9)} == {1, 2, 3, 4, 5}


@pytest.mark.parametrize("extent, n", [(0, 2), (8, 1), (8, 0)])
def test_imperfect_tile_rejects_impossible_requests(extent, n):
    with pytest.raises(ValueError):
        sample_imperfect_tile(np.random.default_rng(0), extent, n, 16)


@pytest.mark.parametrize("extent, decision, repaired", [
    (512, [2, 43, 1, 6], [2, 43, 1, 6]),   # fits: unchanged
    (512, [2, 43, 1, 8], [1, 64, 1, 8]),   # another innermost: the outer ones tile 64 (43 takes it all)
    (500, [2, 43, 1, 6], [1, 84, 1, 6]),   # the loop shrank: ceil(500 / 6) = 84
    (5, [1, 1, 8], [1, 1, 5]),             # innermost beyond the extent: the extent
])
def test_repair_imperfect_tile_examples(extent, decision, repaired):
    assert repair_imperfect_tile(extent, decision) == repaired


@given(extents, st.lists(st.integers(1, 64), min_size=2, max_size=5))
def test_repair_imperfect_tile_covers_and_is_idempotent(extent, decision):
    repaired = repair_imperfect_tile(extent, decision)
    assert len(repaired) == len(decision) and covers_with_one_partial_tile(extent, repaired)
    assert repaired[-1] == min(decision[-1], extent)
    assert repair_imperfect_tile(extent, repaired) == repaired


@pytest.mark.parametrize("decision", [[0, 8], [8], []])
def test_repair_imperfect_tile_rejects_what_cannot_be_a_tiling(decision):
    with pytest.raises(ValueError):
        repair_imperfect_tile(8, decision)


# --------------------------------------------------------------------------- sample_categorical

def test_categorical_follows_the_weights():
    counts = _frequencies(lambda rng: [sample_categorical(rng, [1, 0, 3])])  # need not sum to 1
    assert counts[(1,)] == 0
    assert 2.6 < counts[(2,)] / counts[(0,)] < 3.4


@given(seeds, st.lists(st.floats(0, 10), min_size=1, max_size=6).filter(lambda p: sum(p) > 0))
def test_categorical_draws_a_possible_index_reproducibly(seed, probs):
    index = sample_categorical(np.random.default_rng(seed), probs)
    assert type(index) is int and probs[index] > 0
    assert sample_categorical(np.random.default_rng(seed), probs) == index


@pytest.mark.parametrize("probs", [[], [0, 0], [0.5, -0.1], [float("nan"), 1]])
def test_categorical_rejects_bad_weights(probs):
    with pytest.raises(ValueError):
        sample_categorical(np.random.default_rng(0), probs)


# ---------------------------------------------------------------------- repair_compute_location

@pytest.mark.parametrize("decision, repaired", [(1, 1), (2, 1), (7, 3), (-2, -2), (-3, -1)])
def test_repair_compute_location_examples(decision, repaired):
    assert repair_compute_location(decision, [-2, -1, 0, 1, 3]) == repaired


@given(st.integers(-3, 10), st.lists(st.integers(-2, 8), unique=True).map(sorted))
def test_repair_compute_location_gives_a_candidate_at_or_below(decision, candidates):
    repaired = repair_compute_location(decision, candidates)
    assert repaired == -1 or (repaired in candidates and repaired <= decision)
    assert repair_compute_location(repaired, candidates) == repaired or repaired not in candidates
