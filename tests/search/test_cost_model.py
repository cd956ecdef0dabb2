"""Pairwise ranking accuracy, as ``bench/tune.py``'s model quality uses it: which pairs count
and how ties and failed programs are scored; the line in vectorized lanes the trees start from."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn.ensemble import HistGradientBoostingRegressor

from metasched.search import GBTModel, pairwise_accuracy
from metasched.search.cost_model import _LANES, _LanesThenTrees
from metasched.search.features import FEATURE_NAMES


def test_tied_predictions_count_as_wrong():
    assert pairwise_accuracy([1, 2], [5, 5]) == 0.0
    assert pairwise_accuracy([1, 2, 3], [1, 1, 3]) == pytest.approx(2 / 3)


def test_failed_programs_rank_last_and_tie_with_each_other():
    # Throughputs: two failed programs (0) and two that ran.
    truth = [0.0, 0.0, 2.0, 1.0]
    assert pairwise_accuracy(truth, [0.1, 0.2, 0.9, 0.5]) == 1.0  # the 0-0 pair is left out
    assert pairwise_accuracy(truth, [0.6, 0.2, 0.9, 0.5]) == pytest.approx(4 / 5)


# -- the trees' linear base: a line in the main store's vectorized lanes ---------------------
def _rows_with_lanes(lanes, seed=0):
    """Program rows of random features whose main store has ``lanes`` vectorized lanes."""
    rows = np.random.default_rng(seed).random((len(lanes), 2 * len(FEATURE_NAMES) + 1))
    rows[:, _LANES] = lanes
    return rows


def _trees():
    return HistGradientBoostingRegressor(max_iter=50, max_leaf_nodes=7, min_samples_leaf=4, random_state=0)


def test_the_line_carries_the_lanes_trend_past_the_programs_fitted():
    lanes = np.random.default_rng(1).integers(0, 4, 40).astype(float)
    labels = 0.5 * lanes + np.random.default_rng(2).normal(0, 0.01, 40)
    model = _LanesThenTrees(_trees()).fit(_rows_with_lanes(lanes), labels)
    assert model.slope == pytest.approx(0.5, abs=0.02)
    # Programs with more lanes than any fitted: the line ranks them by lanes, where trees
    # alone, flat past their last split, tie them.
    wide, wider = _rows_with_lanes([5.0] * 6, seed=3), _rows_with_lanes([7.0] * 6, seed=3)
    assert np.all(model.predict(wider) > model.predict(wide) + 0.5)
    alone = _trees().fit(_rows_with_lanes(lanes), labels)
    np.testing.assert_array_equal(alone.predict(wider), alone.predict(wide))


def test_a_falling_trend_in_lanes_is_left_to_the_trees():
    lanes = np.arange(40) % 4.0
    labels = -0.5 * lanes
    rows = _rows_with_lanes(lanes)
    model = _LanesThenTrees(_trees()).fit(rows, labels)
    assert model.slope == 0.0 and model.intercept == pytest.approx(labels.mean())
    assert pairwise_accuracy(labels, model.predict(rows)) > 0.9  # the trees learned it


def test_programs_without_vectorized_loops_are_fitted_by_the_trees_alone():
    rows = _rows_with_lanes(np.zeros(30))
    labels = rows[:, 0]  # a trend in another column
    model = _LanesThenTrees(_trees()).fit(rows, labels)
    assert model.slope == 0.0
    np.testing.assert_allclose(model.predict(rows), _trees().fit(rows, labels - labels.mean()).predict(rows)
                               + labels.mean())


def test_a_weighted_line_is_the_line_of_the_rows_repeated_by_their_weights():
    rng = np.random.default_rng(4)
    lanes = rng.integers(0, 5, 20).astype(float)
    labels = 0.3 * lanes + rng.normal(0, 0.2, 20)
    counts = rng.integers(1, 4, 20)
    weighted = _LanesThenTrees(_trees()).fit(_rows_with_lanes(lanes), labels, counts.astype(float))
    repeated = _LanesThenTrees(_trees()).fit(_rows_with_lanes(np.repeat(lanes, counts)), np.repeat(labels, counts))
    assert weighted.slope == pytest.approx(repeated.slope) and weighted.slope > 0
    assert weighted.intercept == pytest.approx(repeated.intercept)


def test_each_workload_weighs_as_much_as_any_other_in_the_fit():
    model = GBTModel()
    for group, count in (("a", 30), ("b", 10), ("c", 1)):
        for k in range(count):
            model._add(np.zeros(3, dtype=np.float32), group, 1e-3 * (k + 1))
    weights = model.weights()
    groups = np.array(model._groups)
    totals = [weights[groups == g].sum() for g in "abc"]
    assert totals == pytest.approx([totals[0]] * 3) and weights.mean() == pytest.approx(1.0)
    alone = GBTModel()
    alone._add(np.zeros(3, dtype=np.float32), "a", 1e-3)
    assert alone.weights() is None  # one workload: every program alike, as before


# -- the trees fit only the columns that vary: the same trees, sooner -----------------------
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), constant=st.lists(st.integers(0, 30), max_size=20),
       nan_column=st.booleans())
def test_trees_fitted_on_the_varying_columns_alone_are_the_trees_of_all(seed, constant, nan_column):
    rng = np.random.default_rng(seed)
    lanes = rng.integers(0, 4, 60).astype(float)
    rows = _rows_with_lanes(lanes, seed=seed % 1000)[:, :31]
    rows[:, constant] = rng.integers(0, 3)  # columns with one value among the programs fitted
    if nan_column:
        rows[rng.random(60) < 0.2, 7] = np.nan  # a NaN makes a column vary
    labels = 0.3 * lanes + np.nan_to_num(rows[:, 5]) + rng.normal(0, 0.1, 60)
    model = _LanesThenTrees(_trees()).fit(rows, labels)
    assert set(model._columns) == {c for c in range(31) if np.unique(rows[:, c]).size > 1}
    every = _trees().fit(rows, labels - model._line(rows))
    # Other values in the constant columns: the trees of all the columns never read them.
    fresh = _rows_with_lanes(rng.integers(0, 6, 40).astype(float), seed=seed % 1000 + 1)[:, :31]
    for x in (rows, fresh):
        np.testing.assert_array_equal(model.predict(x), model._line(x) + every.predict(x))
