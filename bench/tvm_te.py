"""Any workload of our language in TVM's tensor expressions (TE), for the TVM peer
(``tvm_peer.py``): ``te_of(workload)`` gives the placeholders of its inputs and the tensors of
its outputs, ready for ``te.create_prim_func(inputs + outputs)``.

Runs only in the bench's TVM venv (``tvm_peer.py``'s docstring has the recipe); TVM is never a
dependency of metasched. Check that every built-in workload and every ``bench/ops/*.tensor``
file, at small sizes, builds with TVM's default (unscheduled) llvm build and matches our numpy
reference (``Workload.reference``, compared by ``assert_outputs_close``):

    /tmp/tvm/bin/python bench/tvm_te.py --check

It prints one line per workload, then two of its own: a tour of what the suite leaves out
(``_TOUR``, in float32 and float64) and a guarded load far outside its tensor (``_FAR_LOAD``).

The translation follows ``metasched.lang.reference``:

- each statement is one ``te.compute`` named as its tensor, its axes named as the statement's
  variables; an intermediate is a compute of its own (TVM's schedule rules decide what to
  inline, as for its TOPI operators), and ``create_prim_func`` allocates it;
- ``+=``, ``*=``, ``max=``, ``min=`` reduce over ``te.reduce_axis`` with ``te.sum``, a
  product ``comm_reducer`` (identity 1), ``te.max`` and ``te.min``, the reducers TOPI's
  pooling and softmax use, which TVM's rfactor recognises. Two differences from our reference,
  neither met by finite data: they start from the dtype's lowest/highest finite value, not
  from -inf/+inf (the same result unless every term is that infinity), and they combine by
  ``tir.Max``/``tir.Min``, which may drop a NaN term where ``np.max`` keeps it;
- ``a if COND else b`` is ``tir.if_then_else``, which performs only the taken branch: the LLVM
  backend lowers it to a branch, and vectorisation scalarises it where the lanes' conditions
  may differ. So a guarded load outside its tensor (a padding) is never performed, as our
  language promises; ``--check`` runs one that lies gigabytes away, also vectorized (with
  ``tir.Select`` instead, that kernel dies of a segmentation fault);
- index ``+ - *`` are TVM's int32 arithmetic, ``//`` and ``%`` ``floordiv``/``floormod``
  (Python's rounding, as ours), comparisons, ``and``, ``or``, ``not`` TVM's nodes of those names;
- value ``max``/``min`` are ``llvm.maximum``/``llvm.minimum`` (``call_llvm_pure_intrin``),
  NaN when an operand is, as ``np.maximum`` and our kernels are (TVM's ``Max`` is a select on
  an ordered comparison: ``max(rsqrt(-1), 0)`` would be 0, and a batch norm's ``rsqrt`` of a
  negative random variance feeds a ReLU in ``--check``); they vectorize as TVM's intrinsics do;
- ``exp log sqrt rsqrt tanh sigmoid abs erf`` are TVM's intrinsics of those names and ``pow``
  is ``tir.power``; float constants are made in the workload's dtype; an index used as a value
  (``Cast``) is converted to that dtype.

Unlike our reference, which evaluates in float64 and rounds the outputs, TVM computes in the
workload's dtype, as our kernels do; the tolerance of ``assert_outputs_close`` is made for that.
"""
from __future__ import annotations

import operator
import sys
from pathlib import Path

import tvm
from tvm import te

from metasched.ir.expr import BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Neg, Not, Select, Var

T = tvm.tirx

_COMPARE = {"<": T.LT, "<=": T.LE, ">": T.GT, ">=": T.GE, "==": T.EQ, "!=": T.NE}
_INDEX = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": T.floordiv, "%": T.floormod,
          "max": T.Max, "min": T.Min}
_VALUE = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": T.div}
# Value max and min: NaN when an operand is (the module's docstring says why).
_PROPAGATING = {"max": "llvm.maximum", "min": "llvm.minimum"}
_CALLS = {"exp": T.exp, "log": T.log, "sqrt": T.sqrt, "rsqrt": T.rsqrt, "tanh": T.tanh,
          "sigmoid": T.sigmoid, "abs": T.abs, "erf": T.erf, "pow": T.power}
_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min,
             "prod": te.comm_reducer(lambda x, y: x * y, lambda dtype: T.const(1, dtype), name="prod")}


