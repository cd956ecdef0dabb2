"""Code generation: a loop program (``PrimFunc``) → LLVM IR with llvmlite → a JIT ``Kernel``.

``compile_func(func, options)`` is the entry point; ``CodegenOptions`` the settings.
Parallel loops run through libgomp (or a pthread fallback, see ``runtime``), vectorized loops
become explicit LLVM vector code (``vector``), unrolled loops are copied out.
"""
from metasched.codegen.build import compile_func
from metasched.codegen.kernel import Kernel
from metasched.codegen.options import CodegenOptions
from metasched.codegen.runtime import available_cores, host_description, probe_threads

__all__ = ["CodegenOptions", "Kernel", "available_cores", "compile_func", "host_description",
           "probe_threads"]
