"""Compute locations, caches, rfactor, inlining, annotations: what they do to the program, that
the result still computes the reference, and the errors of illegal uses."""
import pytest

import metasched
from metasched import Schedule, ScheduleError, Trace, replay, workloads
from metasched.schedule import analysis
from metasched.testing import assert_equivalent


def lines(sch):
    return [line.strip() for line in str(sch).splitlines()]


@pytest.fixture
def mm_relu():
    return Schedule(workloads.get("matmul_relu", M=16, N=12, K=8))


def tile(sch, block="C", ti=4, tj=8):
    b = sch.get_block(block)
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, ti])
    j0, j1 = sch.split(j, [None, tj])
    sch.reorder(i0, j0, k, i1, j1)
    return b, (i0, j0, k, i1, j1)


def test_local_write_cache_under_a_tile_becomes_a_tile_sized_array(mm_relu):
    sch = mm_relu
    b, (i0, j0, k, i1, j1) = tile(sch)
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_inline(sch.get_block("D"))
    sch.reverse_compute_at(copy_out, j0)
    text = lines(sch)
    assert text[:3] == ["def matmul_relu(A: float32[16, 8], B: float32[8, 12], D: float32[16, 12]):",
                        "for i_0 in range(4):", "for j_0 in range(2):"]
    assert text[3] == "C_local = allocate([4, 8], 'float32')"
    assert "D[ax0 + i_0 * 4, ax1 + j_0 * 8] = max(C_local[ax0, ax1], 0.0)" in text
    assert_equivalent(sch)


def test_compute_at_computes_the_region_one_iteration_reads():
    wl = workloads.get("conv2d_bias_relu", N=1, C=2, H=8, W=8, F=4)
    sch = Schedule(wl)
    y = sch.get_block("Y")
    n, f, yy, x, c, r, s = sch.get_loops(y)
    y0, y1 = sch.split(yy, [None, 4])
    sch.reorder(n, f, y0, c, y1, x, r, s)
    sch.compute_at(sch.get_block("P"), y0)
    text = lines(sch)
    # four output rows of a 3x3 convolution read six padded rows, and all ten padded columns
    assert "P = allocate([1, 2, 6, 10], 'float32')" in text
    assert_equivalent(sch)


def test_compute_at_a_reduction_consumer_inside_its_reduction_loop():
    wl = workloads.get("conv2d_bias_relu", N=1, C=3, H=5, W=6, F=2)
    sch = Schedule(wl)
    y = sch.get_block("Y")
    loops = sch.get_loops(y)
    sch.compute_at(sch.get_block("P"), loops[4])  # under y, x and c: one 3x3 window of one channel
    assert "P = allocate([1, 1, 3, 3], 'float32')" in lines(sch)
    assert_equivalent(sch)


def test_compute_inline_and_its_errors():
    wl = workloads.get("softmax", M=4, N=6)
    sch = Schedule(wl)
    sch.compute_inline(sch.get_block("e"))
    assert not any(line.startswith("e[") for line in lines(sch))
    assert_equivalent(sch)
    with pytest.raises(ScheduleError, match="is a reduction"):
        sch.compute_inline(sch.get_block("s"))
    with pytest.raises(ScheduleError, match="writes output Y"):
        sch.compute_inline(sch.get_block("Y"))


def test_an_inlined_block_handle_is_rejected_afterwards():
    sch = Schedule(workloads.get("softmax", M=4, N=6))
    e = sch.get_block("e")
    sch.compute_inline(e)
    with pytest.raises(ScheduleError, match="it was inlined"):
        sch.get_loops(e)


def test_reverse_compute_inline_folds_an_epilogue_into_its_producer():
    wl = workloads.get("dense_bias_relu", M=4, K=3, N=6)
    sch = Schedule(wl)
    b = sch.get_block("Y")
    copy_out = sch.cache_write(b, 0, "global")
    sch.reverse_compute_inline(sch.get_block("Z"))
    assert "Z[ax0, ax1] = max(Y_global[ax0, ax1] + bias[ax1], 0.0)" in lines(sch)
    assert sch.get(copy_out) == "Y_global"
    assert_equivalent(sch)
    fresh = Schedule(wl)
    with pytest.raises(ScheduleError, match="producer Y is a reduction"):
        fresh.reverse_compute_inline(fresh.get_block("Z"))


