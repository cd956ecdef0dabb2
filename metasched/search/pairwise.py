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

A group of ``n`` programs makes ``n(n-1)/2`` pairs: beyond ``max_pairs`` of them, as many
pairs drawn at random (from ``random_state``) stand for all, so that a fit's time and memory
stop growing with the square of the records.
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
                 min_samples_leaf: int = 4, max_pairs: int = 60_000, random_state: int = 0) -> None:
        self.rounds, self.learning_rate = rounds, learning_rate
        self.max_leaf_nodes, self.min_samples_leaf = max_leaf_nodes, min_samples_leaf
        self.max_pairs, self.random_state = max_pairs, random_state
        self.trees: list = []  # fitted DecisionTreeRegressors
        self.leaf_values: list[np.ndarray] = []  # per tree, per node: what a row ending there adds
        self.scale, self.offset = 1.0, 0.0  # the map of start + trees onto the labels
        self._tables: Optional[TreeTables] = None

    def fit(self, rows: np.ndarray, labels: np.ndarray, start: np.ndarray,
            sample_weight: Optional[np.ndarray] = None, groups: Optional[np.ndarray] = None) -> PairwiseBoosting:
        """Fitted to the order of ``labels`` (higher: faster) within each of ``groups`` (None:
        one group), from the scores ``start``. A group's pairs weigh in all what its programs
        weigh (``sample_weight``; None: 1 each), not what their number of pairs, which grows as
        its square, would make them: so groups whose programs weigh one over their count
        (``GBTModel.weights``) weigh alike in pairs too. Within a group, pairs weigh alike."""
        from sklearn.tree import DecisionTreeRegressor
        # What the trees compare, as they would convert it, so that their input checks (a third
        # of a fit's time) can be skipped; not for rows with a NaN, whose handling they set up.
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        check = bool(np.isnan(rows).any())
        labels, start = np.asarray(labels, dtype=float), np.asarray(start, dtype=float)
        faster, slower = self._pairs(labels, groups)
        weight = _pair_weights(faster, groups, sample_weight, len(labels))
        n = len(labels)
        scores = start.copy()
        self.trees, self.leaf_values = [], []
        for k in range(self.rounds):
            # Per pair: the chance the scores misorder it, the loss's slope and curvature.
            wrong = np.exp(-np.logaddexp(0.0, scores[faster] - scores[slower]))  # 1 / (1 + e^d)
            slope, curve = weight * wrong, weight * wrong * (1.0 - wrong)
            gradient = np.bincount(faster, slope, n) - np.bincount(slower, slope, n)
            curvature = np.bincount(faster, curve, n) + np.bincount(slower, curve, n)
            tree = DecisionTreeRegressor(max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                                         random_state=self.random_state + k).fit(rows, gradient, check_input=check)
            leaves = tree.apply(rows, check_input=check)
            values = np.zeros(tree.tree_.node_count)
            counts = np.bincount(leaves, minlength=len(values)) > 0
            values[counts] = self.learning_rate * (np.bincount(leaves, gradient, len(values))[counts]
                                                   / (np.bincount(leaves, curvature, len(values))[counts] + 1e-6))
            scores += values[leaves]
            self.trees.append(tree)
            self.leaf_values.append(values)
        self.scale, self.offset = _line_onto(scores, labels, sample_weight)
        self._tables = TreeTables.of_decision_trees(self.trees, self.leaf_values, rows, self._applied(rows))
        return self

    def _pairs(self, labels: np.ndarray, groups: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(faster, slower) indices of every pair of one group with different labels; where
        the groups hold more than ``max_pairs`` pairs, about that many drawn at random (with
        ``random_state``), each group's share by its count of pairs, never all of them made."""
        members = [np.arange(len(labels))] if groups is None else \
            [np.flatnonzero(groups == g) for g in np.unique(groups)]
        counts = np.array([len(idx) * (len(idx) - 1) // 2 for idx in members])
        rng = np.random.default_rng(self.random_state)
        faster, slower = [], []
        for idx, count in zip(members, counts):
            if counts.sum() <= self.max_pairs:
                i, j = np.triu_indices(len(idx), k=1)
            else:
                drawn = int(np.ceil(self.max_pairs * count / counts.sum()))
                i = rng.integers(0, len(idx), drawn)
                j = (i + rng.integers(1, max(len(idx), 2), drawn)) % len(idx)  # another member
            i, j = idx[i], idx[j]
            differ = labels[i] != labels[j]
            i, j = i[differ], j[differ]
            first = labels[i] > labels[j]
            faster.append(np.where(first, i, j))
            slower.append(np.where(first, j, i))
        return np.concatenate(faster), np.concatenate(slower)

    def trees_sum(self, rows: np.ndarray) -> np.ndarray:
        """What the trees add to the start of each row."""
        rows = np.asarray(rows, dtype=np.float32)
        # A NaN goes where each tree sends it, which the tables need not know (no training row
        # had one).
        if self._tables is not None and not np.isnan(rows).any():
            return self._tables(rows)
        return self._applied(rows)

    def _applied(self, rows: np.ndarray) -> np.ndarray:
        """The trees' sum over float32 ``rows``, tree by tree through scikit-learn's ``apply``."""
        total = np.zeros(len(rows))
        for tree, values in zip(self.trees, self.leaf_values):
            total += values[tree.apply(rows)]
        return total

    def predict(self, rows: np.ndarray, start: np.ndarray) -> np.ndarray:
        """The score of each row, from its ``start`` (as ``fit`` took it), on the labels'
        scale."""
        return self.offset + self.scale * (np.asarray(start, dtype=float) + self.trees_sum(rows))


def _pair_weights(faster: np.ndarray, groups: Optional[np.ndarray],
                  sample_weight: Optional[np.ndarray], n: int) -> np.ndarray:
    """Each pair's weight, so that a group's pairs weigh in all what its programs weigh
    (``sample_weight``, None: 1 each), scaled to a mean of 1."""
    if not len(faster):
        return np.ones(0)
    group = np.zeros(n, dtype=np.intp) if groups is None else np.unique(groups, return_inverse=True)[1].ravel()
    totals = np.bincount(group, None if sample_weight is None else np.asarray(sample_weight, dtype=float))
    pairs = np.bincount(group[faster], minlength=len(totals))
    weight = totals[group[faster]] / pairs[group[faster]]
    return weight / weight.mean()


def _line_onto(scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray]) -> tuple[float, float]:
    """(scale, offset) of the least-squares line from ``scores`` to ``labels``, the scale held
    above 0 so that the order stays: (1, 0) when the scores do not vary or run against the
    labels."""
    scale, offset = rising_line(scores, labels, weights)
    return (scale, offset) if scale > 0 else (1.0, 0.0)


def rising_line(x: np.ndarray, y: np.ndarray, weights: Optional[np.ndarray] = None) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line of ``y`` in ``x``, each point counted by its
    weight (None: all alike), the slope held at 0 or above: 0, and the mean of ``y``, where
    ``x`` does not vary or the line falls."""
    mean_x, mean_y = np.average(x, weights=weights), np.average(y, weights=weights)
    spread = x - mean_x
    weighted = spread if weights is None else weights * spread
    slope = max(0.0, float(weighted @ (y - mean_y) / (weighted @ spread))) if spread.any() else 0.0
    return slope, float(mean_y - slope * mean_x)
