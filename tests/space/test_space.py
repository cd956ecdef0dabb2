"""The default space as a whole: it never raises anything but ScheduleError, its samples pass
the postprocessors at least 95% of the time, and every sample that passes computes the
reference, for every built-in workload and for random workloads of the language."""
import collections
import dataclasses
import pathlib
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

from metasched import ScheduleError, parse, workloads
from metasched.space import cpu_default, describe
from metasched.testing import assert_equivalent, samples

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "lang"))
from conftest import SMALL_PARAMS, with_imperfect_rows  # noqa: E402
from golden import check_golden  # noqa: E402
from workload_strategies import workload_texts  # noqa: E402

SPACE = cpu_default()

# The default stack's sketches (default sizes, 2 cores so the files do not depend on the host):
DEFAULT_SKETCHES = {
    # C: tiling alone, the ReLU fused at tile level 1 or 2, a local cache at level 1 or 2 with
    # the ReLU folded into its copy-out (MultiLevelTiling); D is the fused or folded consumer.
    "matmul_relu": 5,
    # S: rfactor over the outer or the inner tile of the rows (AddRFactor), or, unfactorised,
    # the column form of ContiguousReduction (rows outside vector lanes of columns).
    "reduce_cols": 3,
    # e kept (AutoInline bars exp) and annotated, at the root (it has two consumers); s and mx
    # each: rfactor outer or inner, or the row form of ContiguousReduction with its partial
    # block at the root or at the row loop: 4 x 4.
    "softmax": 16,
    # P kept (placed by RandomComputeLocation); Y as matmul_relu's C, with bias + ReLU as the
    # consumer; and two more with the output channels as the vector lanes, the sums cached
    # channels last at level 1 or 2.
    "conv2d_bias_relu": 7,
    # C reads B[j, i] across its memory order: plain, and tiled in two (TransposedReadTiling).
    "transpose_add": 2,
}


def host_free(space):
    """The space with every ``num_cores`` fixed at 2."""
    space.rules = [dataclasses.replace(r, num_cores=2) if hasattr(r, "num_cores") else r for r in space.rules]
    return space


@pytest.mark.parametrize("name", sorted(DEFAULT_SKETCHES))
def test_default_sketches(name):
    sketches = host_free(cpu_default()).generate(workloads.get(name))
    assert len(sketches) == DEFAULT_SKETCHES[name]
    text = "".join(f"# sketch {k} of {len(sketches)}\n{sch.trace.without_decisions()}\n"
                   for k, sch in enumerate(sketches, 1))
    check_golden(pathlib.Path(__file__).parent / "golden" / "cpu_default" / f"{name}.txt", text)


def draw_samples(wl, count: int, seed: int = 0):
    """``count`` samples of the default space: the valid ones and the rejections by reason."""
    rng = np.random.default_rng(seed)
    valid, rejected = [], collections.Counter()
    for _ in range(count):
        try:
            valid.append(SPACE.sample(wl, rng))
        except ScheduleError as err:
            rejected[str(err)[:120]] += 1
    return valid, rejected


@pytest.mark.parametrize("name", workloads.names())
def test_samples_are_mostly_valid_and_all_compute_the_reference(name):
    """Of 30 samples at least 95% valid; the first 15 distinct ones compute the reference
    (the slow ``test_many_samples_compute_the_reference`` checks more)."""
    wl = workloads.get(name, **SMALL_PARAMS[name])
    valid, rejected = draw_samples(wl, 30)
    assert len(valid) >= 0.95 * 30, f"rejected: {dict(rejected)}"
    distinct = list({sch.trace: sch for sch in valid}.values())
    for sch in distinct[:15]:
        assert_equivalent(sch)


@pytest.mark.slow
@pytest.mark.parametrize("name", workloads.names())
def test_many_samples_compute_the_reference(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    valid, _ = draw_samples(wl, 120, seed=1)
    for sch in {sch.trace: sch for sch in valid}.values():
        assert_equivalent(sch)


@pytest.mark.parametrize("name", workloads.names())
def test_every_design_space_replays_and_samples_replay_to_themselves(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    spaces = SPACE.generate(wl)
    assert spaces
    valid, _ = draw_samples(wl, 3, seed=1)
    from metasched import replay
    for sch in valid:
        again = replay(wl, sch.trace)
        assert again.trace == sch.trace and str(again) == str(sch)
        cut = replay(wl, sch.trace, remove_postproc=True)
        assert "EnterPostproc" not in {inst.kind for inst in cut.trace}


@pytest.mark.parametrize("name", ["batch_matmul", "conv2d_bias_relu", "dense_bias_relu", "matmul_relu"])
def test_samples_with_imperfect_rows_compute_the_reference(name):
    """The default stack with partial register tiles (guarded by ``split``), post-processed:
    mostly valid, and every valid sample correct."""
    wl = workloads.get(name, **SMALL_PARAMS[name])
    space, rng = with_imperfect_rows(cpu_default()), np.random.default_rng(3)
    imperfect = 0
    for _ in range(12):
        try:
            sch = space.sample(wl, rng)
        except ScheduleError:
            continue
        imperfect += "sample_imperfect_tile" in str(sch.trace)
        assert_equivalent(sch)
    assert imperfect >= 10


@given(text=workload_texts(), data=st.data())
def test_random_workloads_sample_only_schedule_errors_and_correct_programs(text, data):
    wl = parse(text)
    sch = data.draw(samples(SPACE, wl, max_attempts=10))
    assert_equivalent(sch)


def test_the_default_stack_is_plain_data_with_every_argument_named():
    space = cpu_default()
    shown = [describe(module) for module in [*space.rules, *space.postprocs]]
    assert shown[0].startswith("AutoInline(") and "structure='SSRSRS'" in shown[2]
    assert all("=" in text or text.endswith("()") for text in shown)
    space.rules.pop()  # a list edit makes a new space; the default is unchanged
    assert len(cpu_default().rules) == len(space.rules) + 1


@pytest.mark.slow
@pytest.mark.parametrize("name", workloads.names())
def test_large_run_at_default_parameters(name):
    """500 samples at default parameters: at least 95% valid; 500 at small parameters, every
    valid one computing the reference."""
    valid, rejected = draw_samples(workloads.get(name), 500)
    assert len(valid) >= 475, f"rejected: {dict(rejected)}"
    valid, rejected = draw_samples(workloads.get(name, **SMALL_PARAMS[name]), 500, seed=7)
    assert len(valid) >= 475, f"rejected: {dict(rejected)}"
    seen = set()
    for sch in valid:
        if sch.trace not in seen:
            seen.add(sch.trace)
            assert_equivalent(sch)
