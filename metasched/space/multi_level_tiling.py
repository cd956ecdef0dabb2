"""``MultiLevelTiling``: Ansor's rules 3-5 (multi-level tiling, fusing a consumer into the
tiles, adding a cache stage), MetaSchedule's ``multi_level_tiling.cc``.

A block that reads some data more than once (a matmul, a convolution) runs fastest when its
loops are tiled so that each tile's data stays in cache or registers. The ``structure`` string
names the tile levels from outer to inner: ``S`` a level of every spatial loop, ``R`` a level
of every reduction loop. ``"SSRSRS"`` (Ansor's CPU structure) splits each spatial loop in four
and each reduction loop in two, with sampled tile sizes, and orders them S0 S1 R0 S2 R1 S3.

The tiled block then gets one sketch per way of writing its result (``AddWriteReuse``):

1. as tiled, nothing else;
2. rule 4: its only, element-wise consumer computed right after each tile of level L
   (``reverse_compute_at``), for each L in ``fuse_consumer_levels``;
3. rule 5: a ``cache_scope`` write cache (``cache_write``), the element-wise consumer folded
   into the cache's copy-out where legal (``reverse_compute_inline``), and the copy-out
   computed after each tile of level L, for each L in ``cache_write_levels``.

Level L is the L-th letter of ``structure`` (TVM's ``tiles[L - 1]``); it must be an ``S`` with
only ``S`` before it, so that a tile is complete (its reductions done) when the consumer or
copy-out runs after it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from metasched.schedule import BlockRV, LoopRV, Schedule, analysis
from metasched.schedule.analysis import BlockInfo
from metasched.schedule.annotations import TILING_STRUCTURE
from metasched.schedule.cache import SCOPES
from metasched.space.auto_inline import can_reverse_compute_inline
from metasched.space.base import ScheduleRule
from metasched.space.contiguous_reduction import streamed_reads

Tiles = list[list[LoopRV]]  # per letter of the structure, the loops of that level


@dataclasses.dataclass
class MultiLevelTiling(ScheduleRule):
    """Tile reduction blocks with data reuse at the root, then fork the ways of writing their
    result (see the module's docstring).

    * ``structure``: the tile levels, outer to inner (``S`` spatial, ``R`` reduction).
    * ``max_innermost_factor``: the largest innermost tile a ``sample_perfect_tile`` may draw.
    * ``max_imperfect_innermost``: above 0, every spatial loop but the block's last is tiled
      by ``sample_imperfect_tile`` with its innermost tile (a row count of the register
      tile) from 1 to this, any integer: 6 rows of a 512-row matmul, which no perfect tile
      makes. The last spatial loop (the one vectorized when its accesses are contiguous)
      keeps perfect tiles. 0 (the default): perfect tiles only, MetaSchedule's space.
      ``cpu_default`` keeps 0: rows up to 8 did no better on matmul_relu and worse on
      conv2d_bias_relu, whose best kernels' tiles of 1 and 2 the perfect sampler favours
      (bench/README.md, Design history).
    * ``fuse_consumer_levels``: the levels after which an element-wise consumer is fused.
    * ``cache_write_levels``: the levels after which the write cache is copied out.
    * ``cache_scope``: the write cache's scope (``"local"``: a tile-sized array).
    * ``pack_panels``: each operand read along the block's last spatial axis and a reduction
      axis (``B[k, j]`` of a matmul: ``packable_reads``) gets a global read cache that copies
      the panel a tile reads into a contiguous buffer, as BLAS libraries pack B. Without it,
      rows of B a multiple of 4 KiB apart share L1 sets and evict one another while the
      reduction walks down a tile. The outermost spatial tile level orders the loops of the
      axes the panel indexes first (``j_0, i_0``), and the panel is computed at the last of
      them (``j_0``): copied once for all the row tiles inside it, as the hand-written
      ``cached_matmul`` does; the other levels keep the axes' order. Not in MetaSchedule's
      CPU space.

      An operand read across its memory order (``K[b, j, d]`` of ``Q K^T``, a dense layer's
      weight ``W[j, k]``: ``transposed_reads``) is packed the same way and stored transposed
      (``transform_layout``), the last spatial axis last: its vectorized loads are then
      contiguous instead of gathers. Only where the copy pays: each element packed serves at
      least ``MIN_PANEL_REUSE`` rows (a dense layer at batch 1 reads each weight once).

      The place is fixed, not sampled: sampled, searches settled on a place inside the
      reduction, copying a slice of the panel for every row tile, and never left it (the
      compute-location mutator moves it in 5% of mutants, and the cost model scores the
      better places low once it has measured them with poor tiles), while ``j_0`` is at or
      near each program's fastest place. Where the sampled ``j_0`` tile is 1, the panel is
      all of the operand, and the parallel rewrite, which stops at the loop that holds it,
      leaves the block serial; making the loops below it parallel was tried and reverted: the
      searches then spent most of their trials on such programs (bench/README.md, Design
      history).
    * ``keep_unreused_axes_whole``: a spatial axis other than the last that indexes every
      tensor the block reads, each at a dimension of its own (``b`` of ``C[b, i, j] += A[b, i,
      k] * B[b, k, j]``, the channel of a depthwise convolution), is not split: its loop
      stays whole at the outermost spatial level. Its iterations touch disjoint data, so its
      inner tiles reuse nothing; they only widen a tile's working set and take registers
      from the axes that do reuse. The last spatial axis is always tiled: it is the one
      vectorized. False (the default): every spatial axis tiled, MetaSchedule's space.
    * ``channel_vectors``: a convolution's block (``channel_vector_axis``) gets more forks,
      one per level of ``cache_write_levels``, tiled with the output channel axis last at
      every spatial level (the one vectorized), its weights packed transposed (channels
      last, all of them at the root) and its sums cached in a tile stored channels last
      (``transform_layout``). False (the default): MetaSchedule's space, the last spatial
      axis always the vector one.
    * ``leave_streaming_blocks``: a block that reads an operand indexed by all its axes
      (``streamed_reads``: the weight of a dense layer at batch 1, each element read once;
      only the input row is reused) is not tiled, and ``ContiguousReduction`` takes it. False
      (the default): tiled, as MetaSchedule does."""

    structure: str = "SSRSRS"
    max_innermost_factor: int = 64
    max_imperfect_innermost: int = 0
    fuse_consumer_levels: tuple[int, ...] = (1, 2)
    cache_write_levels: tuple[int, ...] = (1, 2)
    cache_scope: str = "local"
    pack_panels: bool = False
    keep_unreused_axes_whole: bool = False
    channel_vectors: bool = False
    leave_streaming_blocks: bool = False

    def __post_init__(self) -> None:
        _check_structure(self.structure)
        self.fuse_consumer_levels = _check_levels(self.structure, self.fuse_consumer_levels, "fuse_consumer_levels")
        self.cache_write_levels = _check_levels(self.structure, self.cache_write_levels, "cache_write_levels")
        if isinstance(self.max_innermost_factor, bool) or not isinstance(self.max_innermost_factor, int):
            raise ValueError(f"MultiLevelTiling: max_innermost_factor must be an integer (0 or less: no "
                             f"limit), got {self.max_innermost_factor!r}")
        if isinstance(self.max_imperfect_innermost, bool) or not isinstance(self.max_imperfect_innermost, int) \
                or self.max_imperfect_innermost < 0:
            raise ValueError(f"MultiLevelTiling: max_imperfect_innermost must be an integer >= 0 (0: perfect "
                             f"tiles only), got {self.max_imperfect_innermost!r}")
        if self.cache_scope not in SCOPES:
            raise ValueError(f"MultiLevelTiling: cache_scope must be one of {SCOPES}, got {self.cache_scope!r}")
        for flag in ("pack_panels", "keep_unreused_axes_whole", "channel_vectors", "leave_streaming_blocks"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"MultiLevelTiling: {flag} must be True or False, got {getattr(self, flag)!r}")

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if not needs_tiling(info) or (self.leave_streaming_blocks and streamed_reads(info)):
            return [sch]
        vector = channel_vector_axis(info) if self.channel_vectors else None
        other = sch.copy() if vector is not None else None
        sch.annotate(block, TILING_STRUCTURE, self.structure)
        tiles = self._tile_and_pack(sch, block, info, info.innermost_axis)
        forks = [sch, *self._fuse_consumer(sch, block, tiles), *self._cache_write(sch, block, tiles)]
        if other is not None:
            other.annotate(block, TILING_STRUCTURE, self.structure)
            tiles = self._tile_and_pack(other, block, info, vector, at_root=True)
            order = _last(len(info.spatial), [a.name for a in info.spatial].index(vector))
            forks += self._cache_write(other, block, tiles, order)
        return forks

    def _tile_and_pack(self, sch: Schedule, block: BlockRV, info: BlockInfo, vector: str,
                       at_root: bool = False) -> Tiles:
        """Tile the block with ``vector`` the last spatial axis of every level and pack its
        panels (``pack_panels``): each at the outermost tile of its columns, or, ``at_root``,
        all of it once before the block (a convolution's weights, small beside its work:
        packed at the channel tile, they would keep the pixel tiles out of the parallel loop,
        and a channel tile of 1 would leave the block serial)."""
        transposed = transposed_reads(info, vector) if self.pack_panels else {}
        panels = packable_reads(info, vector) + list(transposed) if self.pack_panels else []
        tiles = self._tile(sch, block, info, [] if at_root else panels, vector)
        for buffer in panels:
            panel = sch.cache_read(block, analysis.block(sch, block).reads.index(buffer), "global")
            if not at_root:
                sch.compute_at(panel, _panel_loop(tiles[self.structure.index("S")], info, panels, buffer))
            if buffer in transposed:
                sch.transform_layout(panel, transposed[buffer])
                if at_root:
                    _copy_in_lines(sch, panel, transposed[buffer][-1])
        return tiles

    def _tile(self, sch: Schedule, block: BlockRV, info: BlockInfo, panels: list[str], vector: str) -> Tiles:
        """Split every loop into the levels of its kind with sampled factors (a kind with one
        level keeps its loop whole) and reorder the block's loops level by level, the outermost
        spatial level with the axes of the ``panels`` to be packed first, the others in the
        axes' order with ``vector`` last."""
        positions = {kind: [k for k, letter in enumerate(self.structure) if letter == kind] for kind in "SR"}
        tiles: Tiles = [[] for _ in self.structure]
        owners: list[list[int]] = [[] for _ in self.structure]  # the loop number of each tile
        spatial = [k for k, loop_info in enumerate(info.loops) if not loop_info.is_reduction]
        vector_k = [a.name for a in info.spatial].index(vector)
        whole = unreused_axes(info) if self.keep_unreused_axes_whole else ()
        for k, (loop, loop_info) in enumerate(zip(sch.get_loops(block), info.loops)):
            levels = positions["R" if loop_info.is_reduction else "S"]
            if len(levels) == 1 or k in whole:
                tiles[levels[0]].append(loop)
                owners[levels[0]].append(k)
                continue
            if self.max_imperfect_innermost and k in spatial and k != vector_k:
                factors = sch.sample_imperfect_tile(loop, n=len(levels),
                                                    max_innermost_factor=self.max_imperfect_innermost)
            else:
                factors = sch.sample_perfect_tile(loop, n=len(levels), max_innermost_factor=self.max_innermost_factor)
            for level, part in zip(levels, sch.split(loop, factors)):
                tiles[level].append(part)
                owners[level].append(k)
        outer = positions["S"][0]
        if panels:
            tiles[outer] = _panel_loops_first(tiles[outer], info, panels)
        for level in positions["S"]:
            if level != outer or not panels:  # stable: the other axes keep their order
                tiles[level] = [loop for _, loop in sorted(zip(owners[level], tiles[level]),
                                                           key=lambda pair: pair[0] == vector_k)]
        sch.reorder(*(loop for tile in tiles for loop in tile))
        return tiles

    def _fuse_consumer(self, sch: Schedule, block: BlockRV, tiles: Tiles) -> list[Schedule]:
        """Rule 4: one fork per level in ``fuse_consumer_levels`` with the block's consumer
        computed after that level's tile, when the consumer is fusible."""
        if not self.fuse_consumer_levels or len(analysis.block(sch, block).consumers) != 1:
            return []
        base = sch.copy()
        (consumer,) = base.get_consumers(block)
        if not is_fusible_consumer(base, block, consumer):
            return []
        return [_computed_after(base, consumer, tiles, level) for level in self.fuse_consumer_levels]

    def _cache_write(self, sch: Schedule, block: BlockRV, tiles: Tiles,
                     layout: Optional[list[int]] = None) -> list[Schedule]:
        """Rule 5: one fork per level in ``cache_write_levels`` that accumulates into a
        ``cache_scope`` buffer (its dimensions in ``layout``'s order, if given) whose copy-out
        (with the consumer folded in where legal) runs after that level's tile."""
        if not self.cache_write_levels:
            return []
        base = sch.copy()
        copy_out = base.cache_write(block, 0, self.cache_scope)
        if layout is not None:
            base.transform_layout(block, layout)
        base = _with_consumer_folded(base, copy_out) or base
        return [_computed_after(base, copy_out, tiles, level) for level in self.cache_write_levels]


def needs_tiling(info: BlockInfo) -> bool:
    """TVM's ``NeedsMultiLevelTiling``: a reduction block with data reuse (Ansor's condition),
    at the root, not tiled yet, its loops still its axes in order (TVM's trivial binding)."""
    axes = info.spatial + info.reduction
    return (info.is_reduction and info.has_data_reuse and info.attached_to is None
            and TILING_STRUCTURE not in info.annotations and len(info.loops) == len(axes)
            and all(loop.extent == axis.extent and loop.is_reduction == (k >= len(info.spatial))
                    for k, (loop, axis) in enumerate(zip(info.loops, axes))))


def unreused_axes(info: BlockInfo) -> tuple[int, ...]:
    """The numbers of the spatial axes of ``info``'s block, the last left out, that every read
    of the block indexes at a dimension of their own (``Access.axes``): no element is read
    in two iterations of such an axis, so tiling it reuses nothing."""
    if not info.accesses:
        return ()
    return tuple(k for k, axis in enumerate(info.spatial[:-1]) if all(axis.name in acc.axes for acc in info.accesses))


# A transposed panel is packed only when each element copied serves at least this many
# iterations of the axes that do not index it (rows of a dense layer's batch).
MIN_PANEL_REUSE = 8
# A transposing copy writes this many elements of a line at a time (64 bytes of float32).
COPY_LINE = 16
# A channel axis is vectorized instead of the last one only if it fills a vector of 8 lanes.
MIN_CHANNEL_LANES = 8


def _last(n: int, k: int) -> list[int]:
    """The order of ``n`` dimensions that moves dimension ``k`` last."""
    return [d for d in range(n) if d != k] + [k]


def channel_vector_axis(info: BlockInfo) -> Optional[str]:
    """The spatial axis to vectorize instead of the last one in a convolution's block, or
    None: the output channel ``f`` of ``Y[n, f, y, x] += P[n, c, y + r, x + s] * W[f, c, r,
    s]``. Where the last spatial axis reads no operand along its memory order (no packable or
    transposed panel), and another spatial axis ``v`` of extent at least ``MIN_CHANNEL_LANES``
    indexes only operands it can read contiguously once transposed (a weight: every index an
    axis, the last a reduction axis; ``transposed_reads``), the lanes can run along ``v``:
    the input element is then one broadcast for all of them, the weights a contiguous panel
    ``W[c, r, s, f]``, the sums a tile stored ``f`` last (oneDNN's direct convolution, whose
    blocked layouts these copies make). Of several such axes, the longest."""
    innermost = info.innermost_axis
    if innermost is None or packable_reads(info) or transposed_reads(info, innermost, min_reuse=1):
        return None
    best = None
    for axis in info.spatial:
        if axis.name == innermost or axis.extent < MIN_CHANNEL_LANES:
            continue
        users = [acc for acc in info.accesses if axis.name in acc.uses]
        if users and set(transposed_reads(info, axis.name)) == {acc.buffer for acc in users}:
            if best is None or axis.extent > best.extent:
                best = axis
    return None if best is None else best.name


def transposed_reads(info: BlockInfo, vector: Optional[str] = None,
                     min_reuse: Optional[int] = None) -> dict[str, list[int]]:
    """The tensors ``info``'s block reads, each time exactly at axis variables, with a
    reduction axis indexing their last dimension and ``vector`` (by default the block's last
    spatial axis) another (``K`` of ``S[b, i, j] += Q[b, i, d] * K[b, j, d]``), where the
    spatial axes that do not index the tensor iterate at least ``min_reuse`` times (by default
    ``MIN_PANEL_REUSE``); each with the order of its dimensions that puts ``vector``'s last
    (``[0, 2, 1]``)."""
    reduction = {axis.name for axis in info.reduction}
    innermost = info.innermost_axis if vector is None else vector
    min_reuse = MIN_PANEL_REUSE if min_reuse is None else min_reuse
    found = {}
    for buffer in info.reads:
        reads = [acc for acc in info.accesses if acc.buffer == buffer]
        first = reads[0].axes
        if not all(acc.exact and acc.axes == first for acc in reads):
            continue
        if first[-1] not in reduction or innermost not in first[:-1]:
            continue
        reuse = 1
        for axis in info.spatial:
            if axis.name not in first:
                reuse *= axis.extent
        if reuse >= min_reuse:
            found[buffer] = _last(len(first), first.index(innermost))
    return found


def _copy_in_lines(sch: Schedule, copy: BlockRV, dim: int) -> None:
    """Order a transposing copy's loops so that it writes whole lines: the loop of ``dim``,
    the source dimension stored last, is split with an inner part of at most
    ``COPY_LINE`` elements (the largest divisor of its extent), moved innermost. Left in the
    source's order, each store lands on another line, and a line is written again, a few
    elements at a time, each time the loop of ``dim`` comes back to it. The copy must be at
    the root: its extents are then fixed, whatever the tiles sampled."""
    loops = sch.get_loops(copy)[-len(analysis.block(sch, copy).loops):]
    extent = analysis.block(sch, copy).loops[dim].extent
    inner = max(d for d in range(1, min(extent, COPY_LINE) + 1) if extent % d == 0)
    if inner == 1 or dim == len(loops) - 1:
        return
    outer, lanes = sch.split(loops[dim], [extent // inner, inner])
    sch.reorder(outer, *loops[dim + 1:], lanes)


def packable_reads(info: BlockInfo, vector: Optional[str] = None) -> list[str]:
    """The tensors ``info``'s block reads, each time exactly at axis variables, with
    ``vector`` (by default its last spatial axis) indexing their last dimension (the
    vectorized loads) and a reduction axis another (so that a tile's rows lie a row of the
    tensor apart): ``B`` of ``C[i, j] += A[i, k] * B[k, j]``."""
    reduction = {axis.name for axis in info.reduction}
    vector = info.innermost_axis if vector is None else vector
    packable = []
    for buffer in info.reads:
        reads = [acc for acc in info.accesses if acc.buffer == buffer]
        if all(acc.exact and acc.axes[-1] == vector and reduction.intersection(acc.axes)
               for acc in reads):
            packable.append(buffer)
    return packable


def _panel_loops_first(outer: list[LoopRV], info: BlockInfo, panels: list[str]) -> list[LoopRV]:
    """The outermost spatial tile level's loops (one per spatial axis, in axis order) with
    those that index one of the ``panels`` first: ``j_0, i_0`` for ``B[k, j]`` of a matmul. A panel
    packed at ``j_0`` then serves every ``i_0`` tile (each panel of B copied once, as BLAS
    libraries do), where under ``i_0, j_0`` the whole of B is copied again for each row tile."""
    return [outer[k] for k in _panel_order(info, panels)]


def _panel_loop(outer: list[LoopRV], info: BlockInfo, panels: list[str], panel: str) -> LoopRV:
    """Where ``panel`` is packed: the last loop of the outermost level (``outer``, ordered by
    ``_panel_loops_first``) whose axis indexes it: ``j_0`` of a matmul, ``j_0`` after ``b_0``
    of a batch matmul."""
    mine = _indexed_axes(info, [panel])
    axes = [info.spatial[k].name for k in _panel_order(info, panels)]
    return outer[max(position for position, axis in enumerate(axes) if axis in mine)]


def _panel_order(info: BlockInfo, panels: list[str]) -> list[int]:
    """The spatial axes' numbers, those that index one of ``panels`` first."""
    packed = _indexed_axes(info, panels)
    return sorted(range(len(info.spatial)), key=lambda k: (info.spatial[k].name not in packed, k))


def _indexed_axes(info: BlockInfo, buffers: list[str]) -> set[str]:
    return {axis for acc in info.accesses if acc.buffer in buffers for axis in acc.axes}


def is_fusible_consumer(sch: Schedule, block: BlockRV, consumer: BlockRV) -> bool:
    """Whether ``reverse_compute_at(consumer, <a spatial tile loop of block>)`` is legal and
    useful: ``consumer`` is element-wise over ``block``'s shape (Ansor's "element-wise
    matched"), reads only ``block``'s tensor among the blocks, at its own indices, and is at
    the root with nothing computed at it."""
    info, source = analysis.block(sch, consumer), analysis.block(sch, block)
    return (info.is_elementwise and not info.is_reduction and info.shape == source.shape
            and info.producers == (source.name,) and info.attached_to is None
            and not any(loop.attached for loop in info.loops)
            and info.reads_at_own_indices(source.buffer))


def _with_consumer_folded(sch: Schedule, copy_out: BlockRV) -> Optional[Schedule]:
    """A copy of ``sch`` with the only consumer of ``copy_out`` folded into it, when that
    consumer is fusible and the fold legal; else None (and ``sch``'s trace is untouched)."""
    if len(analysis.block(sch, copy_out).consumers) != 1:
        return None
    trial = sch.copy()
    (consumer,) = trial.get_consumers(copy_out)
    if not (is_fusible_consumer(trial, copy_out, consumer) and can_reverse_compute_inline(trial, consumer, copy_out)):
        return None
    trial.reverse_compute_inline(consumer)
    return trial


def _computed_after(sch: Schedule, block: BlockRV, tiles: Tiles, level: int) -> Schedule:
    """A copy of ``sch`` with ``block`` computed after the last loop of tile level ``level``."""
    fork = sch.copy()
    fork.reverse_compute_at(block, tiles[level - 1][-1])
    return fork


def _check_structure(structure: str) -> None:
    if not isinstance(structure, str) or set(structure) - set("SR") or "S" not in structure or "R" not in structure:
        raise ValueError(f"MultiLevelTiling: structure must be a string of S (spatial level) and R (reduction "
                         f"level) letters with at least one of each, such as 'SSRSRS'; got {structure!r}")


def _check_levels(structure: str, levels: tuple[int, ...], name: str) -> tuple[int, ...]:
    """``levels`` as a tuple, each the 1-based position of an ``S`` of ``structure`` with only
    ``S`` before it; a ``ValueError`` otherwise."""
    if isinstance(levels, (str, bytes)) or not hasattr(levels, "__iter__"):
        raise ValueError(f"MultiLevelTiling: {name} must be a tuple of tile levels, got {levels!r}")
    levels = tuple(levels)
    leading = len(structure) - len(structure.lstrip("S"))  # the S levels before the first R
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= leading:
            raise ValueError(f"MultiLevelTiling: {name} holds {level!r}, but only levels 1 to {leading} of "
                             f"structure {structure!r} come before its first reduction level; a block "
                             f"computed after a later level would read unfinished sums")
    return levels
