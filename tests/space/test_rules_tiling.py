"""AutoInline, MultiLevelTiling and RandomComputeLocation: their design spaces against golden
files, every sketch of the built-in suite replayed, and programs sampled from the sketches
against the reference.

MultiLevelTiling and RandomComputeLocation run after AutoInline, as in the default stack:
inlining decides which blocks they see (conv2d's padding, softmax's ``e``). Regenerate the
golden files with ``METASCHED_UPDATE_GOLDEN=1 python -m pytest tests/space/test_rules_tiling.py``.
"""
import pathlib
import re
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import SMALL_PARAMS
from golden import check_golden
from metasched import ScheduleError, parse, replay, workloads
from metasched.schedule import analysis
from metasched.space import AutoInline, MultiLevelTiling, PostOrderApply, RandomComputeLocation
from metasched.space.multi_level_tiling import (channel_vector_axis, needs_tiling, packable_reads, transposed_reads,
                                                unreused_axes)
from metasched.testing import assert_equivalent

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "lang"))
from workload_strategies import workload_texts  # noqa: E402

GOLDEN = pathlib.Path(__file__).parent / "golden"
STACKS = {
    "auto_inline": [AutoInline()],
    "multi_level_tiling": [AutoInline(), MultiLevelTiling()],
    "random_compute_location": [AutoInline(), RandomComputeLocation()],
}
ALL_THREE = [AutoInline(), MultiLevelTiling(), RandomComputeLocation()]

# Sketches per rule and workload (default sizes), and why.
SKETCHES = {
    # AutoInline never forks. matmul_relu: C is a reduction and D the output: nothing inlines.
    ("auto_inline", "matmul_relu"): 1,
    # reduce_cols: one block, the output.
    ("auto_inline", "reduce_cols"): 1,
    # softmax: e (with its exp) is inlined into s and Y; mx and s are reductions, Y the output.
    ("auto_inline", "softmax"): 1,
    # conv2d_bias_relu: the padding P (a conditional) is inlined into Y.
    ("auto_inline", "conv2d_bias_relu"): 1,
    # matmul_relu: C tiled SSRSRS; then tiling alone, tiling with the ReLU D fused at level 1 /
    # level 2, and tiling with a local cache copied out at level 1 / level 2 with the ReLU
    # folded into its copy-out: 1 + 2 + 2.
    ("multi_level_tiling", "matmul_relu"): 5,
    # reduce_cols: S reads each element of X once (no data reuse): not tiled.
    ("multi_level_tiling", "reduce_cols"): 1,
    # softmax: mx and s read each element once; e (inlined) and Y are spatial: not tiled.
    ("multi_level_tiling", "softmax"): 1,
    # conv2d_bias_relu: Y reuses P and Wt: the same five ways as matmul_relu, with bias + ReLU
    # (Z) fused or folded into the copy-out; P is inlined into Y in each.
    ("multi_level_tiling", "conv2d_bias_relu"): 5,
    # RandomComputeLocation samples a location instead of forking: one sketch each.
    # matmul_relu: C goes to a sampled loop of D (or stays at the root).
    ("random_compute_location", "matmul_relu"): 1,
    # reduce_cols: S is the output and has no consumer: untouched.
    ("random_compute_location", "reduce_cols"): 1,
    # softmax: s goes to a sampled loop of Y; e is inlined, so mx then feeds s and Y (two
    # consumers) and stays at the root.
    ("random_compute_location", "softmax"): 1,
    # conv2d_bias_relu: Y goes to a sampled loop of Z; P is inlined into Y.
    ("random_compute_location", "conv2d_bias_relu"): 1,
}


def sketches_text(sketches) -> str:
    return "".join(f"# sketch {k} of {len(sketches)}\n{sch.trace.without_decisions()}\n"
                   for k, sch in enumerate(sketches, 1))


@pytest.mark.parametrize("rule_name, workload", sorted(SKETCHES))
def test_design_space_matches_golden(rule_name, workload):
    sketches = PostOrderApply(rules=STACKS[rule_name]).generate(workloads.get(workload))
    check_golden(GOLDEN / rule_name / f"{workload}.txt", sketches_text(sketches))
    assert len(sketches) == SKETCHES[rule_name, workload]


