"""The postprocessors: ``RewriteParallelVectorizeUnroll`` turns annotations into the loop kinds
MetaSchedule's rule makes, computing the reference, and unrolls no further than the verifier's
limit on unrolled work; ``VerifyKernel`` rejects vectorized loops that code generation would
run serially, parallel loops with races (one shown to give wrong results) and unrolled code
too big to compile quickly, and passes the hand-written schedules. The two share one lowering
of a sample where they can, and it is the program the schedule lowers to."""
import dataclasses
import pickle

import pytest
from hypothesis import given, strategies as st

from conftest import SMALL_PARAMS
from metasched import CodegenOptions, ScheduleError, build, handwritten, workloads
from metasched.codegen import vector
from metasched.ir import Buffer, FloatImm, For, ForKind, IfThenElse, IntImm, Load, PrimFunc, Seq, Store, Var
from metasched.ir import vectorizable
from metasched.ir.vectorizable import chunk_plan, lane_limit
from metasched.ir.analysis import loads, substitute, walk as walk_expr
from metasched.ir.expr import node_count
from metasched.lang import assert_outputs_close
from metasched.schedule import Schedule, analysis
from metasched.schedule.annotations import PARALLEL, UNROLL_EXPLICIT, VECTORIZE
from metasched.space import PostOrderApply, RewriteParallelVectorizeUnroll, VerifyKernel, cpu_default
from metasched.space.loop_program import (MAX_UNROLLED_WORK, Lowered, UnrolledWork, exprs, lowered,
                                          params, plainly_vectorizes, walk, with_kinds)
from metasched.space.postproc import KEYS, parallel_race, unrolled_work, vector_fallback
from metasched.space.postproc.verify_kernel import _parallel_race, _vector_fallback
from metasched.testing import assert_equivalent, schedules

SERIAL = CodegenOptions(poison=True, threading="serial")


def annotate(sch, block, parallel=0, vectorize=0, unroll=0):
    for key, value in ((PARALLEL, parallel), (VECTORIZE, vectorize), (UNROLL_EXPLICIT, unroll)):
        if value:
            sch.annotate(block, key, value)


def rewrite(sch, post=None):
    sch.enter_postproc()
    assert (post or RewriteParallelVectorizeUnroll()).apply(sch)
    return sch


def kinds(sch, block):
    return [(loop.kind, loop.extent) for loop in analysis.block(sch, block).loops]


def no_annotations_left(sch):
    return all(not set(KEYS) & set(analysis.block(sch, sch.get_block(name)).annotations)
               for name in analysis.blocks(sch))


# -- RewriteParallelVectorizeUnroll -----------------------------------------------------------
def tiled_matmul(unroll):
    """MetaSchedule's SSRSRS tiles of a 64^3 matmul, with a local cache copied out at ``j_1``,
    annotated as ParallelizeVectorizeUnroll would."""
    sch = Schedule(workloads.get("matmul", M=64, N=64, K=64))
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1, i2, i3 = sch.split(i, [4, 2, 2, 4])
    j0, j1, j2, j3 = sch.split(j, [2, 2, 1, 16])
    k0, k1 = sch.split(k, [16, 4])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    copy_out = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(copy_out, j1)
    annotate(sch, b, parallel=8, vectorize=16, unroll=unroll)
    return sch, b, copy_out


@pytest.mark.parametrize("unroll, unrolled", [
    (0, set()),
    (16, {"j_2", "k_1", "i_3"}),  # 1 * 4 * 4 = 16; i_2 would make 32
    (512, {"k_0", "i_2", "j_2", "k_1", "i_3"}),  # 512; j_1 holds the copy-out block
])
def test_tiles_become_parallel_vectorized_and_unrolled_loops(unroll, unrolled):
    sch, b, copy_out = tiled_matmul(unroll)
    rewrite(sch)
    loops = analysis.block(sch, b).loops
    # i_0 * j_0 = 8 is not past the limit of 8; i_1 takes it past, and joins (MetaSchedule).
    assert (loops[0].kind, loops[0].extent) == ("parallel", 16)
    assert (loops[-1].kind, loops[-1].extent) == ("vectorized", 16)
    assert {lp.name for lp in loops if lp.kind == "unrolled"} == unrolled
    # The copy-out block, computed at j_1, vectorizes with its block's limits; a spatial block
    # is not unrolled.
    assert kinds(sch, copy_out) == [("serial", 8), ("vectorized", 16)]
    assert no_annotations_left(sch)
    assert_equivalent(sch)


