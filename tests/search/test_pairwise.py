"""``PairwiseBoosting``, the cost model's ranking trees: the pairs it learns from, what it
learns, its scores' scale, its tables, and ``GBTModel("pairwise")`` around it."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from metasched.search import GBTModel, pairwise_accuracy
from metasched.search.features import FEATURE_NAMES
from metasched.search.pairwise import PairwiseBoosting, _pair_weights


def _ranked(seed: int, n: int = 120, columns: int = 6):
    """Rows of a few values per column, as program features are, and labels whose order a
    non-linear function of two columns decides (the others are noise)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 8, (n, columns)).astype(np.float32)
    labels = np.where(rows[:, 0] > 3, 2.0, 0.0) + 0.3 * rows[:, 1] + rng.normal(0, 0.05, n)
    return rows, labels


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       ties=st.booleans())
def test_pairs_are_within_a_group_and_faster_first(seed, sizes, ties):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(groups)
    labels = rng.integers(0, 3, len(groups)).astype(float) if ties else rng.random(len(groups))
    faster, slower = PairwiseBoosting()._pairs(labels, groups)
    assert np.all(groups[faster] == groups[slower]) and np.all(labels[faster] > labels[slower])
    want = sum(int((labels[groups == g][:, None] > labels[groups == g][None, :]).sum()) for g in range(len(sizes)))
    assert len(faster) == want  # every pair with different labels, once
    assert len(set(zip(faster.tolist(), slower.tolist()))) == want


@pytest.mark.parametrize("grouped", [False, True])
def test_beyond_max_pairs_a_fixed_draw_stands_for_all(grouped):
    rng = np.random.default_rng(0)
    labels = rng.random(300)
    groups = np.repeat([0, 1], [200, 100]) if grouped else None
    faster, slower = PairwiseBoosting(max_pairs=5000)._pairs(labels, groups)
    assert 4900 <= len(faster) <= 5002 and np.all(labels[faster] > labels[slower])
    if grouped:
        assert np.all(groups[faster] == groups[slower])
        # Each group's share by its count of pairs: 19900 and 4950.
        assert abs(np.mean(groups[faster] == 0) - 19900 / 24850) < 0.01
    again = PairwiseBoosting(max_pairs=5000)._pairs(labels, groups)
    assert np.array_equal(faster, again[0]) and np.array_equal(slower, again[1])


def test_workloads_weighed_by_their_counts_weigh_alike_in_pairs():
    model = GBTModel()
    for group, count in (("a", 40), ("b", 10)):
        for k in range(count):
            model._add(np.zeros(3, dtype=np.float32), group, 1e-3 * (k + 1))
    groups = np.array(model._groups)
    faster, slower = PairwiseBoosting()._pairs(model.labels(), groups)
    weight = _pair_weights(faster, groups, model.weights(), len(groups))
    per_group = [weight[groups[faster] == g].sum() for g in "ab"]
    # 780 pairs and 45: pair by pair, the first workload would weigh 17 times the second.
    assert per_group[0] == pytest.approx(per_group[1]) and weight.mean() == pytest.approx(1.0)
    unweighted = _pair_weights(faster, groups, None, len(groups))  # each workload by its programs
    assert [unweighted[groups[faster] == g].sum() for g in "ab"] == pytest.approx([4 / 5 * 825, 1 / 5 * 825])
    np.testing.assert_allclose(_pair_weights(faster, None, None, len(groups)), 1.0)


def test_it_learns_an_order_the_start_misses():
    rows, labels = _ranked(0)
    test_rows, test_labels = _ranked(1)
    start = np.zeros(len(rows))
    model = PairwiseBoosting(random_state=0).fit(rows, labels, start)
    assert pairwise_accuracy(test_labels, model.predict(test_rows, np.zeros(len(test_rows)))) > 0.85
    # The start stays part of a score: a large one decides the order.
    shifted = model.predict(test_rows, 100.0 * np.arange(len(test_rows)))
    assert np.all(np.diff(shifted) > 0)


def test_scores_are_on_the_labels_scale():
    rows, labels = _ranked(2)
    for unit in (1.0, 10.0):  # the same order on another scale: the scores follow the labels
        model = PairwiseBoosting(random_state=0).fit(rows, unit * labels, np.zeros(len(rows)))
        scores = model.predict(rows, np.zeros(len(rows)))
        assert scores.mean() == pytest.approx(unit * labels.mean())  # a least-squares line's
        assert np.corrcoef(scores, labels)[0, 1] > 0.9
        assert 0.5 * unit * labels.std() < scores.std() < 1.5 * unit * labels.std()