def test_cache_read_redirects_only_the_given_block():
    wl = workloads.get("matmul", M=6, N=5, K=4)
    sch = Schedule(wl)
    c = sch.get_block("C")
    cache = sch.cache_read(c, 1, "global")
    assert sch.get(cache) == "B_global"
    assert "B_global[ax0, ax1] = B[ax0, ax1]" in lines(sch)
    assert_equivalent(sch)
    with pytest.raises(ScheduleError, match="out of range"):
        sch.cache_read(c, 5, "global")
    with pytest.raises(ScheduleError, match="scope must be one of"):
        sch.cache_read(c, 0, "shared")


def test_cache_read_of_a_tensor_still_being_computed_is_refused():
    # Z runs after each row tile of Y: a root copy of Y for Z would read Y unfinished
    wl = workloads.get("dense_bias_relu", M=5, K=7, N=10)
    sch = Schedule(wl)
    y = sch.get_block("Y")
    i, j, k = sch.get_loops(y)
    sch.reverse_compute_at(sch.get_block("Z"), i)
    before = str(sch)
    with pytest.raises(ScheduleError, match="would read it unfinished"):
        sch.cache_read(sch.get_block("Z"), 0, "global")
    assert str(sch) == before


def test_a_block_back_at_the_root_runs_after_a_copy_made_while_it_was_inside_another():
    """Y computed at a loop of Z, then a copy of X for Y (it goes before Z, after Y's place in
    the stage order), then Y back at the root: Y must run after the copy. It ran before it,
    reading the copy unwritten (found by the random schedules of ``tests/lower/test_regions``)."""
    wl = workloads.get("dense_bias_relu", M=5, K=7, N=10)
    sch = Schedule(wl)
    y, z = sch.get_block("Y"), sch.get_block("Z")
    sch.compute_at(y, sch.get_loops(z)[0])
    sch.cache_read(y, 0, "global")
    sch.compute_at(y, sch.sample_compute_location(y, decision=-1))
    text = lines(sch)
    assert text.index("X_global[ax0, ax1] = X[ax0, ax1]") < text.index("Y[i, j] = 0.0")
    assert_equivalent(sch)


def test_cache_read_computed_at_a_tile_is_compacted():
    wl = workloads.get("matmul", M=8, N=16, K=4)
    sch = Schedule(wl)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(j0, i, k, j1)
    cache = sch.cache_read(c, 1, "local")
    sch.compute_at(cache, j0)
    assert "B_local = allocate([4, 8], 'float32')" in lines(sch)
    assert_equivalent(sch)


def test_rfactor_makes_a_partial_reduction_block():
    wl = workloads.get("reduce_cols", M=10, N=7)
    sch = Schedule(wl)
    s = sch.get_block("S")
    j, i = sch.get_loops(s)
    i0, i1 = sch.split(i, [3, None])  # 3 * 4 = 12 > 10: the partial sums are guarded
    rf = sch.rfactor(i0, 0)
    assert sch.get(rf) == "S_rf"
    p_i0, p_j, p_i1 = sch.get_loops(rf)
    sch.parallel(p_i0)
    assert_equivalent(sch)
    with pytest.raises(ScheduleError, match="not a reduction loop"):
        sch.rfactor(p_j, 0)


@pytest.mark.parametrize("factor_axis", [-2, -1, 0, 1])
def test_rfactor_factor_axis_positions(factor_axis):
    wl = workloads.get("reduce_cols", M=6, N=5)
    sch = Schedule(wl)
    j, i = sch.get_loops(sch.get_block("S"))
    i0, _ = sch.split(i, [2, 3])
    sch.rfactor(i0, factor_axis)
    assert_equivalent(sch)