def unrolled_loops(sch):
    return {lp.name for name in analysis.blocks(sch) for lp in analysis.block(sch, sch.get_block(name)).loops
            if lp.kind == "unrolled"}


def test_the_unroll_chain_stops_where_the_code_would_grow_past_the_verifiers_limit():
    whole = rewrite(tiled_matmul(512)[0], RewriteParallelVectorizeUnroll(max_unrolled_work=10**9))
    assert unrolled_loops(whole) == {"k_0", "i_2", "j_2", "k_1", "i_3"}
    work = unrolled_work(whole.lower())
    # Just below the work of the whole chain, its last loop (k_0, 16 copies of the rest) is left.
    sch = rewrite(tiled_matmul(512)[0], RewriteParallelVectorizeUnroll(max_unrolled_work=work - 1))
    assert unrolled_loops(sch) == {"i_2", "j_2", "k_1", "i_3"}
    assert unrolled_work(sch.lower()) <= work - 1
    assert VerifyKernel(max_unrolled_work=work - 1).reason(sch) is None
    assert VerifyKernel(max_unrolled_work=work - 1).reason(whole).startswith(f"its unrolled loops make {work}")
    assert_equivalent(sch)
    assert RewriteParallelVectorizeUnroll().max_unrolled_work == VerifyKernel().max_unrolled_work == MAX_UNROLLED_WORK


@pytest.mark.parametrize("limit", [MAX_UNROLLED_WORK, 3_000])
def test_the_rewrite_never_makes_code_the_verifier_rejects_for_its_size(limit):
    """Samples of the default space for a small convolution (its inlined padding makes a large
    body to unroll) with the verifier's limit, and with a tight one: where the rewrite unrolls
    some loop, the program stays within the limit. (Where it unrolls none, it made nothing the
    limit is about.)"""
    wl = workloads.get("conv2d_bias_relu", **SMALL_PARAMS["conv2d_bias_relu"])
    space = PostOrderApply(rules=cpu_default().rules,
                           postprocs=[RewriteParallelVectorizeUnroll(max_unrolled_work=limit)])
    verify = VerifyKernel(max_unrolled_work=limit)
    unrolling = 0
    for seed in range(80):
        sch = space.sample(wl, seed)
        if unrolled_loops(sch):
            unrolling += 1
            assert unrolled_work(sch.lower()) <= limit
            reason = verify.reason(sch)
            assert reason is None or "unrolled" not in reason
    assert unrolling >= 20  # the sampled depths still unroll


def test_the_vector_loop_takes_in_outer_loops_only_while_every_access_stays_linear():
    sch, b, _ = tiled_matmul(0)
    rewrite(sch)
    # C_local[i_3, j_3] is contiguous over i_3 and j_3 (32 lanes would fit), but A[i, k] would
    # become a gather over their fusion: only j_3 is vectorized.
    assert analysis.block(sch, b).loops[-2].kind == "serial"
    sch = Schedule(workloads.get("transpose_add", M=4, N=8))
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    sch.split(j, [2, 4])
    annotate(sch, c, vectorize=64)  # without a parallel limit, no fuse-split form
    rewrite(sch)
    # C[i, j] is contiguous over all three loops, B[j, i] strided over j_0 and j_1 only.
    assert kinds(sch, c) == [("serial", 4), ("vectorized", 8)]
    assert_equivalent(sch)


def test_partial_blocks_take_the_annotations_of_their_consumer():
    sch = Schedule(workloads.get("reduce_cols", M=64, N=40))
    s = sch.get_block("S")
    j, i = sch.get_loops(s)
    i0, i1 = sch.split(i, [4, None])
    partial = sch.rfactor(i0, 0)
    p_i0, p_j, p_i1 = sch.get_loops(partial)
    sch.reorder(p_i0, p_i1, p_j)
    annotate(sch, s, parallel=16, vectorize=64, unroll=16)
    rewrite(sch)
    assert kinds(sch, partial) == [("parallel", 4), ("unrolled", 16), ("vectorized", 40)]
    assert kinds(sch, s) == [("parallel", 40), ("unrolled", 4)]
    assert no_annotations_left(sch)
    assert_equivalent(sch)