# -- every built-in workload ----------------------------------------------------------------

@pytest.mark.parametrize("stack", [*STACKS, "all_three"])
@pytest.mark.parametrize("name", workloads.names())
def test_every_sketch_of_the_suite_replays(name, stack):
    wl = workloads.get(name)
    for sketch in PostOrderApply(rules=STACKS.get(stack, ALL_THREE)).generate(wl):
        assert replay(wl, sketch.trace).trace == sketch.trace
        for seed in range(2):
            replay(wl, sketch.trace.without_decisions(), rng=seed)


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_sampled_programs_compute_the_reference(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    for sketch in PostOrderApply(rules=ALL_THREE).generate(wl):
        for seed in range(2):
            assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=seed))


def every_compute_location(wl, trace, prefix=(), tile=None):
    """The programs of ``trace`` for every combination of its compute-location decisions
    (``prefix`` fixes the first ones); its other samplings draw from seed 0, but for the
    perfect tiles ``tile(extent, n)`` gives when given."""
    choices = []

    def provider(sch, index, inst, inputs, decision):
        if inst.kind == "SamplePerfectTile" and tile is not None:
            return tile(analysis.loop(sch, inputs[0]).extent, inst.attrs[0])
        if inst.kind != "SampleComputeLocation":
            return None
        choices.append(analysis.compute_locations(sch, inputs[0]))
        k = len(choices) - 1
        return prefix[k] if k < len(prefix) else choices[k][0]

    sch = replay(wl, trace.without_decisions(), decision_provider=provider)
    if len(prefix) == len(choices):
        yield sch
        return
    for decision in choices[len(prefix)]:
        yield from every_compute_location(wl, trace, prefix + (decision,), tile)


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_every_sampled_compute_location_computes_the_reference(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])
    (sketch,) = PostOrderApply(rules=STACKS["random_compute_location"]).generate(wl)
    for sch in every_compute_location(wl, sketch.trace):
        assert_equivalent(sch)


@given(text=workload_texts(), into_producer=st.booleans(), pack_panels=st.booleans(), whole=st.booleans())
def test_rules_never_fail_on_random_workloads(text, into_producer, pack_panels, whole):
    wl = parse(text)
    rules = [AutoInline(into_producer=into_producer),
             MultiLevelTiling(pack_panels=pack_panels, keep_unreused_axes_whole=whole), RandomComputeLocation()]
    for sketch in PostOrderApply(rules=rules).generate(wl):
        assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=1))


# -- AutoInline -----------------------------------------------------------------------------

CHAIN = """
workload chain(N = 7) {
    input X: float32[N]
    A[i] = X[i] * 2.0
    output B[i] = A[i] + 1.0
}
"""


def blocks_after(rules, text):
    wl = parse(text)
    (sch,) = PostOrderApply(rules=rules).generate(wl)
    assert_equivalent(sch)
    return analysis.blocks(sch), str(sch.trace)


def test_auto_inline_into_producer():
    # B is the output, so it cannot inline into a consumer; it folds into A instead.
    names, trace = blocks_after([AutoInline(into_producer=True)], CHAIN)
    assert names == ("A",) and "reverse_compute_inline" in trace
    # Off by default, and into_consumer comes first: A inlines into B.
    names, trace = blocks_after([AutoInline()], CHAIN)
    assert names == ("B",) and "reverse_compute_inline" not in trace


@pytest.mark.parametrize("text", [
    # B reads A shifted by one: reverse_compute_inline would refuse.
    CHAIN.replace("A[i] + 1.0", "A[i - 1] if i >= 1 else 0.0 where i in 0..N"),
    # A has a second consumer, C.
    CHAIN.replace("output B[i] = A[i] + 1.0", "output B[i] = A[i] + 1.0\n    output C[i] = A[i] * A[i]"),
])
def test_auto_inline_into_producer_only_where_legal(text):
    names, trace = blocks_after([AutoInline(into_producer=True, into_consumer=False)], text)
    assert "A" in names and "reverse_compute_inline" not in trace and "get_producers" not in trace


