"""Loop kinds, threading back ends, allocation, and what the emitted IR looks like."""
import os
import re

import numpy as np
import pytest

from metasched.codegen import CodegenOptions, compile_func, host_vector_bits, probe_threads
from metasched.codegen.runtime import (
    GompLauncher, PthreadLauncher, gomp_available, pthread_available,
)
from metasched.ir import Allocate

from codegen_builders import P, S, U, V, buf, f, func, ld, loop, op, st, v

rng = np.random.default_rng(1)
THREADINGS = [t for t, ok in (("gomp", gomp_available()), ("pthread", pthread_available())) if ok]


def scale_kernel(outer_kind, inner_kind, n=64, m=40, options=None):
    A, B = buf("A", n, m), buf("B", n, m)
    i, j = v("i"), v("j")
    store = st(B, (i, j), op("*", ld(A, i, j), f(2.0)))
    body = loop("i", n, outer_kind, loop("j", m, inner_kind, store))
    return compile_func(func("scale", [A], [B], body), options)


@pytest.mark.parametrize("threading", THREADINGS + ["serial"])
def test_parallel_loop_is_correct_on_every_backend(threading):
    k = scale_kernel(P, V, options=CodegenOptions(threading=threading))
    a = rng.standard_normal((64, 40)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], 2 * a)
    assert k.threading == threading
    calls_gomp = "GOMP_parallel" in k.llvm_ir
    calls_pthread = "pthread_create" in k.llvm_ir
    assert (calls_gomp, calls_pthread) == (threading == "gomp", threading == "pthread")


@pytest.mark.parametrize("launcher", [GompLauncher, PthreadLauncher])
def test_launchers_run_shares_on_distinct_threads(launcher):
    if launcher is GompLauncher and not gomp_available():
        pytest.skip("libgomp not available")
    thread_ids = probe_threads(launcher(2), 2)
    assert len(set(thread_ids)) == 2 and 0 not in thread_ids


def test_auto_threading_prefers_gomp():
    k = scale_kernel(P, S)
    assert k.threading == ("gomp" if gomp_available() else "pthread")


@pytest.mark.parametrize("extent", [1, 2, 3, 7])
def test_parallel_extents_smaller_and_not_divisible_by_threads(extent):
    A, B = buf("A", extent), buf("B", extent)
    i = v("i")
    body = loop("i", extent, P, st(B, (i,), op("+", ld(A, i), f(1.0))))
    k = compile_func(func("small", [A], [B], body), CodegenOptions(num_threads=3))
    a = rng.standard_normal(extent).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], a + 1)


def test_nested_parallel_runs_inner_serially():
    k = scale_kernel(P, P)
    a = rng.standard_normal((64, 40)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], 2 * a)
    if k.threading != "serial":
        outlined = re.findall(r"define internal void @\"?ms_scale\.par(\.\d+)?\"?\(", k.llvm_ir)
        assert len(outlined) == 1


def test_parallel_inside_serial_loop_captures_loop_variable():
    A, B = buf("A", 5, 30), buf("B", 5, 30)
    i, j = v("i"), v("j")
    body = loop("i", 5, S, loop("j", 30, P, st(B, (i, j), op("+", ld(A, i, j), f(1.0)))))
    k = compile_func(func("cap", [A], [B], body))
    a = rng.standard_normal((5, 30)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], a + 1)


def test_unrolled_loop_leaves_no_loop_in_ir():
    k = scale_kernel(U, U, n=4, m=6)
    assert "phi" not in k.llvm_ir and not re.search(r"br label %\"?\w*header", k.llvm_ir)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], 2 * a)


@pytest.mark.parametrize("rest", [0, 1, 2, 12, 15])
def test_vectorized_ir_is_wide_and_has_chunks_of_the_lanes_left(rest):
    # With AVX-512 the lanes left are one chunk; without, power-of-two chunks (the last of one
    # lane scalar code).
    k = scale_kernel(S, V, n=3, m=16 * 3 + rest)
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", k.llvm_ir)}
    if host_vector_bits() >= 512:
        rests = {rest} if rest > 1 else set()
    else:
        rests = {1 << b for b in range(1, 4) if rest >> b & 1}
    assert widths == {16} | rests
    a = rng.standard_normal((3, 16 * 3 + rest)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], 2 * a)


