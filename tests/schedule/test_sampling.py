"""The sampling distributions and the repairs of stale decisions."""
import collections
import math
import time

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from metasched.schedule.sampling import (repair_compute_location, repair_perfect_tile, sample_categorical,
                                         sample_perfect_tile)

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
