"""The gate: a kernel's cheap way in from Python.

Checking the arrays of a call in Python and fetching their data pointers through
``ndarray.ctypes`` costs about a microsecond per array, more than a small kernel runs. So
every kernel's module also holds a *gate* function, ``i32 gate(ptr arguments, ptr tail)``:
``arguments`` is the tuple of arrays the call was given (the ``*arrays`` tuple itself, passed
as a Python object), ``tail`` a per-thread table of addresses (``Tail``). The gate reads each
array's fields in place (numpy's ``PyArrayObject`` and CPython's tuple, whose layouts
compiled extensions depend on) and calls the kernel only when every argument is exactly what
it expects: an ``ndarray`` (not a subclass) of the buffer's dtype and shape, C-contiguous with
the natural strides, its data aligned to the element, an output writeable and sharing no
memory with another argument. Anything else returns ``GATE_DECLINED`` without running, and
``Kernel`` takes its Python path, which accepts what it can and explains what it cannot.

The layout is checked once per process (``gate_layout``): where it differs from what the
gate reads (another Python build, a future numpy), kernels use the Python path only.
"""
from __future__ import annotations

import ctypes
import functools
from math import prod
from typing import Sequence

import numpy as np
from llvmlite import ir

from metasched.codegen.llvmutil import ELEMENT_BYTES, I8, I32, I64, PTR, i64
from metasched.ir.stmt import Buffer

GATE_RAN = 0
GATE_DECLINED = 1  # an argument is not as the gate expects; nothing ran
GATE_OUT_OF_MEMORY = 2  # the kernel ran and set its status word (``emit.OUT_OF_MEMORY``)

# Byte offsets in the objects the gate reads (64-bit CPython with the GIL, numpy 1.7 to 2.x).
_OB_TYPE = 8  # PyObject: ob_refcnt, ob_type
_TUPLE_SIZE, _TUPLE_ITEMS = 16, 24  # PyTupleObject: ob_size, ob_item[]
_DATA, _ND, _DIMS, _STRIDES, _DESCR, _FLAGS = 16, 24, 32, 40, 56, 64  # PyArrayObject_fields
_WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE


def gate_symbol(kernel_symbol: str) -> str:
    return kernel_symbol + ".gate"


def emit_gate(module: ir.Module, kernel: ir.Function, inputs: Sequence[Buffer], outputs: Sequence[Buffer],
              workspaces: int, symbol: str) -> None:
    """Add the gate of ``kernel`` to ``module``: it checks a tuple of arrays for ``inputs``
    and ``outputs`` and calls ``kernel`` with their data pointers, then the ``workspaces``
    and the status word the tail holds.

    The tail (``Tail``) is an array of addresses: ``ndarray``, each argument's dtype object,
    each workspace's data, the status word."""
    arguments = list(inputs) + list(outputs)
    writes = [False] * len(inputs) + [True] * len(outputs)
    gate = ir.Function(module, ir.FunctionType(I32, [PTR, PTR]), name=symbol)
    args_tuple, tail = gate.args
    args_tuple.name, tail.name = "arguments", "tail"
    b = ir.IRBuilder(gate.append_basic_block("entry"))
    declined = gate.append_basic_block("declined")
    with b.goto_block(declined):
        b.ret(ir.Constant(I32, GATE_DECLINED))

    def field(base: ir.Value, offset: int, typ: ir.Type, name: str) -> ir.Value:
        return b.load(b.gep(base, [i64(offset)], source_etype=I8), typ=typ, name=name)

    def require(condition: ir.Value, what: str) -> None:
        passed = gate.append_basic_block(what)
        b.cbranch(condition, passed, declined)
        b.position_at_end(passed)

    def tail_entry(index: int, name: str) -> ir.Value:
        return b.load(b.gep(tail, [i64(index)], source_etype=PTR), typ=PTR, name=name)

    count = field(args_tuple, _TUPLE_SIZE, I64, "count")
    require(b.icmp_signed("==", count, i64(len(arguments))), "count.ok")
    ndarray = tail_entry(0, "ndarray")
    data, spans = [], []
    for k, buffer in enumerate(arguments):
        array = field(args_tuple, _TUPLE_ITEMS + 8 * k, PTR, f"{buffer.name}.object")
        require(b.icmp_unsigned("==", field(array, _OB_TYPE, PTR, "type"), ndarray), f"{buffer.name}.ndarray")
        require(b.icmp_unsigned("==", field(array, _DESCR, PTR, "descr"), tail_entry(1 + k, "dtype")),
                f"{buffer.name}.dtype")
        require(b.icmp_signed("==", field(array, _ND, I32, "nd"), ir.Constant(I32, len(buffer.shape))),
                f"{buffer.name}.nd")
        itemsize = ELEMENT_BYTES[buffer.dtype]
        dims, strides = field(array, _DIMS, PTR, "dims"), field(array, _STRIDES, PTR, "strides")
        for d, (extent, stride) in enumerate(zip(buffer.shape, buffer.strides)):
            got = b.load(b.gep(dims, [i64(d)], source_etype=I64), typ=I64)
            require(b.icmp_signed("==", got, i64(extent)), f"{buffer.name}.dim{d}")
            got = b.load(b.gep(strides, [i64(d)], source_etype=I64), typ=I64)
            require(b.icmp_signed("==", got, i64(stride * itemsize)), f"{buffer.name}.stride{d}")
        pointer = field(array, _DATA, PTR, f"{buffer.name}.data")
        start = b.ptrtoint(pointer, I64)
        require(b.icmp_unsigned("==", b.urem(start, i64(itemsize)), i64(0)), f"{buffer.name}.aligned")
        if writes[k]:
            flags = field(array, _FLAGS, I32, "flags")
            writeable = b.and_(flags, ir.Constant(I32, _WRITEABLE))
            require(b.icmp_unsigned("!=", writeable, ir.Constant(I32, 0)), f"{buffer.name}.writeable")
        data.append(pointer)
        spans.append((start, b.add(start, i64(prod(buffer.shape) * itemsize))))
    for k, buffer in enumerate(arguments):
        if not writes[k]:
            continue
        for j, other in enumerate(arguments):
            if j != k:  # two half-open spans overlap when each starts before the other ends
                overlap = b.and_(b.icmp_unsigned("<", spans[k][0], spans[j][1]),
                                 b.icmp_unsigned("<", spans[j][0], spans[k][1]))
                require(b.not_(overlap), f"{buffer.name}.apart{j}")
    first = 1 + len(arguments)
    rest = [tail_entry(first + w, f"workspace{w}") for w in range(workspaces)]
    status = tail_entry(first + workspaces, "status")
    b.call(kernel, data + rest + [status])
    failed = b.icmp_signed("!=", b.load(status, typ=I32), ir.Constant(I32, 0))
    b.ret(b.select(failed, ir.Constant(I32, GATE_OUT_OF_MEMORY), ir.Constant(I32, GATE_RAN)))