def test_auto_inline_options_bar_blocks():
    def kept(rule, name):
        (sch,) = PostOrderApply(rules=[rule]).generate(workloads.get(name))
        return "compute_inline" not in str(sch.trace)

    assert kept(AutoInline(disallow_ops=("exp",)), "softmax")  # TVM's CPU default
    assert not kept(AutoInline(disallow_ops=("max", "rsqrt")), "softmax")
    assert kept(AutoInline(disallow_if_then_else=True), "conv2d_bias_relu")  # the padding
    assert kept(AutoInline(into_consumer=False), "conv2d_bias_relu")


@pytest.mark.parametrize("ops", ["exp", ("exp", "expf")])
def test_auto_inline_refuses_unknown_ops(ops):
    with pytest.raises(ValueError, match="disallow_ops"):
        AutoInline(disallow_ops=ops)


# -- MultiLevelTiling -----------------------------------------------------------------------

def test_tiling_matches_sampled_matmul():
    # handwritten.sampled_matmul is this rule's cache sketch at level 2, then postprocessing.
    wl = workloads.get("matmul_relu")
    sketches = PostOrderApply(rules=[MultiLevelTiling()]).generate(wl)
    text = str(sketches[-1].trace.without_decisions())
    assert "sch.reorder(l9, l17, l10, l18, l23, l11, l19, l24, l12, l20)" in text
    assert text.endswith('b25 = sch.cache_write(b1, 0, "local")\nb26, = sch.get_consumers(b25)\n'
                         'sch.reverse_compute_inline(b26)\nsch.reverse_compute_at(b25, l18)')


@pytest.mark.parametrize("name, count", [
    ("matmul", 3),  # C is the output: no consumer to fuse; plain + cache at levels 1 and 2
    ("batch_matmul", 3),
    ("dense_bias_relu", 5),  # like matmul_relu
    ("depthwise_conv2d", 3),  # Y reuses Wt and is the output; P is inlined
    ("layernorm", 1),  # Y reuses gamma, total and sq but is spatial: TVM tiles only reductions
    ("transpose_add", 1),
])
def test_tiling_sketch_counts_of_the_rest_of_the_suite(name, count):
    assert len(PostOrderApply(rules=STACKS["multi_level_tiling"]).generate(workloads.get(name))) == count


def test_tiling_options():
    wl = workloads.get("matmul_relu")
    # S R S: the spatial loops in two levels, k whole; fusion and cache at level 1 only.
    rule = MultiLevelTiling(structure="SRS", fuse_consumer_levels=(1,), cache_write_levels=(1,), cache_scope="global")
    sketches = PostOrderApply(rules=[rule]).generate(wl)
    assert len(sketches) == 3
    text = str(sketches[-1].trace.without_decisions())
    assert text.count("sample_perfect_tile(") == 2 and "n=2, max_innermost_factor=64" in text
    assert 'cache_write(b1, 0, "global")' in text
    small = workloads.get("matmul_relu", **SMALL_PARAMS["matmul_relu"])
    for sketch in PostOrderApply(rules=[rule]).generate(small):
        assert_equivalent(replay(small, sketch.trace.without_decisions()))
    # No write-reuse levels: tiling alone.
    assert len(PostOrderApply(rules=[MultiLevelTiling(fuse_consumer_levels=(), cache_write_levels=())])
               .generate(wl)) == 1


@pytest.mark.parametrize("name, block, packed", [
    ("matmul_relu", "C", ["B"]), ("dense_bias_relu", "Y", ["Wt"]), ("batch_matmul", "C", ["B"]),
    # P[n, c, y + r, x + s] and Wt[f, c, r, s]: neither has the last spatial axis alone last.
    ("conv2d_bias_relu", "Y", []), ("softmax", "s", []),
    # S[j] += X[i, j] reads X so too, but MultiLevelTiling never tiles it (no data reuse).
    ("reduce_cols", "S", ["X"]),
])
def test_packable_reads_are_the_panels_read_along_the_vector_axis_and_a_reduction(name, block, packed):
    sch = PostOrderApply(rules=[AutoInline()]).generate(workloads.get(name))[0]
    assert packable_reads(analysis.block(sch, sch.get_block(block))) == packed


