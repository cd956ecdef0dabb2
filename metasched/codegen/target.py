"""LLVM set-up for the host: initialisation, target machines, the optimisation pipeline, JIT."""
from __future__ import annotations

import ctypes.util
import functools
import threading

import llvmlite.binding as llvm


# llvmlite parses every module into LLVM's one global context, which is not thread-safe, and
# its calls release the GIL: parsing, optimising and JIT-compiling hold this lock.
LLVM_LOCK = threading.Lock()


@functools.cache
def ensure_llvm() -> None:
    """Initialise LLVM's native target once and make libm visible to JIT code (``erff`` and the
    libcalls that vector math intrinsics are scalarised into)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)


@functools.cache
def host_cpu() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of the machine we run on."""
    ensure_llvm()
    features = llvm.get_host_cpu_features().flatten()
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), features


def enabled_features(features: str) -> list[str]:
    """The features an LLVM feature string turns on (``+avx2`` gives ``avx2``), in its order."""
    return [f[1:] for f in features.split(",") if f.startswith("+")]


def host_vector_bits() -> int:
    """The width in bits of this CPU's widest vector registers that the code generator uses:
    512 with AVX-512, 256 with AVX, else 128 (SSE)."""
    enabled = enabled_features(host_cpu()[2])
    if "avx512f" in enabled:
        return 512
    return 256 if "avx" in enabled else 128


def host_target_machine(opt_level: int = 3) -> llvm.TargetMachine:
    """A fresh target machine for the host CPU and all its features.

    Fresh each time because an MCJIT execution engine takes ownership of the one it is given.
    """
    triple, cpu, features = host_cpu()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                        reloc="default", codemodel="jitdefault", jit=True)


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, opt_level: int) -> None:
    """Run the new pass manager's default pipeline at ``opt_level`` (speed level) in place."""
    if opt_level <= 0:
        return
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def jit(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> llvm.ExecutionEngine:
    """Machine code for ``module``; the engine owns module and machine and must outlive any
    function pointer taken from it."""
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine


def assembly(optimized_ir: str, opt_level: int = 3) -> str:
    """Host assembly of an (optimised) module's text, compiled from a private copy."""
    with LLVM_LOCK:
        module = llvm.parse_assembly(optimized_ir)
        return host_target_machine(opt_level).emit_assembly(module)