@pytest.mark.parametrize("m", [7, 12, 28, 30])
def test_a_chunk_of_the_lanes_left_touches_no_element_past_the_loop(m):
    # B's rows are written last to first, each A's row in the other order: a rest chunk that
    # stored past its row's end would overwrite the start of the row after it, written before,
    # with the start of another row of A.
    A, B = buf("A", 4, m), buf("B", 4, m)
    i, j = v("i"), v("j")
    body = loop("i", 4, S, loop("j", m, V, st(B, (op("-", 3, i), j), op("*", ld(A, i, j), f(2.0)))))
    k = compile_func(func("rows", [A], [B], body))
    a = rng.standard_normal((4, m)).astype(np.float32)
    np.testing.assert_array_equal(k(a)[0], 2 * a[::-1])


def test_pointer_parameters_are_noalias():
    k = scale_kernel(S, S)
    signature = re.search(r"define void @\"?ms_scale\"?\((.*)\)", k.llvm_ir).group(1)
    params = signature.split(",")  # A, B and the status word
    assert len(params) == 3 and all("noalias" in p for p in params)


def test_allocate_inside_parallel_loop():
    # Each row is staged through a scratch buffer that lives on the running thread's stack.
    A, B = buf("A", 16, 40), buf("B", 16, 40)
    T = buf("T", 40)
    i, j = v("i"), v("j")
    body = loop("i", 16, P, Allocate(T, loop("z", 1, S,
                loop("j", 40, V, st(T, (j,), op("*", ld(A, i, j), f(3.0)))),
                loop("j", 40, V, st(B, (i, j), op("+", ld(T, op("-", 39, j)), f(1.0)))))))
    k = compile_func(func("stage", [A], [B], body))
    a = rng.standard_normal((16, 40)).astype(np.float32)
    np.testing.assert_allclose(k(a)[0], 3 * a[:, ::-1] + 1, rtol=1e-6)
    if k.threading != "serial":
        outlined = k.llvm_ir[k.llvm_ir.index("ms_stage.par"):]
        assert "alloca [40 x float], align 64" in outlined


def test_allocate_in_unrolled_loop_reuses_one_slot():
    A, B = buf("A", 4, 8), buf("B", 4, 8)
    T = buf("T", 8)
    i, j = v("i"), v("j")
    body = loop("i", 4, U, Allocate(T, loop("z", 1, S,
                loop("j", 8, S, st(T, (j,), ld(A, i, j))),
                loop("j", 8, S, st(B, (i, j), op("*", ld(T, j), ld(T, j)))))))
    k = compile_func(func("reuse", [A], [B], body))
    assert k.llvm_ir.count("alloca [8 x float]") == 1
    a = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(k(a)[0], a * a, rtol=1e-6)


def test_workspace_buffers_are_allocated_by_the_kernel():
    A, B, W = buf("A", 10), buf("B", 10), buf("W", 10)
    i = v("i")
    body = loop("z", 1, S, loop("i", 10, V, st(W, (i,), op("*", ld(A, i), f(2.0)))),
                loop("i", 10, V, st(B, (i,), op("+", ld(W, i), f(1.0)))))
    k = compile_func(func("ws", [A], [B], body, workspaces=[W]))
    a = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_allclose(k(a)[0], 2 * a + 1, rtol=1e-6)
    assert "ptr noalias %\"W\"" in k.llvm_ir or "ptr noalias %W" in k.llvm_ir


def test_every_module_verifies_and_optimizes_at_all_levels():
    for level in (0, 1, 2, 3):
        k = scale_kernel(P, V, options=CodegenOptions(opt_level=level))
        a = rng.standard_normal((64, 40)).astype(np.float32)
        np.testing.assert_array_equal(k(a)[0], 2 * a)


@pytest.mark.skipif(not gomp_available() or not hasattr(os, "fork"),
                    reason="needs libgomp and fork")
# Forking a process whose threads run is what this test is about; Python 3.12 and newer warn of it.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_forked_child_gets_pthread_kernels_and_no_gomp_hang():
    parent_kernel = scale_kernel(P, V, options=CodegenOptions(threading="gomp"))
    a = np.ones((64, 40), np.float32)
    parent_kernel(a)  # starts libgomp's pool in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, never return into pytest
        try:
            child_kernel = scale_kernel(P, V)
            ok = child_kernel.threading == "pthread" and child_kernel(a)[0].sum() == 2 * a.size
            try:
                parent_kernel(a)
                ok = False
            except RuntimeError:
                pass
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