def test_rfactor_factor_axis_out_of_range():
    sch = Schedule(workloads.get("reduce_cols", M=6, N=5))
    j, i = sch.get_loops(sch.get_block("S"))
    with pytest.raises(ScheduleError, match="factor_axis must lie in"):
        sch.rfactor(i, 3)


@pytest.mark.parametrize("action, message", [
    (lambda s: s.compute_at(s.get_block("C"), s.get_loops(s.get_block("C"))[0]), "its own loop"),
    (lambda s: s.compute_at(s.get_block("D"), s.get_loops(s.get_block("C"))[0]), "must be computed whole"),
    (lambda s: s.reverse_compute_at(s.get_block("D"), s.get_loops(s.get_block("C"))[2]),
     "inside the reduction loops"),
    (lambda s: s.reverse_compute_at(s.get_block("C"), s.get_loops(s.get_block("D"))[0]), "is a reduction"),
    (lambda s: s.cache_write(s.get_block("C"), 1, "local"), "write_index must be 0"),
    (lambda s: s.unannotate(s.get_block("C"), "nothing"), "has no annotation"),
    (lambda s: s.annotate(s.get_block("C"), "", 1), "non-empty string"),
    (lambda s: s.annotate(s.get_block("C"), "k", [1]), "must be a 64-bit int, a finite float"),
    (lambda s: s.annotate(s.get_block("C"), "k", float("inf")), "must be a 64-bit int, a finite float"),
    (lambda s: s.sample_categorical([1, 2], [0.5, float("nan")]), "must be finite"),
])
def test_illegal_stage_primitives(mm_relu, action, message):
    before = str(mm_relu)
    with pytest.raises(ScheduleError, match=message):
        action(mm_relu)
    assert str(mm_relu) == before


def test_loops_cannot_move_past_an_attach_point(mm_relu):
    sch = mm_relu
    b, (i0, j0, k, i1, j1) = tile(sch)
    sch.reorder(i1, k)  # i_0, j_0, i_1, k, j_1
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(copy_out, j0)
    with pytest.raises(ScheduleError, match="cannot move past"):
        sch.reorder(i1, j0)
    with pytest.raises(ScheduleError, match="before its input is complete"):
        sch.fuse(j0, i1)
    sch.reorder(k, i1)  # inside the attach point: fine
    sch.fuse(i0, j0)  # the attach loop with the loops outside it: fine
    assert_equivalent(sch)


def test_split_of_an_attach_loop_keeps_the_block_inside_it(mm_relu):
    sch = mm_relu
    b, (i0, j0, k, i1, j1) = tile(sch)
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(copy_out, j0)
    sch.split(j0, [2, 1])
    assert_equivalent(sch)


def test_get_loops_includes_the_loops_of_the_enclosing_block(mm_relu):
    sch = mm_relu
    b, (i0, j0, k, i1, j1) = tile(sch)
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(copy_out, j0)
    names = [sch.get(lp).name for lp in sch.get_loops(copy_out)]
    assert names == ["i_0", "j_0", "ax0", "ax1"]


def test_producers_and_consumers(mm_relu):
    sch = mm_relu
    c, d = sch.get_block("C"), sch.get_block("D")
    assert [sch.get(b) for b in sch.get_consumers(c)] == ["D"]
    assert [sch.get(b) for b in sch.get_producers(d)] == ["C"]
    assert sch.get_producers(c) == []


def test_annotations_show_in_the_program(mm_relu):
    sch = mm_relu
    i, j, k = sch.get_loops(sch.get_block("C"))
    v = sch.sample_categorical([0, 16, 64], [0.2, 0.3, 0.5], decision=2)
    sch.annotate(i, "pragma_auto_unroll_max_step", v)
    assert "for i in range(16):  # pragma_auto_unroll_max_step = 64" in lines(sch)
    sch.unannotate(i, "pragma_auto_unroll_max_step")
    assert "for i in range(16):" in lines(sch)
    sch.annotate(sch.get_block("C"), "meta_schedule.tiling_structure", "SSRSRS")
    assert "# block C: meta_schedule.tiling_structure = 'SSRSRS'" in lines(sch)


