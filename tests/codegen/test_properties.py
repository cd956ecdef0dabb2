"""Random loop programs compiled and compared with the reference interpreter."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from metasched.codegen import compile_func

from codegen_reference import reference
from codegen_strategies import loop_programs


def check_matches_reference(func):
    rng = np.random.default_rng(len(str(func)))
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    expected = reference(func, *inputs)
    actual = compile_func(func)(*inputs)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(func))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_programs())
def test_random_programs_match_reference(func):
    check_matches_reference(func)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_programs())
def test_many_random_programs_match_reference(func):
    check_matches_reference(func)