def test_a_block_contiguous_throughout_is_fused_split_parallel_and_vectorized():
    sch = Schedule(workloads.get("transpose_add", M=12, N=16))
    c = sch.get_block("C")
    annotate(sch, c, parallel=4, vectorize=16)
    rewrite(sch)
    assert kinds(sch, c) == [("parallel", 12), ("vectorized", 16)]
    assert_equivalent(sch)


def test_loops_that_cannot_change_kind_are_left_alone():
    sch = Schedule(workloads.get("transpose_add", M=12, N=16))
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    sch.reorder(j, i)  # the store C[i, j] is strided in the innermost loop now
    sch.annotate(j, "pragma", 1)  # an annotated loop is not fused into the parallel loop
    annotate(sch, c, parallel=4, vectorize=16, unroll=512)
    rewrite(sch)
    assert kinds(sch, c) == [("serial", 16), ("serial", 12)]
    assert_equivalent(sch)


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_every_builtin_workload(name):
    """Outputs annotated (the other blocks inherit), rewritten, verified, compared."""
    sch = Schedule(workloads.get(name, **SMALL_PARAMS[name]))
    for block in analysis.blocks(sch):
        rv = sch.get_block(block)
        if analysis.block(sch, rv).is_output:
            annotate(sch, rv, parallel=8, vectorize=8, unroll=16)
    rewrite(sch)
    assert no_annotations_left(sch)
    assert any(loop.kind != "serial" for block in analysis.blocks(sch)
               for loop in analysis.block(sch, sch.get_block(block)).loops)
    assert VerifyKernel().reason(sch) is None
    assert_equivalent(sch)


@given(st.data())
def test_the_rewrite_never_fails_and_never_vectorizes_a_loop_that_falls_back(data):
    name = data.draw(st.sampled_from(sorted(SMALL_PARAMS)))
    sch = data.draw(schedules(workloads.get(name, **SMALL_PARAMS[name]), max_steps=10))
    limits = data.draw(st.tuples(st.sampled_from([0, 4, 96]), st.sampled_from([0, 4, 64]),
                                 st.sampled_from([0, 16, 512])))
    for block in analysis.blocks(sch):
        rv = sch.get_block(block)
        if analysis.block(sch, rv).attached_to is None and data.draw(st.booleans()):
            annotate(sch, rv, *limits)
    fell_back = vector_fallback(sch.lower())
    rewrite(sch)
    assert no_annotations_left(sch)
    if fell_back is None:
        assert vector_fallback(sch.lower()) is None
    if VerifyKernel().reason(sch) is None:
        assert_equivalent(sch)


@given(st.data())
def test_the_quick_vectorize_check_never_says_yes_where_the_predicate_finds_a_reason(data):
    """``plainly_vectorizes`` answers most questions without flattening offsets; where it says
    a loop vectorizes, the full predicate (codegen's) must find nothing against it."""
    name = data.draw(st.sampled_from(sorted(SMALL_PARAMS)))
    wl = workloads.get(name, **SMALL_PARAMS[name])
    if data.draw(st.booleans()):
        sch = data.draw(schedules(wl, max_steps=10))
    else:
        try:
            sch = cpu_default().sample(wl, data.draw(st.integers(0, 2**32)))
        except ScheduleError:
            return
    func = sch.lower()
    for stmt, scope, _ in walk(func.body, params(func)):
        if isinstance(stmt, For) and plainly_vectorizes(stmt, scope):
            assert vectorizable.vector_fallback_reason(stmt, scope.__getitem__) is None


def sampled_program(data):
    """The program of a random schedule or of a sample of ``cpu_default()`` (None if refused)."""
    name = data.draw(st.sampled_from(sorted(SMALL_PARAMS)))
    wl = workloads.get(name, **SMALL_PARAMS[name])
    if data.draw(st.booleans()):
        return data.draw(schedules(wl, max_steps=10)).lower()
    try:
        return cpu_default().sample(wl, data.draw(st.integers(0, 2**32))).lower()
    except ScheduleError:
        return None


