"""The memo of index summaries that features keep across programs changes no feature: a
program's rows are the same cold, after other programs, and when the memo fills up and is
emptied midway."""
import numpy as np

from metasched import ScheduleError, workloads
from metasched.search import features
from metasched.search.features import per_store_features
from metasched.space import cpu_default


def programs(name, count, **params):
    """Lowered programs of ``count`` samples (seeds from 0, refused ones skipped)."""
    wl, space, out, seed = workloads.get(name, **params), cpu_default(), [], 0
    while len(out) < count:
        try:
            out.append(space.sample(wl, seed).lower())
        except ScheduleError:
            pass
        seed += 1
    return out


def cold_rows(funcs):
    rows = []
    for func in funcs:
        features._reset_caches()
        rows.append(per_store_features(func))
    return rows


def test_rows_do_not_depend_on_what_the_memo_holds(monkeypatch):
    funcs = programs("conv2d_bias_relu", 4) + programs("matmul_relu", 4, M=64, N=64, K=64)
    cold = cold_rows(funcs)
    features._reset_caches()
    for func, expected in zip(funcs + funcs[::-1], cold + cold[::-1]):  # warm: shared entries
        np.testing.assert_array_equal(per_store_features(func), expected)
    monkeypatch.setattr(features, "_SUMMARY_LIMIT", 5)  # emptied again and again
    features._reset_caches()
    for func, expected in zip(funcs, cold):
        np.testing.assert_array_equal(per_store_features(func), expected)
    assert len(features._INDEX_SUMMARIES) <= 5


def test_equal_programs_made_apart_share_the_memo_and_agree():
    first, again = programs("conv2d_bias_relu", 1)[0], programs("conv2d_bias_relu", 1)[0]
    features._reset_caches()
    expected = per_store_features(first)
    entries = len(features._INDEX_SUMMARIES)
    np.testing.assert_array_equal(per_store_features(again), expected)
    assert len(features._INDEX_SUMMARIES) == entries  # found by value: nothing new summarised
