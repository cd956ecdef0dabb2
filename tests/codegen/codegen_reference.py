"""A direct Python interpreter of loop programs: the oracle of the codegen tests. Loops of
every kind run in order; values are computed in float64 and rounded where stored."""
from __future__ import annotations

import math

import numpy as np

from metasched.ir import (
    Allocate, BinOp, Call, Cast, FloatImm, For, IfThenElse, IntImm, Load, Neg, Not, PrimFunc,
    Select, Seq, Store, Var,
)

_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b != 0 else (math.copysign(math.inf, a) if a else math.nan),
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "max": lambda a, b: a if (a != a or a > b) else b,
    "min": lambda a, b: a if (a != a or a < b) else b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


def _safe(fn):
    def wrapped(*args):
        try:
            return fn(*args)
        except (ValueError, OverflowError):
            return math.nan if not isinstance(args[0], float) or args[0] < 0 else math.inf
    return wrapped


_CALLS = {
    "exp": _safe(lambda x: math.exp(x) if x < 709 else math.inf), "log": _safe(math.log),
    "sqrt": _safe(math.sqrt), "rsqrt": _safe(lambda x: 1 / math.sqrt(x)), "tanh": math.tanh,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)) if x > -700 else 0.0, "abs": abs,
    "erf": math.erf, "pow": _safe(math.pow),
}


class Interpreter:
    def __init__(self, func: PrimFunc, arrays: dict[str, np.ndarray]) -> None:
        self.buffers = {b.name: b for b in func.params}
        self.arrays = {name: a.reshape(-1) for name, a in arrays.items()}
        self.env: dict[str, int] = {}

    def offset(self, name, indices):
        buffer = self.buffers[name]
        values = [self.expr(i) for i in indices]
        for v, extent in zip(values, buffer.shape):
            assert 0 <= v < extent, f"out of bounds access {name}{values} (shape {buffer.shape})"
        return sum(v * s for v, s in zip(values, buffer.strides))

    def expr(self, e):
        if isinstance(e, IntImm):
            return e.value
        if isinstance(e, FloatImm):
            return float(e.value)
        if isinstance(e, Var):
            return self.env[e.name]
        if isinstance(e, Load):
            return float(self.arrays[e.buffer][self.offset(e.buffer, e.indices)])
        if isinstance(e, BinOp):
            return _ARITH[e.op](self.expr(e.a), self.expr(e.b))
        if isinstance(e, Neg):
            return -self.expr(e.a)
        if isinstance(e, Not):
            return not self.expr(e.a)
        if isinstance(e, Cast):
            return float(self.expr(e.value))
        if isinstance(e, Call):
            return _CALLS[e.func](*[self.expr(a) for a in e.args])
        if isinstance(e, Select):
            return self.expr(e.true_value) if self.expr(e.cond) else self.expr(e.false_value)
        raise TypeError(e)

    def stmt(self, s):
        if isinstance(s, Store):
            self.arrays[s.buffer][self.offset(s.buffer, s.indices)] = self.expr(s.value)
        elif isinstance(s, Seq):
            for child in s.stmts:
                self.stmt(child)
        elif isinstance(s, For):
            for v in range(s.extent):
                self.env[s.var] = v
                self.stmt(s.body)
            del self.env[s.var]
        elif isinstance(s, IfThenElse):
            if self.expr(s.cond):
                self.stmt(s.then_body)
            elif s.else_body is not None:
                self.stmt(s.else_body)
        elif isinstance(s, Allocate):
            self.buffers[s.buffer.name] = s.buffer
            self.arrays[s.buffer.name] = np.full(s.buffer.size, np.nan, dtype=s.buffer.dtype)
            self.stmt(s.body)
            del self.arrays[s.buffer.name]
        else:
            raise TypeError(s)


def reference(func: PrimFunc, *inputs: np.ndarray) -> list[np.ndarray]:
    """The outputs of ``func`` on ``inputs`` (outputs start as NaN, workspaces too)."""
    arrays = {b.name: np.array(a, dtype=b.dtype, copy=True) for b, a in zip(func.inputs, inputs)}
    for b in func.outputs + func.workspaces:
        arrays[b.name] = np.full(b.shape, np.nan, dtype=b.dtype)
    interpreter = Interpreter(func, arrays)
    with np.errstate(all="ignore"):
        interpreter.stmt(func.body)
    return [arrays[b.name] for b in func.outputs]