@given(st.data())
def test_node_counts_remembered_by_binary_nodes_are_the_nodes_of_the_tree(data):
    """``UnrolledWork`` counts nodes with ``node_count``, which binary nodes remember as they
    remember their hash: it must count every node of the tree, a shared one each time."""
    func = sampled_program(data)
    if func is None:
        return
    for stmt, _, _ in walk(func.body, params(func)):
        for e in exprs(stmt):
            assert node_count(e) == sum(1 for _ in walk_expr(e))
            copy = pickle.loads(pickle.dumps(e))
            assert copy == e and hash(copy) == hash(e) and node_count(copy) == node_count(e)


@given(st.data())
def test_the_running_unroll_count_is_the_unrolled_work(data):
    """The rewrite builds its unroll chains with ``UnrolledWork.unrolling``: one loop at a time,
    it must count what ``total`` counts of the program with those loops unrolled."""
    func = sampled_program(data)
    if func is None:
        return
    work = UnrolledWork.of(func)
    names = sorted({name for _, _, loops in work.statements for name, _, _ in loops})
    running, unrolled = work.unrolling(), set()
    assert running.total == work.total()
    for name in data.draw(st.lists(st.sampled_from(names), max_size=6)) if names else ():
        assert running.total_with(name) == work.total(unrolled | {name})
        running.unroll(name)
        unrolled.add(name)
        assert running.total == work.total(unrolled)


@given(st.data())
def test_the_checks_read_the_program_as_lowered_with_the_kinds_changed_since(data):
    """The verifier reads a program as lowered, with the loop kinds changed since
    (``Lowered.changed``): it must find what it finds in that program made anew."""
    func = sampled_program(data)
    if func is None:
        return
    loops = sorted({stmt.var for stmt, _, _ in walk(func.body, params(func)) if isinstance(stmt, For)})
    kinds = data.draw(st.dictionaries(st.sampled_from(loops), st.sampled_from(list(ForKind)), max_size=4)) \
        if loops else {}
    changed, made = Lowered(func).changed(kinds), with_kinds(func, kinds)
    assert changed.func == made
    assert changed.unrolled_work().total() == unrolled_work(made)
    assert _vector_fallback(changed) == vector_fallback(made)
    assert _parallel_race(changed) == parallel_race(made)
    for stmt, _, _ in walk(made.body, params(made)):
        if isinstance(stmt, Store):
            assert loads(stmt.value) == [e for e in walk_expr(stmt.value) if isinstance(e, Load)]


# -- VerifyKernel -----------------------------------------------------------------------------
def test_codegen_and_the_verifier_share_one_vectorize_predicate():
    assert vector.vector_fallback_reason is vectorizable.vector_fallback_reason
    assert vector.lane_limit is vectorizable.lane_limit  # the chunk width UnrolledWork counts


def small_matmul():
    sch = Schedule(workloads.get("matmul", M=8, N=12, K=4))
    return sch, sch.get_block("C")


def test_a_vectorized_loop_holding_loops_is_rejected_and_really_runs_serially():
    sch, c = small_matmul()
    i, _, _ = sch.get_loops(c)
    sch.vectorize(i)
    assert "vectorized loop i would run serially: the body contains a loop" in VerifyKernel().reason(sch)
    assert "x float>" not in build(sch).llvm_ir  # no vector type in the emitted code
    sch, c = small_matmul()
    i, j, k = sch.get_loops(c)
    sch.reorder(i, k, j)
    sch.vectorize(j)
    assert VerifyKernel().reason(sch) is None
    assert "x float>" in build(sch).llvm_ir


def test_a_vectorized_loop_whose_lanes_store_non_linearly_is_rejected():
    sch, c = small_matmul()
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [2, 4])
    j0, j1 = sch.split(j, [3, 4])
    sch.reorder(i0, j0, k, i1, j1)
    sch.vectorize(sch.fuse(i1, j1))  # C[i0 * 4 + f // 4, j0 * 4 + f % 4]: rows of 4 lanes
    assert "lanes may store to one element of C" in VerifyKernel().reason(sch)
    assert_equivalent(sch)  # still right, as a serial loop


def test_too_much_unrolled_code_is_rejected():
    sch = Schedule(workloads.get("matmul", M=32, N=32, K=128))
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [2, 16])
    sch.reorder(i, j0, k, j1)
    sch.unroll(k)
    sch.vectorize(j1)
    assert VerifyKernel().reason(sch) is None  # 128 copies of the update
    i0, i1 = sch.split(i, [1, 32])
    sch.unroll(i1)
    work = unrolled_work(sch.lower())
    assert work > 60_000
    assert VerifyKernel().reason(sch).startswith(f"its unrolled loops make {work} expression nodes")
    assert VerifyKernel(max_unrolled_work=work).reason(sch) is None


