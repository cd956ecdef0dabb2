"""Hand-written schedules of built-in workloads, made of loop primitives only.

They are the yardstick a search must beat, the demo of the README and the subject of
``bench/loops.py``. Each takes a workload and returns a ``Schedule``.
"""
from __future__ import annotations

from metasched.lang.workload import Workload
from metasched.schedule import Schedule


def tiled_matmul(workload: Workload, block: str = "C", tile_i: int = 8, tile_j: int = 32,
                 tile_k: int = 128, parallel: bool = True) -> Schedule:
    """A register-tiled matmul ``block[..., i, j] += A[..., i, k] * B[..., k, j]``.

    Loop order ``j_0, i_0, k_0, k_1, i_1, j_1``: a ``tile_k x tile_j`` panel of B stays in cache
    while the rows of A stream past it; the ``tile_i x tile_j`` tile of the result is updated by
    ``tile_i`` unrolled vector operations per ``k``, so LLVM keeps it in registers across the
    ``k_1`` loop. Leading batch loops, if any, are fused into the parallel outer loop.
    """
    sch = Schedule(workload)
    b = sch.get_block(block)
    *batch, i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, tile_i])
    j0, j1 = sch.split(j, [None, tile_j])
    k0, k1 = sch.split(k, [None, tile_k])
    sch.reorder(j0, i0, k0, k1, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
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
    i0, i1 = sch.split(i, [None, tile])
    j0, j1 = sch.split(j, [None, tile])
    sch.reorder(i0, j0, i1, j1)
    sch.vectorize(j1)
    if parallel:
        sch.parallel(i0)
    return sch
