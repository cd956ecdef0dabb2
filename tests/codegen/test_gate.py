"""The gate (``codegen.gate``): a call through it does exactly what the Python path does, for
any arguments. It runs the kernel only on arguments the Python path accepts, and on everything
else it declines, so that the Python path accepts or explains them.

The arrays drawn here are views into larger parents, each checked byte for byte after the
call: an argument the gate let through wrongly would show as a difference, not as a crash."""
import sys
import sysconfig
from math import prod

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from metasched import parse
from metasched.build import build
from metasched.codegen.gate import GATE_DECLINED, GATE_RAN, gate_layout
from metasched.errors import KernelArgumentError

# Two inputs and an output of one shape; two outputs of a shape with a unit dimension and a
# workspace (the intermediate T).
WORKLOADS = {
    "add": parse("""
workload add(M = 3, N = 5) {
  input A: float32[M, N]
  input B: float32[M, N]
  output C[i, j] = A[i, j] * 2.0 + B[i, j]
}"""),
    "unit": parse("""
workload unit(M = 1, N = 6) {
  input A: float32[M, N]
  T[i, j] = A[i, j] + 1.0
  output C[i, j] = T[i, j] * T[i, j]
  output D[i, j] = T[i, j] - A[i, j]
}"""),
}
KERNELS = {name: build(wl) for name, wl in WORKLOADS.items()}

SLACK = 256  # bytes of a parent before and after its view
# Mostly what a kernel takes, so that one odd argument among good ones is drawn often.
VARIANTS = ("exact",) * 16 + ("float64", "big-endian", "int64", "transposed", "extra-dim", "flat", "more-rows", "fewer-rows",
            "strided", "fortran", "unit-stride", "unaligned", "read-only", "subclass", "list", "zero-d",
            "same-as-earlier", "overlapping-earlier")


class Sub(np.ndarray):
    """An ndarray subclass: the Python path takes it, the gate leaves it to the Python path."""


def _parent(nbytes: int, seed: int) -> np.ndarray:
    words = (nbytes + 2 * SLACK) // 4 + 1
    return np.random.default_rng(seed).uniform(-1, 1, words).astype(np.float32)


def _argument(variant: str, shape: tuple, made: list, parents: list, seed: int):
    """The array (or not) ``variant`` makes for a slot of ``shape`` float32."""
    dtype = {"float64": "<f8", "big-endian": ">f4", "int64": "<i8"}.get(variant, "<f4")
    itemsize = np.dtype(dtype).itemsize
    shape = {"transposed": shape[::-1], "extra-dim": (1, *shape), "flat": (prod(shape),), "zero-d": (),
             "more-rows": (shape[0] + 1, *shape[1:]), "fewer-rows": (shape[0] - 1, *shape[1:])}.get(variant, shape)
    strides = None
    if variant == "strided":
        strides = tuple(2 * s for s in np.empty(shape, dtype).strides)
    elif variant == "fortran":
        strides = np.empty(shape, dtype, order="F").strides
    elif variant == "unit-stride":  # C-contiguous still: a unit dimension's stride does not matter
        strides = tuple(0 if n == 1 else s for n, s in zip(shape, np.empty(shape, dtype).strides))
    if variant in ("same-as-earlier", "overlapping-earlier") and made:
        earlier = made[seed % len(made)]
        if variant == "same-as-earlier" or not isinstance(earlier, np.ndarray) or earlier.ndim == 0:
            return earlier
        base = earlier
        while isinstance(base.base, np.ndarray):
            base = base.base
        offset = earlier.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        return np.ndarray(earlier.shape, earlier.dtype, buffer=base, offset=offset + 4, strides=earlier.strides)
    parent = _parent(prod(shape) * itemsize * 2, seed)
    parents.append(parent)
    array = np.ndarray(shape, dtype, buffer=parent, offset=SLACK + (1 if variant == "unaligned" else 0),
                       strides=strides)
    if variant == "read-only":
        array.flags.writeable = False
    elif variant == "subclass":
        array = array.view(Sub)
    elif variant == "list":
        return array.tolist()
    return array