def ansor_matmul_relu(sch):
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=8)
    tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16)
    i0, i1 = sch.split(i, ti)
    j0, j1 = sch.split(j, tj)
    sch.reorder(i0, j0, k, i1, j1)
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_inline(sch.get_block("D"))
    sch.reverse_compute_at(copy_out, j0)
    sch.vectorize(j1)
    unroll = sch.sample_categorical([0, 16, 64], [0.3, 0.3, 0.4])
    sch.annotate(i0, "pragma_auto_unroll_max_step", unroll)
    sch.parallel(i0)
    return sch


def test_same_seed_same_program_and_trace():
    wl = workloads.get("matmul_relu", M=48, N=64, K=8)
    a, b = ansor_matmul_relu(Schedule(wl, seed=7)), ansor_matmul_relu(Schedule(wl, seed=7))
    assert a.trace == b.trace and str(a) == str(b)
    others = {str(ansor_matmul_relu(Schedule(wl, seed=s)).trace) for s in range(8)}
    assert len(others) > 1  # the seed matters


def test_replay_gives_the_identical_program_and_trace():
    wl = workloads.get("matmul_relu", M=48, N=64, K=8)
    sch = ansor_matmul_relu(Schedule(wl, seed=3))
    trace = sch.trace
    again = replay(wl, trace)
    assert str(again) == str(sch) and again.trace == trace
    assert replay(wl, Trace.parse(str(trace))).trace == trace
    assert_equivalent(again)


def test_edited_decision_replays_to_the_new_tiles():
    wl = workloads.get("matmul_relu", M=48, N=64, K=8)
    trace = ansor_matmul_relu(Schedule(wl, seed=3)).trace
    index = next(i for i, inst in enumerate(trace.insts) if inst.kind == "SamplePerfectTile")
    edited = trace.with_decision(index, [12, 4])
    sch = replay(wl, edited)
    assert sch.trace.decisions[index] == (12, 4)
    assert "for i_1 in range(4):" in lines(sch)
    assert_equivalent(sch)


def test_a_decision_that_no_longer_fits_is_repaired():
    wl = workloads.get("matmul_relu", M=48, N=64, K=8)
    trace = ansor_matmul_relu(Schedule(wl, seed=3)).trace
    index = next(i for i, inst in enumerate(trace.insts) if inst.kind == "SamplePerfectTile")
    sch = replay(wl, trace.with_decision(index, [5, 7]))  # 7 does not divide 48: becomes 48
    assert sch.trace.decisions[index] == (1, 48)
    assert_equivalent(sch)


def test_replay_error_names_the_instruction():
    wl = workloads.get("matmul_relu", M=48, N=64, K=8)
    text = str(ansor_matmul_relu(Schedule(wl, seed=3)).trace)
    broken = text.replace('sch.get_block("D")', 'sch.get_block("C")')
    with pytest.raises(ScheduleError, match=r"instruction \d+ `sch.reverse_compute_inline\(b\d+\)`"):
        replay(wl, Trace.parse(broken))


def test_sample_compute_location_decisions():
    wl = workloads.get("softmax", M=4, N=6)
    sch = Schedule(wl)
    e = sch.get_block("e")
    assert sch.get(sch.sample_compute_location(e, decision=-2)) == "inline"
    assert sch.get(sch.sample_compute_location(e, decision=-1)) == "root"
    s = Schedule(workloads.get("conv2d_bias_relu", C=2, H=4, W=4, F=2))
    p = s.get_block("P")
    loop = s.sample_compute_location(p, decision=3)
    assert s.get(loop).name == "x"
    s.compute_at(p, loop)
    assert_equivalent(s)
    assert s.trace.decisions[len(s.trace.insts) - 2] == 3  # a valid decision is kept as it is
    # a decision that is no longer a candidate becomes the nearest one below it: of Y's 7
    # loops (n f y x | c r s) the last candidate is x, the last data-parallel one
    t = Schedule(workloads.get("conv2d_bias_relu", C=2, H=4, W=4, F=2))
    assert t.get(t.sample_compute_location(t.get_block("P"), decision=99)).name == "x"
    assert t.trace.decisions[len(t.trace.insts) - 1] == 3


