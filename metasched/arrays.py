"""Arrays that start on a cache line.

numpy aligns its data to 16 bytes, so one array's 64-byte vector accesses straddle two cache
lines and another's do not, depending on where the allocator put each of them. A kernel's time
then changes from one process to the next (seen: 6% on a 512 matmul). The arrays the project
allocates itself (random inputs, outputs, workspaces) start on a 64-byte boundary, so that the
same program measures the same everywhere.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

CACHE_LINE = 64


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a cache line."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    raw = np.empty(math.prod(shape) * dtype.itemsize + CACHE_LINE, dtype=np.uint8)
    start = ctypes.addressof(ctypes.c_char.from_buffer(raw))  # a third of what raw.ctypes.data costs
    return np.ndarray(shape, dtype, buffer=raw, offset=-start % CACHE_LINE)


def aligned(array: np.ndarray) -> np.ndarray:
    """``array``'s values in a C-contiguous array that starts on a cache line (``array``
    itself when it already is one)."""
    if array.flags.c_contiguous and array.ctypes.data % CACHE_LINE == 0:
        return array
    copy = aligned_empty(array.shape, array.dtype)
    copy[...] = array
    return copy