def test_a_packed_panel_is_cached_at_the_outermost_tile_of_its_columns():
    rule = MultiLevelTiling(pack_panels=True)
    wl = workloads.get("dense_bias_relu")
    sketches = PostOrderApply(rules=[AutoInline(), rule]).generate(wl)
    assert len(sketches) == 5  # packed in every sketch, not a fork
    for sketch in sketches:
        text = str(sketch.trace.without_decisions())
        # A fixed place, nothing sampled: the dense block's only sampling is its tiles.
        assert 'cache_read(b1, 1, "global")' in text and "sample_compute_location(" not in text
    # The panel of a j_0 tile: all of K by the columns of the tile, allocated inside j_0 and
    # outside the row tiles, whatever the tiles.
    for seed in range(4):
        program = str(replay(wl, sketches[0].trace.without_decisions(), rng=np.random.default_rng(seed)).lower())
        columns = program[program.index("Wt_global = allocate([768, ") + len("Wt_global = allocate([768, "):]
        j_tile = int(columns[:columns.index("]")])
        assert 3072 % j_tile == 0
        assert program.index("for j_0 in ") < program.index("Wt_global = allocate(") < program.index("for i_0 in ")
    # Tiling without packing has no cache read; a workload with nothing to pack is untouched.
    plain = PostOrderApply(rules=[AutoInline(), MultiLevelTiling()]).generate(wl)
    assert "cache_read" not in str(plain[0].trace)
    conv = workloads.get("conv2d_bias_relu")
    assert sketches_text(PostOrderApply(rules=[AutoInline(), rule]).generate(conv)) == \
        sketches_text(PostOrderApply(rules=[AutoInline(), MultiLevelTiling()]).generate(conv))


@pytest.mark.parametrize("name, panel, outer", [
    ("matmul_relu", "B_global", ["j_0", "i_0"]), ("dense_bias_relu", "Wt_global", ["j_0", "i_0"]),
    ("batch_matmul", "B_global", ["b_0", "j_0", "i_0"]),
])
def test_a_panel_packed_outside_the_row_tiles_serves_them_all(name, panel, outer):
    wl = workloads.get(name)

    def sketch(pack):
        rule = MultiLevelTiling(pack_panels=pack, fuse_consumer_levels=(), cache_write_levels=())
        (only,) = PostOrderApply(rules=[AutoInline(), rule]).generate(wl)
        return only

    def starts(program, loops):
        return [program.index(f"for {loop} in ") for loop in loops]

    # Without packing the outermost tiles keep the axes' order, as in MetaSchedule.
    in_axis_order = sorted(outer, key=lambda loop: "bij".index(loop[0]))
    plain = str(replay(wl, sketch(False).trace).lower())
    assert starts(plain, in_axis_order) == sorted(starts(plain, in_axis_order))
    # Packing puts the outermost tiles of the axes the panel is indexed by first and computes
    # the panel (all of K by the columns of one tile) at the last of them: copied there, once
    # for all the row tiles (i_0) inside it.
    (program,) = [str(sch.lower()) for sch in every_compute_location(wl, sketch(True).trace, tile=outer_tiles)]
    assert starts(program, outer) == sorted(starts(program, outer)), program
    assert program.index(f"for {outer[-2]} in ") < program.index(f"{panel} = allocate(") \
        < program.index("for i_0 in "), program


@pytest.mark.parametrize("name", ["matmul_relu", "dense_bias_relu", "batch_matmul"])
def test_packed_panels_compute_the_reference_whatever_the_tiles(name):
    # outer_tiles: the panel's outermost tile above 1; tile_one: every outermost tile 1 (the
    # panel then all of the operand, under unit loops); others drawn from seeds. (The sketches
    # sample no compute location: every_compute_location gives the one program of the tiles.)
    wl = workloads.get(name, **SMALL_PARAMS[name])
    rule = MultiLevelTiling(pack_panels=True)
    for sketch in PostOrderApply(rules=[AutoInline(), rule]).generate(wl):
        for tile in (outer_tiles, tile_one):
            (sch,) = every_compute_location(wl, sketch.trace, tile=tile)
            assert_equivalent(sch)
        for seed in range(3):
            assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=np.random.default_rng(seed)))


