"""The numpy oracle: a workload's outputs computed straight from its statements.

Each statement is evaluated over its iteration domain (its axes, then its reduction axes): a
variable is an ``arange`` laid along its own dimension, so every sub-expression is an array that
broadcasts over the domain and has extent 1 on the axes it does not depend on. Everything is
float64; outputs are cast to the workload's dtype at the end.

Memory stays bounded by evaluating the domain a chunk at a time: outer axes are cut first,
reduction axes only when one slice of the outer axes is still too big, and partial reductions
are combined with the reduction's own operator. Loads whose indices are ``v + c`` slices are
views, and a sum of a product goes through ``einsum`` (BLAS), so the whole suite evaluates at
its default sizes in a few seconds.
"""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from metasched.errors import KernelArgumentError
from metasched.ir.analysis import as_affine, free_vars, walk
from metasched.ir.expr import BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Neg, Not, Select, Var

if TYPE_CHECKING:  # workload.py imports this module: no run-time import back
    from metasched.lang.workload import Statement, Workload

# Bytes of float64 temporaries one chunk may create, counted as if all were alive at once.
DEFAULT_CHUNK_BYTES = 256 * 2**20

_INIT = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_BINARY = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "//": np.floor_divide,
    "%": np.mod, "max": np.maximum, "min": np.minimum, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
    "and": np.logical_and, "or": np.logical_or,
}
_CALLS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "abs": np.abs,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),  # numpy has no erf; math's is exact
    "pow": np.power,
}
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
Array = Union[np.ndarray, float, int]


