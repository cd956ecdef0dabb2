"""``TreeTables``: a fitted ``HistGradientBoostingRegressor``'s trees (or
``pairwise.PairwiseBoosting``'s decision trees) evaluated in bulk with numpy, equal to its
``predict`` bit for bit.

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
path rather than into other predictions. ``TreeTables.of_decision_trees`` does the same for
scikit-learn ``DecisionTreeRegressor``s with leaf values of one's own, checked against their
``apply``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

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
    def of_decision_trees(cls, trees: list, leaf_values: list[np.ndarray], rows: np.ndarray,
                          summed: np.ndarray) -> Optional[TreeTables]:
        """The tables of scikit-learn ``DecisionTreeRegressor``s whose nodes add
        ``leaf_values[t][node]`` (a sum over the trees, in order, from 0), given ``summed``, that
        sum on ``rows`` as the trees work it out; None where they cannot be tables or give
        other values there."""
        try:
            nodes = [_Nodes(tree.tree_.children_left == -1, tree.tree_.feature, tree.tree_.threshold,
                            tree.tree_.missing_go_to_left.astype(bool), tree.tree_.children_left,
                            tree.tree_.children_right, values, int(tree.tree_.max_depth))
                     for tree, values in zip(trees, leaf_values)]
            tables = cls._tabulate(nodes, 0.0)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        return tables if tables is not None and np.array_equal(tables(rows), summed) else None

    @classmethod
    def _build(cls, regressor) -> Optional[TreeTables]:
        from sklearn.ensemble import HistGradientBoostingRegressor
        if (type(regressor) is not HistGradientBoostingRegressor or regressor.loss != "squared_error"
                or regressor.n_trees_per_iteration_ != 1):
            return None
        trees = [iteration[0].nodes for iteration in regressor._predictors]
        if not trees or any(nodes["is_categorical"].any() for nodes in trees):
            return None
        nodes = [_Nodes(t["is_leaf"].astype(bool), t["feature_idx"], t["num_threshold"],
                        t["missing_go_to_left"].astype(bool), t["left"], t["right"], t["value"],
                        int(t["depth"].max())) for t in trees]
        return cls._tabulate(nodes, float(np.asarray(regressor._baseline_prediction).ravel()[0]))

    @classmethod
    def _tabulate(cls, trees: list[_Nodes], baseline: float) -> Optional[TreeTables]:
        """Tables of ``trees`` summed from ``baseline``; None when a tree has too many splits."""
        if not trees:
            return None
        splits = max(int((~nodes.leaf).sum()) for nodes in trees)
        if splits > MAX_SPLITS:
            return None
        feature = np.zeros((len(trees), splits), dtype=np.intp)
        threshold = np.zeros((len(trees), splits))
        missing_left = np.zeros((len(trees), splits), dtype=bool)
        codes = np.arange(2 ** splits)
        table = np.empty((len(trees), len(codes)))
        for t, nodes in enumerate(trees):
            leaf = nodes.leaf
            inner = np.flatnonzero(~leaf)
            feature[t, :len(inner)] = nodes.feature[inner]
            threshold[t, :len(inner)] = nodes.threshold[inner]
            missing_left[t, :len(inner)] = nodes.missing_left[inner]
            bit = np.zeros(len(leaf), dtype=np.intp)  # an internal node's bit in a code
            bit[inner] = np.arange(len(inner))
            # Every code walked down the tree at once: bit k set means split k went left.
            at = np.zeros(len(codes), dtype=np.intp)
            for _ in range(nodes.depth):
                left = (codes >> bit[at]) & 1 == 1
                at = np.where(leaf[at], at, np.where(left, nodes.left[at], nodes.right[at]))
            if not leaf[at].all():
                return None
            table[t] = nodes.value[at]
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


class _Nodes(NamedTuple):
    """One tree's nodes, whichever estimator made it: per node, whether it is a leaf, the
    column and threshold it splits on (a row goes left where its value is <= the threshold),
    where a NaN goes, its children, and the value a row ending there adds; the tree's depth."""

    leaf: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    missing_left: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    depth: int
