"""Per-store features: the table, hand-computed values on tiny programs, and real programs of
the default space (finite, deterministic, sensitive to tile sizes)."""
import numpy as np
import pytest
from conftest import SMALL_PARAMS

from metasched import ScheduleError, workloads
from metasched.ir import (
    Allocate, BinOp, Buffer, FloatImm, For, ForKind, IfThenElse, IntImm, Load, PrimFunc, Select,
    Seq, Store, Var, seq,
)
from metasched.ir.access import sub_stmts
from metasched.schedule import replay
from metasched.search.cost_model import program_features
from metasched.search import features
from metasched.search.features import (
    DEFAULT_CACHE_BYTES, FEATURE_NAMES, FEATURE_VERSION, FEATURES, READ_SLOTS, batch_per_store_features,
    host_cache_bytes, per_store_features,
)
from metasched.space import cpu_default

S, P, V, U = ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED
SIX = {"matmul_relu": dict(M=512, N=512, K=512), "conv2d_bias_relu": {}, "softmax": {},
       "reduce_cols": {}, "dense_bias_relu": {}, "batch_matmul": {}}


# -- terse builders -------------------------------------------------------------------------
def buf(name, *shape):
    return Buffer(name, tuple(shape), "float32")


def ix(i):
    return IntImm(i) if isinstance(i, int) else Var(i) if isinstance(i, str) else i


def ld(b, *indices):
    return Load(b.name, tuple(ix(i) for i in indices), b.dtype)


def st(b, indices, value):
    return Store(b.name, tuple(ix(i) for i in indices), value)


def loop(var, extent, kind, *body):
    return For(var, extent, kind, seq(*body))


def fn(inputs, outputs, body):
    return PrimFunc("f", tuple(inputs), tuple(outputs), (), body)


def log(x):
    return np.float32(np.log2(1.0 + x))


def col(table, name):
    return table[:, FEATURE_NAMES.index(name)]


def sample(name, seed, **params):
    return cpu_default().sample(workloads.get(name, **params), seed)


def stores(func):
    count, stack = 0, [func.body]
    while stack:
        s = stack.pop()
        if isinstance(s, Store):
            count += 1
        elif isinstance(s, (For, Allocate)):
            stack.append(s.body)
        elif isinstance(s, IfThenElse):
            stack.extend(b for b in (s.then_body, s.else_body) if b is not None)
        elif isinstance(s, Seq):
            stack.extend(s.stmts)
    return count


A8x16, B8x16 = buf("A", 8, 16), buf("B", 8, 16)


def scale_by_two(outer=S):
    """for i in outer(8): for j in vectorized(16): B[i, j] = A[i, j] * 2.0"""
    body = st(B8x16, ("i", "j"), BinOp("*", ld(A8x16, "i", "j"), FloatImm(2.0)))
    return fn([A8x16], [B8x16], loop("i", 8, outer, loop("j", 16, V, body)))


def matmul_update(outer="i", inner="j"):
    """for outer: for inner: for k in unrolled(16): C[i, j] += A[i, k] * B[k, j], with
    A 4x16, B 16x8, C 4x8 (float32)."""
    a, b, c = buf("A", 4, 16), buf("B", 16, 8), buf("C", 4, 8)
    update = st(c, ("i", "j"), BinOp("+", ld(c, "i", "j"),
                                     BinOp("*", ld(a, "i", "k"), ld(b, "k", "j"))))
    extents = {"i": 4, "j": 8}
    return fn([a, b], [c], loop(outer, extents[outer], S,
                                loop(inner, extents[inner], S, loop("k", 16, U, update))))


# -- the table ------------------------------------------------------------------------------
def test_table_names_descriptions_and_version():
    assert isinstance(FEATURE_VERSION, int) and FEATURE_VERSION >= 1
    assert len(FEATURE_NAMES) == len(FEATURES) == len(set(FEATURE_NAMES))
    assert FEATURE_NAMES == tuple(name for name, _ in FEATURES)
    assert all(name.isidentifier() and text.strip() for name, text in FEATURES)
    assert 40 <= len(FEATURES) <= 90


def test_shape_and_dtype():
    func = sample("matmul_relu", 0, M=64, N=64, K=64).lower()
    table = per_store_features(func)
    assert table.dtype == np.float32
    stores = [s.buffer for s in sub_stmts(func.body) if isinstance(s, Store)]
    assert stores == ["B_global", "C_local", "C_local", "D"]  # the packed panel, init, update, epilogue
    assert table.shape == (len(stores), len(FEATURES))