def test_unrolled_work_counts_each_copy_of_each_node():
    a, c = Buffer("A", (4, 8), "float32"), Buffer("C", (4, 8), "float32")
    i, j = Var("i"), Var("j")
    store = Store("C", (i, j), Load("A", (i, j)) + FloatImm(1.0))  # 2 + 5 nodes
    body = For("i", 4, ForKind.UNROLLED, For("j", 8, ForKind.UNROLLED, store))
    assert unrolled_work(PrimFunc("f", (a,), (c,), (), body)) == 7 * 32
    body = For("i", 4, ForKind.UNROLLED, For("j", 7, ForKind.VECTORIZED, store))  # chunks 4, 2, 1
    assert unrolled_work(PrimFunc("f", (a,), (c,), (), body)) == 7 * 4 * 3
    # The rewrite asks what the work would be with more loops unrolled: the same count.
    serial = PrimFunc("f", (a,), (c,), (), For("i", 4, ForKind.SERIAL, For("j", 7, ForKind.VECTORIZED, store)))
    assert UnrolledWork.of(serial).total() == 7 * 3
    unrolled = with_kinds(serial, {"i": ForKind.UNROLLED})
    assert UnrolledWork.of(serial).total({"i"}) == unrolled_work(unrolled) == 7 * 4 * 3


@pytest.mark.parametrize("dtype, extent, plan", [
    ("float32", 16, (1, ())), ("float32", 64, (4, ())), ("float32", 40, (2, (8,))), ("float32", 28, (1, (8, 4))),
    ("float32", 7, (0, (4, 2, 1))), ("float64", 64, (8, ())), ("float64", 20, (2, (4,))),
])
def test_unrolled_work_counts_the_vector_chunks_code_generation_emits_without_avx512(dtype, extent, plan):
    """A vectorized loop is emitted in chunks of 16 float32 lanes or 8 float64 ones (a loop over
    them, which LLVM unrolls), then the lanes left in power-of-two chunks (with AVX-512: one
    chunk, which the count leaves aside): one copy of the body each."""
    a, c = Buffer("A", (4, extent), dtype), Buffer("C", (4, extent), dtype)
    i, j = Var("i"), Var("j")
    store = Store("C", (i, j), Load("A", (i, j), dtype) * Load("A", (i, j), dtype))  # 2 + 7 nodes
    body = For("i", 4, ForKind.UNROLLED, For("j", extent, ForKind.VECTORIZED, store))
    assert chunk_plan(extent, lane_limit(body.body), whole_rest=False) == plan
    full, rests = plan
    assert unrolled_work(PrimFunc("f", (a,), (c,), (), body)) == 9 * 4 * (full + len(rests))


@pytest.mark.parametrize("extent, plan", [(16, (1, ())), (28, (1, (12,))), (17, (1, (1,))), (7, (0, (7,)))])
def test_chunk_plan_with_the_whole_rest(extent, plan):
    assert chunk_plan(extent, 16, whole_rest=True) == plan


def reversed_parallel(stmt):
    """``stmt`` with each parallel loop run serially in reverse order: one of the orders a
    parallel loop may run in, so a race-free program gives the same result."""
    if isinstance(stmt, For):
        body = reversed_parallel(stmt.body)
        if stmt.kind is not ForKind.PARALLEL:
            return dataclasses.replace(stmt, body=body)
        backwards = {stmt.var: IntImm(stmt.extent - 1) - Var(stmt.var)}
        return For(stmt.var, stmt.extent, ForKind.SERIAL, substituted(body, backwards), stmt.annotations)
    if isinstance(stmt, Seq):
        return Seq(tuple(reversed_parallel(s) for s in stmt.stmts))
    if isinstance(stmt, IfThenElse):
        return IfThenElse(stmt.cond, reversed_parallel(stmt.then_body),
                          None if stmt.else_body is None else reversed_parallel(stmt.else_body))
    if hasattr(stmt, "body"):
        return dataclasses.replace(stmt, body=reversed_parallel(stmt.body))
    return stmt