class _Body:
    """One statement's body in TE: ``tensors`` by name, ``env`` the TVM variable of each of
    the statement's variables (its axes and reduction axes)."""

    def __init__(self, dtype: str, tensors: dict, env: dict) -> None:
        self.dtype, self.tensors, self.env = dtype, tensors, env

    def index(self, e: Expr):
        """An index expression (int32, as TE's axes) or a condition (bool)."""
        if isinstance(e, IntImm):
            return T.const(e.value, "int32")
        if isinstance(e, Var):
            return self.env[e.name]
        if isinstance(e, Neg):
            return T.const(0, "int32") - self.index(e.a)
        if isinstance(e, Not):
            return T.Not(self.index(e.a))
        if isinstance(e, BinOp):
            a, b = self.index(e.a), self.index(e.b)
            if e.op in _COMPARE:
                return _COMPARE[e.op](a, b)
            if e.op == "and":
                return T.And(a, b)
            if e.op == "or":
                return T.Or(a, b)
            return _INDEX[e.op](a, b)
        raise TypeError(f"not an index expression or condition: {e!r}")

    def value(self, e: Expr):
        """A value expression, in the workload's dtype."""
        if isinstance(e, FloatImm):
            return T.const(e.value, self.dtype)
        if isinstance(e, Cast):
            return T.Cast(self.dtype, self.index(e.value))
        if isinstance(e, Load):
            return self.tensors[e.buffer](*(self.index(i) for i in e.indices))
        if isinstance(e, Neg):
            return -self.value(e.a)
        if isinstance(e, BinOp) and e.op in _PROPAGATING:
            return T.call_llvm_pure_intrin(self.dtype, _PROPAGATING[e.op], self.value(e.a), self.value(e.b))
        if isinstance(e, BinOp):
            return _VALUE[e.op](self.value(e.a), self.value(e.b))
        if isinstance(e, Call):
            return _CALLS[e.func](*(self.value(a) for a in e.args))
        if isinstance(e, Select):
            return T.if_then_else(self.index(e.cond), self.value(e.true_value), self.value(e.false_value))
        raise TypeError(f"not a value expression: {e!r}")


def te_of(workload) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """The placeholders of ``workload``'s inputs (in declaration order) and the tensors of its
    outputs (in statement order), as TVM TE; its intermediates are computes the outputs read."""
    dtype = workload.dtype
    inputs = [te.placeholder(t.shape, dtype=t.dtype, name=t.name) for t in workload.inputs]
    tensors = {t.name: p for t, p in zip(workload.inputs, inputs)}
    for s in workload.statements:
        tensors[s.name] = _compute(s, dtype, tensors)
    return inputs, [tensors[s.name] for s in workload.statements if s.is_output]


def _compute(s, dtype: str, tensors: dict) -> te.Tensor:
    reduce_axes = [te.reduce_axis((0, a.extent), name=a.name) for a in s.reduce_axes]

    def body(*spatial):
        env = {a.name: v for a, v in zip(s.axes, spatial)}
        env.update({a.name: r.var for a, r in zip(s.reduce_axes, reduce_axes)})
        value = _Body(dtype, tensors, env).value(s.body)
        if s.reduce_op is None:
            return value
        return _REDUCERS[s.reduce_op](value, axis=reduce_axes)

    return te.compute(s.shape, body, name=s.name, varargs_names=[a.name for a in s.axes])


def prim_func(workload) -> T.PrimFunc:
    """``workload`` as a TIR PrimFunc whose arguments are its inputs, then its outputs."""
    inputs, outputs = te_of(workload)
    return te.create_prim_func(inputs + outputs)


# -- the check ----------------------------------------------------------------------------------
BENCH = Path(__file__).resolve().parent
OPS = BENCH / "ops"


# What the suite leaves out, in float32 and in float64: two outputs, a product and a min reduction, pow, log,
# tanh, sigmoid, abs, sqrt, exp, erf, rsqrt, negation, indices used as values, a condition
# with not, or and !=.
_TOUR = """
workload language_tour_{dtype}(M = 5, N = 7, P = 3) {{
    input X: {dtype}[M, N]
    input Y: {dtype}[N]
    prodv[i] *= 1.0 + 0.5 * X[i, j]
    mn[j] min= X[i, j]
    g[i, j] = pow(abs(X[i, j]) + 0.5, Y[j]) + log(abs(X[i, j]) + 1.0) - tanh(X[i, j]) * sigmoid(-X[i, j])
    h[i, j] = (sqrt(abs(g[i, j])) if not (i == 2 or j != 3) else exp(-g[i, j])) + i * 0.25 + j
    output Z[i, j] = h[i, j] * prodv[i] + mn[j] / P + erf(X[i, j]) + rsqrt(1.0 + X[i, j] * X[i, j])
    output W[i] max= min(X[i, j], 0.25) - max(Y[j], -0.25)
}}
"""