# -- hand-computed values ---------------------------------------------------------------------
def test_vectorized_scale_by_two():
    table = per_store_features(scale_by_two())
    assert table.shape == (1, len(FEATURES))
    expected = {
        "float_mul": log(128), "float_add_sub": 0, "int_add_sub": 0,
        "flops_per_iter": log(1), "flops": log(128),
        "loops": log(2), "iterations": log(128), "innermost_extent": log(16),
        "innermost_vectorized": 1, "innermost_serial": 0, "vector_lanes": log(16),
        "in_parallel": 0, "parallel_extent": 0,
        # B and A alike: one iteration of i touches a row, 64 contiguous bytes.
        "w_read_write": 0, "w_bytes": log(512), "w_unique_bytes": log(64),
        "w_unique_lines": log(1), "w_stride": log(1), "w_repeat": log(1), "w_reuse": log(1),
        "w_reuse_iters": 0, "w_local": 0, "w_buffer_bytes": log(512),
        "r1_bytes": log(512), "r1_unique_bytes": log(64), "r1_stride": log(1),
        "r2_bytes": 0, "r2_stride": 0,
        "intensity": log(128 / 1024), "intensity_inner": log(16 / 128),
        "outer_iter_bytes": log(128), "program_stores": log(1), "program_iterations": log(128),
    }
    for name, value in expected.items():
        assert col(table, name)[0] == pytest.approx(value, rel=1e-6, abs=1e-6), name


def test_transposed_read_has_the_row_stride():
    a = buf("A", 16, 8)
    body = st(B8x16, ("i", "j"), ld(a, "j", "i"))
    table = per_store_features(fn([a], [B8x16], loop("i", 8, S, loop("j", 16, S, body))))
    assert col(table, "w_stride")[0] == log(1)
    assert col(table, "r1_stride")[0] == log(8)
    # One iteration of i reads a column of A: 16 elements, each on its own cache line.
    assert col(table, "r1_unique_bytes")[0] == log(64)
    assert col(table, "r1_unique_lines")[0] == log(16)
    assert col(table, "w_unique_lines")[0] == log(1)
    assert col(table, "innermost_serial")[0] == 1


def test_broadcast_read_is_reused_by_the_inner_loop():
    body = st(B8x16, ("i", "j"), ld(A8x16, "i", 0))
    table = per_store_features(fn([A8x16], [B8x16], loop("i", 8, S, loop("j", 16, S, body))))
    assert col(table, "r1_stride")[0] == log(16)  # moved by i, one row of A per step
    assert col(table, "r1_repeat")[0] == log(16)
    assert col(table, "r1_reuse")[0] == log(16)
    assert col(table, "r1_reuse_iters")[0] == log(1)
    assert col(table, "r1_reuse_bytes")[0] == log(8)  # one iteration: 4 bytes of A and of B
    assert col(table, "r1_unique_bytes")[0] == log(4)  # one element per iteration of i


def test_matmul_update_counts_multiply_adds_and_reuse():
    table = per_store_features(matmul_update())
    assert col(table, "float_mul")[0] == log(512) == col(table, "float_add_sub")[0]
    assert col(table, "flops")[0] == log(1024)
    assert col(table, "innermost_unrolled")[0] == 1
    assert col(table, "unrolled_prod")[0] == log(16)
    # C is read and written, reused by k: 16 consecutive iterations on one element.
    assert col(table, "w_read_write")[0] == 1
    assert col(table, "w_bytes")[0] == log(512 * 4)
    assert col(table, "w_reuse")[0] == log(16) and col(table, "w_repeat")[0] == log(16)
    assert col(table, "w_reuse_extent")[0] == log(16)  # k: 16 updates in a row
    assert col(table, "w_stride")[0] == log(1)
    # Reads, biggest region per iteration of i first: all of B (512 bytes, 8 lines), then a
    # row of A (64 bytes).
    assert col(table, "r1_unique_bytes")[0] == log(512)
    assert col(table, "r1_unique_lines")[0] == log(8)
    assert col(table, "r1_stride")[0] == log(8)  # k walks down a column of B
    assert col(table, "r2_unique_bytes")[0] == log(64)
    assert col(table, "r2_stride")[0] == log(1)
    # A is reused across j; between reuses k runs 16 times over 4 + 64 + 64 bytes.
    assert col(table, "r2_reuse")[0] == log(8)
    assert col(table, "r2_reuse_iters")[0] == log(16)
    assert col(table, "r2_reuse_extent")[0] == log(8)  # j: A's row read 8 times in a row
    assert col(table, "r2_reuse_bytes")[0] == log(4 + 64 + 64)