def _arguments(name: str, plan: list, seed: int) -> tuple[list, list]:
    """The arguments of ``plan`` (a variant per slot; more or fewer slots than the kernel has)
    and the parents they live in."""
    func = KERNELS[name].func
    shapes = [b.shape for b in func.inputs + func.outputs]
    made, parents = [], []
    for k, variant in enumerate(plan):
        made.append(_argument(variant, shapes[k % len(shapes)], made, parents, seed + k))
    return made, parents


def _outcome(call, arguments, parents):
    try:
        call(*arguments)
    except KernelArgumentError as err:
        return ("refused", str(err))
    return ("ran", [p.tobytes() for p in parents])


GATE_CODES: list = []  # what the gates of KERNELS returned, in order


def _recording(kernel) -> None:
    gate = kernel._gate

    def recording(arguments, tail):
        GATE_CODES.append(gate(arguments, tail))
        return GATE_CODES[-1]
    kernel._gate = recording


for _kernel in KERNELS.values():
    if _kernel._gate is not None:
        _recording(_kernel)


def _last_code():
    return GATE_CODES[-1] if GATE_CODES else None


def test_the_gate_is_used_on_this_python():
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("the gate reads the layout of CPython's default build")
    assert gate_layout()
    assert all(kernel._gate is not None for kernel in KERNELS.values())


def _check_against_the_python_path(name: str, plan: list, seed: int) -> None:
    kernel = KERNELS[name]
    GATE_CODES.clear()
    through_gate = _outcome(kernel.run, *_arguments(name, plan, seed))
    code = _last_code()
    python_path = _outcome(lambda *a: kernel.run(*a, poison=False), *_arguments(name, plan, seed))
    assert through_gate == python_path
    if code == GATE_RAN:
        kernel._checked_arguments(_arguments(name, plan, seed)[0])  # the Python path accepts them
    expected = len(kernel.func.inputs) + len(kernel.func.outputs)
    if len(plan) == expected and all(v == "exact" for v in plan):
        assert code == GATE_RAN


@settings(max_examples=300)  # microseconds each
@given(name=st.sampled_from(sorted(KERNELS)), seed=st.integers(0, 2**16),
       extra=st.sampled_from([-1, 0, 0, 0, 0, 0, 1]), variants=st.lists(st.sampled_from(VARIANTS), min_size=5))
def test_a_call_through_the_gate_does_what_the_python_path_does(name, seed, extra, variants):
    count = len(KERNELS[name].func.inputs) + len(KERNELS[name].func.outputs)
    _check_against_the_python_path(name, variants[:count + extra], seed)


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("variant", sorted(set(VARIANTS)))
def test_one_odd_argument_in_every_place(name, variant):
    slots = len(KERNELS[name].func.inputs) + len(KERNELS[name].func.outputs)
    for place in range(slots):
        for seed in range(slots):  # which earlier argument a "same" or "overlapping" one takes
            _check_against_the_python_path(name, ["exact"] * place + [variant] + ["exact"] * (slots - place - 1),
                                           seed)


@given(name=st.sampled_from(sorted(KERNELS)), seed=st.integers(0, 2**16))
def test_a_call_allocating_its_outputs_goes_through_the_gate(name, seed):
    kernel, wl = KERNELS[name], WORKLOADS[name]
    inputs = wl.random_inputs(seed=seed)
    got = kernel(*inputs)
    assert _last_code() == GATE_RAN
    for ours, want in zip(got, wl.reference(*inputs)):
        np.testing.assert_allclose(ours, want, rtol=1e-6, atol=1e-6)
    # an input the gate declines still runs, through the Python path
    subclassed = [x.view(Sub) for x in inputs]
    assert [o.tobytes() for o in kernel(*subclassed)] == [o.tobytes() for o in got]
    assert _last_code() == GATE_DECLINED


def test_poisoned_calls_take_the_python_path():
    kernel, wl = KERNELS["add"], WORKLOADS["add"]
    inputs = wl.random_inputs(seed=0)
    GATE_CODES.clear()
    kernel(*inputs, poison=True)
    assert not GATE_CODES
