"""``TreeTables``: the cost model's trees evaluated as tables give scikit-learn's predictions
exactly (the search's choices must not depend on which path predicted), and it declines
where it cannot promise that."""
import numpy as np
from hypothesis import given, settings, strategies as st
from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor

from metasched import workloads
from metasched.search import GBTModel
from metasched.search.scoring import Scorer
from metasched.search.tree_tables import MAX_SPLITS, TreeTables
from metasched.space import cpu_default


def _data(seed: int, n: int, columns: int, nan_share: float, levels: int):
    """Rows of a few distinct values per column (as program features are: counts, lanes,
    log sizes), some NaN, and labels that depend on them."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, levels, (n, columns)).astype(np.float32) * np.float32(0.5)
    rows[rng.random((n, columns)) < nan_share] = np.nan
    labels = np.nan_to_num(rows[:, 0]) - np.nan_to_num(rows[:, -1]) + rng.normal(0, 0.3, n)
    return rows, labels


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), leaves=st.integers(2, MAX_SPLITS + 1), rounds=st.integers(1, 40),
       nan_share=st.sampled_from([0.0, 0.0, 0.1]), levels=st.integers(2, 12))
def test_tables_predict_what_scikit_learn_predicts_bit_for_bit(seed, leaves, rounds, nan_share, levels):
    rows, labels = _data(seed, 120, 7, nan_share, levels)
    trees = HistGradientBoostingRegressor(max_iter=rounds, max_leaf_nodes=leaves, min_samples_leaf=3,
                                          random_state=0).fit(rows, labels)
    tables = TreeTables.of(trees, rows)
    assert tables is not None
    # New rows: other values, NaN where training had none, and every threshold itself.
    fresh, _ = _data(seed + 1, 60, 7, 0.1, levels + 3)
    at_thresholds = np.zeros((len(tables.threshold), 7), dtype=np.float64)
    at_thresholds[np.arange(len(tables.threshold)), tables.feature] = tables.threshold
    for x in (fresh, at_thresholds, fresh[:1]):
        assert np.array_equal(tables(x), trees.predict(x))


def test_the_cost_model_predicts_the_same_with_and_without_tables():
    wl = workloads.get("matmul_relu")
    scorer = Scorer(wl, cpu_default())
    rows = np.stack([c.row for c in scorer.samples(range(60)) if c is not None])
    model = GBTModel()
    seconds = 1e-3 * (1 + np.random.default_rng(0).random(len(rows)) + rows[:, 0] % 3)
    for row, s in zip(rows, seconds):
        model._add(row, wl.key, float(s))
    model._fit()
    hist, pairwise = model._regressor.models  # the default, "blend": both kinds of trees
    assert hist._tables is not None and pairwise.trees._tables is not None  # the fast path is the one taken
    with_tables = model.predict(rows[::-1])
    hist._tables = pairwise.trees._tables = None
    assert np.array_equal(with_tables, model.predict(rows[::-1]))


def test_trees_too_large_for_a_table_and_other_regressors_are_declined():
    rows, labels = _data(0, 400, 7, 0.0, 12)
    large = HistGradientBoostingRegressor(max_iter=5, max_leaf_nodes=31, min_samples_leaf=2).fit(rows, labels)
    assert max(int((~p[0].nodes["is_leaf"].astype(bool)).sum()) for p in large._predictors) > MAX_SPLITS
    assert TreeTables.of(large, rows) is None
    assert TreeTables.of(GradientBoostingRegressor(n_estimators=5).fit(rows, labels), rows) is None


def test_tables_that_would_predict_otherwise_are_declined(monkeypatch):
    rows, labels = _data(1, 120, 7, 0.0, 6)
    trees = HistGradientBoostingRegressor(max_iter=10, max_leaf_nodes=7).fit(rows, labels)
    assert TreeTables.of(trees, rows) is not None
    exact = TreeTables.__call__
    monkeypatch.setattr(TreeTables, "__call__", lambda self, x: exact(self, x) + 1e-12)
    assert TreeTables.of(trees, rows) is None
