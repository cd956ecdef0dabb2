"""Postprocessors: run on a sampled program after ``sch.enter_postproc()``, they make real loop
kinds of the annotations rules left (``RewriteParallelVectorizeUnroll``) and reject the
programs the code generator cannot make correct or fast enough (``VerifyKernel``)."""
from metasched.schedule.annotations import PARALLEL_VECTORIZE_UNROLL as KEYS
from metasched.space.postproc.rewrite_parallel_vectorize_unroll import RewriteParallelVectorizeUnroll
from metasched.space.postproc.verify_kernel import VerifyKernel, parallel_race, unrolled_work, vector_fallback

__all__ = ["KEYS", "RewriteParallelVectorizeUnroll", "VerifyKernel", "parallel_race", "unrolled_work",
           "vector_fallback"]
