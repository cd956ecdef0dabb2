"""Search spaces: schedule rules and postprocessors composed by a space generator."""
from metasched.space.add_rfactor import AddRFactor
from metasched.space.auto_inline import AutoInline
from metasched.space.base import Postproc, PostOrderApply, ScheduleRule, SpaceGenerator, describe, host_cores
from metasched.space.contiguous_reduction import ContiguousReduction
from metasched.space.default import cpu_default
from metasched.space.multi_level_tiling import MultiLevelTiling
from metasched.space.parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from metasched.space.postproc import RewriteParallelVectorizeUnroll, VerifyKernel
from metasched.space.random_compute_location import RandomComputeLocation
from metasched.space.transposed_read import TransposedReadTiling

__all__ = ["AddRFactor", "AutoInline", "ContiguousReduction", "MultiLevelTiling", "ParallelizeVectorizeUnroll",
           "PostOrderApply", "Postproc", "RandomComputeLocation", "RewriteParallelVectorizeUnroll", "ScheduleRule",
           "SpaceGenerator", "TransposedReadTiling", "VerifyKernel", "cpu_default", "describe", "host_cores"]