def square_matmul(n, tile=None):
    """C[i, j] += A[i, k] * B[k, j], all n x n float32, loops i, j, k; with ``tile``, j is
    split into jo and ji (``tile`` wide) and the loops run i, jo, k, ji."""
    a, b, c = buf("A", n, n), buf("B", n, n), buf("C", n, n)
    j = "j" if tile is None else BinOp("+", BinOp("*", Var("jo"), IntImm(tile)), Var("ji"))
    update = st(c, ("i", j), BinOp("+", ld(c, "i", j), BinOp("*", ld(a, "i", "k"), ld(b, "k", j))))
    if tile is None:
        nest = loop("i", n, S, loop("j", n, S, loop("k", n, S, update)))
    else:
        nest = loop("i", n, S, loop("jo", n // tile, S, loop("k", n, S, loop("ji", tile, S, update))))
    return fn([a, b], [c], nest)


def test_cache_intensities_read_the_outermost_level_that_fits(monkeypatch):
    """128 x 128 x 128, untiled: the k loop touches one element of C, a row of A and a column
    of B (4 + 512 + 512 bytes); the j loop all of B (64 KiB), over an L1 of 32 KiB; the whole
    nest 192 KiB, within an L2 of 512 KiB. So L1 sees 256 flops over 1028 bytes and L2 the
    whole nest. (The sizes are this machine's otherwise.)"""
    monkeypatch.setattr(features, "L1_BYTES", 32 * 1024)
    monkeypatch.setattr(features, "L2_BYTES", 512 * 1024)
    table = per_store_features(square_matmul(128))
    assert col(table, "intensity_l1")[0] == pytest.approx(log(256 / 1028), rel=1e-6)
    assert col(table, "intensity_l2")[0] == pytest.approx(log(2 * 128 ** 3 / (3 * 65536)), rel=1e-6)
    # Splitting j by 16 and moving k out of it: the k loop now touches a 16-wide row of C,
    # a row of A and a 128 x 16 panel of B (64 + 512 + 8192 bytes), which fits L1 and does
    # sixteen times the work: more flops per byte from L1, the same nest for L2.
    tiled = per_store_features(square_matmul(128, tile=16))
    assert col(tiled, "intensity_l1")[0] == pytest.approx(log(2 * 128 * 16 / (64 + 512 + 8192)), rel=1e-6)
    assert col(tiled, "intensity_l1")[0] > col(table, "intensity_l1")[0]
    assert col(tiled, "intensity_l2")[0] == col(table, "intensity_l2")[0]


def test_a_larger_l1_moves_the_l1_level_out(monkeypatch):
    """The untiled matmul of the test above with an L1 of 96 KiB: the j loop's 64 KiB of B
    (plus a row of A and of C) now fit, so L1 sees the j loop's 128 x 256 flops."""
    monkeypatch.setattr(features, "L1_BYTES", 96 * 1024)
    table = per_store_features(square_matmul(128))
    assert col(table, "intensity_l1")[0] == pytest.approx(log(128 * 256 / (512 + 512 + 65536)), rel=1e-6)


def _cache_folder(root, caches):
    """A folder laid out like Linux's ``/sys/devices/system/cpu/cpu0/cache``."""
    for k, (level, kind, size) in enumerate(caches):
        index = root / f"index{k}"
        index.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(f"{value}\n")
    return str(root)


def test_host_cache_sizes_are_read_from_sysfs(tmp_path):
    folder = _cache_folder(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "64K"), (2, "Unified", "2048K"),
                                      (3, "Unified", "491520K")])
    assert host_cache_bytes(folder) == (48 * 1024, 2 * 1024 * 1024)


def test_host_cache_sizes_fall_back_where_sysfs_is_silent(tmp_path):
    assert host_cache_bytes(str(tmp_path / "missing")) == DEFAULT_CACHE_BYTES
    # An instruction cache is no data cache; an unreadable size is skipped; 1M is a size too.
    folder = _cache_folder(tmp_path, [(1, "Instruction", "32K"), (1, "Data", "?"), (2, "Unified", "1M")])
    assert host_cache_bytes(folder) == (DEFAULT_CACHE_BYTES[0], 1024 * 1024)


