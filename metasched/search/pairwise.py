"""``PairwiseBoosting``: gradient-boosted trees fitted to a pairwise ranking loss.

A search asks its cost model one thing: which of these programs runs fastest. Trees fitted to
each program's time by squared error spend their few leaves on getting the times right,
the slow programs' as much as the fast ones'; trees fitted to the order of pairs spend them on
the pairs they misorder. This is RankNet's loss, boosted as LambdaMART boosts it and as
XGBoost's ``rank:pairwise`` objective does (which TVM's XGBoost cost model offers): for each
pair of programs ``(i, j)`` of one workload where ``i`` ran faster, the loss
``log(1 + exp(-(F_i - F_j)))`` of the scores ``F``; each round fits a scikit-learn
``DecisionTreeRegressor`` to the loss's negative gradient per program and sets each leaf to a
Newton step (the gradient's sum over the leaf divided by the curvature's).

Scores start from given values (``start``: the cost model's line in vectorized lanes, which a
model fitted on a dozen programs needs) and end as a monotone map of the sum back onto the
labels' scale (least squares), so that a score still reads as a predicted log throughput:
search draws parents in proportion to ``exp`` of it, and the ranking loss alone leaves its
scale arbitrary.

Every pair of a group of ``n`` programs is ``n(n-1)/2`` pairs: beyond ``max_pairs`` of them,
a fixed sample (from ``random_state``) stands for all, so a fit's cost stops growing with
the square of the records.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from metasched.search.tree_tables import TreeTables


class PairwiseBoosting:
    """Boosted regression trees minimising the pairwise logistic loss of ``fit``'s labels'
    order (see the module's docstring). ``predict`` gives the fitted trees' sum, mapped onto
    the labels' scale together with ``start``: call ``predict(rows, start)``."""

    def __init__(self, rounds: int = 100, learning_rate: float = 0.1, max_leaf_nodes: int = 7,
                 min_samples_leaf: int = 4, l2: float = 1e-6, max_pairs: int = 60_000, random_state: int = 0) -> None:
        self.rounds, self.learning_rate, self.l2 = rounds, learning_rate, l2
        self.max_leaf_nodes, self.min_samples_leaf = max_leaf_nodes, min_samples_leaf
        self.max_pairs, self.random_state = max_pairs, random_state
        self.trees: list = []  # fitted DecisionTreeRegressors
        self.leaf_values: list[np.ndarray] = []  # per tree, per node: what a row ending there adds
        self.scale, self.offset = 1.0, 0.0  # the map of start + trees onto the labels
        self._tables: Optional[TreeTables] = None

    def fit(self, rows: np.ndarray, labels: np.ndarray, start: np.ndarray,
            sample_weight: Optional[np.ndarray] = None, groups: Optional[np.ndarray] = None) -> PairwiseBoosting:
        """Fitted to the order of ``labels`` (higher: faster) within each of ``groups`` (None:
        one group), from the scores ``start``; a pair weighs as its first program's
        ``sample_weight`` (the pairs of a group share their weight)."""
        from sklearn.tree import DecisionTreeRegressor
        # What the trees compare, as they would convert it (so their input checks, a third of a
        # fit's time, are skipped).
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        labels, start = np.asarray(labels, dtype=float), np.asarray(start, dtype=float)
        faster, slower = self._pairs(labels, groups)
        weight = np.ones(len(faster)) if sample_weight is None else np.asarray(sample_weight, dtype=float)[faster]
        n = len(labels)
        scores = start.copy()
        self.trees, self.leaf_values = [], []
        for k in range(self.rounds):
            # Per pair: the chance the scores misorder it, the loss's slope and curvature.
            wrong = 1.0 / (1.0 + np.exp(scores[faster] - scores[slower]))
            slope, curve = weight * wrong, weight * wrong * (1.0 - wrong)
            gradient = np.bincount(faster, slope, n) - np.bincount(slower, slope, n)
            curvature = np.bincount(faster, curve, n) + np.bincount(slower, curve, n)
            tree = DecisionTreeRegressor(max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                                         random_state=self.random_state + k).fit(rows, gradient, check_input=False)
            leaves = tree.apply(rows, check_input=False)
            values = np.zeros(tree.tree_.node_count)
            counts = np.bincount(leaves, minlength=len(values)) > 0
            values[counts] = self.learning_rate * (np.bincount(leaves, gradient, len(values))[counts]
                                                   / (np.bincount(leaves, curvature, len(values))[counts] + self.l2))
            scores += values[leaves]
            self.trees.append(tree)
            self.leaf_values.append(values)
        self.scale, self.offset = _line_onto(scores, labels, sample_weight)
        self._tables = TreeTables.of_decision_trees(self.trees, self.leaf_values, rows)
        return self

    def _pairs(self, labels: np.ndarray, groups: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(faster, slower) indices of every pair of one group with different labels, or a
        fixed sample of ``max_pairs`` of them."""
        faster, slower = [], []
        members = [np.arange(len(labels))] if groups is None else \
            [np.flatnonzero(groups == g) for g in np.unique(groups)]
        for idx in members:
            i, j = np.triu_indices(len(idx), k=1)
            i, j = idx[i], idx[j]
            differ = labels[i] != labels[j]
            i, j = i[differ], j[differ]
            first = labels[i] > labels[j]
            faster.append(np.where(first, i, j))
            slower.append(np.where(first, j, i))
        faster_all, slower_all = np.concatenate(faster), np.concatenate(slower)
        if len(faster_all) > self.max_pairs:
            keep = np.sort(np.random.default_rng(self.random_state).choice(len(faster_all), self.max_pairs,
                                                                           replace=False))
            faster_all, slower_all = faster_all[keep], slower_all[keep]
        return faster_all, slower_all

    def trees_sum(self, rows: np.ndarray) -> np.ndarray:
        """What the trees add to the start of each row."""
        rows = np.asarray(rows, dtype=np.float32)
        # A NaN goes where each tree sends it, which the tables need not know (no training row
        # had one).
        if self._tables is not None and not np.isnan(rows).any():
            return self._tables(rows)
        total = np.zeros(len(rows))
        for tree, values in zip(self.trees, self.leaf_values):
            total += values[tree.apply(rows)]
        return total

    def predict(self, rows: np.ndarray, start: np.ndarray) -> np.ndarray:
        """The score of each row, from its ``start`` (as ``fit`` took it), on the labels'
        scale."""
        return self.offset + self.scale * (np.asarray(start, dtype=float) + self.trees_sum(rows))


def _line_onto(scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray]) -> tuple[float, float]:
    """(scale, offset) of the least-squares line from ``scores`` to ``labels``, the scale held
    above 0 so that the order stays: (1, 0) when the scores do not vary or run against the
    labels."""
    mean_scores, mean_labels = np.average(scores, weights=weights), np.average(labels, weights=weights)
    spread = scores - mean_scores
    weighted = spread if weights is None else weights * spread
    variance = float(weighted @ spread)
    scale = float(weighted @ (labels - mean_labels)) / variance if variance > 0 else 0.0
    if scale <= 0:
        return 1.0, 0.0
    return scale, float(mean_labels - scale * mean_scores)
