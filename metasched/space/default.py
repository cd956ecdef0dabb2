"""The default search space for CPUs: MetaSchedule's CPU stack, plus what its space lacks."""
from __future__ import annotations

from metasched.space.add_rfactor import AddRFactor
from metasched.space.auto_inline import AutoInline
from metasched.space.base import PostOrderApply
from metasched.space.contiguous_reduction import ContiguousReduction
from metasched.space.multi_level_tiling import MultiLevelTiling
from metasched.space.parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from metasched.space.postproc import RewriteParallelVectorizeUnroll, VerifyKernel
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
    tiles).

    ``exp`` kept (``AutoInline(disallow_ops=("exp",))``, TVM's CPU default): inlined, softmax's
    ``e = exp(X - mx)`` would run twice per element, in both blocks that read it (the sum ``s``
    and the output ``Y``); kept, it runs once and ``e`` is stored (a pass over memory costs a
    fraction of a vector ``exp``).

    Panels packed (``MultiLevelTiling(pack_panels=True)``, beyond MetaSchedule's space): B of a
    matmul is copied, a tile's panel at a time, into a contiguous buffer. The packed operand's
    tile loops come first in the outermost level (``j_0, i_0``): a panel packed at ``j_0``
    serves every row tile, the hand-written schedule's structure, which then needs no
    particular ``i`` tiling.

    Operands read across their memory order packed transposed (part of ``pack_panels``): K of
    attention's ``Q K^T`` and a dense layer's ``[out, in]`` weight are copied a panel at a time
    with the vector axis last, so that their vector loads are contiguous, not gathers.

    Output channels as vector lanes (``MultiLevelTiling(channel_vectors=True)``, beyond
    MetaSchedule's space): a convolution's block gets forks that vectorize its output
    channels, the input element broadcast to all lanes, the weights packed channels last and
    the sums cached channels last (the blocked layouts of oneDNN's direct convolution, made by
    copies inside the kernel); its pixel axis, the other choice, reads the input with the
    convolution's stride.

    A dense layer at batch 1 streamed (``MultiLevelTiling(leave_streaming_blocks=True)``):
    its weight is read once, so tiles reuse nothing but the input row, and the row form of
    ``ContiguousReduction`` runs its lanes along the weight's rows instead.

    Transposed reads tiled (``TransposedReadTiling``): without it, the best program of
    ``transpose_add`` (``C[i, j] = A[i, j] + B[j, i]``) walks ``B`` a column at a time.

    Unreused axes kept whole (``MultiLevelTiling(keep_unreused_axes_whole=True)``, beyond
    MetaSchedule's space): the batch axis of a batch matmul and the channel axis of a depthwise
    convolution index every tensor the block reads, so their tiles reuse nothing, and they are
    not split.

    Each of these was measured against the space without it (bench/README.md, Design
    history); a workload with no such block has the same space either way."""
    return PostOrderApply(
        rules=[
            AutoInline(into_producer=False, into_consumer=True, disallow_if_then_else=True, disallow_ops=("exp",)),
            AddRFactor(max_jobs_per_core=16, max_innermost_factor=64, num_cores=None),
            MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64, fuse_consumer_levels=(1, 2),
                             cache_write_levels=(1, 2), cache_scope="local", pack_panels=True,
                             keep_unreused_axes_whole=True, channel_vectors=True,
                             leave_streaming_blocks=True),
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
