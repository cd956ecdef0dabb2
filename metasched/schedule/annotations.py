"""The annotation keys that schedule rules, postprocessors, mutators and hand-written schedules
share (``Schedule.annotate(block_or_loop, key, value)``), with TVM MetaSchedule's spellings.

An annotation changes no loop by itself: a rule leaves one for a later rule or for a
postprocessor to act on, and the reader removes it when it has acted (``Schedule.unannotate``).
Each key below says who writes it, who reads it and what its value means.
"""

# -- on a block, from one schedule rule to another ----------------------------------------
# Written by MultiLevelTiling (and handwritten.sampled_matmul) on the block it tiled; value: the
# tile structure, e.g. "SSRSRS". Read by MultiLevelTiling itself, AddRFactor and
# ContiguousReduction (``is_free_root_reduction``), RandomComputeLocation and TransposedReadTiling,
# which leave a tiled block as it is (TVM's attr::meta_schedule_tiling_structure).
TILING_STRUCTURE = "meta_schedule.tiling_structure"
# Written by AddRFactor on the block whose reduction it factorised into a partial block; value: 1.
# Read (and removed) by RandomComputeLocation, which then samples where the partial block runs
# too; AddRFactor and ContiguousReduction (``is_free_root_reduction``) leave such a block alone.
RANDOM_COMPUTE_PRODUCER = "meta_schedule.random_compute_producer"

# -- on a block, from ParallelizeVectorizeUnroll to RewriteParallelVectorizeUnroll --------
# All four are read and removed by RewriteParallelVectorizeUnroll, which turns them into loop
# kinds; blocks rules made (caches, partial blocks) take those of their nearest annotated consumer.
# Value: the most parallel iterations worth making (jobs per core times cores), an integer
# drawn by a sample_categorical; MutateParallel changes that decision.
PARALLEL = "meta_schedule.parallel"
# Value: the longest loop worth vectorising (max_vectorize_extent), an integer constant.
VECTORIZE = "meta_schedule.vectorize"
# Value: the unroll depth (the most iterations unrolled in one chain of loops), an integer drawn by
# a sample_categorical; MutateUnroll changes that decision. For unroll_explicit=True.
UNROLL_EXPLICIT = "meta_schedule.unroll_explicit"
# As UNROLL_EXPLICIT, written instead of it when the rule's unroll_explicit is False.
UNROLL_IMPLICIT = "meta_schedule.unroll_implicit"
# The four keys above: what RewriteParallelVectorizeUnroll reads, and what marks a block whose
# limits other blocks take (MutateParallel's ``_limits_source``).
PARALLEL_VECTORIZE_UNROLL = (PARALLEL, VECTORIZE, UNROLL_EXPLICIT, UNROLL_IMPLICIT)

# -- on a loop, as TVM's postprocessor leaves them ------------------------------------------
# Written by handwritten.sampled_matmul on its outer parallel loop, as TVM's
# RewriteParallelVectorizeUnroll writes it; value: the unroll depth. Nothing in metasched reads
# it (the loop program keeps it on its For, and shows it): TVM's code generation does.
PRAGMA_AUTO_UNROLL_MAX_STEP = "pragma_auto_unroll_max_step"
# Written beside PRAGMA_AUTO_UNROLL_MAX_STEP; value: 1 to unroll explicitly (0: leave it to
# LLVM). Read by nothing in metasched either.
PRAGMA_UNROLL_EXPLICIT = "pragma_unroll_explicit"

__all__ = ["PARALLEL", "PARALLEL_VECTORIZE_UNROLL", "PRAGMA_AUTO_UNROLL_MAX_STEP", "PRAGMA_UNROLL_EXPLICIT",
           "RANDOM_COMPUTE_PRODUCER", "TILING_STRUCTURE", "UNROLL_EXPLICIT", "UNROLL_IMPLICIT", "VECTORIZE"]
