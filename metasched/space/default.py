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


def cpu_default() -> PostOrderApply:
    """The default stack, every argument named: print it, copy it, edit the lists.

    The rules run in this order on each block, from the outputs back to the inputs:
    AutoInline (Ansor's rules 1 and 2; ``exp`` may inline, unlike TVM's CPU default),
    AddRFactor (rule 6), MultiLevelTiling with consumer fusion and a local cache stage (rules
    3 to 5), ContiguousReduction (vector lanes along the contiguous axis of a reduction without
    data reuse, which TVM's space cannot express), ParallelizeVectorizeUnroll (annotations)
    and RandomComputeLocation. The postprocessors turn the annotations into loop kinds and
    reject what the code generator cannot make correct or fast."""
    return PostOrderApply(
        rules=[
            AutoInline(into_producer=False, into_consumer=True, disallow_if_then_else=False, disallow_ops=()),
            AddRFactor(max_jobs_per_core=16, max_innermost_factor=64, num_cores=None),
            MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64, fuse_consumer_levels=(1, 2),
                             cache_write_levels=(1, 2), cache_scope="local"),
            ContiguousReduction(),
            ParallelizeVectorizeUnroll(max_jobs_per_core=16, max_vectorize_extent=64,
                                       unroll_max_steps=(0, 16, 64, 512), unroll_explicit=True, num_cores=None),
            RandomComputeLocation(),
        ],
        postprocs=[
            RewriteParallelVectorizeUnroll(),
            VerifyKernel(),
        ],
    )