def _read(address: int, ctype: type) -> int:
    return ctype.from_address(address).value


@functools.cache
def gate_layout() -> bool:
    """Whether this process lays out tuples and arrays as the gate reads them: checked on
    real objects, once."""
    if ctypes.sizeof(ctypes.c_void_p) != 8 or object.__basicsize__ != 16 \
            or tuple.__basicsize__ != _TUPLE_ITEMS or tuple.__itemsize__ != 8:
        return False
    array = np.arange(15, dtype=np.float32).reshape(3, 5)
    frozen = array[1:]
    frozen.flags.writeable = False
    objects = (array, frozen)
    if _read(id(objects) + _TUPLE_SIZE, ctypes.c_ssize_t) != 2 or \
            [_read(id(objects) + _TUPLE_ITEMS + 8 * k, ctypes.c_void_p) for k in range(2)] != list(map(id, objects)):
        return False
    for a in objects:
        address = id(a)
        dims, strides = _read(address + _DIMS, ctypes.c_void_p), _read(address + _STRIDES, ctypes.c_void_p)
        if (_read(address + _OB_TYPE, ctypes.c_void_p) != id(np.ndarray)
                or _read(address + _DATA, ctypes.c_void_p) != a.ctypes.data
                or _read(address + _ND, ctypes.c_int32) != a.ndim
                or [_read(dims + 8 * d, ctypes.c_int64) for d in range(a.ndim)] != list(a.shape)
                or [_read(strides + 8 * d, ctypes.c_int64) for d in range(a.ndim)] != list(a.strides)
                or _read(address + _DESCR, ctypes.c_void_p) != id(a.dtype)
                or bool(_read(address + _FLAGS, ctypes.c_int32) & _WRITEABLE) != a.flags.writeable):
            return False
    # The gate tells a dtype by its object: numpy's built-in dtypes must be singletons.
    return all(np.empty(1, dtype).dtype is np.dtype(dtype) for dtype in ELEMENT_BYTES)


class Tail:
    """The addresses a gate reads besides its arguments, for one thread: ``ndarray``, the
    dtype object of each argument, the thread's workspaces and its status word. It keeps
    what they point to alive."""

    def __init__(self, arguments: Sequence[Buffer], workspaces: Sequence[np.ndarray],
                 status: ctypes.c_int32) -> None:
        self._keep = (workspaces, status)
        addresses = [id(np.ndarray)] + [id(np.dtype(b.dtype)) for b in arguments] \
            + [w.ctypes.data for w in workspaces] + [ctypes.addressof(status)]
        self.table = (ctypes.c_void_p * len(addresses))(*addresses)
        self.address = ctypes.addressof(self.table)
