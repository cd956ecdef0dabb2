"""``TreeTables``: a fitted ``HistGradientBoostingRegressor``'s trees evaluated in bulk with
numpy, equal to its ``predict`` bit for bit.

Search predicts a population of a hundred-odd rows at every genetic round, between two
batches of work in the worker processes, which wait meanwhile. scikit-learn's ``predict``
walks its 150 small trees one call each (2 ms a population in a search, up to 34 ms when its
OpenMP threads had gone to sleep); here each tree is a table: its internal nodes'
comparisons, taken for all rows and trees in one gather, make a code per (row, tree) that
picks the tree's leaf (0.4 ms). The sum runs over the trees in scikit-learn's order, from its
baseline, so every prediction is the very float it would give.

``TreeTables.of(regressor, rows)`` returns None where that cannot be promised: another kind of
regressor, categorical splits, trees too large for a table (more than ``MAX_SPLITS`` splits),
or a result that differs from scikit-learn's on ``rows`` (what it was fitted on) — its private
attributes may change between versions, and this check turns such a change into the slower
path rather than into other predictions.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

# The most internal nodes of one tree a table takes (2**MAX_SPLITS entries per tree, and a
# code fits one byte). The cost model's trees have at most 6.
MAX_SPLITS = 8


class TreeTables:
    """Built by ``of``; called on rows, it returns what the regressor's ``predict`` does."""

    def __init__(self, baseline: float, feature: np.ndarray, threshold: np.ndarray,
                 missing_left: np.ndarray, table: np.ndarray) -> None:
        self.baseline = baseline
        # Split-major, (splits * trees,): entry k * trees + t is split k of tree t.
        self.feature = feature  # the column each split reads
        self.threshold = threshold  # a row goes left where its value is <= this
        self.missing_left = missing_left  # where a NaN goes
        self.table = table  # (trees, 2**splits): the leaf value of each code
        self.splits = table.shape[1].bit_length() - 1

    @classmethod
    def of(cls, regressor, rows: np.ndarray) -> Optional[TreeTables]:
        """The tables of a fitted ``HistGradientBoostingRegressor`` that gives the same
        predictions on ``rows``; None where it does not (see the module's docstring)."""
        try:
            tables = cls._build(regressor)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        if tables is None or not np.array_equal(tables(rows), regressor.predict(rows)):
            return None
        return tables

    @classmethod
    def _build(cls, regressor) -> Optional[TreeTables]:
        from sklearn.ensemble import HistGradientBoostingRegressor
        if (type(regressor) is not HistGradientBoostingRegressor or regressor.loss != "squared_error"
                or regressor.n_trees_per_iteration_ != 1):
            return None
        trees = [iteration[0].nodes for iteration in regressor._predictors]
        if not trees or any(nodes["is_categorical"].any() for nodes in trees):
            return None
        splits = max(int((~nodes["is_leaf"].astype(bool)).sum()) for nodes in trees)
        if splits > MAX_SPLITS:
            return None
        feature = np.zeros((len(trees), splits), dtype=np.intp)
        threshold = np.zeros((len(trees), splits))
        missing_left = np.zeros((len(trees), splits), dtype=bool)
        codes = np.arange(2 ** splits)
        table = np.empty((len(trees), len(codes)))
        for t, nodes in enumerate(trees):
            leaf = nodes["is_leaf"].astype(bool)
            inner = np.flatnonzero(~leaf)
            feature[t, :len(inner)] = nodes["feature_idx"][inner]
            threshold[t, :len(inner)] = nodes["num_threshold"][inner]
            missing_left[t, :len(inner)] = nodes["missing_go_to_left"][inner].astype(bool)
            bit = np.zeros(len(nodes), dtype=np.intp)  # an internal node's bit in a code
            bit[inner] = np.arange(len(inner))
            # Every code walked down the tree at once: bit k set means split k went left.
            at = np.zeros(len(codes), dtype=np.intp)
            for _ in range(int(nodes["depth"].max())):
                left = (codes >> bit[at]) & 1 == 1
                at = np.where(leaf[at], at, np.where(left, nodes["left"][at], nodes["right"][at]))
            if not leaf[at].all():
                return None
            table[t] = nodes["value"][at]
        baseline = float(np.asarray(regressor._baseline_prediction).ravel()[0])
        return cls(baseline, feature.T.ravel(), threshold.T.ravel(), missing_left.T.ravel(), table)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        x = np.asarray(rows, dtype=np.float64)  # as scikit-learn converts them
        n, trees = len(x), len(self.table)
        values = x[:, self.feature]
        went_left = values <= self.threshold
        if np.isnan(x).any():
            went_left = np.where(np.isnan(values), self.missing_left, went_left)
        went_left = went_left.reshape(n, self.splits, trees).view(np.uint8)
        codes = np.zeros((n, trees), dtype=np.uint8)
        for k in range(self.splits):
            codes |= went_left[:, k] << k
        leaves = self.table[np.arange(trees), codes]
        # Summed from the baseline, tree by tree, as scikit-learn adds them (a cumulative sum
        # runs in order; ``sum`` would pair them up and round differently).
        total = np.empty((n, trees + 1))
        total[:, 0] = self.baseline
        total[:, 1:] = leaves
        return np.cumsum(total, axis=1)[:, -1]
