"""Vector loads whose lanes lie a few elements apart (a strided convolution's input) are
contiguous loads and a shuffle: right for every stride, width and offset, and they read no
element outside the span the lanes read (the tensor here ends at a page the process may not
read, so a load past its end would kill the process)."""
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from metasched.codegen import compile_func

from codegen_builders import S, V, buf, f, func, ld, loop, op, st, v

CASES = [(stride, lanes, first) for stride in (2, 3, 4, 5) for lanes in (2, 3, 5, 8, 9, 16, 17) for first in (0, 1)]


def strided_kernel(stride, lanes, first, rows=3):
    """Y[r, i] = X[stride * (r * lanes + i) + first] * 2, the i loop of ``lanes`` vectorized,
    X exactly as long as the last lane needs."""
    n = rows * lanes
    x, y = buf("X", stride * (n - 1) + first + 1), buf("Y", rows, lanes)
    r, i = v("r"), v("i")
    index = op("+", op("*", stride, op("+", op("*", r, lanes), i)), first)
    body = loop("r", rows, S, loop("i", lanes, V, st(y, (r, i), op("*", ld(x, index), f(2.0)))))
    return compile_func(func("strided", [x], [y], body))


@pytest.mark.parametrize("stride, lanes, first", CASES)
def test_strided_vector_loads_take_every_stride_th_element(stride, lanes, first):
    kernel = strided_kernel(stride, lanes, first)
    x = np.random.default_rng(stride * 100 + lanes).standard_normal(kernel.func.inputs[0].shape).astype(np.float32)
    (y,) = kernel(x)
    np.testing.assert_array_equal(y.ravel(), 2 * x[first::stride])
    if stride <= 4:  # the shuffled path: no gather left
        assert "masked.gather" not in kernel.llvm_ir


GUARDED = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_strided_loads import CASES, strided_kernel
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(start + page, page, 0) == 0  # PROT_NONE: the page after the tensor
    for stride, lanes, first in CASES:
        kernel = strided_kernel(stride, lanes, first)
        size = kernel.func.inputs[0].shape[0]
        x = np.frombuffer(region, np.float32, count=size, offset=page - 4 * size)  # ends at the page
        x[:] = np.arange(size, dtype=np.float32)
        (y,) = kernel(x)
        assert (y.ravel() == 2 * x[first::stride]).all(), (stride, lanes, first)
    print("read within the tensor")
""")


def test_strided_vector_loads_read_nothing_past_the_tensor():
    here = str(pathlib.Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", GUARDED, here], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "read within the tensor" in done.stdout, done.stderr[-2000:]
