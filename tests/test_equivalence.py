"""Every schedule the primitives can make computes what the reference computes.

The CI run draws a few schedules per workload; the slow run draws 520 per workload (5,200 in
all): ``python -m pytest -m slow tests/test_equivalence.py``."""
import pytest
from hypothesis import given, settings, strategies as st

from conftest import SMALL_PARAMS
from metasched import Schedule, ScheduleError, workloads
from metasched.lang import parse
from metasched.testing import _step, assert_equivalent, schedules


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


@st.composite
def _rows_fused(draw, wl, reducer: str, shared: str, max_steps: int):
    """A random schedule in which ``shared`` (read by ``reducer`` and the output) may be
    computed in a loop of the output, once ``reducer`` runs inside it: random steps, the
    reducer at a random loop of the output, ``shared`` at a sampled location, more steps."""
    sch = Schedule(wl, seed=draw(st.integers(0, 2**32 - 1)))
    for _ in range(draw(st.integers(0, max_steps // 2))):
        try:
            _step(draw, sch)
        except ScheduleError:
            pass
    try:
        loops = sch.get_loops(sch.get_block(wl.outputs[0].name))
        sch.compute_at(sch.get_block(reducer), draw(st.sampled_from(loops)))
        block = sch.get_block(shared)
        sch.compute_at(block, sch.sample_compute_location(block, decision=draw(st.integers(-2, 4))))
    except ScheduleError:
        pass
    for _ in range(draw(st.integers(0, max_steps // 2))):
        try:
            _step(draw, sch)
        except ScheduleError:
            pass
    return sch


# Layer norm in two passes, as BERT's is written: the mean is read by the sum of squares and
# by the output.
TWO_PASS_NORM = parse("""
workload two_pass_norm(M = 5, N = 11) {
    input X: float32[M, N]
    total[i] += X[i, j]
    mean[i] = total[i] / N
    sq[i] += (X[i, j] - mean[i]) * (X[i, j] - mean[i])
    output Y[i, j] = (X[i, j] - mean[i]) * rsqrt(sq[i] / N + 1e-5)
}
""")
ROWS = [("softmax", "s", "e"), ("two_pass_norm", "sq", "mean")]


def _rows_workload(name):
    return TWO_PASS_NORM if name == "two_pass_norm" else workloads.get(name, **SMALL_PARAMS[name])


@pytest.mark.parametrize("name, reducer, shared", ROWS)
def test_blocks_read_by_two_computed_in_a_loop_match_the_reference(name, reducer, shared):
    wl = _rows_workload(name)

    @given(_rows_fused(wl, reducer, shared, max_steps=8))
    def check(sch):
        assert_equivalent(sch)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("name, reducer, shared", ROWS)
def test_many_blocks_read_by_two_computed_in_a_loop_match_the_reference(name, reducer, shared):
    wl = _rows_workload(name)

    @given(_rows_fused(wl, reducer, shared, max_steps=12))
    @settings(max_examples=400)
    def check(sch):
        assert_equivalent(sch)

    check()
