"""The tolerance rule: |got - want| <= atol + rtol * |want|, rtol = 16 eps sqrt(L), atol = rtol max|want|."""
import math

import numpy as np
import pytest

from metasched import workloads
from metasched.errors import MismatchError
from metasched.lang import assert_outputs_close, evaluate, outputs_close, parse, tolerance


@pytest.fixture
def matmul():
    wl = workloads.get("matmul", M=6, N=5, K=64)
    return wl, evaluate(wl, wl.random_inputs(seed=0))


def test_rtol_grows_with_the_square_root_of_the_longest_reduction():
    eps32 = float(np.finfo(np.float32).eps)
    assert tolerance(workloads.get("matmul")) == pytest.approx(16 * eps32 * math.sqrt(512))
    assert tolerance(workloads.get("transpose_add")) == pytest.approx(16 * eps32)
    wl64 = parse("workload d(N = 4) {\n input X: float64[N]\n output Y[i] = X[i]\n}")
    assert tolerance(wl64) == pytest.approx(16 * float(np.finfo(np.float64).eps))


@pytest.mark.parametrize("fraction, ok", [(0.9, True), (1.1, False)])
def test_a_perturbation_just_inside_passes_and_just_outside_fails(matmul, fraction, ok):
    wl, (want,) = matmul
    rtol = tolerance(wl)
    index = (2, 3)
    allowed = rtol * np.max(np.abs(want)) + rtol * abs(want[index])
    got = want.astype(np.float64)
    got[index] += fraction * allowed
    got = got.astype(np.float32)
    # float32 rounding of the perturbed value moves it by at most half an ulp; keep it on its side
    assert (abs(float(got[index]) - float(want[index])) <= allowed) == ok
    assert outputs_close(wl, [got], [want]) == ok
    if not ok:
        with pytest.raises(MismatchError, match=r"output C differs .* worst at index \(2, 3\): got .* want .* allowed"):
            assert_outputs_close(wl, [got], [want])


def test_nan_must_be_nan_in_both(matmul):
    wl, (want,) = matmul
    want = want.copy()
    want[0, 0] = np.nan
    assert outputs_close(wl, [want.copy()], [want])
    got = want.copy()
    got[0, 0] = 1.0
    assert not outputs_close(wl, [got], [want])
    got = want.copy()
    got[1, 1] = np.nan
    with pytest.raises(MismatchError, match=r"index \(1, 1\): got nan"):
        assert_outputs_close(wl, [got], [want])


def test_infinities_must_match(matmul):
    wl, (want,) = matmul
    want = want.copy()
    want[0, 0] = np.inf
    assert outputs_close(wl, [want.copy()], [want])
    got = want.copy()
    got[0, 0] = -np.inf
    assert not outputs_close(wl, [got], [want])


def test_shapes_dtypes_and_counts_must_match_exactly(matmul):
    wl, (want,) = matmul
    with pytest.raises(MismatchError, match=r"output C: got float64\[6, 5\], want float32\[6, 5\]"):
        assert_outputs_close(wl, [want.astype(np.float64)], [want])
    with pytest.raises(MismatchError, match=r"got float32\[5, 6\]"):
        assert_outputs_close(wl, [want.reshape(5, 6)], [want])
    with pytest.raises(MismatchError, match=r"1 output\(s\) \(C\); got 2 array"):
        assert_outputs_close(wl, [want, want], [want])
