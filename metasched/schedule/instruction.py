"""Instructions: one recorded call of a schedule primitive, and the table of their kinds.

An ``Instruction`` is a value: its kind (MetaSchedule's name, e.g. ``"SamplePerfectTile"``),
its inputs (random variables or literals, in call order), its attributes (literals) and its
outputs (the random variables it made). A ``Trace`` is a sequence of them plus the decisions
of the sampling instructions.

Each ``InstructionKind`` knows the Python method that applies it and that method's signature,
so one table serves replay, printing and parsing alike.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Optional, Union

# A literal an instruction may carry: an int, a float, a string, None, or a tuple of literals.
Literal = Union[int, float, str, None, tuple]


class RV:
    """A random variable: a name that a schedule maps to a block, a loop or an integer.

    Two random variables of one class and name are equal, so that traces compare by value;
    a schedule still rejects a variable made by another schedule."""

    __slots__ = ("name", "owner")
    prefix = "v"

    def __init__(self, name: str, owner: Optional[int] = None) -> None:
        self.name = name
        self.owner = owner

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def __str__(self) -> str:
        return self.name


class BlockRV(RV):
    """A handle to a block (the computation of one stage)."""

    __slots__ = ()
    prefix = "b"


class LoopRV(RV):
    """A handle to a loop (or, from ``sample_compute_location``, to the root or inline mark)."""

    __slots__ = ()
    prefix = "l"


class ExprRV(RV):
    """An integer drawn by a sampling instruction; usable wherever an integer is."""

    __slots__ = ()
    prefix = "v"


@dataclass(frozen=True)
class Instruction:
    """One primitive call: ``outputs = kind(inputs, attrs)``."""

    kind: str
    inputs: tuple[Any, ...]
    attrs: tuple[Literal, ...]
    outputs: tuple[RV, ...]


@dataclass(frozen=True)
class Param:
    """One parameter of a primitive's Python signature, in call order.

    ``role`` is ``"input"`` (one input), ``"inputs"`` (all remaining inputs, as ``*args``),
    ``"input_list"`` (all remaining inputs, as one list argument) or ``"attr"`` (the next
    attribute). ``keyword``: printed as ``name=value``."""

    name: str
    role: str
    keyword: bool = False


@dataclass(frozen=True)
class InstructionKind:
    """What a kind of instruction is: its name, the ``Schedule`` method that applies it, that
    method's parameters, the class of its outputs (``outputs``: ``"none"``, ``"one"`` or
    ``"list"``), whether it is pure (no effect but its outputs) and whether it carries a
    decision."""

    name: str
    method: str
    params: tuple[Param, ...]
    output_class: Optional[type]
    outputs: str = "none"
    pure: bool = False
    sampling: bool = False


def _kind(name: str, method: str, params: str, output_class: Optional[type] = None, outputs: str = "none",
          pure: bool = False, sampling: bool = False) -> InstructionKind:
    # params: "block:input loops:inputs name:attr n:attr=" (a trailing = marks a keyword)
    parsed = []
    for spec in params.split():
        pname, role = spec.split(":")
        keyword = role.endswith("=")
        parsed.append(Param(pname, role.rstrip("="), keyword))
    return InstructionKind(name, method, tuple(parsed), output_class, outputs, pure, sampling)


KINDS: dict[str, InstructionKind] = {k.name: k for k in (
    _kind("GetBlock", "get_block", "name:attr", BlockRV, "one", pure=True),
    _kind("GetLoops", "get_loops", "block:input", LoopRV, "list", pure=True),
    _kind("GetProducers", "get_producers", "block:input", BlockRV, "list", pure=True),
    _kind("GetConsumers", "get_consumers", "block:input", BlockRV, "list", pure=True),
    _kind("Split", "split", "loop:input factors:input_list", LoopRV, "list"),
    _kind("Fuse", "fuse", "loops:inputs", LoopRV, "one"),
    _kind("Reorder", "reorder", "loops:inputs"),
    _kind("Parallel", "parallel", "loop:input"),
    _kind("Vectorize", "vectorize", "loop:input"),
    _kind("Unroll", "unroll", "loop:input"),
    _kind("ComputeInline", "compute_inline", "block:input"),
    _kind("ReverseComputeInline", "reverse_compute_inline", "block:input"),
    _kind("ComputeAt", "compute_at", "block:input loop:input"),
    _kind("ReverseComputeAt", "reverse_compute_at", "block:input loop:input"),
    _kind("CacheRead", "cache_read", "block:input read_index:attr scope:attr", BlockRV, "one"),
    _kind("CacheWrite", "cache_write", "block:input write_index:attr scope:attr", BlockRV, "one"),
    _kind("RFactor", "rfactor", "loop:input factor_axis:attr", BlockRV, "one"),
    _kind("Annotate", "annotate", "block_or_loop:input key:attr value:input"),
    _kind("Unannotate", "unannotate", "block_or_loop:input key:attr"),
    _kind("SamplePerfectTile", "sample_perfect_tile", "loop:input n:attr= max_innermost_factor:attr=",
          ExprRV, "list", pure=True, sampling=True),
    _kind("SampleCategorical", "sample_categorical", "candidates:attr probs:attr",
          ExprRV, "one", pure=True, sampling=True),
    _kind("SampleComputeLocation", "sample_compute_location", "block:input",
          LoopRV, "one", pure=True, sampling=True),
)}

KINDS_BY_METHOD: dict[str, InstructionKind] = {k.method: k for k in KINDS.values()}


def output_count(kind: InstructionKind, inputs: tuple[Any, ...], attrs: tuple[Literal, ...]) -> Optional[int]:
    """How many outputs an instruction of ``kind`` with these arguments makes, when that is fixed
    (None when only running it can tell, as for ``get_loops``). The text and JSON forms check
    it, so that a malformed trace is caught where it is written rather than on replay."""
    if kind.outputs != "list":
        return 1 if kind.outputs == "one" else 0
    if kind.name == "Split":
        return len(inputs) - 1  # one loop per factor
    if kind.name == "SamplePerfectTile" and is_int(attrs[0]):
        return int(attrs[0])  # n factors
    return None


def decision_problem(inst: Instruction, decision: Any) -> Optional[str]:
    """What is wrong with ``decision`` as the decision of ``inst`` (None when nothing is): only
    a sampling instruction takes one; a kind with a list of outputs decides one integer per
    output (``SamplePerfectTile``: the factors), a kind with one output decides one integer."""
    kind = KINDS[inst.kind]
    shown = list(decision) if isinstance(decision, tuple) else decision  # as the text writes it
    if not kind.sampling:
        return f"{kind.method} is not a sampling instruction, so it takes no decision"
    if kind.outputs != "list":
        return None if is_int(decision) else f"the decision of {kind.method} is one integer, not {shown!r}"
    if not isinstance(decision, (tuple, list)) or not all(is_int(d) for d in decision):
        return f"the decision of {kind.method} is a list of integers, not {shown!r}"
    if len(decision) != len(inst.outputs):
        return (f"the decision of {kind.method} has one integer per output: {len(inst.outputs)} "
                f"here, not {len(decision)}")
    return None


def is_int(value: Any) -> bool:
    """An integer as a trace holds one: any ``numbers.Integral`` (numpy's too) but ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