def tile_one(extent, n):
    """Every level 1 but the last, which takes all of ``extent``."""
    return [1] * (n - 1) + [extent]


def outer_tiles(extent, n):
    """A tiling with the outermost tile above 1 where the extent allows (a unit loop is no
    compute location), the rest in the third of four levels; other level counts: all in the
    first."""
    if n != 4:
        return [extent] + [1] * (n - 1)
    first = next((d for d in range(2, extent + 1) if extent % d == 0), 1)
    return [first, 1, extent // first, 1]


LAST_AXIS_UNREUSED = """
workload last_axis_unreused(M = 8, N = 4, K = 4, B = 16) {
    input A: float32[M, K, B]
    input W: float32[K, N, B]
    output C[i, j, b] += A[i, k, b] * W[k, j, b]
}
"""


def tiled_block_info(wl):
    """The facts of the one block ``MultiLevelTiling`` tiles in ``wl`` (after AutoInline)."""
    (sch,) = PostOrderApply(rules=[AutoInline()]).generate(wl)
    (info,) = [info for info in (analysis.block(sch, sch.get_block(name)) for name in analysis.blocks(sch))
               if needs_tiling(info)]
    return info


@pytest.mark.parametrize("name, axes", [
    # b indexes C, A and B alone: no element is read for two batches.
    ("batch_matmul", ["b"]),
    # c indexes P and Wt alone; n does not index Wt (which every image reuses), y and x index
    # P only with r and s (a window that overlaps its neighbours').
    ("depthwise_conv2d", ["c"]),
    ("matmul_relu", []), ("dense_bias_relu", []), ("conv2d_bias_relu", []),
])
def test_unreused_axes_are_those_every_read_indexes_alone(name, axes):
    info = tiled_block_info(workloads.get(name))
    assert [info.spatial[k].name for k in unreused_axes(info)] == axes


def test_the_last_spatial_axis_is_tiled_even_unreused():
    # b indexes every read alone, but it is the contiguous axis, the one vectorized.
    wl = parse(LAST_AXIS_UNREUSED)
    assert unreused_axes(tiled_block_info(wl)) == ()
    rule = MultiLevelTiling(keep_unreused_axes_whole=True, fuse_consumer_levels=(), cache_write_levels=())
    (sketch,) = PostOrderApply(rules=[rule]).generate(wl)
    assert [inst.attrs[0] for inst in sketch.trace if inst.kind == "SamplePerfectTile"] == [4, 4, 4, 2]


@pytest.mark.parametrize("pack_panels", [False, True])
def test_an_unreused_axis_stays_whole_at_the_outermost_level(pack_panels):
    rule = MultiLevelTiling(keep_unreused_axes_whole=True, pack_panels=pack_panels)
    wl = workloads.get("batch_matmul")
    sketches = PostOrderApply(rules=[AutoInline(), rule]).generate(wl)
    assert len(sketches) == 3  # tiled, then a local cache copied out at level 1 / 2 (no consumer)
    for sketch in sketches:
        # i and j in four levels, k in two; b not split.
        assert [inst.attrs[0] for inst in sketch.trace if inst.kind == "SamplePerfectTile"] == [4, 4, 2]
        program = str(replay(wl, sketch.trace).lower())
        assert "b_0" not in program
        outer = ["b", "j_0", "i_0"] if pack_panels else ["b", "i_0", "j_0"]
        starts = [program.index(f"for {loop} in ") for loop in outer]
        assert starts == sorted(starts), program
    small = workloads.get("batch_matmul", **SMALL_PARAMS["batch_matmul"])
    depthwise = workloads.get("depthwise_conv2d", **SMALL_PARAMS["depthwise_conv2d"])
    for wl in (small, depthwise):
        for seed in range(4):
            assert_equivalent(PostOrderApply(rules=[AutoInline(), rule]).sample(wl, np.random.default_rng(seed)))


def test_imperfect_tiles_for_every_spatial_loop_but_the_last():
    rule = MultiLevelTiling(max_imperfect_innermost=6, fuse_consumer_levels=(), cache_write_levels=())
    (sketch,) = PostOrderApply(rules=[rule]).generate(workloads.get("batch_matmul"))
    kinds = [(inst.kind, inst.attrs) for inst in sketch.trace if inst.kind.startswith("Sample")]
    # b and i imperfect (innermost up to 6), j perfect (up to 64), k in two perfect levels.
    assert kinds == [("SampleImperfectTile", (4, 6))] * 2 + [("SamplePerfectTile", (4, 64)),
                                                              ("SamplePerfectTile", (2, 64))]
    small = workloads.get("batch_matmul", **SMALL_PARAMS["batch_matmul"])
    for seed in range(5):
        assert_equivalent(PostOrderApply(rules=[rule]).sample(small, np.random.default_rng(seed)))


@pytest.mark.parametrize("arguments", [
    dict(structure=""), dict(structure="SSS"), dict(structure="RR"), dict(structure="SSXRS"), dict(structure=3),
    dict(fuse_consumer_levels=(3,)), dict(cache_write_levels=(0,)), dict(structure="SRSRS"),
    dict(cache_write_levels=2), dict(max_innermost_factor="64"), dict(cache_scope="shared"),
    dict(max_imperfect_innermost=-1), dict(max_imperfect_innermost=True), dict(max_imperfect_innermost=6.0),
    dict(pack_panels="yes"), dict(pack_panels=1), dict(keep_unreused_axes_whole=1),
    dict(keep_unreused_axes_whole="no"),
])
def test_tiling_refuses_bad_arguments(arguments):
    with pytest.raises(ValueError, match="MultiLevelTiling"):
        MultiLevelTiling(**arguments)


# -- RandomComputeLocation ------------------------------------------------------------------

def test_random_compute_location_leaves_tiled_blocks_alone():
    for sketch in PostOrderApply(rules=ALL_THREE).generate(workloads.get("matmul_relu")):
        assert "sample_compute_location" not in str(sketch.trace)


def test_rules_leave_a_block_they_do_not_apply_to_unchanged():
    wl = workloads.get("softmax")
    for rule in [AutoInline(), MultiLevelTiling(), RandomComputeLocation()]:
        (sch,) = PostOrderApply().generate(wl)
        block = sch.get_block("Y")  # the output: no rule applies
        before = sch.trace
        assert rule.apply(sch, block) == [sch] and sch.trace == before


def test_rules_raise_only_schedule_error_on_an_inlined_block():
    wl = workloads.get("softmax")
    for rule in [AutoInline(), MultiLevelTiling(), RandomComputeLocation()]:
        (sch,) = PostOrderApply().generate(wl)
        block = sch.get_block("e")
        sch.compute_inline(block)
        with pytest.raises(ScheduleError):
            rule.apply(sch, block)


# Operands read across their memory order, as attention and a dense layer with [out, in]
# weights read them; odd sizes, with enough rows (9) for the panel to be packed.
QK_TEXT = """workload qk(H = 2, S = 9, D = 5) {
    input Q: float32[H, S, D]
    input K: float32[H, S, D]
    output Z[b, i, j] += Q[b, i, d] * K[b, j, d]
}"""
DENSE_T_TEXT = """workload dense_t(M = 9, K = 7, N = 10) {
    input X: float32[M, K]
    input W: float32[N, K]
    input bias: float32[N]
    Y[i, j] += X[i, k] * W[j, k]
    output Z[i, j] = max(Y[i, j] + bias[j], 0.0)
}"""


@pytest.mark.parametrize("wl, block, transposed", [
    (parse(QK_TEXT), "Z", {"K": [0, 2, 1]}), (parse(DENSE_T_TEXT), "Y", {"W": [1, 0]}),
    # B[k, j] is read along its memory order: packed as it is (packable_reads), not transposed.
    (workloads.get("matmul_relu"), "C", {}),
    # One row (a dense layer at batch 1), or 7: each packed weight would serve too few rows
    # for the copy to pay.
    (parse(DENSE_T_TEXT, M=1), "Y", {}), (parse(DENSE_T_TEXT, M=7), "Y", {}),
    (parse(QK_TEXT, S=7), "Z", {}),
])
def test_transposed_reads_are_operands_read_across_their_order_by_enough_rows(wl, block, transposed):
    sch = PostOrderApply(rules=[AutoInline()]).generate(wl)[0]
    assert transposed_reads(analysis.block(sch, sch.get_block(block))) == transposed


@pytest.mark.parametrize("text, copy", [(QK_TEXT, "K_global[ax0, ax2, ax1] = K["),
                                        (DENSE_T_TEXT, "W_global[ax1, ax0] = W[")])
def test_a_transposed_panel_is_stored_with_the_vector_axis_last_and_computes_the_reference(text, copy):
    wl = parse(text)
    rule = MultiLevelTiling(pack_panels=True)
    sketches = PostOrderApply(rules=[AutoInline(), rule]).generate(wl)
    for sketch in sketches:
        assert "transform_layout(" in str(sketch.trace)
        for tile in (outer_tiles, tile_one):
            (sch,) = every_compute_location(wl, sketch.trace, tile=tile)
            # The panel's reduction dimension before the columns of its tile: the block's
            # vector axis indexes the panel's last dimension, contiguous.
            assert copy in str(sch.lower())
            assert_equivalent(sch)
        for seed in range(3):
            assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=np.random.default_rng(seed)))


