"""Memory a kernel uses starts on a cache line, so that one program times the same in every
process: its stack frames (spilled vector registers), its heap scratch, and the arrays the
project allocates (inputs, outputs, workspaces)."""
import re

import numpy as np
import pytest

from metasched import workloads
from metasched.arrays import CACHE_LINE, aligned, aligned_empty
from metasched.codegen import compile_func
from metasched.codegen.emit import MAX_STACK_BUFFER_BYTES
from metasched.codegen.kernel import ALIGNED_OUTPUT_BYTES
from metasched.ir import Allocate

from codegen_builders import P, S, V, buf, f, func, ld, loop, op, st, v


def _starts_on_a_line(array: np.ndarray) -> bool:
    return array.ctypes.data % CACHE_LINE == 0


@pytest.mark.parametrize("shape, dtype", [((3, 5), "float32"), ((7,), "float64"), ((0, 4), "float32"),
                                          ((2, 3, 4), "int64")])
def test_aligned_arrays(shape, dtype):
    for _ in range(8):  # numpy alone gives a 16-byte boundary: some of these would miss
        empty = aligned_empty(shape, dtype)
        assert empty.shape == shape and empty.dtype == dtype and empty.flags.c_contiguous
        assert _starts_on_a_line(empty) or empty.size == 0
    values = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    copy = aligned(values[::-1] if values.ndim else values)
    np.testing.assert_array_equal(copy, values[::-1] if values.ndim else values)
    assert copy.flags.c_contiguous and (_starts_on_a_line(copy) or copy.size == 0)


def test_inputs_outputs_and_workspaces_start_on_a_cache_line():
    wl = workloads.get("matmul_relu", M=24, N=40, K=8)
    inputs = wl.random_inputs(seed=3)
    assert all(_starts_on_a_line(x) for x in inputs)
    np.testing.assert_array_equal(inputs[0], wl.random_inputs(seed=3)[0])  # still seeded
    # Outputs of ALIGNED_OUTPUT_BYTES and more: below, a kernel call allocates as numpy does.
    n = ALIGNED_OUTPUT_BYTES // 4
    A, B, W = buf("A", n), buf("B", n), buf("W", n)
    i = v("i")
    body = loop("z", 1, S, loop("i", n, V, st(W, (i,), op("*", ld(A, i), f(2.0)))),
                loop("i", n, V, st(B, (i,), op("+", ld(W, i), f(1.0)))))
    kernel = compile_func(func("ws", [A], [B], body, workspaces=[W]))
    for _ in range(4):
        (out,) = kernel(aligned(np.arange(n, dtype=np.float32)))
        assert _starts_on_a_line(out)
        np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) * 2 + 1)
    assert all(_starts_on_a_line(w) for w in kernel._workspaces())


def test_every_function_aligns_its_stack_to_a_cache_line():
    # The kernel, the outlined parallel body and the launcher's tasks alike: a vector register
    # spilled to an unaligned frame straddles two lines (seen: 1.7 ms instead of 1.2).
    A, B = buf("A", 64, 40), buf("B", 64, 40)
    i, j = v("i"), v("j")
    body = loop("i", 64, P, loop("j", 40, V, st(B, (i, j), op("*", ld(A, i, j), f(2.0)))))
    kernel = compile_func(func("frames", [A], [B], body))
    defined = [line for line in kernel.llvm_ir.splitlines() if line.startswith("define")]
    assert len(defined) >= 1 + 2 * (kernel.threading != "serial")
    assert all("alignstack(64)" in line for line in defined), defined


def test_heap_scratch_starts_on_a_cache_line():
    n = MAX_STACK_BUFFER_BYTES // 4 + 16
    X, Y, T = buf("X", 2, n), buf("Y", 2, n), buf("T", n)
    i, j = v("i"), v("j")
    body = loop("i", 2, S, Allocate(T, loop("z", 1, S,
                loop("j", n, V, st(T, (j,), op("+", ld(X, i, j), f(1.0)))),
                loop("j", n, V, st(Y, (i, j), ld(T, j))))))
    kernel = compile_func(func("heap", [X], [Y], body))
    # malloc gives 16-byte boundaries: 63 more bytes, and the buffer starts at the first line.
    assert re.search(rf'call ptr @"malloc"\(i64 {n * 4 + CACHE_LINE - 1}\)', kernel.llvm_ir)
    assert re.search(rf"and i64 %\S+, {CACHE_LINE - 1}", kernel.llvm_ir)
    x = aligned(np.random.default_rng(0).random((2, n), dtype=np.float32))
    np.testing.assert_array_equal(kernel(x)[0], x + 1)
