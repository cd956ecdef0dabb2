"""The ``Workload``: a parsed, parameter-bound tensor program, the starting point of every
schedule. Produced by ``metasched.lang.parse``; immutable."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from math import prod
from typing import Optional

import numpy as np

from metasched.arrays import aligned
from metasched.errors import check_integer
from metasched.ir.expr import BinOp, Call, Expr, Load, Neg, Var
from metasched.ir.analysis import simplify, substitute, transform, walk
from metasched.lang.reference import evaluate

REDUCE_OPS = ("sum", "prod", "max", "min")


@dataclass(frozen=True)
class TensorDecl:
    """A named dense tensor: an input, an output or an intermediate."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Axis:
    """A variable of a statement and its range ``0 .. extent`` (half-open)."""

    name: str
    extent: int

    @property
    def var(self) -> Var:
        return Var(self.name)


@dataclass(frozen=True)
class Statement:
    """One definition ``T[axes] (op)= body``: ``axes`` index the left side (the tensor's shape),
    ``reduce_axes`` are the body's other variables (empty for an element-wise definition).
    ``body`` loads inputs and tensors defined by earlier statements, indexed by axis variables."""

    name: str
    axes: tuple[Axis, ...]
    reduce_axes: tuple[Axis, ...]
    reduce_op: Optional[str]
    body: Expr
    dtype: str
    is_output: bool
    line: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.extent for a in self.axes)

    @property
    def tensor(self) -> TensorDecl:
        return TensorDecl(self.name, self.shape, self.dtype)

    @property
    def is_reduction(self) -> bool:
        return self.reduce_op is not None

    @property
    def reduce_length(self) -> int:
        """How many terms each output element combines (1 for an element-wise statement)."""
        return prod(a.extent for a in self.reduce_axes)

    def reads(self) -> list[str]:
        """Names of the tensors the body loads, in first-use order."""
        return list(self._reads)

    @cached_property
    def _reads(self) -> tuple[str, ...]:
        # Worked out once: scheduling asks it of every stage's statement for each consumer
        # and producer walk.
        seen: dict[str, None] = {}
        for node in walk(self.body):
            if isinstance(node, Load):
                seen.setdefault(node.buffer, None)
        return tuple(seen)


def reduce_init(op: str) -> float:
    """The value a reduction starts from."""
    return {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}[op]


# Float operators whose operands may come in either order.
_COMMUTATIVE = frozenset({"+", "*", "max", "min"})


def _statement_kind(s: Statement) -> str:
    """``op(body)`` of a reduction, ``body`` of an element-wise statement, with its axes renamed by
    position (spatial ``s0, s1, ...``, reduction ``r0, ...``), indices simplified again after the
    renaming (their terms then come in the new names' order), the operands of commutative float
    operators put in one order (by their text with the tensors' names left out) and then the
    tensors renamed by first use (``t0, t1, ...``)."""
    axes = {a.name: Var(f"s{k}") for k, a in enumerate(s.axes)}
    axes.update({a.name: Var(f"r{k}") for k, a in enumerate(s.reduce_axes)})

    def unnamed(e: Expr) -> str:
        return str(transform(e, lambda n: Load("T", n.indices, n.dtype_) if isinstance(n, Load) else None))

    def ordered(e: Expr) -> Optional[Expr]:
        if isinstance(e, Load):
            return Load(e.buffer, tuple(simplify(i) for i in e.indices), e.dtype_)
        if isinstance(e, BinOp) and e.op in _COMMUTATIVE and e.dtype in ("float32", "float64"):
            a, b = sorted((e.a, e.b), key=unnamed)
            return BinOp(e.op, a, b)
        return None

    body = transform(substitute(s.body, axes), ordered)
    tensors: dict[str, str] = {}
    for node in walk(body):
        if isinstance(node, Load):
            tensors.setdefault(node.buffer, f"t{len(tensors)}")
    body = transform(body, lambda n: Load(tensors[n.buffer], n.indices, n.dtype_) if isinstance(n, Load) else None)
    return f"{s.reduce_op}({body})" if s.is_reduction else str(body)


def _body_flops(body: Expr) -> int:
    # Float arithmetic, negation and math calls count one each; index arithmetic,
    # comparisons, conditionals and loads count nothing.
    count = 0
    for node in walk(body):
        if isinstance(node, BinOp) and node.dtype in ("float32", "float64"):
            count += 1
        elif isinstance(node, Neg) and node.dtype in ("float32", "float64"):
            count += 1
        elif isinstance(node, Call):
            count += 1
    return count