# A strided convolution with its batch norm, odd sizes, 9 output channels (a vector's worth).
CONV_TEXT = """workload conv(N = 1, C = 3, H = 9, W = 11, F = 9, R = 3, S = 2, ST = 2, PAD = 1) {
    input X: float32[N, C, H, W]
    input Wt: float32[F, C, R, S]
    input scale: float32[F]
    let OH = (H + 2 * PAD - R) // ST + 1
    let OW = (W + 2 * PAD - S) // ST + 1
    P[n, c, h, w] = X[n, c, h - PAD, w - PAD] if h >= PAD and h < H + PAD and w >= PAD and w < W + PAD else 0.0
        where h in 0..H + 2 * PAD, w in 0..W + 2 * PAD
    Y[n, f, y, x] += P[n, c, y * ST + r, x * ST + s] * Wt[f, c, r, s]
        where y in 0..OH, x in 0..OW
    output Z[n, f, y, x] = max(Y[n, f, y, x] * scale[f], 0.0)
}"""


@pytest.mark.parametrize("text, vector", [
    (CONV_TEXT, "f"), (CONV_TEXT.replace("F = 9", "F = 7"), None),  # fewer channels than a vector
    # Attention and a dense layer: their vector axis reads a transposed panel contiguously.
    (QK_TEXT, None), (DENSE_T_TEXT, None),
])
def test_a_convolution_may_vectorize_its_output_channels(text, vector):
    wl = parse(text)
    sch = PostOrderApply(rules=[AutoInline()]).generate(wl)[0]
    assert channel_vector_axis(analysis.block(sch, sch.get_block("Y" if "Y[" in text else "Z"))) == vector