# A conditional whose untaken branch loads up to 2 GiB before or after its tensor (TVM's
# int32 indices allow no further), once unscheduled and once with its loop vectorized by 8, as
# tuned schedules vectorize a padding inlined into a convolution. Built with ``tir.Select`` in
# place of ``if_then_else``, the vectorized kernel performs those loads and dies of a
# segmentation fault here (with the unscheduled one, TVM's simplifier and LLVM drop them).
_FAR_LOAD = """
workload untaken_far_load(N = 2048, AT = 1000, FAR = 524288) {
    input A: float32[N]
    output B[i] = A[(i - AT) * FAR] if i >= AT and i <= AT else A[i] + 1.0
}
"""


def check_workloads() -> list:
    """The workloads ``--check`` builds: the built-in suite at the tests' small sizes, then
    every ``bench/ops/*.tensor`` at ``ops_torch.SMALL``'s sizes, then ``_TOUR``."""
    import metasched
    from metasched import workloads

    sys.path.insert(0, str(BENCH.parent / "tests"))
    from conftest import SMALL_PARAMS
    from ops_torch import SMALL

    found = [workloads.get(name, **SMALL_PARAMS[name]) for name in workloads.names()]
    for path in sorted(OPS.glob("*.tensor")):
        found.append(metasched.parse(path.read_text(), path.stem, file=str(path), **SMALL[path.stem]))
    return found + [metasched.parse(_TOUR.format(dtype=dtype)) for dtype in ("float32", "float64")]


def run(kernel, workload, inputs):
    """``kernel`` (a compiled PrimFunc of ``workload``) run on numpy ``inputs``: its outputs,
    as numpy arrays, written into arrays that start as NaN (an element never written shows)."""
    import numpy as np

    device = tvm.cpu()
    args = [tvm.runtime.tensor(a, device) for a in inputs]
    outputs = [tvm.runtime.tensor(np.full(t.shape, np.nan, t.dtype), device) for t in workload.outputs]
    kernel(*args, *outputs)
    return [out.numpy() for out in outputs]


def _vectorized(func, block: str, lanes: int = 8):
    """``func`` with the innermost loop of ``block`` split by ``lanes`` and vectorized."""
    sch = tvm.s_tir.Schedule(func)
    loop = sch.get_loops(sch.get_sblock(block))[-1]
    sch.vectorize(sch.split(loop, [None, lanes])[1])
    return sch.mod


def check() -> None:
    """Build each of ``check_workloads`` with TVM's default llvm build, run it and compare it
    with the reference, then the untaken far load unscheduled and vectorized; one line each,
    and a non-zero exit on any failure."""
    import time
    import traceback

    import metasched

    far = metasched.parse(_FAR_LOAD)
    # (workload, its label, the PrimFuncs to build of it)
    cases = [(wl, wl.label, lambda wl: [prim_func(wl)]) for wl in check_workloads()]
    cases.append((far, f"{far.label}, unscheduled and vectorized by 8",
                  lambda wl: [prim_func(wl), _vectorized(prim_func(wl), "B")]))
    failures = 0
    for wl, label, funcs in cases:
        try:
            inputs = wl.random_inputs(seed=0)
            want = wl.reference(*inputs)
            built = 0.0
            for func in funcs(wl):
                started = time.perf_counter()
                kernel = tvm.compile(func, target="llvm")["main"]
                built += time.perf_counter() - started
                metasched.assert_outputs_close(wl, run(kernel, wl, inputs), want)
        except Exception as e:  # every failure is reported, then the check fails
            failures += 1
            print(f"FAIL {label}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            continue
        print(f"ok   {label}: {', '.join(f'{t.name}{list(t.shape)}' for t in wl.outputs)} "
              f"matches the reference (build {built:.2f} s)", flush=True)
    if failures:
        sys.exit(f"{failures} of {len(cases)} FAILED")
    print(f"all {len(cases)} match")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="build, run and check every workload at small sizes")
    if not parser.parse_args().check:
        parser.error("nothing to do: pass --check")
    check()