def substituted(stmt, mapping):
    if isinstance(stmt, Store):
        return Store(stmt.buffer, tuple(substitute(i, mapping) for i in stmt.indices),
                     substitute(stmt.value, mapping))
    if isinstance(stmt, Seq):
        return Seq(tuple(substituted(s, mapping) for s in stmt.stmts))
    if isinstance(stmt, IfThenElse):
        return IfThenElse(substitute(stmt.cond, mapping), substituted(stmt.then_body, mapping),
                          None if stmt.else_body is None else substituted(stmt.else_body, mapping))
    return dataclasses.replace(stmt, body=substituted(stmt.body, mapping))


def widened(stmt, var, buffer, old, new):
    """``stmt`` with loop ``var`` and the last dimension of ``buffer`` ``new`` long, not ``old``."""
    if isinstance(stmt, For):
        extent = new if stmt.var == var and stmt.extent == old else stmt.extent
        return dataclasses.replace(stmt, extent=extent, body=widened(stmt.body, var, buffer, old, new))
    if isinstance(stmt, Seq):
        return Seq(tuple(widened(s, var, buffer, old, new) for s in stmt.stmts))
    if isinstance(stmt, IfThenElse):
        return dataclasses.replace(stmt, then_body=widened(stmt.then_body, var, buffer, old, new))
    if hasattr(stmt, "buffer") and hasattr(stmt, "body"):  # Allocate
        shape = stmt.buffer.shape
        if stmt.buffer.name == buffer and shape[-1] == old:
            stmt = dataclasses.replace(stmt, buffer=dataclasses.replace(stmt.buffer, shape=shape[:-1] + (new,)))
        return dataclasses.replace(stmt, body=widened(stmt.body, var, buffer, old, new))
    return stmt


def test_a_racing_parallel_schedule_is_rejected_and_really_depends_on_the_order():
    """One iteration of j_0 completes 3 * 205 = 615 columns of Y: the guard of the
    overshooting split of j_2 (35 * 6 = 210 > 205) leaves 5 of the 620 its loops run
    unwritten. reverse_compute_at copies those 615 (it once took 620), and the schedule
    passes. The program it once made, whose copy-out writes 5 columns of Z from garbage that
    the next iteration writes again, right: serially the right values come last, run
    backwards (a legal order of parallel iterations) the garbage does; it is rejected."""
    wl = workloads.get("dense_bias_relu", M=2, K=3, N=3072)
    sch = Schedule(wl)
    y = sch.get_block("Y")
    i, j, k = sch.get_loops(y)
    j0, j1, j2 = sch.split(j, [5, 3, 205])
    sch.split(j2, [35, 6])
    sch.reverse_compute_at(sch.get_block("Z"), j0)
    sch.parallel(j0)
    assert VerifyKernel().reason(sch) is None
    func = sch.lower()
    inputs = wl.random_inputs(0)
    backwards = build(dataclasses.replace(func, body=reversed_parallel(func.body)), SERIAL)
    assert_outputs_close(wl, backwards(*inputs), wl.reference(*inputs))

    racing = dataclasses.replace(func, body=widened(func.body, "j1", "Y", 615, 620))
    assert "for j1 in range(620):" in str(racing) and "Y = allocate([1, 620], 'float32')" in str(racing)
    assert parallel_race(racing) == ("parallel loop j_0: two of its iterations may access one "
                                     "element of Z, one of them storing to it")
    assert_outputs_close(wl, build(racing, SERIAL)(*inputs), wl.reference(*inputs))
    backwards = build(dataclasses.replace(racing, body=reversed_parallel(racing.body)), SERIAL)
    with pytest.raises(AssertionError):
        assert_outputs_close(wl, backwards(*inputs), wl.reference(*inputs))


def parallel_store(extent, indices, shape=(8, 8)):
    """``for f in parallel(extent): C[indices] = A[indices]`` over ``C`` of ``shape``."""
    c, a = Buffer("C", shape, "float32"), Buffer("A", shape, "float32")
    body = For("f", extent, ForKind.PARALLEL, Store("C", indices, Load("A", indices)))
    return PrimFunc("f", (a,), (c,), (), body)


f = Var("f")


