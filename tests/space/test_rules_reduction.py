"""The reduction rules (AddRFactor, ContiguousReduction) and ParallelizeVectorizeUnroll: their
design spaces against golden files, and programs sampled from them against the reference.

Each rule runs after ``AutoInline`` in ``PostOrderApply`` (so softmax's ``e`` and conv2d's
padding are inlined first, as in the default space), with ``num_cores=2`` so that the files
do not depend on the machine. Regenerate them with
``METASCHED_UPDATE_GOLDEN=1 python -m pytest tests/space/test_rules_reduction.py``.
"""
import collections
import pathlib
import sys

import pytest
from hypothesis import given

from conftest import SMALL_PARAMS
from golden import check_golden
from metasched import Schedule, handwritten, parse, replay, workloads
from metasched.schedule import analysis
from metasched.space import AddRFactor, ContiguousReduction, ParallelizeVectorizeUnroll, PostOrderApply
from metasched.space.auto_inline import AutoInline
from metasched.space.parallel_vectorize_unroll import jobs_per_core_choices
from metasched.testing import assert_equivalent

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "lang"))
from workload_strategies import workload_texts  # noqa: E402

GOLDEN = pathlib.Path(__file__).parent / "golden"
RULES = {
    "add_rfactor": AddRFactor(num_cores=2),
    "contiguous_reduction": ContiguousReduction(),
    "parallelize_vectorize_unroll": ParallelizeVectorizeUnroll(num_cores=2),
}


def space(*rule_names: str) -> PostOrderApply:
    """AutoInline, then the named rules."""
    return PostOrderApply(rules=[AutoInline(), *(RULES[name] for name in rule_names)])


# Sketches per rule and workload (default sizes), and why.
SKETCHES = {
    # matmul_relu: C reuses data and its 512 x 512 spatial points outnumber its 512-long reduction.
    ("add_rfactor", "matmul_relu"): 1,
    # reduce_cols: no reuse and a 4096-long reduction > 2 cores: rfactor over the outer tile,
    # over the inner tile, and the unfactorised block.
    ("add_rfactor", "reduce_cols"): 3,
    # softmax: the same three forks for each of its two row reductions, s and mx: 3 x 3.
    ("add_rfactor", "softmax"): 9,
    # conv2d_bias_relu: Y reuses data and 64 x 56 x 56 spatial points outnumber 64 x 3 x 3.
    ("add_rfactor", "conv2d_bias_relu"): 1,
    # matmul_relu, conv2d_bias_relu: their reductions reuse data (MultiLevelTiling's blocks).
    ("contiguous_reduction", "matmul_relu"): 1,
    ("contiguous_reduction", "conv2d_bias_relu"): 1,
    # reduce_cols: the column form replaces the block: one sketch.
    ("contiguous_reduction", "reduce_cols"): 1,
    # softmax: the row form of s and of mx, each with its partial block at the root or computed
    # at the row loop of its consumer: 2 x 2.
    ("contiguous_reduction", "softmax"): 4,
    # Annotations only, never a fork.
    ("parallelize_vectorize_unroll", "matmul_relu"): 1,
    ("parallelize_vectorize_unroll", "reduce_cols"): 1,
    ("parallelize_vectorize_unroll", "softmax"): 1,
    ("parallelize_vectorize_unroll", "conv2d_bias_relu"): 1,
}


def sketches_text(sketches) -> str:
    return "".join(f"# sketch {k} of {len(sketches)}\n{sch.trace.without_decisions()}\n"
                   for k, sch in enumerate(sketches))


@pytest.mark.parametrize("rule_name, workload", sorted(SKETCHES))
def test_design_space_matches_golden(rule_name, workload):
    sketches = space(rule_name).generate(workloads.get(workload))
    check_golden(GOLDEN / rule_name / f"{workload}.txt", sketches_text(sketches))
    assert len(sketches) == SKETCHES[rule_name, workload]


def test_contiguous_reduction_composes_with_add_rfactor():
    both = space("add_rfactor", "contiguous_reduction")
    # AddRFactor's two factorised forks stay as they are; its unfactorised fork gets the
    # column form.
    assert len(both.generate(workloads.get("reduce_cols"))) == 3
    # Per row reduction: 2 factorised forks + the 2 row forms of the unfactorised one.
    assert len(both.generate(workloads.get("softmax"))) == 4 * 4


SMALL = {"reduce_cols": dict(M=64, N=48), "softmax": dict(M=8, N=40), "layernorm": dict(M=6, N=36)}


def vectorize_innermost(sch: Schedule) -> Schedule:
    """What the postprocessor would do to the lanes: vectorise every block's innermost loop
    when it is spatial, and run the outermost loop of each root block in parallel."""
    for name in analysis.blocks(sch):
        block = sch.get_block(name)
        info = analysis.block(sch, block)
        own = sch.get_loops(block)[-len(info.loops):] if info.loops else []
        if own and not info.loops[-1].is_reduction and info.loops[-1].kind == "serial":
            sch.vectorize(own[-1])
        if info.attached_to is None and own and not info.loops[0].is_reduction and info.loops[0].kind == "serial":
            sch.parallel(own[0])
    return sch


