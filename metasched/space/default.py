"""The default search space for CPUs: MetaSchedule's CPU stack, plus what its space lacks."""
from __future__ import annotations

from metasched.space.add_rfactor import AddRFactor
from metasched.space.auto_inline import AutoInline
from metasched.space.base import PostOrderApply
from metasched.space.contiguous_reduction import ContiguousReduction
from metasched.space.multi_level_tiling import MultiLevelTiling
from metasched.space.parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from metasched.space.postprocs import RewriteParallelVectorizeUnroll, VerifyKernel
from metasched.space.random_compute_location import RandomComputeLocation
from metasched.space.transposed_read import TransposedReadTiling


def cpu_default() -> PostOrderApply:
    """The default stack, every argument named: print it, copy it, edit the lists.

    The rules run in this order on each block, from the outputs back to the inputs:
    AutoInline (Ansor's rules 1 and 2; a block with a conditional, such as a padding stage,
    or one that applies ``exp`` stays a stage of its own, as in TVM's CPU default),
    AddRFactor (rule 6), MultiLevelTiling with consumer fusion and a local cache stage (rules
    3 to 5), ContiguousReduction (vector lanes along the contiguous axis of a reduction without
    data reuse, which TVM's space cannot express), TransposedReadTiling (a spatial block that
    reads a tensor across its memory order, tiled in two; beyond TVM's space too),
    ParallelizeVectorizeUnroll (annotations)
    and RandomComputeLocation. The postprocessors turn the annotations into loop kinds and
    reject what the code generator cannot make correct or fast.

    Padding kept: inlined into a convolution, it puts a select on every load of the innermost
    loop; kept, RandomComputeLocation places it (at the root, or inside the convolution's
    tiles). conv2d_bias_relu, 64 trials, seeds 0-2, against PyTorch in one process (znver3,
    AVX2): inlined 0.43, 0.71, 0.76; kept 0.64, 0.76, 0.75 (best times 5.17, 3.41, 2.81 ms
    against 3.47, 2.89, 2.65 ms).

    ``exp`` kept (``AutoInline(disallow_ops=("exp",))``, TVM's CPU default; until then it was
    inlined): softmax's ``e = exp(X - mx)`` was inlined into both blocks that read it, the sum
    ``s`` and the output ``Y``, so every element's ``exp`` ran twice; kept, it runs once and
    ``e`` is stored (a pass over memory costs a fraction of a vector ``exp``). Eight paired
    seeds of 64 trials (znver4, AVX-512, 2 cores; ``python bench/search_variants.py softmax
    default disallow_ops=exp``), the best times the tuners recorded: 0.312-0.381 ms against
    0.425-0.533 ms, geometric mean 0.750, all eight won. No other built-in workload applies
    ``exp``: their spaces are unchanged.

    Panels packed (``MultiLevelTiling(pack_panels=True)``, beyond MetaSchedule's space): B of a
    matmul is copied, a tile's panel at a time, into a contiguous buffer. With its location
    sampled (inline: not copied), as first built: twelve paired seeds of 64 trials (Xeon,
    AVX-512, 2 cores), each best timed in turns with numpy, geometric means without / with:
    matmul_relu 1.146 / 1.161x numpy (7 seeds of 12 won, the best 1.40x), dense_bias_relu
    0.986 / 1.039x (6 won, 2 level).
    ``python bench/search_variants.py matmul_relu default pack_panels=0 --seeds 0-11``
    runs such pairs (comparing the best times the tuner recorded). Hand-written, the same
    packing took matmul 1024 from 0.41 to 0.95 of numpy and dense_bias_relu from 0.58 to 1.12.
    The packed operand's tile loops come first in the outermost level (``j_0, i_0``: a panel
    packed at ``j_0`` serves every row tile, the hand-written schedule's structure, which then
    needs no particular ``i`` tiling); against ``i_0, j_0``, 16 paired seeds of 64 trials, the
    geometric mean of the best times the tuners recorded: matmul_relu 0.972 (won 9 of 16),
    dense_bias_relu 0.987 (won 11). Packed at ``j_0`` always, rather than at a sampled
    location: medians of twelve paired seeds, 1.13 to 1.24x numpy on matmul_relu and 1.07 to
    1.20x on dense_bias_relu (``MultiLevelTiling``'s docstring). Other workloads have nothing
    to pack: their spaces are unchanged.

    Transposed reads tiled (``TransposedReadTiling``): ``transpose_add`` (``C[i, j] = A[i, j] +
    B[j, i]``, 2048 x 2048), 64 trials, seeds 0 and 1, timed in turns with the hand-written
    ``tiled_transpose`` (znver4, 2 cores): without the rule 0.47 and 0.43 of its speed (12.8 and
    12.1 ms: the fused loop's best program walks ``B`` a column at a time), with it 1.56 and 1.85
    (3.6 and 3.0 ms; 8.2 and 8.7x numpy). No other built-in workload has such a block: their
    spaces are unchanged.

    Unreused axes kept whole (``MultiLevelTiling(keep_unreused_axes_whole=True)``, beyond
    MetaSchedule's space): the batch axis of a batch matmul and the channel axis of a depthwise
    convolution index every tensor the block reads, so their tiles reuse nothing, and they are
    not split. Paired seeds of 64 trials (Xeon, AVX-512, 2 cores), the geometric mean of the
    best times the tuners recorded, with / without: batch_matmul 0.909 (12 seeds, won 10),
    depthwise_conv2d 0.719 (8 seeds, won 7); the median tuning wall fell from 21 to 15 s and
    from 17 to 13 s. No other built-in workload has such an axis: their spaces are
    unchanged."""
    return PostOrderApply(
        rules=[
            AutoInline(into_producer=False, into_consumer=True, disallow_if_then_else=True, disallow_ops=("exp",)),
            AddRFactor(max_jobs_per_core=16, max_innermost_factor=64, num_cores=None),
            MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64, fuse_consumer_levels=(1, 2),
                             cache_write_levels=(1, 2), cache_scope="local", pack_panels=True,
                             keep_unreused_axes_whole=True),
            ContiguousReduction(),
            TransposedReadTiling(max_tile=64),
            ParallelizeVectorizeUnroll(max_jobs_per_core=16, max_vectorize_extent=64,
                                       unroll_max_steps=(0, 16, 64, 512), unroll_explicit=True, num_cores=None),
            RandomComputeLocation(),
        ],
        postprocs=[
            RewriteParallelVectorizeUnroll(),
            VerifyKernel(),
        ],
    )
