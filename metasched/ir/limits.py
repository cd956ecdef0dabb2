"""The integer limits of generated code, shared by every layer that checks a value before it
reaches machine code.

Generated code computes loop indices, extents, strides and byte offsets in signed 64-bit
arithmetic, where a value that does not fit wraps around silently and a kernel computes
garbage. So every integer is checked where it enters: the workload language (dimensions,
literals, parameters), a trace (its literals), the schedule primitives (split factors, new
buffers) and, as a last line, code generation.
"""
from __future__ import annotations

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# A buffer's size in bytes stays below this, so that a byte offset into it, and the sum or
# difference of two such offsets, always fits in an int64.
MAX_BUFFER_BYTES = 2**62


def fits_int64(value: int) -> bool:
    """Whether ``value`` is representable as a signed 64-bit integer."""
    return INT64_MIN <= value <= INT64_MAX
