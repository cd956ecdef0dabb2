"""Hand-written schedules of built-in workloads.

They are the yardstick a search must beat, the demo of the README and the subject of the
benchmarks: ``tiled_matmul`` and ``tiled_transpose`` use loop primitives only
(``bench/loops.py``); the others add caches, compute locations and rfactor
(``bench/schedules.py``). Each takes a workload and returns a ``Schedule``.
"""
from __future__ import annotations

from typing import Optional

from metasched.lang.workload import Workload
from metasched.workloads import builtin
from metasched.schedule import LoopRV, Schedule
from metasched.schedule.annotations import (PARALLEL, PRAGMA_AUTO_UNROLL_MAX_STEP, PRAGMA_UNROLL_EXPLICIT,
                                         TILING_STRUCTURE, UNROLL_EXPLICIT, VECTORIZE)


def _split(sch: Schedule, loop: LoopRV, *inner: int) -> list[LoopRV]:
    """``sch.split(loop, [None, *inner])`` with each inner factor cut down to what the loop
    needs (``split`` refuses a factor that would run iterations doing nothing), so that one
    schedule fits every size of its workload."""
    extent = sch.get(loop).extent
    factors: list[int] = []
    inside = 1
    for factor in reversed(inner):
        factor = min(factor, -(-extent // inside))
        factors.insert(0, factor)
        inside *= factor
    return sch.split(loop, [None, *factors])


def _register_tiles(sch: Schedule, block: str, tile_i: int, tile_j: int, tile_k: int) -> tuple:
    """The loops of a matmul block as ``j_0, i_0, k_0, k_1, i_1, j_1``, ``i_1`` unrolled and
    ``j_1`` vectorized: a ``tile_k x tile_j`` panel of B stays in cache while rows of A stream
    past it, and each ``k`` updates a ``tile_i x tile_j`` tile with ``tile_i`` vector
    operations. Returns the block, its leading batch loops and ``j_0, i_0``."""
    b = sch.get_block(block)
    *batch, i, j, k = sch.get_loops(b)
    i0, i1 = _split(sch, i, tile_i)
    j0, j1 = _split(sch, j, tile_j)
    k0, k1 = _split(sch, k, tile_k)
    sch.reorder(j0, i0, k0, k1, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
    return b, batch, j0, i0


def tiled_matmul(workload: Workload, block: str = "C", tile_i: int = 8, tile_j: int = 32,
                 tile_k: int = 128, parallel: bool = True) -> Schedule:
    """A register-tiled matmul ``block[..., i, j] += A[..., i, k] * B[..., k, j]`` made of loop
    primitives only (see ``_register_tiles``): LLVM keeps the tile in registers across the
    ``k_1`` loop. Leading batch loops, if any, are fused into the parallel outer loop."""
    sch = Schedule(workload)
    _, batch, j0, _ = _register_tiles(sch, block, tile_i, tile_j, tile_k)
    outer = sch.fuse(*batch, j0) if batch else j0
    if parallel:
        sch.parallel(outer)
    return sch


def tiled_transpose(workload: Workload, block: str = "C", tile: int = 16, parallel: bool = True) -> Schedule:
    """An element-wise 2-D block that reads one input transposed, in ``tile x tile`` tiles so
    that every cache line of either input is used whole while it is in cache."""
    sch = Schedule(workload)
    b = sch.get_block(block)
    i, j = sch.get_loops(b)
    i0, i1 = _split(sch, i, tile)
    j0, j1 = _split(sch, j, tile)
    sch.reorder(i0, j0, i1, j1)
    sch.vectorize(j1)
    if parallel:
        sch.parallel(i0)
    return sch


def cached_matmul(workload: Workload, block: str = "C", epilogue: Optional[str] = None, tile_i: int = 8,
                  tile_j: int = 32, tile_k: int = 128, parallel: bool = True, pack: bool = True) -> Schedule:
    """Ansor's sketch for a matmul with an element-wise epilogue: the ``tiled_matmul`` loops,
    the tile accumulated in a ``local`` write cache (a ``tile_i x tile_j`` array under the tile
    loop), the epilogue block (e.g. a ReLU) folded into the cache's copy-out, and the copy-out
    computed right after each tile, so the result is written once, finished.

    ``pack``: each ``tile_j``-column panel of B (the block's second operand) is first copied
    into a contiguous buffer (a ``cache_read`` at the outer loop), as BLAS libraries pack it.
    Rows of B a multiple of 4 KiB apart map to the same L1 sets and evict one another while
    ``k_1`` walks down the panel; packed, they lie side by side (figures: bench/README.md,
    Design history)."""
    sch = Schedule(workload)
    b, batch, j0, i0 = _register_tiles(sch, block, tile_i, tile_j, tile_k)
    copy_out = sch.cache_write(b, 0, "local")
    if epilogue is not None:
        sch.reverse_compute_inline(sch.get_block(epilogue))
    sch.reverse_compute_at(copy_out, i0)
    sch.vectorize(sch.get_loops(copy_out)[-1])
    outer = sch.fuse(*batch, j0) if batch else j0
    if pack:
        panel = sch.cache_read(b, 1, "global")
        sch.compute_at(panel, outer)
        sch.vectorize(sch.get_loops(panel)[-1])
    if parallel:
        sch.parallel(outer)
    return sch


def streamed_column_sum(workload: Workload, block: str = "S", columns: int = 2048, rows: int = 8,
                        lanes: int = 16, parallel: bool = True) -> Schedule:
    """``S[j] += X[i, j]`` streaming rows: the reduction loop outside a vectorized column loop,
    parallel over blocks of ``columns`` columns. Each step folds ``rows`` rows (unrolled) into
    a ``lanes``-wide slice of the sums, so the sums are loaded and stored once per ``rows``
    rows and every thread keeps several row streams in flight."""
    sch = Schedule(workload)
    b = sch.get_block(block)
    j, i = sch.get_loops(b)
    j0, j1, j2 = _split(sch, j, max(1, columns // lanes), lanes)
    i0, i1 = _split(sch, i, rows)
    sch.reorder(j0, i0, j1, i1, j2)
    sch.unroll(i1)
    sch.vectorize(j2)
    if parallel:
        sch.parallel(j0)
    return sch


def rfactor_column_sum(workload: Workload, block: str = "S", parts: int = 4) -> Schedule:
    """``S[j] += X[i, j]`` with the rows factorised into ``parts`` partial sums (``rfactor``):
    each thread sums bands of whole rows, streaming them front to back, into its own partial
    row; a short final reduction adds the ``parts`` partial rows."""
    sch = Schedule(workload)
    b = sch.get_block(block)
    j, i = sch.get_loops(b)
    i0, i1 = sch.split(i, [min(parts, sch.get(i).extent), None])
    partial = sch.rfactor(i0, 0)
    p_i0, p_j, p_i1 = sch.get_loops(partial)
    sch.reorder(p_i0, p_i1, p_j)
    sch.vectorize(p_j)
    sch.parallel(p_i0)
    j, r = sch.get_loops(b)
    sch.reorder(r, j)
    sch.vectorize(j)
    return sch


def tiled_conv2d(workload: Workload, tile_f: int = 8, tile_x: int = 8, parallel: bool = True) -> Schedule:
    """A direct NCHW convolution with padding, bias and ReLU (``conv2d_bias_relu``): the padded
    input ``P`` stays a root stage (cheap, and it keeps conditionals out of the inner loop);
    ``Y`` is register-tiled over ``tile_f`` output channels (unrolled) by ``tile_x`` output
    columns (vectorized, contiguous in memory) and accumulated in a local cache; bias and
    ReLU are folded into the copy-out after each tile."""
    sch = Schedule(workload)
    y_block = sch.get_block("Y")
    n, f, y, x, c, r, s = sch.get_loops(y_block)
    f0, f1 = _split(sch, f, tile_f)
    x0, x1 = _split(sch, x, tile_x)
    sch.reorder(n, f0, y, x0, c, r, s, f1, x1)
    sch.unroll(f1)
    sch.vectorize(x1)
    sch.unroll(s)
    copy_out = sch.cache_write(y_block, 0, "local")
    sch.reverse_compute_inline(sch.get_block("Z"))
    sch.reverse_compute_at(copy_out, x0)
    sch.vectorize(sch.get_loops(copy_out)[-1])
    outer = sch.fuse(n, f0, y)
    if parallel:
        sch.parallel(outer)
    p_loops = sch.get_loops(sch.get_block("P"))
    sch.parallel(sch.fuse(*p_loops[:2]))
    return sch


def sampled_matmul(workload: Workload, seed: int = 0, block: str = "C",
                   epilogue: Optional[str] = None) -> Schedule:
    """MetaSchedule's multi-level tiling (``SSRSRS``) of a matmul with sampled tile sizes, as
    its CPU rules and post-processors would record it: the spatial loops in four levels, the
    reduction in two, a local write cache under the second spatial level with the epilogue
    folded into its copy-out, the outer tiles fused and parallel, the innermost unrolled and
    vectorized, and the sampled unroll depth as annotations. Its trace has 30 instructions
    with an epilogue; ``seed`` draws the tiles and the unroll depth."""
    sch = Schedule(workload, seed=seed)
    b = sch.get_block(block)
    sch.annotate(b, TILING_STRUCTURE, "SSRSRS")
    i, j, k = sch.get_loops(b)
    i0, i1, i2, i3 = sch.split(i, sch.sample_perfect_tile(i, n=4, max_innermost_factor=8))
    j0, j1, j2, j3 = sch.split(j, sch.sample_perfect_tile(j, n=4, max_innermost_factor=32))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=64))
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    copy_out = sch.cache_write(b, 0, "local")
    if epilogue is not None:
        sch.reverse_compute_inline(sch.get_block(epilogue))
    sch.reverse_compute_at(copy_out, j1)
    unroll = sch.sample_categorical([0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25])
    sch.annotate(b, PARALLEL, 96)
    sch.annotate(b, VECTORIZE, 64)
    sch.annotate(b, UNROLL_EXPLICIT, unroll)
    # What the post-processors make of those annotations.
    outer = sch.fuse(*sch.get_loops(b)[:2])
    sch.parallel(outer)
    sch.unroll(i3)
    sch.vectorize(j3)
    sch.annotate(outer, PRAGMA_AUTO_UNROLL_MAX_STEP, unroll)
    sch.annotate(outer, PRAGMA_UNROLL_EXPLICIT, 1)
    sch.vectorize(sch.get_loops(copy_out)[-1])
    for key in (PARALLEL, VECTORIZE, UNROLL_EXPLICIT):
        sch.unannotate(b, key)
    return sch


def register_tile(vector_bits: int) -> tuple[int, int]:
    """``(tile_i, tile_j)`` of ``cached_matmul`` for a CPU whose vector registers are
    ``vector_bits`` wide: the accumulator tile takes most of the registers and leaves room for
    a row of B and a broadcast of A. AVX-512 has 32 registers of 16 floats: 8 x 32 (16
    accumulators); AVX2 and SSE have 16: 6 rows by two vectors (12 accumulators), the shape
    of OpenBLAS's Haswell kernel. On AVX2, 8 x 32 would take 32 registers and spill."""
    lanes = vector_bits // 32
    return (8, 2 * lanes) if vector_bits >= 512 else (6, 2 * lanes)


def for_workload(workload: Workload, vector_bits: int = 512) -> Optional[Schedule]:
    """The hand-written schedule of a built-in workload (``workloads.builtin``: its program,
    not just its name) for a CPU with ``vector_bits``-wide vector registers
    (``codegen.host_vector_bits()`` for this one), or None."""
    name = builtin(workload)
    tile_i, tile_j = register_tile(vector_bits)
    if name in ("matmul", "batch_matmul"):
        return cached_matmul(workload, tile_i=tile_i, tile_j=tile_j)
    if name == "matmul_relu":
        return cached_matmul(workload, epilogue="D", tile_i=tile_i, tile_j=tile_j)
    if name == "dense_bias_relu":
        return cached_matmul(workload, block="Y", epilogue="Z", tile_i=tile_i, tile_j=tile_j)
    if name == "transpose_add":
        return tiled_transpose(workload)
    if name == "reduce_cols":
        return streamed_column_sum(workload)
    if name == "conv2d_bias_relu":
        return tiled_conv2d(workload)
    return None