def test_compute_locations_follow_metaschedules_rules():
    # Y's loops n f y x c r s: n has extent 1 (N=1), c r s are reductions after the last
    # data-parallel loop; so P may go inline, at the root, or at f, y or x
    sch = Schedule(workloads.get("conv2d_bias_relu", C=2, H=4, W=4, F=2))
    p, y = sch.get_block("P"), sch.get_block("Y")
    assert analysis.compute_locations(sch, p) == (-2, -1, 1, 2, 3)
    # tiled: the reductions come before the last data-parallel level, and each loop of
    # extent 1 is left out, as is every data-parallel loop after the first reduction
    n, f, h, w, c, r, s = sch.get_loops(y)
    f0, f1 = sch.split(f, [1, 2])
    c0, c1 = sch.split(c, [2, 1])
    sch.reorder(n, f0, h, w, c0, r, f1, s, c1)
    assert analysis.compute_locations(sch, p) == (-2, -1, 2, 3, 4, 5)
    # a decision on a left-out loop (f0, extent 1) becomes the candidate below it: the root
    assert sch.get(sch.sample_compute_location(p, decision=1)) == "root"
    # compute_at itself still takes a unit loop, and the program stays right
    sch.compute_at(p, sch.get_loops(y)[1])
    assert_equivalent(sch)


def test_copy_is_independent(mm_relu):
    sch = mm_relu
    b, (i0, j0, k, i1, j1) = tile(sch)
    twin = sch.copy()
    sch.parallel(i0)
    assert "parallel" not in str(twin)
    twin.vectorize(j1)  # the twin's handles work on the twin
    assert "vectorized" in str(twin) and "vectorized" not in str(sch)
    assert twin.trace.insts[:len(sch.trace.insts) - 1] == sch.trace.insts[:-1]


OUTPUT_READ_LATER = """
workload two(N = 6) {
    input X: float32[N]
    output A[i] = X[i] * 2.0
    output B[i] = A[i + 1] + 1.0 where i in 0..N - 1
}
"""


def test_an_output_is_never_computed_at_a_loop():
    # B reads A[1:], so computing A only where B reads it would never write A[0]
    sch = Schedule(metasched.parse(OUTPUT_READ_LATER))
    a = sch.get_block("A")
    with pytest.raises(ScheduleError, match="must be computed whole"):
        sch.compute_at(a, sch.get_loops(sch.get_block("B"))[0])
    assert sch.get(sch.sample_compute_location(a)) == "root"  # the only candidate


def test_reverse_compute_at_needs_the_exact_region_an_iteration_completes():
    sch = Schedule(workloads.get("matmul_relu", M=8, N=8, K=4))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [2, 4])
    sch.reorder(j1, j0)  # one iteration of j_1 writes columns j_1 and j_1 + 4: not one box
    d = sch.get_block("D")
    with pytest.raises(ScheduleError, match="that one iteration of loop j_1 completes are not one box"):
        sch.reverse_compute_at(d, j1)
    fused = Schedule(workloads.get("matmul_relu", M=8, N=8, K=4))
    c = fused.get_block("C")
    i, j, k = fused.get_loops(c)
    i0, i1 = fused.split(i, [2, 4])
    fused.fuse(i1, j)  # (f // 8, f % 8) with f over all its values inside i_0: a 4 x 8 box
    fused.reverse_compute_at(fused.get_block("D"), i0)
    assert_equivalent(fused)
    other = Schedule(workloads.get("matmul_relu", M=8, N=8, K=4))
    c = other.get_block("C")
    i, j, k = other.get_loops(c)
    i0, i1 = other.split(i, [2, 4])
    other.reverse_compute_at(other.get_block("D"), i0)
    other.fuse(i1, j)  # fusing inside the attach point afterwards is fine
    assert_equivalent(other)