@pytest.mark.parametrize("extent, indices", [
    (64, (f // 8, f % 8)),  # a fused parallel loop
    (32, (f // 4, f % 8)),  # f // 4 and f % 8 together tell f
    (16, (f // 8 * 4 + f // 2 % 4, f % 2 * 4)),  # three fused loops, two digits in one index
    (8, (f, IntImm(3))),
])
def test_iterations_that_own_their_elements_do_not_race(extent, indices):
    assert parallel_race(parallel_store(extent, indices)) is None


@pytest.mark.parametrize("extent, indices", [
    (32, (f // 8, f % 4)),  # f and f + 4 store to one element
    (8, (IntImm(0), f % 4)),
    (8, (f // 2, IntImm(0))),
])
def test_iterations_that_share_an_element_race(extent, indices):
    assert "two of its iterations may access one element of C" in parallel_race(parallel_store(extent, indices))


def test_reading_what_another_iteration_stores_is_a_race():
    b, c = Buffer("B", (9,), "float32"), Buffer("C", (8,), "float32")
    i = Var("i")
    body = For("i", 8, ForKind.PARALLEL, Seq((Store("B", (i,), FloatImm(1.0)),
                                              Store("C", (i,), Load("B", (i + 1,))))))
    assert "element of B" in parallel_race(PrimFunc("f", (), (b, c), (), body))
    body = For("i", 8, ForKind.PARALLEL, Seq((Store("B", (i,), FloatImm(1.0)),
                                              Store("C", (i,), Load("B", (i,))))))
    assert parallel_race(PrimFunc("f", (), (b, c), (), body)) is None


GOOD = [
    lambda: handwritten.cached_matmul(workloads.get("matmul", M=20, N=70, K=13)),
    lambda: handwritten.cached_matmul(workloads.get("dense_bias_relu", M=10, K=7, N=40), block="Y", epilogue="Z"),
    lambda: handwritten.streamed_column_sum(workloads.get("reduce_cols", M=29, N=100), columns=48),
    lambda: handwritten.rfactor_column_sum(workloads.get("reduce_cols", M=29, N=100)),
    lambda: handwritten.tiled_conv2d(workloads.get("conv2d_bias_relu", C=3, H=7, W=11, F=12)),
    lambda: handwritten.tiled_transpose(workloads.get("transpose_add", M=37, N=21)),
] + [lambda seed=seed: handwritten.sampled_matmul(workloads.get("matmul_relu", M=24, N=40, K=12), seed=seed,
                                                  epilogue="D") for seed in range(4)]


@pytest.mark.parametrize("make", GOOD)
def test_good_schedules_pass(make):
    sch = make()
    assert VerifyKernel().reason(sch) is None
    assert VerifyKernel().apply(sch)


def test_a_rejection_says_why_through_the_space_generator():
    sch, c = small_matmul()
    sch.vectorize(sch.get_loops(c)[0])
    with pytest.raises(ScheduleError, match=r"postprocessor VerifyKernel\(max_unrolled_work=60000\) rejected the "
                                            r"program: vectorized loop i would run serially"):
        PostOrderApply(postprocs=[VerifyKernel()]).postprocess(sch)


# -- one lowering, shared ---------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_the_program_the_postprocessors_share_is_the_one_the_schedule_lowers_to(name):
    """The rewrite hands the verifier the program it lowered, with the loop kinds it changed
    since: it must be what ``sch.lower()`` gives (and what code generation compiles)."""
    wl = workloads.get(name, **SMALL_PARAMS[name])
    space = PostOrderApply(rules=cpu_default().rules, postprocs=[RewriteParallelVectorizeUnroll()])
    for seed in range(12):
        sch = space.sample(wl, seed)
        shared, fresh = lowered(sch).func, sch.lower()
        assert shared == fresh and str(shared) == str(fresh)


def test_a_sample_is_lowered_once_unless_its_vector_runs_fuse_loops(monkeypatch):
    lowerings = []
    lower = Schedule.lower
    monkeypatch.setattr(Schedule, "lower", lambda sch: lowerings.append(sch) or lower(sch))
    space, wl = cpu_default(), workloads.get("matmul_relu", M=64, N=64, K=64)
    counts = []
    for seed in range(30):
        lowerings.clear()
        try:
            space.sample(wl, seed)
        except ScheduleError:
            pass
        counts.append(len(lowerings))
    assert max(counts) <= 2 and counts.count(1) >= 20