def test_channel_vector_forks_store_weights_and_sums_channels_last_and_compute_the_reference():
    wl = parse(CONV_TEXT)
    plain = PostOrderApply(rules=[AutoInline(), MultiLevelTiling(pack_panels=True)]).generate(wl)
    forks = PostOrderApply(rules=[AutoInline(), MultiLevelTiling(pack_panels=True, channel_vectors=True)]).generate(wl)
    assert sketches_text(forks[:len(plain)]) == sketches_text(plain)
    extra = forks[len(plain):]
    assert len(extra) == 2  # one per cache-write level
    for sketch in extra:
        for tile in (outer_tiles, tile_one):
            (sch,) = every_compute_location(wl, sketch.trace, tile=tile)
            program = str(sch.lower())
            # [c, r, s, f], the copy's innermost loop along f: it writes a line (9 channels)
            # at a time.
            assert re.search(r"for ax0_1 in range\(9\):\n *Wt_global\[ax1, ax2, ax3, ax0_0 \* 9 \+ ax0_1\] = Wt\[",
                             program), program
            # The copy-out reads the sums with the channel (its second axis, ax1) last.
            assert re.search(r"max\(Y_local\[[^]]*, ax1\d*( \+ [^],]*)?\] \* scale", program), program
            assert_equivalent(sch)
        for seed in range(4):
            assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=np.random.default_rng(seed)))