def evaluate(workload: "Workload", inputs: Sequence[np.ndarray], *,
             chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[np.ndarray]:
    """The outputs of ``workload`` (in statement order) for ``inputs`` (in declaration order).

    ``chunk_bytes`` bounds the temporaries of one chunk of an iteration domain. Raises
    ``KernelArgumentError`` for a wrong number, shape or dtype of inputs."""
    _check_inputs(workload, inputs)
    env = {t.name: np.asarray(a, dtype=np.float64) for t, a in zip(workload.inputs, inputs)}
    with np.errstate(all="ignore"):  # inf and NaN are results like any other here
        for statement in workload.statements:
            env[statement.name] = _statement(statement, env, max(chunk_bytes // 8, 1))
    return [env[s.name].astype(workload.dtype) for s in workload.statements if s.is_output]


def _check_inputs(workload: "Workload", inputs: Sequence[np.ndarray]) -> None:
    if len(inputs) != len(workload.inputs):
        names = ", ".join(t.name for t in workload.inputs)
        raise KernelArgumentError(f"{workload.name} takes {len(workload.inputs)} input(s) ({names}), "
                                  f"got {len(inputs)}")
    for decl, array in zip(workload.inputs, inputs):
        if not isinstance(array, np.ndarray):
            raise KernelArgumentError(f"input {decl.name} must be a numpy array, got {type(array).__name__}")
        if array.shape != decl.shape:
            raise KernelArgumentError(f"input {decl.name} must have shape {decl.shape}, got {array.shape}")
        if array.dtype != np.dtype(decl.dtype):
            raise KernelArgumentError(f"input {decl.name} must be {decl.dtype}, got {array.dtype}")


def _statement(s: "Statement", env: dict[str, np.ndarray], budget: int) -> np.ndarray:
    axes = s.axes + s.reduce_axes
    extents = [a.extent for a in axes]
    position = {a.name: d for d, a in enumerate(axes)}
    spatial = len(s.axes)
    # A sum of a product never materialises the product: einsum contracts it.
    contract = s.reduce_op == "sum" and isinstance(s.body, BinOp) and s.body.op == "*"
    chunk = _chunk_extents(s.body, position, extents, spatial, budget, contract)
    out = np.empty(s.shape)
    tiles = [range(0, extent, step) for extent, step in zip(extents, chunk)]
    for outer in itertools.product(*tiles[:spatial]):
        partial = None
        for inner in itertools.product(*tiles[spatial:]):
            window = [(a, min(a + c, e)) for a, c, e in zip(outer + inner, chunk, extents)]
            part = _Chunk(window, position, env).result(s, contract)
            partial = part if partial is None else _COMBINE[s.reduce_op](partial, part)
        out[tuple(slice(a, min(a + c, e)) for a, c, e in zip(outer, chunk, extents))] = partial
    return out


def _chunk_extents(body: Expr, position: dict[str, int], extents: list[int], spatial: int,
                   budget: int, contract: bool) -> list[int]:
    """Chunk extents along each domain axis so that the estimated temporaries fit ``budget``
    elements: each node of the body costs the product of the chunk extents it depends on."""
    nodes = [n for n in walk(body) if not (contract and n is body)]
    groups = [tuple(position[v] for v in free_vars(n)) for n in nodes]

    def cost(c: list[int]) -> int:
        return sum(math.prod(c[d] for d in g) for g in groups) + math.prod(c[:spatial])

    chunk = list(extents)
    for d in range(len(chunk)):  # outer axes first, reduction axes last
        if cost(chunk) <= budget:
            break
        lo, hi = 1, chunk[d]  # bisect for the largest extent along d that fits
        while lo < hi:
            chunk[d] = (lo + hi + 1) // 2
            if cost(chunk) <= budget:
                lo = chunk[d]
            else:
                hi = chunk[d] - 1
        chunk[d] = lo
    return chunk


class _Chunk:
    """One chunk of a statement's domain: ``window[d]`` is the (start, stop) of axis ``d``."""

    def __init__(self, window: list[tuple[int, int]], position: dict[str, int],
                 env: dict[str, np.ndarray]) -> None:
        self.window = window
        self.position = position
        self.env = env
        self.shape = tuple(b - a for a, b in window)

    def result(self, s: "Statement", contract: bool) -> np.ndarray:
        """The statement's (partial) result over this chunk's spatial window."""
        spatial = len(s.axes)
        if contract:
            return self._sum_of_product(s.body.a, s.body.b, spatial)
        value = np.broadcast_to(self.value(s.body), self.shape)
        if s.reduce_op is None:
            return value
        return _REDUCE[s.reduce_op](value, axis=tuple(range(spatial, len(self.shape))))

    def var(self, name: str) -> np.ndarray:
        d = self.position[name]
        shape = [1] * len(self.shape)
        shape[d] = self.shape[d]
        return np.arange(*self.window[d]).reshape(shape)

    def index(self, e: Expr) -> Array:
        if isinstance(e, IntImm):
            return e.value
        if isinstance(e, Var):
            return self.var(e.name)
        if isinstance(e, Neg):
            return -self.index(e.a)
        if isinstance(e, Not):
            return np.logical_not(self.index(e.a))
        if isinstance(e, BinOp):
            return _BINARY[e.op](self.index(e.a), self.index(e.b))
        raise TypeError(f"not an index expression or condition: {e}")

    def value(self, e: Expr, clip: bool = False) -> Array:
        """``clip``: inside a branch of a conditional, where a load may lie outside its tensor
        on the elements whose other branch is taken; it is clamped and its value discarded."""
        if isinstance(e, FloatImm):
            return e.value
        if isinstance(e, Cast):
            return np.asarray(self.index(e.value), dtype=np.float64)
        if isinstance(e, Load):
            return self.load(e, clip)
        if isinstance(e, Neg):
            return -self.value(e.a, clip)
        if isinstance(e, BinOp):
            return _BINARY[e.op](self.value(e.a, clip), self.value(e.b, clip))
        if isinstance(e, Call):
            return _CALLS[e.func](*(self.value(a, clip) for a in e.args))
        if isinstance(e, Select):
            taken = self.index(e.cond)
            return np.where(taken, self.value(e.true_value, True), self.value(e.false_value, True))
        raise TypeError(f"not a value expression: {e}")

    def load(self, e: Load, clip: bool) -> Array:
        array = self.env[e.buffer]
        view = self._view(e, array)
        if view is not None:
            return view
        indices = [self.index(i) for i in e.indices]
        if clip:
            indices = [np.clip(i, 0, n - 1) for i, n in zip(indices, array.shape)]
        return array[tuple(indices)]

    def _view(self, e: Load, array: np.ndarray) -> Optional[np.ndarray]:
        """The load as a strided view (no copy) when each index is ``a*v + c`` (a > 0, each
        variable once) or a constant, and the window stays inside the array; else None."""
        slices: list = []
        dims: list[int] = []
        for index, n in zip(e.indices, array.shape):
            form = as_affine(index)
            if form is None or len(form[0]) > 1:
                return None
            coeffs, c = form
            if not coeffs:
                if not 0 <= c < n:
                    return None
                slices.append(c)
                continue
            (name, a), = coeffs.items()
            d = self.position[name]
            start, stop = self.window[d]
            first, last = a * start + c, a * (stop - 1) + c
            if a <= 0 or d in dims or first < 0 or last >= n:
                return None
            slices.append(slice(first, last + 1, a))
            dims.append(d)
        view = array[tuple(slices)].transpose(sorted(range(len(dims)), key=dims.__getitem__))
        present = set(dims)
        return view[tuple(slice(None) if d in present else None for d in range(len(self.shape)))]

    def _sum_of_product(self, a: Expr, b: Expr, spatial: int) -> np.ndarray:
        """sum over the reduction axes of ``a * b``, by ``einsum`` over the axes each operand
        really has; an axis neither has multiplies the sum by its extent."""
        operands, subscripts, used = [], [], set()
        for e in (a, b):
            array = np.asarray(self.value(e))
            keep = [d for d in range(array.ndim) if array.shape[d] != 1]
            operands.append(array.reshape([array.shape[d] for d in keep]))
            subscripts.append("".join(_LETTERS[d] for d in keep))
            used.update(keep)
        out_dims = [d for d in range(spatial) if d in used]
        result = np.einsum(f"{subscripts[0]},{subscripts[1]}->{''.join(_LETTERS[d] for d in out_dims)}",
                           *operands, optimize=True)
        unused = math.prod(self.shape[d] for d in range(spatial, len(self.shape)) if d not in used)
        shape = [self.shape[d] if d in used else 1 for d in range(spatial)]
        return np.broadcast_to(result.reshape(shape) * unused, self.shape[:spatial])
