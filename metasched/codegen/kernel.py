"""``Kernel``: a compiled ``PrimFunc`` that numpy arrays can be passed to."""
from __future__ import annotations

import ctypes
import numbers
from functools import cached_property, partial
from threading import local
from typing import TYPE_CHECKING, Optional, Sequence

import llvmlite.binding as llvm
import numpy as np

from metasched.arrays import aligned_empty
from metasched.codegen.emit import buffer_bytes, heap_buffers
from metasched.codegen.gate import GATE_OUT_OF_MEMORY, GATE_RAN, Tail, gate_layout
from metasched.codegen.options import CodegenOptions
from metasched.codegen.repeat import repeater
from metasched.codegen.runtime import enter_gomp
from metasched.codegen.target import assembly
from metasched.errors import KernelArgumentError, check_integer, check_type
from metasched.timing import median, repeat_seconds
from metasched.ir.stmt import Buffer

if TYPE_CHECKING:
    from metasched.codegen.compiler import Artifact


# Outputs ``__call__`` starts on a cache line (``metasched.arrays``) from this size on, where
# the alignment can change the kernel's time and the microsecond it costs cannot. Smaller ones
# come from numpy's allocator, as numpy's own results do: a small kernel's call then costs
# about what numpy's does (a fresh small block on a cache line cost more than it saved).
ALIGNED_OUTPUT_BYTES = 64 * 1024


