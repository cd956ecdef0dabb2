"""The machine code loop that times a kernel's back-to-back runs: it calls the entry as often
as asked, with the pointers given, and a kernel timed through it still computes its outputs."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import metasched
from metasched import workloads
from metasched.codegen.llvmutil import I64, PTR, VOID
from metasched.codegen.repeat import repeater
from metasched.codegen.target import LLVM_LOCK, host_cpu, host_target_machine, jit


@pytest.fixture(scope="module")
def add_first_to_second():
    """The address of ``void f(ptr a, ptr b) { *b += *a; }`` on int64s (and its engine)."""
    module = ir.Module(name="count")
    module.triple = host_cpu()[0]
    function = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR]), name="add_first_to_second")
    a, b = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.store(builder.add(builder.load(b, typ=I64), builder.load(a, typ=I64)), b)
    builder.ret_void()
    with LLVM_LOCK:
        engine = jit(llvm.parse_assembly(str(module)), host_target_machine(0))
        address = engine.get_function_address("add_first_to_second")
    yield address  # while the engine, which holds the code, lives


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_the_loop_calls_the_entry_n_times_with_the_pointers(add_first_to_second, n):
    step, total = ctypes.c_int64(3), ctypes.c_int64(5)
    repeater(2)(add_first_to_second, n, ctypes.addressof(step), ctypes.addressof(total))
    assert total.value == 5 + 3 * n


def test_one_loop_per_arity():
    assert repeater(3) is repeater(3) and repeater(3) is not repeater(4)


def test_a_kernel_timed_in_the_loop_writes_its_outputs():
    wl = workloads.get("matmul_relu", M=16, N=24, K=8)
    kernel = metasched.build(wl)
    inputs = wl.random_inputs(seed=0)
    out = np.full((16, 24), np.nan, dtype=np.float32)
    seconds = kernel.timings(*inputs, out, number=3, repeat=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    metasched.assert_outputs_close(wl, [out], wl.reference(*inputs))
