"""The Kernel object: argument checking, outputs, timing, recorded artefacts."""
import re

import numpy as np
import pytest

from metasched.codegen import CodegenOptions, Kernel, compile_func
from metasched.errors import KernelArgumentError

from codegen_builders import S, V, buf, f, func, ld, loop, op, st, v


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    A, B, C = buf("A", 4, 8), buf("B", 8), buf("C", 4, 8)
    i, j = v("i"), v("j")
    body = loop("i", 4, S, loop("j", 8, V, st(C, (i, j), op("+", ld(A, i, j), ld(B, j)))))
    return compile_func(func("addrow", [A, B], [C], body))


def arrays():
    return np.ones((4, 8), np.float32), np.arange(8, dtype=np.float32)


def test_call_allocates_outputs(kernel):
    a, b = arrays()
    (c,) = kernel(a, b)
    np.testing.assert_array_equal(c, a + b)


def test_run_writes_given_outputs(kernel):
    a, b = arrays()
    c = np.zeros((4, 8), np.float32)
    kernel.run(a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("make_args, fragment", [
    (lambda a, b: (a,), "takes 2 inputs"),
    (lambda a, b: (a, b, b), "takes 2 inputs"),
    (lambda a, b: (a, b[:4]), "'B' (argument 1) must have shape (8,)"),
    (lambda a, b: (a.astype(np.float64), b), "'A' (argument 0) must have dtype float32"),
    (lambda a, b: (np.ones((8, 4), np.float32).T, b), "C-contiguous"),
    (lambda a, b: (a, list(b)), "'B' (argument 1) must be a numpy.ndarray, got list"),
])
def test_wrong_arguments_raise_before_running(kernel, make_args, fragment):
    a, b = arrays()
    with pytest.raises(KernelArgumentError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        kernel(*make_args(a, b))


def test_wrong_output_arguments(kernel):
    a, b = arrays()
    with pytest.raises(KernelArgumentError, match="takes 2 inputs and 1 outputs"):
        kernel.run(a, b)
    with pytest.raises(KernelArgumentError, match="output 'C'.*shape"):
        kernel.run(a, b, np.zeros((8, 4), np.float32))
    read_only = np.zeros((4, 8), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(KernelArgumentError, match="read-only"):
        kernel.run(a, b, read_only)
    with pytest.raises(KernelArgumentError, match="overlaps"):
        kernel.run(a, b, a)


def test_non_contiguous_view_is_rejected(kernel):
    a = np.ones((4, 16), np.float32)[:, ::2]
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        kernel(a, np.zeros(8, np.float32))


def test_time_is_a_positive_median(kernel):
    a, b = arrays()
    seconds = kernel.time(a, b, repeat=3, min_repeat_seconds=0.002)
    assert isinstance(seconds, float) and 0 < seconds < 0.01
    assert kernel.time(a, b, np.empty((4, 8), np.float32), number=5, repeat=2) > 0


def test_records(kernel):
    assert 0 < kernel.compile_seconds < 5
    assert kernel.func.name == "addrow"
    assert re.search(r'define void @"?ms_addrow"?\(', kernel.llvm_ir)
    assert re.search(r'define void @"?ms_addrow"?\(', kernel.optimized_ir)
    assert "ms_addrow" in kernel.asm
    assert "addrow" in repr(kernel)


def test_options_validate():
    with pytest.raises(ValueError):
        CodegenOptions(threading="openmp")
    with pytest.raises(ValueError):
        CodegenOptions(num_threads=-1)
    with pytest.raises(ValueError):
        CodegenOptions(opt_level=4)


def test_bad_programs_raise_clear_errors():
    A, B = buf("A", 4), buf("B", 4)
    i = v("i")
    with pytest.raises(ValueError, match="buffer 'Z'"):
        compile_func(func("bad", [A], [B], loop("i", 4, S, st(B, (i,), ld(buf("Z", 4), i)))))
    with pytest.raises(ValueError, match="variable 'q'"):
        compile_func(func("bad", [A], [B], loop("i", 4, S, st(B, (v("q"),), f(1.0)))))
    with pytest.raises(ValueError, match="dimensions"):
        compile_func(func("bad", [A], [B], loop("i", 4, S, st(B, (i, i), f(1.0)))))


def test_compiling_from_several_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor

    def build_and_run(scale: int):
        A, B = buf("A", 50), buf("B", 50)
        i = v("i")
        body = loop("i", 50, V, st(B, (i,), op("*", ld(A, i), f(scale))))
        k = compile_func(func(f"s{scale}", [A], [B], body))
        a = np.arange(50, dtype=np.float32)
        return np.array_equal(k(a)[0], a * scale)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(build_and_run, range(12)))


def test_big_scratch_buffers_live_on_the_heap_inside_parallel_loops():
    # 4 MiB of scratch per iteration of a parallel loop: too big for a worker's stack.
    import numpy as np

    from metasched.codegen import compile_func
    from metasched.codegen.emit import MAX_STACK_BUFFER_BYTES
    from metasched.ir import Allocate, Buffer, For, ForKind, Load, PrimFunc, Seq, Store, Var

    n = 1 << 20
    assert n * 4 > MAX_STACK_BUFFER_BYTES
    x, y, tmp = Buffer("X", (4, n), "float32"), Buffer("Y", (4, n), "float32"), Buffer("T", (n,), "float32")
    i, j = Var("i"), Var("j")
    body = For("i", 4, ForKind.PARALLEL, Allocate(tmp, Seq((
        For("j", n, ForKind.SERIAL, Store("T", (j,), Load("X", (i, j)))),
        For("j", n, ForKind.SERIAL, Store("Y", (i, j), Load("T", (j,)))),
    ))))
    kernel = compile_func(PrimFunc("copy_via_heap", (x,), (y,), (), body))
    assert 'call ptr @"malloc"' in kernel.llvm_ir and 'call void @"free"' in kernel.llvm_ir
    data = np.random.default_rng(0).random((4, n), dtype=np.float32)
    (out,) = kernel(data)
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("threading", ["serial", "gomp", "pthread"])
def test_a_scratch_buffer_malloc_cannot_give_raises_memory_error(threading):
    # 2**61 bytes of scratch per iteration: malloc returns null on any 64-bit Linux. The code
    # then skips the loop body and sets its status word, and the call raises (it crashed,
    # writing through the null pointer, before the kernels had a status word).
    from metasched.codegen.runtime import gomp_available, pthread_available
    from metasched.ir import Allocate, BinOp, Buffer, For, ForKind, IntImm, Load, PrimFunc, Seq, Store, Var

    if threading == "gomp" and not gomp_available() or threading == "pthread" and not pthread_available():
        pytest.skip(f"no {threading} launcher here")
    n = 64
    x, y, huge = Buffer("X", (4, n), "float32"), Buffer("Y", (4, n), "float32"), Buffer("T", (2**59,), "float32")
    i, j = Var("i"), Var("j")
    # T is read back in reverse, so that LLVM cannot forward the stores and drop the malloc.
    body = For("i", 4, ForKind.PARALLEL, Allocate(huge, Seq((
        For("j", n, ForKind.SERIAL, Store("T", (j,), Load("X", (i, j)))),
        For("j", n, ForKind.SERIAL, Store("Y", (i, j), Load("T", (BinOp("-", IntImm(n - 1), j),)))),
    ))))
    kernel = compile_func(PrimFunc("huge_scratch", (x,), (y,), (), body), CodegenOptions(threading=threading))
    assert "@malloc" in kernel.optimized_ir.replace('"', "")
    data = np.ones((4, n), dtype=np.float32)
    message = r"huge_scratch: malloc could not allocate a scratch buffer on the heap \(T \(2305843009213693952 bytes\)\)"
    with pytest.raises(MemoryError, match=message):
        kernel(data)
    with pytest.raises(MemoryError, match=message):
        kernel.run(data, np.empty_like(data))
    with pytest.raises(MemoryError, match=message):
        kernel.timings(data, number=1, repeat=1)


def test_poison_makes_reads_of_unwritten_memory_fail_every_time():
    # Y reads a workspace nothing wrote: garbage without poison, NaN with it, on every run.
    import numpy as np

    from metasched.codegen import CodegenOptions, compile_func
    from metasched.ir import Allocate, Buffer, For, ForKind, Load, PrimFunc, Seq, Store, Var

    i = Var("i")
    x, y, w, t = (Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32"),
                  Buffer("W", (8,), "float32"), Buffer("T", (8,), "float32"))
    unwritten = For("i", 8, ForKind.SERIAL, Store("Y", (i,), Load("W", (i,))))
    kernel = compile_func(PrimFunc("reads_workspace", (x,), (y,), (w,), unwritten), CodegenOptions(poison=True))
    for _ in range(2):
        assert np.isnan(kernel(np.ones(8, np.float32))[0]).all()
    scratch = Allocate(t, For("i", 8, ForKind.SERIAL, Store("Y", (i,), Load("T", (i,)))))
    kernel = compile_func(PrimFunc("reads_scratch", (x,), (y,), (), scratch), CodegenOptions(poison=True))
    assert np.isnan(kernel(np.ones(8, np.float32))[0]).all()
    written = Seq((For("i", 8, ForKind.SERIAL, Store("W", (i,), Load("X", (i,)))), unwritten))
    kernel = compile_func(PrimFunc("writes_first", (x,), (y,), (w,), written), CodegenOptions(poison=True))
    np.testing.assert_array_equal(kernel(np.arange(8, dtype=np.float32))[0], np.arange(8))


def test_host_vector_bits_follows_the_cpu_features(monkeypatch):
    from metasched.codegen import target
    for features, bits in (("+sse2,+avx,+avx2,+fma,-avx512f", 256), ("+avx,+avx2,+avx512f,+avx512bw", 512),
                           ("+sse2,+sse4.1,-avx,-avx2", 128)):
        monkeypatch.setattr(target, "host_cpu", lambda features=features: ("x86_64-unknown-linux-gnu", "cpu", features))
        assert target.host_vector_bits() == bits