class Kernel:
    """Machine code for ``func`` with the signature ``void name(ptr noalias, ...)`` taking the
    buffers of ``func.params`` (inputs, outputs, workspaces) in order, then a status word
    (``int32``, which the code sets to ``emit.OUT_OF_MEMORY`` where a scratch buffer on the heap
    cannot be allocated; the call then raises ``MemoryError``).

    ``kernel(*inputs)`` allocates the outputs and returns them; ``kernel.run(*inputs,
    *outputs)`` writes into given arrays. Arguments are checked before any machine code runs; a
    wrong one raises ``KernelArgumentError``. Both go in through the kernel's gate
    (``codegen.gate``), which checks plain arrays in machine code, so that a call costs about
    what a numpy call does; other arguments take a Python path that checks them one by one.

    One kernel may be called from several Python threads at once (ctypes releases the GIL, so
    the calls really overlap): each thread gets its own workspaces, allocated on its first
    call and kept for its later ones, so a kernel holds one set of workspaces per thread that
    has called it (freed when that thread ends). Every launcher (gomp, pthread, serial) runs
    parallel loops of concurrent calls correctly.
    """

    def __init__(self, artifact: Artifact, engine: llvm.ExecutionEngine, address: int, gate: int) -> None:
        self.artifact = artifact  # what it was loaded from (picklable: load it elsewhere)
        self.func = artifact.func
        self.llvm_ir = artifact.llvm_ir
        self.optimized_ir = artifact.optimized_ir
        self.compile_seconds = artifact.compile_seconds
        self.options: CodegenOptions = artifact.options
        self.threading = artifact.threading  # the launcher of parallel loops: gomp, pthread, serial
        self.num_threads = artifact.num_threads
        self._engine = engine  # owns the machine code: keep it as long as the kernel
        self._address = address
        self._function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(self.func.params) + 1))(address)
        # The gate, where this process lays out arrays as it reads them and no run is poisoned.
        self._gate = None
        if gate_layout() and not self.options.poison:
            self._gate = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.py_object, ctypes.c_void_p)(gate)
        self._gomp = self.threading == "gomp"
        # What makes each output of ``__call__``: on a cache line from ``ALIGNED_OUTPUT_BYTES`` on.
        self._new_outputs = [partial(aligned_empty if buffer_bytes(b) >= ALIGNED_OUTPUT_BYTES else np.empty,
                                     b.shape, np.dtype(b.dtype)) for b in self.func.outputs]
        # Workspaces hold intermediates while a call runs, so two calls running at once must
        # not share them. One set per thread, reused by its calls: allocating them per call
        # costs more (bench/threads.py measures it) and a lock would serialise the calls.
        self._per_thread = local()

    def _fresh(self, buffer, poison: bool) -> np.ndarray:
        """An output array: NaN-filled when poisoning (see ``CodegenOptions.poison``)."""
        array = aligned_empty(buffer.shape, buffer.dtype)
        if poison:
            array.fill(np.nan)
        return array

    def __repr__(self) -> str:
        return (f"<Kernel {self.func.name}: {len(self.func.inputs)} in, {len(self.func.outputs)} "
                f"out, threading={self.threading}, "
                f"compiled in {self.compile_seconds * 1e3:.1f} ms>")

    @cached_property
    def asm(self) -> str:
        """Host assembly of the optimised module."""
        return assembly(self.optimized_ir, self.options.opt_level)

    def __call__(self, *inputs: np.ndarray, poison: Optional[bool] = None) -> list[np.ndarray]:
        """Run on ``inputs``; returns freshly allocated outputs in ``func.outputs`` order.

        ``poison=True`` fills the outputs and workspaces with NaN before this run (default:
        ``options.poison``), so that a kernel which reads memory it never wrote shows it.
        Scratch buffers allocated inside the machine code are poisoned only by kernels
        compiled with ``CodegenOptions(poison=True)``.
        """
        if poison is None and self._gate is not None:
            outputs = [new() for new in self._new_outputs]
            if self._through_gate((*inputs, *outputs)):
                return outputs
        poison = self.options.poison if poison is None else poison
        self._check(inputs, self.func.inputs, "input", first_position=0)
        outputs = [self._fresh(b, poison) for b in self.func.outputs]
        workspaces = self._workspaces()
        self._enter(workspaces, poison=poison)
        self._function(*self._pointers(list(inputs) + outputs, workspaces))
        self._check_status()
        return outputs

    def run(self, *arrays: np.ndarray, poison: Optional[bool] = None) -> None:
        """Run on inputs followed by outputs, writing the outputs in place (``poison`` as in
        ``__call__``)."""
        if poison is None and self._gate is not None and self._through_gate(arrays):
            return
        poison = self.options.poison if poison is None else poison
        checked = self._checked_arguments(arrays)
        workspaces = self._workspaces()
        self._enter(workspaces, checked[len(self.func.inputs):], poison=poison)
        self._function(*self._pointers(checked, workspaces))
        self._check_status()

    def time(self, *arrays: np.ndarray, number: Optional[int] = None, repeat: int = 5,
             min_repeat_seconds: float = 0.05) -> float:
        """Median seconds per run, as TVM's time_evaluator measures it: the median of
        ``timings``."""
        return median(self.timings(*arrays, number=number, repeat=repeat,
                                   min_repeat_seconds=min_repeat_seconds))

    def timings(self, *arrays: np.ndarray, number: Optional[int] = None, repeat: int = 5,
                min_repeat_seconds: float = 0.05, warm_seconds: Optional[float] = None) -> list[float]:
        """Seconds per run in each of ``repeat`` repeats (``timing.repeat_seconds``).

        ``arrays`` are the inputs (outputs are then allocated) or inputs and outputs. After a
        warm-up run, ``number`` (default: doubled until one repeat lasts at least
        ``min_repeat_seconds``) back-to-back runs, in a machine code loop (``codegen.repeat``),
        are timed together, ``repeat`` times; each repeat gives elapsed / number;
        ``warm_seconds``, the time of a run just made, stands
        for the warm-up. Arguments are checked once, before timing; the runs use the calling
        thread's workspaces.
        """
        if len(arrays) == len(self.func.inputs):
            self._check(arrays, self.func.inputs, "input", first_position=0)
            arrays = tuple(arrays) + tuple(aligned_empty(b.shape, b.dtype)
                                           for b in self.func.outputs)
        if number is not None:
            check_integer(number, "Kernel.timings", "number", 1)
        check_integer(repeat, "Kernel.timings", "repeat", 1)
        check_type(min_repeat_seconds, "Kernel.timings", "min_repeat_seconds", numbers.Real, "a number of seconds")
        if not 0 <= min_repeat_seconds < float("inf"):
            raise ValueError(f"Kernel.timings: min_repeat_seconds must be finite and >= 0, not {min_repeat_seconds}")
        workspaces = self._workspaces()
        pointers = self._pointers(self._checked_arguments(arrays), workspaces)
        function, entry, loop = self._function, self._address, repeater(len(pointers))
        self._enter(workspaces, poison=False)
        seconds = repeat_seconds(lambda: function(*pointers), repeat=repeat,
                                 min_repeat_seconds=min_repeat_seconds, number=number,
                                 warm_seconds=warm_seconds, calls=lambda n: loop(entry, n, *pointers))
        self._check_status()
        return seconds

    def _through_gate(self, arrays: tuple) -> bool:
        """Run through the gate; False when it declined ``arrays`` and nothing ran."""
        if self._gomp:
            enter_gomp()
        try:
            tail = self._per_thread.tail
        except AttributeError:
            tail = self._per_thread.tail = Tail(self.func.inputs + self.func.outputs, self._workspaces(),
                                                self._status())
        code = self._gate(arrays, tail.address)
        if code == GATE_OUT_OF_MEMORY:
            self._check_status()
        return code == GATE_RAN

    def _workspaces(self) -> list[np.ndarray]:
        """The calling thread's workspaces, allocated on its first call."""
        try:
            return self._per_thread.arrays
        except AttributeError:
            arrays = [aligned_empty(b.shape, b.dtype) for b in self.func.workspaces]
            self._per_thread.arrays = arrays
            return arrays

    def _status(self) -> ctypes.c_int32:
        """The calling thread's status word (its calls take turns with it)."""
        try:
            return self._per_thread.status
        except AttributeError:
            self._per_thread.status = ctypes.c_int32(0)
            return self._per_thread.status

    def _check_status(self) -> None:
        """Raise ``MemoryError`` if a call since the last check could not allocate a scratch
        buffer (its outputs are then incomplete); clear the status word."""
        status = self._status()
        failed, status.value = status.value, 0
        if failed:  # emit.OUT_OF_MEMORY, the only status the code sets
            heap = [f"{b.name} ({buffer_bytes(b)} bytes)" for b in heap_buffers(self.func)]
            raise MemoryError(f"{self.func.name}: malloc could not allocate a scratch buffer on the heap "
                              f"({', '.join(heap)}), so the outputs were not computed")

    def _enter(self, workspaces: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = (), *,
               poison: bool = False) -> None:
        if self.threading == "gomp":
            enter_gomp()
        if poison:  # a run must not see what an earlier run left behind
            for array in list(workspaces) + list(outputs):
                array.fill(np.nan)

    # --- arguments ---------------------------------------------------------------------------
    def _checked_arguments(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        n_in, n_out = len(self.func.inputs), len(self.func.outputs)
        if len(arrays) != n_in + n_out:
            raise KernelArgumentError(
                f"{self.func.name} takes {n_in} inputs and {n_out} outputs "
                f"({', '.join(b.name for b in self.func.inputs + self.func.outputs)}), "
                f"got {len(arrays)} arrays")
        self._check(arrays[:n_in], self.func.inputs, "input", first_position=0)
        self._check(arrays[n_in:], self.func.outputs, "output", first_position=n_in)
        for k, out in enumerate(arrays[n_in:]):
            for j, other in enumerate(arrays):
                if j != n_in + k and np.may_share_memory(out, other):
                    raise KernelArgumentError(
                        f"output {self.func.outputs[k].name!r} (argument {n_in + k}) overlaps "
                        f"argument {j}; outputs must not share memory with other arguments")
        return list(arrays)

    def _check(self, arrays: Sequence[object], buffers: Sequence[Buffer], role: str,
               first_position: int) -> None:
        if role == "input" and len(arrays) != len(buffers):
            raise KernelArgumentError(
                f"{self.func.name} takes {len(buffers)} inputs "
                f"({', '.join(b.name for b in buffers)}), got {len(arrays)}")
        for k, (array, buffer) in enumerate(zip(arrays, buffers)):
            where = f"{role} {buffer.name!r} (argument {first_position + k})"
            if not isinstance(array, np.ndarray):
                raise KernelArgumentError(f"{where} must be a numpy.ndarray, "
                                          f"got {type(array).__name__}")
            if array.dtype != np.dtype(buffer.dtype):
                raise KernelArgumentError(f"{where} must have dtype {buffer.dtype}, "
                                          f"got {array.dtype}")
            if array.shape != tuple(buffer.shape):
                raise KernelArgumentError(f"{where} must have shape {tuple(buffer.shape)}, "
                                          f"got {array.shape}")
            if not (array.flags.c_contiguous and array.flags.aligned):
                raise KernelArgumentError(f"{where} must be C-contiguous and aligned "
                                          f"(use numpy.ascontiguousarray)")
            if role == "output" and not array.flags.writeable:
                raise KernelArgumentError(f"{where} is read-only")

    def _pointers(self, arrays: Sequence[np.ndarray],
                  workspaces: Sequence[np.ndarray]) -> list[int]:
        return ([a.ctypes.data for a in arrays] + [w.ctypes.data for w in workspaces]
                + [ctypes.addressof(self._status())])