def test_compute_at_needs_every_other_reader_inside_the_loop():
    sch = Schedule(workloads.get("softmax", M=4, N=6))  # e feeds both s and Y
    with pytest.raises(ScheduleError, match="block Y also reads e and does not run inside loop"):
        sch.compute_at(sch.get_block("e"), sch.get_loops(sch.get_block("s"))[0])
    with pytest.raises(ScheduleError, match="block s also reads e and does not run inside loop"):
        sch.compute_at(sch.get_block("e"), sch.get_loops(sch.get_block("Y"))[0])
    _, j = sch.get_loops(sch.get_block("Y"))
    j0, j1 = sch.split(j, [2, 3])
    sch.compute_at(sch.get_block("s"), j0)
    with pytest.raises(ScheduleError, match="block s also reads e and does not run inside loop"):
        sch.compute_at(sch.get_block("e"), j1)  # s runs outside it, once per j0
    sch.compute_at(sch.get_block("e"), j0)
    assert_equivalent(sch)
    with pytest.raises(ScheduleError, match="does not read mx"):
        sch.compute_at(sch.get_block("mx"), sch.get_loops(sch.get_block("Y"))[0])


def _softmax_by_rows(rows_split: bool):
    """softmax with ``s`` and then ``e`` computed in the output's row loop (split in two first
    with ``rows_split``), as TVM's rule allows: every reader of ``e`` runs inside it."""
    sch = Schedule(workloads.get("softmax", M=6, N=20))
    y = sch.get_block("Y")
    i, _ = sch.get_loops(y)
    if rows_split:
        _, i = sch.split(i, [3, 2])
    sch.compute_at(sch.get_block("s"), i)
    sch.compute_at(sch.get_block("e"), i)
    return sch


@pytest.mark.parametrize("rows_split", [False, True])
def test_a_block_read_by_two_computes_the_rows_both_read_in_their_loop(rows_split):
    sch = _softmax_by_rows(rows_split)
    text = str(sch.lower())
    assert "e = allocate([1, 20]" in text  # a row at a time, not the whole tensor
    assert_equivalent(sch)
    e = sch.get_block("e")
    sch.compute_at(sch.get_block("mx"), sch.get_loops(e)[-2])  # mx at e's row, within it
    assert_equivalent(sch)


def test_a_reader_may_run_inside_a_block_computed_in_the_loop():
    # The row sum factored (s_rf computed in s, s in the output's row loop): e, read by s_rf
    # and Y, is still computed a row at a time in that loop.
    sch = Schedule(workloads.get("softmax", M=6, N=20))
    s = sch.get_block("s")
    _, j = sch.get_loops(s)
    _, j1 = sch.split(j, [4, 5])
    s_rf = sch.rfactor(j1, 1)
    row, _ = sch.get_loops(sch.get_block("Y"))
    sch.compute_at(s, row)
    sch.compute_at(s_rf, sch.get_loops(s)[1])
    assert analysis.compute_locations(sch, sch.get_block("e")) == (-2, -1, 0)
    sch.compute_at(sch.get_block("e"), row)
    assert "e = allocate([1, 20]" in str(sch.lower())
    assert_equivalent(sch)


def test_layernorm_rows_fuse_the_mean_read_by_the_sum_of_squares_and_the_output():
    sch = Schedule(workloads.get("layernorm", M=5, N=11))
    y = sch.get_block("Y")
    i, _ = sch.get_loops(y)
    sch.compute_at(sch.get_block("sq"), i)
    total = sch.get_block("total")
    sch.compute_at(total, i)  # read by Y and sq, both in the row loop
    assert "total = allocate([1]" in str(sch.lower())
    assert_equivalent(sch)


@pytest.mark.parametrize("move", ["compute_root", "compute_at"])
def test_a_reader_of_a_block_computed_for_it_stays_where_it_is(move):
    sch = _softmax_by_rows(rows_split=False)
    s = sch.get_block("s")
    with pytest.raises(ScheduleError, match="block s reads e, which block e computes inside loop"):
        if move == "compute_root":
            sch.compute_at(s, sch.sample_compute_location(s, decision=-1))
        else:
            sch.compute_at(s, sch.get_loops(sch.get_block("Y"))[-1])
    assert_equivalent(sch)  # nothing changed


