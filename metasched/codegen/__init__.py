"""Code generation: a loop program (``PrimFunc``) → LLVM IR with llvmlite → a JIT ``Kernel``.

``compile_func(func, options)`` is the entry point; ``CodegenOptions`` the settings. It is two
halves that may run in different processes: ``compile_artifact`` (loop program → object code in a
picklable ``Artifact``) and ``load_kernel`` (artifact → ``Kernel`` in this process).
Parallel loops run through libgomp (or a pthread fallback, see ``runtime``), vectorized loops
become explicit LLVM vector code (``vector``), unrolled loops are copied out.
"""
from metasched.arrays import aligned_empty  # what a kernel's arguments are best allocated with
from metasched.codegen.compiler import Artifact, compile_artifact, compile_func, load_kernel
from metasched.codegen.kernel import Kernel
from metasched.codegen.options import CodegenOptions
from metasched.codegen.runtime import available_cores, host_description, probe_threads
from metasched.codegen.target import host_vector_bits

__all__ = ["Artifact", "CodegenOptions", "Kernel", "aligned_empty", "available_cores", "compile_artifact",
           "compile_func", "host_description", "host_vector_bits", "load_kernel", "probe_threads"]