def test_pairs_across_groups_teach_nothing():
    # Two groups whose labels lie far apart and a column telling the groups apart. Pairs
    # across the groups would teach the trees to score one group above the other; within
    # each, that column says nothing about the order.
    rows, labels = _ranked(3)
    groups = (np.arange(len(rows)) % 2).astype(int)
    rows[:, -1] = groups
    labels = labels + 100.0 * groups

    def gap(model: PairwiseBoosting) -> float:
        added = model.trees_sum(rows)
        return float(added[groups == 1].mean() - added[groups == 0].mean())

    within = gap(PairwiseBoosting(random_state=0).fit(rows, labels, np.zeros(len(rows)), groups=groups))
    across = gap(PairwiseBoosting(random_state=0).fit(rows, labels, np.zeros(len(rows))))
    assert across > 5 and abs(within) < 0.2 * across


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), leaves=st.integers(2, 9))
def test_tables_give_the_trees_sum_bit_for_bit(seed, leaves):
    rows, labels = _ranked(seed % 1000, n=80)
    model = PairwiseBoosting(rounds=30, max_leaf_nodes=leaves, min_samples_leaf=2, random_state=seed % 97)
    model.fit(rows, labels, np.zeros(len(rows)))
    assert model._tables is not None
    fresh, _ = _ranked(seed % 1000 + 1, n=50)
    fresh[:3] = np.nan  # NaN goes where the trees send it
    slow = np.zeros(len(fresh))
    for tree, values in zip(model.trees, model.leaf_values):
        slow += values[tree.apply(fresh)]
    assert np.array_equal(model.trees_sum(fresh), slow)


def _program_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` as the first columns of program rows (``program_features``'s width), the
    others 0 (no vectorized lanes: the line is flat)."""
    wide = np.zeros((len(rows), 2 * len(FEATURE_NAMES) + 1), dtype=np.float32)
    wide[:, :rows.shape[1]] = rows
    return wide


def test_gbt_model_of_kind_pairwise_ranks_saves_and_loads(tmp_path):
    rows, labels = _ranked(4, n=100)
    rows = _program_rows(rows)
    seconds = np.exp(-labels) * 1e-3
    seconds_list = [None if k % 17 == 0 else float(s) for k, s in enumerate(seconds)]  # some failed
    model = GBTModel("pairwise")
    for row, s in zip(rows, seconds_list):
        model._add(row, "w", s)
    model._fit()
    test_rows, test_labels = _ranked(5, n=60)
    test_rows = _program_rows(test_rows)
    predicted = model.predict(test_rows)
    assert pairwise_accuracy(test_labels, predicted) > 0.8
    model.save(tmp_path / "m.pkl")
    assert np.array_equal(GBTModel.load(tmp_path / "m.pkl").predict(test_rows), predicted)
    again = GBTModel("pairwise")
    for row, s in zip(rows, seconds_list):
        again._add(row, "w", s)
    again._fit()
    assert np.array_equal(again.predict(test_rows), predicted)  # deterministic


def test_an_unknown_kind_names_the_kinds():
    with pytest.raises(ValueError, match="'blend', 'hist', 'pairwise', 'exact', got 'xgboost'"):
        GBTModel("xgboost")


def test_the_blend_averages_the_hist_and_pairwise_models_log_predictions():
    rows, labels = _ranked(6, n=90)
    rows = _program_rows(rows)
    seconds = [float(s) for s in np.exp(-labels) * 1e-3]
    models = {kind: GBTModel(kind, seed=3) for kind in ("blend", "hist", "pairwise")}
    for model in models.values():
        for row, s in zip(rows, seconds):
            model._add(row, "w", s)
        model._fit()
    test_rows = _program_rows(_ranked(7, n=40)[0])
    logs = {kind: np.log(model.predict(test_rows)) for kind, model in models.items()}
    np.testing.assert_allclose(logs["blend"], (logs["hist"] + logs["pairwise"]) / 2, rtol=1e-12, atol=1e-12)
    assert GBTModel().kind == "blend"


def test_without_a_pair_to_order_the_trees_add_nothing():
    # Two workloads whose programs all ran alike within each: no pair within a group differs.
    rows = np.random.default_rng(8).random((20, 4)).astype(np.float32)
    labels, groups = np.repeat([0.0, 1.0], 10), np.repeat([0, 1], 10)
    model = PairwiseBoosting(rounds=5).fit(rows, labels, np.arange(20.0), groups=groups)
    assert np.array_equal(model.trees_sum(rows), np.zeros(20))
    assert np.array_equal(model.predict(rows, np.arange(20.0)), model.offset + model.scale * np.arange(20.0))