def test_sample_compute_location_offers_the_loops_every_reader_runs_in():
    sch = Schedule(workloads.get("softmax", M=6, N=20))
    e = sch.get_block("e")
    assert analysis.compute_locations(sch, e) == (-2, -1)  # s and Y: no loop holds both
    y = sch.get_block("Y")
    sch.compute_at(sch.get_block("s"), sch.get_loops(y)[0])
    assert analysis.compute_locations(sch, e) == (-2, -1, 0)  # Y's row loop, not its column loop
    sch.compute_at(e, sch.sample_compute_location(e, decision=0))
    assert "e = allocate([1, 20]" in str(sch.lower())
    assert_equivalent(sch)


def test_a_consumer_after_an_iteration_that_produced_nothing_computes_nothing():
    # M = 3 split by 2: the last iteration of i_1 is guarded off and writes no row of C; the
    # ReLU after it must not recompute a row from that iteration's (unwritten) tile. (This was
    # found with M = 1 split by 2, a split that is refused now: its factor exceeds the extent.)
    sch = Schedule(workloads.get("matmul_relu", M=3, N=6, K=3))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 2])
    sch.reverse_compute_at(sch.get_block("D"), i1)
    assert "if i1 + i_0 * 2 + i_1 < 3:" in lines(sch)
    assert_equivalent(sch)


def test_transform_layout_reorders_every_access_of_the_buffer_and_its_allocation():
    wl = workloads.get("batch_matmul", BATCH=2, M=5, N=6, K=3)
    sch = Schedule(wl)
    c = sch.get_block("C")
    b, i, j, k = sch.get_loops(c)
    cache = sch.cache_read(c, 1, "global")
    sch.compute_at(cache, b)
    sch.transform_layout(cache, [0, 2, 1])
    text = lines(sch)
    assert "B_global = allocate([1, 6, 3], 'float32')" in text  # the panel of one b, [b, j, k]
    assert any(line.startswith("B_global[ax0, ax2, ax1] = B[") for line in text)
    assert_equivalent(sch)
    # A second transform composes with the first: these two give back the layout as written.
    sch.transform_layout(cache, [0, 2, 1])
    assert "B_global = allocate([1, 3, 6], 'float32')" in lines(sch)
    assert any(line.startswith("B_global[ax0, ax1, ax2] = B[") for line in lines(sch))
    assert_equivalent(sch)


def test_transform_layout_follows_the_buffer_when_a_cache_or_a_fold_takes_it_over():
    wl = workloads.get("dense_bias_relu", M=5, K=7, N=10)
    sch = Schedule(wl)
    y = sch.get_block("Y")
    sch.transform_layout(y, [1, 0])
    sch.cache_write(y, 0, "local")  # the copy now writes Y, laid out as asked; Y_local as written
    assert "Y[ax1, ax0] = Y_local[ax0, ax1]" in lines(sch)
    assert_equivalent(sch)
    # Folded into its producer, an output keeps its layout: the producer's is dropped.
    chain = metasched.parse("""workload chain(M = 3, N = 4) {
        input X: float32[M, N]
        A[i, j] = X[i, j] * 2.0
        output B[i, j] = A[i, j] + 1.0
    }""")
    sch = Schedule(chain)
    sch.transform_layout(sch.get_block("A"), [1, 0])
    assert "A[j, i] = X[i, j] * 2.0" in lines(sch)
    sch.reverse_compute_inline(sch.get_block("B"))
    assert "B[i, j] = X[i, j] * 2.0 + 1.0" in lines(sch)
    assert_equivalent(sch)


def test_transform_layout_refuses_an_output_and_orders_that_are_not_permutations():
    wl = workloads.get("dense_bias_relu", M=5, K=7, N=10)
    sch = Schedule(wl)
    before = str(sch)
    with pytest.raises(ScheduleError, match="writes output Z"):
        sch.transform_layout(sch.get_block("Z"), [1, 0])
    for order in ([0], [0, 0], [0, 2], "10", [True, False]):
        with pytest.raises(ScheduleError, match="a permutation of 0..1"):
            sch.transform_layout(sch.get_block("Y"), order)
    assert str(sch) == before