@dataclass(frozen=True)
class Workload:
    """A tensor program with its parameters bound.

    ``statements`` run in order; ``outputs`` are the statements marked ``output``; every other
    statement is an intermediate."""

    name: str
    params: dict[str, int]
    inputs: tuple[TensorDecl, ...]
    statements: tuple[Statement, ...]
    source: str = field(default="", compare=False, repr=False)
    file: str = field(default="<string>", compare=False, repr=False)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.params.items())), self.inputs, self.statements))

    @cached_property
    def canonical_text(self) -> str:
        """The program with its parameters bound, in one fixed layout: name, parameters, every
        tensor's shape and dtype, every statement's axes with their extents, reduction and body.
        Two workloads have the same text exactly when they are the same program (comments,
        spacing and the order of keyword parameters do not show); its hash is ``key``."""
        def axes(axes: tuple[Axis, ...]) -> str:
            return ", ".join(f"{a.name}:{a.extent}" for a in axes)

        params = ", ".join(f"{k} = {v}" for k, v in sorted(self.params.items()))
        lines = [f"workload {self.name}({params})"]
        lines += [f"input {t.name}: {t.dtype}{list(t.shape)}" for t in self.inputs]
        for s in self.statements:
            op = f"{s.reduce_op} over [{axes(s.reduce_axes)}]" if s.is_reduction else "="
            role = "output" if s.is_output else "intermediate"
            lines.append(f"{role} {s.name}: {s.dtype}[{axes(s.axes)}] {op} {s.body}")
        return "\n".join(lines) + "\n"

    @cached_property
    def key(self) -> str:
        """A stable identity of the bound program: the first 24 hex digits of the SHA-256 of
        ``canonical_text``, the same in every process and on every machine (unlike ``hash``,
        which Python salts per process). The tuning database finds a workload's records by it."""
        return hashlib.sha256(self.canonical_text.encode()).hexdigest()[:24]

    @cached_property
    def kind(self) -> str:
        """What sort of computation this is, whatever its sizes and names: the dtype, then its
        reductions in order (every statement when it has none), each as ``op(body)`` with the
        statement's axes renamed by position, the operands of ``+``, ``*``, ``max`` and ``min``
        in one order and the tensors it reads renamed by first use. The element-wise
        statements around a reduction (a bias, a ReLU, a padding) do not count: the space
        tiles the reductions, and fuses or inlines the rest. matmul_relu and
        dense_bias_relu are one kind, ``float32 sum(t0[r0, s1] * t1[s0, r0])``;
        conv2d_bias_relu is another at any channels and image size. ``tune`` warm-starts the
        cost model on records of a workload of the same kind."""
        chosen = [s for s in self.statements if s.is_reduction] or list(self.statements)
        return f"{self.dtype} " + "; ".join(_statement_kind(s) for s in chosen)

    @property
    def outputs(self) -> tuple[TensorDecl, ...]:
        return tuple(s.tensor for s in self.statements if s.is_output)

    @property
    def intermediates(self) -> tuple[TensorDecl, ...]:
        return tuple(s.tensor for s in self.statements if not s.is_output)

    @property
    def dtype(self) -> str:
        return self.inputs[0].dtype if self.inputs else self.statements[0].dtype

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(f"workload {self.name} defines no tensor {name!r}")

    def tensor(self, name: str) -> TensorDecl:
        for t in self.inputs:
            if t.name == name:
                return t
        return self.statement(name).tensor

    @property
    def flops(self) -> int:
        """Floating-point operations of one run: a multiply-add counts 2 (the multiply in the
        body and the add of the reduction); math calls count 1; copies and selects count 0."""
        total = 0
        for s in self.statements:
            points = prod(s.shape) * s.reduce_length
            total += points * (_body_flops(s.body) + (1 if s.is_reduction else 0))
        return total

    @property
    def nbytes(self) -> int:
        """Bytes of all the tensors (inputs, intermediates, outputs), each at its dtype."""
        tensors = self.inputs + tuple(s.tensor for s in self.statements)
        return sum(prod(t.shape) * np.dtype(t.dtype).itemsize for t in tensors)

    @property
    def max_reduce_length(self) -> int:
        return max((s.reduce_length for s in self.statements), default=1)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs drawn uniformly from [-1, 1) in the workload's dtype, the same for one seed,
        each starting on a cache line (``metasched.arrays``: a kernel timed on them times the
        same in every process)."""
        rng = np.random.default_rng(check_integer(seed, "random_inputs", "seed", 0))
        return [aligned(rng.uniform(-1.0, 1.0, size=t.shape).astype(t.dtype)) for t in self.inputs]

    def reference(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The outputs computed straight from the statements with numpy: the oracle."""
        return evaluate(self, inputs)

    def __str__(self) -> str:
        params = ", ".join(f"{k} = {v}" for k, v in self.params.items())
        return f"workload {self.name}({params})"

    @property
    def label(self) -> str:
        """``name(P=v, ...)``, as messages name the workload: ``matmul_relu(M=512, N=512, K=512)``."""
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.params.items())})"

    def __repr__(self) -> str:
        return f"<Workload {self.label}>"