# The fast run checks the three rules together; each rule alone is a slow case.
@pytest.mark.parametrize("rules", [pytest.param(["add_rfactor"], marks=pytest.mark.slow),
                                   pytest.param(["contiguous_reduction"], marks=pytest.mark.slow),
                                   pytest.param(["parallelize_vectorize_unroll"], marks=pytest.mark.slow),
                                   ["add_rfactor", "contiguous_reduction", "parallelize_vectorize_unroll"]])
@pytest.mark.parametrize("workload", sorted(SMALL))
def test_sampled_programs_compute_the_reference(rules, workload):
    wl = workloads.get(workload, **SMALL[workload])
    for sketch in space(*rules).generate(wl):
        for k in range(2):  # fresh decisions, serial loops and then vector lanes
            sch = replay(wl, sketch.trace.without_decisions(), rng=k)
            assert_equivalent(vectorize_innermost(sch) if k else sch)


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_every_built_in_workload_replays_with_fresh_decisions(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    for sketch in space(*RULES).generate(wl):
        for k in range(3):
            replay(wl, sketch.trace.without_decisions(), rng=k)


def test_column_form_holds_streamed_column_sum():
    wl = workloads.get("reduce_cols")
    (sketch,) = space("contiguous_reduction").generate(wl)
    # streamed_column_sum's defaults: 2048 columns per thread in 16 lanes, 8 rows per step.
    tiles = iter([[2, 128, 16], [512, 8]])
    sch = replay(wl, sketch.trace.without_decisions(),
                 decision_provider=lambda s, index, inst, inputs, decision: next(tiles))
    j0, i0, j1, i1, j2 = sch.get_loops(sch.get_block("S"))
    sch.unroll(i1)
    sch.vectorize(j2)
    sch.parallel(j0)
    assert str(sch) == str(handwritten.streamed_column_sum(wl))


@pytest.mark.parametrize("workload", ["softmax", "layernorm"])
def test_row_form_puts_lanes_innermost_in_every_partial_block(workload):
    wl = workloads.get(workload, **SMALL[workload])
    statements = {st.name for st in wl.statements}
    for sketch in space("contiguous_reduction").generate(wl):
        partials = [name for name in analysis.blocks(sketch) if name not in statements]
        assert len(partials) == 2
        for name in partials:
            loops = analysis.block(sketch, sketch.get_block(name)).loops
            assert not loops[-1].is_reduction and any(lp.is_reduction for lp in loops[:-1])


def test_add_rfactor_condition():
    def count(name, **params):
        return len(space("add_rfactor").generate(workloads.get(name, **params)))
    # With data reuse, only when the spatial points are fewer than the reduction and at most
    # max_jobs_per_core * cores = 32.
    assert count("matmul", M=4, N=8, K=512) == 3
    assert count("matmul", M=4, N=16, K=512) == 1  # 64 spatial points > 32
    assert count("matmul", M=4, N=8, K=16) == 1  # 32 spatial points >= 16
    # Without reuse, when the reduction is longer than the 2 cores.
    assert count("reduce_cols", M=3, N=4) == 3
    assert count("reduce_cols", M=2, N=4) == 1


def test_parallelize_vectorize_unroll_annotations():
    wl = workloads.get("reduce_cols", **SMALL["reduce_cols"])
    (sch,) = space("parallelize_vectorize_unroll").generate(wl)
    annotations = analysis.block(sch, sch.get_block("S")).annotations
    assert annotations["meta_schedule.parallel"] in (2, 4, 8, 16, 32) and annotations["meta_schedule.vectorize"] == 64
    assert annotations["meta_schedule.unroll_explicit"] in (0, 16, 64, 512)
    implicit = ParallelizeVectorizeUnroll(unroll_explicit=False, max_jobs_per_core=-1, unroll_max_steps=(4,))
    sch = Schedule(wl)
    implicit.apply(sch, sch.get_block("S"))
    assert dict(analysis.block(sch, sch.get_block("S")).annotations) == {
        "meta_schedule.vectorize": 64, "meta_schedule.unroll_implicit": 4}


def test_the_parallel_limit_is_a_decision_mostly_at_max_jobs_per_core():
    wl = workloads.get("reduce_cols", **SMALL["reduce_cols"])
    (sketch,) = space("parallelize_vectorize_unroll").generate(wl)
    trace = sketch.trace.without_decisions()
    limit = next(inst for inst in trace if inst.kind == "Annotate" and inst.attrs == ("meta_schedule.parallel",))
    (index, sample), = [(i, inst) for i, inst in enumerate(trace) if limit.inputs[1] in inst.outputs]
    # 1, 2, 4, 8 and 16 jobs on each of 2 cores; MetaSchedule's constant (16) keeps 0.8.
    assert sample.kind == "SampleCategorical" and sample.attrs == ((2, 4, 8, 16, 32), (0.05, 0.05, 0.05, 0.05, 0.8))
    drawn = collections.Counter(replay(wl, trace, rng=k).trace.decisions[index] for k in range(300))
    assert set(drawn) == set(range(5)) and 0.72 <= drawn[4] / 300 <= 0.88
    assert jobs_per_core_choices(12) == [1, 2, 4, 8, 12] and jobs_per_core_choices(1) == [1]
    one = ParallelizeVectorizeUnroll(max_jobs_per_core=1, num_cores=4)
    sch = Schedule(wl)
    one.apply(sch, sch.get_block("S"))
    assert analysis.block(sch, sch.get_block("S")).annotations["meta_schedule.parallel"] == 4
    assert "sch.sample_categorical([4], [1.0], decision=0)" in str(sch.trace)


def test_parallelize_vectorize_unroll_skips_attached_blocks_and_unrolls_only_reductions():
    wl = workloads.get("conv2d_bias_relu", **SMALL_PARAMS["conv2d_bias_relu"])
    sch = Schedule(wl)
    pad = sch.get_block("P")
    sch.compute_at(pad, sch.get_loops(sch.get_block("Y"))[2])
    before = sch.trace
    assert RULES["parallelize_vectorize_unroll"].apply(sch, pad) == [sch] and sch.trace == before
    # A workload without reductions gets no unroll depth (MetaSchedule's rule).
    (spatial,) = space("parallelize_vectorize_unroll").generate(
        workloads.get("transpose_add", **SMALL_PARAMS["transpose_add"]))
    assert "unroll" not in str(spatial.trace)


@pytest.mark.parametrize("text, applies", [
    # Column form: the reductions are fused, other spatial axes stay outside.
    ("workload w(B = 3, M = 6, K = 4, N = 20) { input X: float32[B, M, K, N]\n"
     " output S[b, j] += X[b, i, k, j] where b in 0..B, j in 0..N }", True),
    # Row form over a reduction that is not the last one, and a max.
    ("workload w(M = 6, K = 3, N = 20) { input X: float32[M, K, N]\n"
     " output S[i] max= X[i, k, j] where i in 0..M }", True),
    # A one-element row reduction.
    ("workload w(N = 30) { input X: float32[N]\n output S[z] += X[j] where z in 0..1 }", True),
    # A window: pooling, its lanes two elements apart; and one element sliding backwards.
    ("workload w(H = 9, W = 11) { input X: float32[H, W]\n"
     " output S[y, x] max= X[y * 2 + r, x * 2 + s] where y in 0..(H - 3) // 2 + 1, x in 0..(W - 3) // 2 + 1,"
     " r in 0..3, s in 0..3 }", True),
    ("workload w(M = 6, N = 10) { input X: float32[M, N]\n output S[j] += X[i, N - 1 - j] where j in 0..N }",
     True),
    # The innermost axis indexes no last dimension, and no axis indexes it alone.
    ("workload w(M = 6, N = 10) { input X: float32[N, M, 2]\n"
     " output S[j] += X[j, i // 2, i % 2] where j in 0..N, i in 0..2 * M }", False),
])
def test_contiguous_reduction_on_other_shapes(text, applies):
    wl = parse(text)
    sketches = space("contiguous_reduction").generate(wl)
    changed = any(inst.kind == "Split" for sch in sketches for inst in sch.trace)
    assert changed == applies
    for sketch in sketches:
        for k in range(2):
            assert_equivalent(vectorize_innermost(replay(wl, sketch.trace.without_decisions(), rng=k)))


@given(text=workload_texts())
def test_rules_never_fail_on_random_workloads(text):
    wl = parse(text)
    for sketch in space(*RULES).generate(wl):
        assert_equivalent(vectorize_innermost(replay(wl, sketch.trace.without_decisions(), rng=1)))


# A dense layer with [out, in] weights, at batch 1 and at batch 9.
DENSE_T = """workload dense_t(M = 1, K = 13, N = 10) {
    input X: float32[M, K]
    input W: float32[N, K]
    Y[i, j] += X[i, k] * W[j, k]
    output Z[i, j] = Y[i, j] + 1.0
}"""


@pytest.mark.parametrize("rows, streamed", [(1, True), (9, False)])
def test_a_dense_layer_at_batch_one_is_streamed_not_tiled(rows, streamed):
    from metasched.space import MultiLevelTiling
    wl = parse(DENSE_T, M=rows)
    rules = [AutoInline(), MultiLevelTiling(leave_streaming_blocks=True), ContiguousReduction()]
    sketches = PostOrderApply(rules=rules).generate(wl)
    kinds = [{inst.kind for inst in sch.trace} for sch in sketches]
    # Streamed: the row form of ContiguousReduction (partial sums along the weight's rows) at
    # the root and in the row loop; else MultiLevelTiling's five sketches.
    assert all(("RFactor" in k) == streamed and ("Annotate" in k) != streamed for k in kinds)
    assert len(sketches) == (2 if streamed else 5)
    # Without the flag the block is tiled as MetaSchedule tiles it.
    plain = PostOrderApply(rules=[AutoInline(), MultiLevelTiling(), ContiguousReduction()]).generate(wl)
    assert all("RFactor" not in {inst.kind for inst in sch.trace} for sch in plain)
    for sketch in sketches:
        for k in range(3):
            assert_equivalent(vectorize_innermost(replay(wl, sketch.trace.without_decisions(), rng=k)))
