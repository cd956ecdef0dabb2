"""What a runner worker does with one kernel (``run_artifact``): a clear loser is timed once,
but only when that one run is long enough to be the kernel's time rather than the call's."""
import pytest

from metasched.codegen.compiler import compile_artifact
from metasched.lang import parse
from metasched.measure.runner import TimingConfig, run_artifact
from metasched.schedule import Schedule

SLOW = """
workload slow(M = 128, N = 128, K = 128) {
    input A: float32[M, K]
    input B: float32[K, N]
    output C[i, j] += A[i, k] * B[k, j]
}
"""


def artifact(wl):
    return compile_artifact(Schedule(wl).lower())


@pytest.fixture(scope="module")
def slow():
    wl = parse(SLOW)
    return wl, artifact(wl)


def test_a_clear_loser_is_timed_once(slow):
    # The unscheduled 128^3 matmul takes milliseconds a run: far past 3x a best of 1 us.
    wl, art = slow
    seconds = run_artifact(wl, art, TimingConfig(), seed=0, best=1e-6)
    assert len(seconds) == 1 and seconds[0] >= TimingConfig().min_single_run_seconds


def test_a_kernel_of_a_microsecond_is_timed_in_full_even_against_a_faster_best(tiny_add):
    # One run of an 8-element add measures the call (microseconds), not the kernel: it must
    # not stand for the kernel's time however it compares with the best.
    config = TimingConfig()
    seconds = run_artifact(tiny_add, artifact(tiny_add), config, seed=0, best=1e-12)
    assert len(seconds) == config.repeat


def test_without_a_best_every_kernel_is_timed_in_full(slow):
    wl, art = slow
    config = TimingConfig(repeat=2, min_repeat_seconds=0.001)
    assert len(run_artifact(wl, art, config, seed=0)) == 2


@pytest.mark.parametrize("floor", [0.0, 10.0])
def test_the_floor_of_a_single_run_is_a_setting(slow, floor):
    wl, art = slow
    config = TimingConfig(repeat=2, min_repeat_seconds=0.001, min_single_run_seconds=floor)
    expected = 1 if floor == 0.0 else 2
    assert len(run_artifact(wl, art, config, seed=0, best=1e-9)) == expected


def test_a_negative_floor_is_refused():
    with pytest.raises(ValueError, match="min_single_run_seconds"):
        TimingConfig(min_single_run_seconds=-1.0)
