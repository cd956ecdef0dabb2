"""This machine's fp32 arithmetic peak, measured: the ceiling that a matmul's GFLOP/s is read
against.

    python bench/peak.py

A loop of fused multiply-adds on ``ACCUMULATORS`` independent vectors of the widest width the
code generator uses (``codegen.host_vector_bits``), compiled through llvmlite for the host CPU,
run on every core at once (one Python thread each: a ctypes call lets go of the GIL), the best
of ``REPEATS`` runs. Nothing but the arithmetic: no loads, no stores, so no kernel that does
work can reach it. The issue's reference host had "about 220 GFLOP/s"; two cores of an AMD EPYC
Zen 4 (``znver4``, AVX-512 on 256-bit units, so one 16-lane FMA a cycle) gave 225-234 (116-117
each), 16 and 8 lanes alike.

A kernel's fraction of this peak tells how much room its schedule leaves. For scale, measured
in one process on that host: numpy's matmul (OpenBLAS) ran at 196 GFLOP/s on 512 x 512 and 201
on 2048 x 2048 (0.84-0.86 of the peak), the hand-written ``cached_matmul`` of matmul_relu 512 at
207-213 (0.88-0.91). 1.2 times numpy's speed on matmul 512 is then 1.0 of the peak; on
matmul_relu 512, whose numpy baseline adds a ReLU pass, about 0.93.
"""
from __future__ import annotations

import ctypes
import threading
import time

import llvmlite.binding as llvm

from metasched.codegen import available_cores, host_vector_bits
from metasched.codegen.target import host_target_machine

ACCUMULATORS = 12  # enough to cover an FMA's latency on two pipes (4 cycles x 2, and some)
ITERATIONS = 20_000_000  # per run: about 0.1 s at 16 lanes and 3.5 GHz
REPEATS = 7


def _kernel_ir(lanes: int) -> str:
    """``void fma_loop(i64 n, float* out)``: n rounds of ACCUMULATORS chained FMAs, their sum
    stored so that nothing is optimised away."""
    vec = f"<{lanes} x float>"
    splat = lambda value: "<" + ", ".join([f"float {value}"] * lanes) + ">"  # noqa: E731
    scale, offset = splat("0x3FF0000020000000"), splat("0x3FE0000000000000")  # 1 + 2^-23 (float), 0.5
    body = [f"define void @fma_loop(i64 %n, float* %out) {{", "entry:", "  br label %loop", "loop:",
            "  %i = phi i64 [0, %entry], [%next, %loop]"]
    body += [f"  %a{k} = phi {vec} [zeroinitializer, %entry], [%b{k}, %loop]" for k in range(ACCUMULATORS)]
    body += [f"  %b{k} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{k}, {vec} {scale}, {vec} {offset})"
             for k in range(ACCUMULATORS)]
    body += ["  %next = add i64 %i, 1", "  %more = icmp ult i64 %next, %n",
             "  br i1 %more, label %loop, label %done", "done:"]
    total = "%b0"
    for k in range(1, ACCUMULATORS):
        body.append(f"  %s{k} = fadd {vec} {total}, %b{k}")
        total = f"%s{k}"
    body += [f"  %first = extractelement {vec} {total}, i32 0", "  store float %first, float* %out",
             "  ret void", "}", f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})"]
    return "\n".join(body)


class _FmaLoop:
    def __init__(self, lanes: int) -> None:
        module = llvm.parse_assembly(_kernel_ir(lanes))
        module.verify()
        self._engine = llvm.create_mcjit_compiler(module, host_target_machine())
        self._engine.finalize_object()
        address = self._engine.get_function_address("fma_loop")
        self.run = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(address)


def fma_peak(threads: int = 0) -> float:
    """GFLOP/s of ``threads`` cores (0: every core this process may use) doing nothing but
    fp32 FMAs at the host's vector width; an FMA counts two flops."""
    threads = threads or available_cores()
    lanes = host_vector_bits() // 32
    loop = _FmaLoop(lanes)
    sinks = [(ctypes.c_float * 1)() for _ in range(threads)]
    best = float("inf")
    for _ in range(REPEATS):
        workers = [threading.Thread(target=loop.run, args=(ITERATIONS, ctypes.addressof(sink))) for sink in sinks]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = min(best, time.perf_counter() - started)
    return 2 * lanes * ACCUMULATORS * ITERATIONS * threads / best / 1e9


def main() -> None:
    cores = available_cores()
    print(f"fp32 FMA peak, {host_vector_bits() // 32} lanes: {fma_peak(1):.0f} GFLOP/s on one core, "
          f"{fma_peak(cores):.0f} on {cores}")


if __name__ == "__main__":
    main()