def test_the_features_use_this_machines_cache_sizes():
    assert (features.L1_BYTES, features.L2_BYTES) == host_cache_bytes()
    assert f"({features.L1_BYTES} bytes here)" in dict(FEATURES)["intensity_l1"]


def test_rolled_loop_is_the_innermost_serial_one():
    """The matmul update of the test above: j is the innermost rolled loop (k is unrolled).
    Along j, C and B move one element per step and A stays: LLVM may vectorize j."""
    table = per_store_features(matmul_update())
    assert col(table, "rolled_extent")[0] == log(8)
    assert col(table, "rolled_body")[0] == log(16)  # the unrolled copies of the update
    assert col(table, "rolled_unit_stride")[0] == 1
    assert col(table, "w_rolled_stride")[0] == log(1)
    assert col(table, "r1_rolled_stride")[0] == log(1)  # B, the biggest read
    assert col(table, "r2_rolled_stride")[0] == 0  # A does not move along j


def test_rolled_loop_across_rows_is_not_unit_stride():
    """With i innermost of the rolled loops, B and C move a row per step: no plain vector
    loads (the 106 ms programs of matmul_relu 512 that features version 2 ranked high)."""
    table = per_store_features(matmul_update("j", "i"))
    assert col(table, "rolled_extent")[0] == log(4)
    assert col(table, "rolled_unit_stride")[0] == 0
    assert col(table, "w_rolled_stride")[0] == log(8)
    # Reads, biggest region per iteration of j first: all of A, moved a row per step of i;
    # then a column of B, which i does not move.
    assert col(table, "r1_rolled_stride")[0] == log(16)
    assert col(table, "r2_rolled_stride")[0] == 0


def test_no_rolled_loop_without_a_serial_loop():
    table = per_store_features(scale_by_two(P))  # parallel i, vectorized j
    for name in ("rolled_extent", "rolled_body", "rolled_unit_stride", "w_rolled_stride",
                 "r1_rolled_stride"):
        assert col(table, name)[0] == 0, name
    table = per_store_features(scale_by_two(S))  # i is rolled, j vectorized inside it
    assert col(table, "rolled_extent")[0] == log(8) and col(table, "rolled_body")[0] == log(16)
    assert col(table, "rolled_unit_stride")[0] == 0  # A and B move a row of 16 per step of i
    assert col(table, "w_rolled_stride")[0] == log(16)


def test_parallel_outer_loop_sets_the_parallel_columns():
    serial, parallel = per_store_features(scale_by_two(S)), per_store_features(scale_by_two(P))
    assert col(serial, "in_parallel")[0] == 0 and col(parallel, "in_parallel")[0] == 1
    assert col(serial, "parallel_extent")[0] == 0 and col(parallel, "parallel_extent")[0] == log(8)
    assert col(parallel, "innermost_vectorized")[0] == 1


def test_nested_parallel_loop_runs_serially():
    """Code generation runs a parallel loop inside a parallel loop serially: the outer one
    gives the parallel extent."""
    body = st(B8x16, ("i", "j"), ld(A8x16, "i", "j"))
    table = per_store_features(fn([A8x16], [B8x16], loop("i", 8, P, loop("j", 16, P, body))))
    assert col(table, "parallel_extent")[0] == log(8)
    assert col(table, "innermost_parallel")[0] == 1


def test_allocated_buffer_is_local():
    t = buf("T", 16)
    fill = loop("j", 16, V, st(t, ("j",), BinOp("+", ld(A8x16, "i", "j"), FloatImm(1.0))))
    use = loop("j", 16, V, st(B8x16, ("i", "j"), BinOp("*", ld(t, "j"), ld(t, "j"))))
    table = per_store_features(fn([A8x16], [B8x16], loop("i", 8, S, Allocate(t, seq(fill, use)))))
    assert table.shape[0] == 2
    assert list(col(table, "w_local")) == [1, 0]
    assert list(col(table, "r1_local")) == [0, 1]
    assert list(col(table, "alloc_bytes")) == [log(64)] * 2
    assert list(col(table, "alloc_entries")) == [log(8)] * 2
    assert col(table, "r1_bytes")[1] == log(128 * 4)  # T[j] read twice is one access
    assert list(col(table, "program_stores")) == [log(2)] * 2
    assert list(col(table, "program_iterations")) == [log(256)] * 2


