"""Every schedule the primitives can make computes what the reference computes.

The CI run draws a few schedules per workload; the slow run draws 520 per workload (5,200 in
all): ``python -m pytest -m slow tests/test_equivalence.py``."""
import pytest
from hypothesis import given, settings

from conftest import SMALL_PARAMS
from metasched import workloads
from metasched.testing import assert_equivalent, schedules


def test_small_params_cover_the_whole_suite():
    assert sorted(SMALL_PARAMS) == workloads.names()


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_random_schedules_match_the_reference(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])

    @given(schedules(wl, max_steps=8))
    def check(sch):
        assert_equivalent(sch)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_many_random_schedules_match_the_reference(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])

    @given(schedules(wl, max_steps=12))
    @settings(max_examples=520)
    def check(sch):
        assert_equivalent(sch)

    check()
