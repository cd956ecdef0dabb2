"""The rewrite counts the unrolled work of the program it leaves as it unrolls, and hands the
count to the verifier (``Lowered.changed(..., unrolled_total=...)``): it must be the count made
afresh from the final program."""
import pytest

from conftest import SMALL_PARAMS
from metasched import ScheduleError, workloads
from metasched.schedule import replay
from metasched.space import cpu_default
from metasched.space.loop_program import lowered, unrolled_work
from metasched.space.postproc import RewriteParallelVectorizeUnroll


@pytest.mark.parametrize("name", ["matmul_relu", "conv2d_bias_relu", "softmax"])
def test_the_count_handed_to_the_verifier_is_the_final_programs(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    space = cpu_default()
    spaces = space.design_spaces(wl)
    rewrite = next(post for post in space.postprocs if isinstance(post, RewriteParallelVectorizeUnroll))
    checked = 0
    for seed in range(12):
        sch = replay(wl, spaces[seed % len(spaces)].trace.without_decisions(), rng=seed)
        sch.enter_postproc()
        try:
            rewrite.apply(sch)
        except ScheduleError:
            continue
        assert lowered(sch).unrolled_total() == unrolled_work(sch.lower())
        checked += 1
    assert checked