def test_guards_and_selects_are_counted():
    a, b = buf("A", 10), buf("B", 10)
    guarded = IfThenElse(BinOp("<", Var("i"), IntImm(7)), st(b, ("i",), ld(a, "i")))
    table = per_store_features(fn([a], [b], loop("i", 10, S, guarded)))
    assert col(table, "guards")[0] == log(1) and col(table, "int_cmp")[0] == log(10)
    padded = st(b, ("i",), Select(BinOp(">=", Var("i"), IntImm(1)),
                                 ld(a, BinOp("-", Var("i"), IntImm(1))), FloatImm(0.0)))
    table = per_store_features(fn([a], [b], loop("i", 10, S, padded)))
    assert col(table, "guards")[0] == 0
    assert col(table, "selects")[0] == log(10) and col(table, "int_cmp")[0] == log(10)
    assert col(table, "int_add_sub")[0] == log(10)


def test_loops_of_extent_one_are_ignored():
    body = st(B8x16, ("i", 0), ld(A8x16, "i", 0))
    table = per_store_features(fn([A8x16], [B8x16], loop("i", 8, S, loop("u", 1, V, body))))
    assert col(table, "loops")[0] == log(1)
    assert col(table, "innermost_serial")[0] == 1 and col(table, "vector_lanes")[0] == 0
    # With one loop, one iteration of the outermost loop is one element.
    assert col(table, "w_unique_bytes")[0] == log(4) and col(table, "w_unique_lines")[0] == log(1)


# -- real programs --------------------------------------------------------------------------
def test_deterministic():
    func = sample("conv2d_bias_relu", 1).lower()
    again = sample("conv2d_bias_relu", 1).lower()  # equal program, new objects
    first = per_store_features(func)
    np.testing.assert_array_equal(first, per_store_features(func))
    np.testing.assert_array_equal(first, per_store_features(again))


def test_batch_matches_single_programs():
    funcs = [sample("matmul_relu", seed, M=64, N=64, K=64).lower() for seed in range(3)]
    table, counts = batch_per_store_features(funcs)
    np.testing.assert_array_equal(table, np.concatenate([per_store_features(f) for f in funcs]))
    assert list(counts) == [stores(f) for f in funcs]


def test_other_tile_sizes_give_other_rows():
    wl = workloads.get("matmul_relu", M=512, N=512, K=512)
    space = cpu_default()
    sch = space.sample(wl, 0)
    trace = sch.trace
    index = next(i for i, inst in enumerate(trace.insts) if inst.kind == "SamplePerfectTile")
    factors = trace.decisions[index]
    assert factors != factors[::-1], "pick a seed whose first tiling is not a palindrome"
    other = space.postprocess(replay(wl, trace.with_decision(index, factors[::-1]),
                                     remove_postproc=True))
    base_rows, other_rows = per_store_features(sch.lower()), per_store_features(other.lower())
    assert base_rows.shape == other_rows.shape
    assert not np.array_equal(base_rows, other_rows)


@pytest.mark.parametrize("name", sorted(SIX))
def test_space_programs_give_finite_rows(name):
    funcs = []
    for params in (SIX[name], SMALL_PARAMS[name]):  # small sizes: imperfect splits, guards
        for seed in range(4):
            try:
                funcs.append(sample(name, seed, **params).lower())
            except ScheduleError:
                continue
    assert funcs
    for func in funcs:
        table = per_store_features(func)
        assert table.shape == (stores(func), len(FEATURES))
        assert np.isfinite(table).all()
        assert (table >= 0).all()


def test_read_slots_fill_in_order():
    """Layernorm's output store reads five buffers: each read slot is used, largest first."""
    func = sample("layernorm", 0).lower()
    table = per_store_features(func)
    last = table[-1]
    sizes = [last[FEATURE_NAMES.index(f"r{k}_bytes")] for k in range(1, READ_SLOTS + 1)]
    assert all(size > 0 for size in sizes)
    assert sizes == sorted(sizes, reverse=True)


def test_a_program_row_is_its_main_store_then_the_maximum_over_stores():
    wl = workloads.get("softmax", M=8, N=16)
    sch = cpu_default().sample(wl, np.random.default_rng(0))
    table = per_store_features(sch.lower())
    assert table.shape[0] > 2  # max, sum, exp, division: stores of different weight
    width = table.shape[1]
    row = program_features(sch)
    flops = col(table, "flops")
    assert np.array_equal(row[:width], table[int(np.argmax(flops))].astype(np.float32))
    assert flops[int(np.argmax(flops))] > min(flops)  # the main store is not just any store
    assert np.array_equal(row[width:2 * width], table.max(axis=0).astype(np.float32))
    assert row[-1] == np.float32(np.log2(1 + table.shape[0]))
