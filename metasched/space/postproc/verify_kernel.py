"""``VerifyKernel``: reject the programs the code generator cannot make correct, or fast enough
to be worth a measurement, saying why.

Map of this file: ``VerifyKernel`` and its three checks of the lowered program, each usable on
any ``PrimFunc``: ``unrolled_work`` (``loop_program.UnrolledWork``, which
``RewriteParallelVectorizeUnroll`` asks too), ``vector_fallback``, and ``parallel_race`` with
the digit reasoning that proves an access belongs to one iteration of a parallel loop
(``_race``, ``_owned``, ``_tells``, ``_coordinate_form``, ``_determines``).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Mapping, Optional, Sequence

from metasched.errors import ScheduleError
from metasched.ir.access import Terms
from metasched.ir.analysis import Interval, free_vars, int_bounds, loads
from metasched.ir.expr import BinOp, Expr, IntImm, Var
from metasched.ir.stmt import Allocate, Buffer, For, ForKind, PrimFunc, Stmt, Store
from metasched.schedule import Schedule
from metasched.space.base import Postproc
from metasched.space.loop_program import (MAX_UNROLLED_WORK, Around, Lowered, Scope, flat_terms, index_terms,
                                          lowered, unrolled_work)

__all__ = ["VerifyKernel", "parallel_race", "unrolled_work", "vector_fallback"]


@dataclasses.dataclass
class VerifyKernel(Postproc):
    """Rejects a program that code generation would not make correct, or not fast enough to be
    worth measuring, saying why: ``apply`` raises ``ScheduleError(reason)`` (the space
    generator reports it with this postprocessor's name) and returns True otherwise;
    ``reason(sch)`` gives the reason, or None, without raising. The checks, on the lowered
    program:

    * unrolled work (``unrolled_work``, ``loop_program.UnrolledWork``): an estimate of the code
      LLVM must optimise, whose O3 time grows with it; at most ``max_unrolled_work``
      (``loop_program.MAX_UNROLLED_WORK``; bench/README.md has the measurements behind it).
      ``RewriteParallelVectorizeUnroll`` unrolls no further than this limit, so this check
      only guards programs made otherwise;
    * vectorized loops that code generation would run serially (``vector_fallback``: the
      predicate of ``metasched.ir.vectorizable``, the very one code generation asks);
    * races in parallel loops (``parallel_race``).

    The program is ``loop_program.lowered(sch)``: lowered here, unless the postprocessor
    before already holds the program of the schedule's current state."""

    max_unrolled_work: int = MAX_UNROLLED_WORK

    def apply(self, sch: Schedule) -> bool:
        reason = self.reason(sch)
        if reason is not None:
            raise ScheduleError(reason)
        return True

    def reason(self, sch: Schedule) -> Optional[str]:
        """Why ``sch`` is rejected, or None when it passes."""
        program = lowered(sch)
        work = program.unrolled_total()
        if work > self.max_unrolled_work:
            return (f"its unrolled loops make {work} expression nodes, more than max_unrolled_work="
                    f"{self.max_unrolled_work}: LLVM would take seconds to compile it")
        return _vector_fallback(program) or _parallel_race(program)


# The checks read the program as lowered (``Lowered.sites``), with each loop's kind as it is
# now (``Lowered.kind``): what they find of a loop depends on its variable, extent and body,
# and a loop inside a changed one has the same, whatever its own kind.
def vector_fallback(func: PrimFunc) -> Optional[str]:
    """Why some vectorized loop of ``func`` would run as a serial loop, or None."""
    return _vector_fallback(Lowered(func))


def _vector_fallback(program: Lowered) -> Optional[str]:
    for stmt, scope, _ in program.sites():
        if isinstance(stmt, For) and program.kind(stmt) is ForKind.VECTORIZED:
            reason = program.vector_fallback_reason(stmt, scope)
            if reason is not None:
                return f"vectorized loop {stmt.var} would run serially: {reason}"
    return None


def parallel_race(func: PrimFunc) -> Optional[str]:
    """Why two iterations of some parallel loop of ``func`` may race, or None when none can.

    Sound, never accepting a race: for every parallel loop, each buffer stored to in its body
    and not allocated there (code generation allocates those per thread) must be accessed,
    by every store and load of the body, only at elements that tell which iteration made
    the access (``_owned``). Conditions around accesses are ignored (that only adds
    accesses), and accesses are assumed in bounds, as lowering guarantees."""
    return _parallel_race(Lowered(func))


def _parallel_race(program: Lowered) -> Optional[str]:
    sites = program.sites()
    for position, (stmt, scope, _) in enumerate(sites):
        if isinstance(stmt, For) and stmt.extent > 1 and program.kind(stmt) is ForKind.PARALLEL:
            reason = _race(stmt, scope, sites, position)
            if reason is not None:
                return reason
    return None


# An access: its indices and the ranges of the loops inside the parallel loop around it, as
# (name, range) pairs outermost first (a value, so that ``_owned`` can be memoised).
_Access = tuple[tuple[Expr, ...], tuple[tuple[str, Interval], ...]]


def _race(loop: For, scope: Scope, sites: Sequence[tuple[Stmt, Scope, Around]], position: int) -> Optional[str]:
    """Why ``loop``, the statement at ``position`` of ``sites`` (the walk of a program: the
    statements inside the loop follow it, with more loops around them), may race, or None."""
    # By buffer, the distinct accesses: one tuple of indices (lowering shares one between a
    # block's stores and the read of its value) under the same loops is one access. Each
    # entry keeps its indices and loops, so that their identities stay theirs. The ranges of
    # the loops are worked out only for the buffers checked (most accesses are to buffers
    # allocated in the body, which code generation makes private to each thread).
    accesses_of: dict[str, dict[tuple[int, int], tuple[tuple[Expr, ...], Around]]] = {}
    written: set[str] = set()
    private: set[str] = set()
    depth = len(sites[position][2])  # the loops around ``loop``
    for stmt, _, around in itertools.islice(sites, position + 1, None):
        if len(around) <= depth:  # past the end of the loop's body
            break
        if isinstance(stmt, Allocate):
            private.add(stmt.buffer.name)
        elif isinstance(stmt, Store):  # only stored values read tensors (``loads``)
            written.add(stmt.buffer)
            found = [(ld.buffer, ld.indices) for ld in loads(stmt.value)]
            found.append((stmt.buffer, stmt.indices))
            for buffer, indices in found:
                accesses_of.setdefault(buffer, {}).setdefault((id(indices), id(around)), (indices, around))
    ranges: dict[int, tuple[tuple[str, Interval], ...]] = {}  # of the loops inside ``loop``
    for buffer in sorted(written - private):
        accesses = []
        for indices, around in accesses_of[buffer].values():
            if id(around) not in ranges:
                ranges[id(around)] = tuple((inner.var, (0, inner.extent - 1)) for inner, _ in around[depth + 1:])
            accesses.append((indices, ranges[id(around)]))
        if not _owned(loop.var, loop.extent, scope[buffer], tuple(accesses)):
            return (f"parallel loop {loop.var}: two of its iterations may access one element of "
                    f"{buffer}, one of them storing to it")
    return None


# A digit of the parallel variable v: (d, m) stands for (v // d) % m, with m == 0 for v // d.
_Digit = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class _Form:
    """A coordinate of one access, split by what its terms read: ``digits`` of the parallel
    variable with their coefficients, ``outer`` (the terms of enclosing loops: the same in
    every iteration), a constant ``base``, and ``terms`` of inner loops as ``(k, low, high)``,
    ``k`` times a value in ``[low, high]``."""

    digits: tuple[tuple[_Digit, int], ...]
    outer: frozenset[tuple[Expr, int]]
    base: int
    terms: tuple[tuple[int, int, int], ...]


@functools.lru_cache(maxsize=1 << 12)
def _owned(var: str, extent: int, buffer: Buffer, accesses: tuple[_Access, ...]) -> bool:
    """Whether every access in ``accesses`` touches only elements from which the iteration of
    the parallel loop ``var`` (of ``extent``) that made it can be told. An element is seen
    through coordinates: its flat offset, then its indices. Where every access gives a
    coordinate the same digits of the loop variable and the same outer terms
    (``_coordinate_form``), the coordinate tells each digit that stands apart from the other
    terms (``_tells``); once the digits told determine the variable (``_determines``), the
    coordinates left need not be read.

    Memoised: the stores of the programs of one search repeat (a mutant changes one tile
    size, most often of loops that do not change them), and their indices are the
    expressions lowering memoises (their hashes known)."""
    digits: list[_Digit] = []
    ranges = [dict(loops) for _, loops in accesses]
    for position in range(len(buffer.shape) + 1):
        coordinates = [flat_terms(buffer, indices) if position == 0 else index_terms(indices[position - 1])
                       for indices, _ in accesses]
        forms = [_coordinate_form(terms, var, inner) for terms, inner in zip(coordinates, ranges)]
        if any(form is None for form in forms) or len({(f.digits, f.outer) for f in forms}) != 1:
            continue
        digits.extend(digit for digit, k in forms[0].digits if _tells(forms, digit, k, extent))
        if _determines(digits, extent):
            return True
    return False


def _tells(forms: Sequence[_Form], digit: _Digit, k: int, extent: int) -> bool:
    """Whether the coordinate value tells ``digit`` (coefficient ``k``) in every access: the
    terms below ``|k|`` (other digits and inner terms, with the constant) span ``W < |k|``
    across all accesses, and the terms above are all multiples of some ``M`` with
    ``W + |k| * (largest digit) < M``. Then two accesses to one element agree modulo ``M``
    on the part below and the digit, which lie in a window narrower than ``M``, so they
    agree on it exactly, and the terms below are too narrow to hide a different digit."""
    lows, highs, above = [], [], []
    for form in forms:
        low = high = form.base
        others = [(c, 0, _largest(d, extent)) for d, c in form.digits if d != digit] + list(form.terms)
        for c, a, b in others:
            if abs(c) > abs(k) and a != b:
                above.append(c)
            elif abs(c) == abs(k) and a != b:
                return False
            else:  # below, or a single value
                low, high = low + min(c * a, c * b), high + max(c * a, c * b)
        lows.append(low)
        highs.append(high)
    window = max(highs) - min(lows)
    modulus = math.gcd(*above) if above else math.inf
    return window < abs(k) and window + abs(k) * _largest(digit, extent) < modulus


def _coordinate_form(terms: Terms, var: str, ranges: Mapping[str, Interval]) -> Optional[_Form]:
    """A coordinate (its ``index_terms``) as a ``_Form``, or None when the loop variable enters
    it other than through digits or not at all, or a term mixes inner and enclosing loops or
    reads memory (which the loop may change)."""
    digits: list[tuple[_Digit, int]] = []
    inner: list[tuple[int, int, int]] = []
    outer = []
    for atom, k in terms.items():
        if atom is None:
            continue
        if isinstance(atom, Var):  # the common case, without walking the atom
            names = {atom.name}
        elif loads(atom):
            return None
        else:
            names = free_vars(atom)
        if var in names:
            digit = _as_digit(atom, var)
            if digit is None:
                return None
            digits.append((digit, k))
        elif names.isdisjoint(ranges):
            outer.append((atom, k))
        elif names <= ranges.keys():
            try:
                inner.append((k, *int_bounds(atom, ranges)))
            except (KeyError, ValueError):
                return None
        else:
            return None
    if not digits:
        return None
    return _Form(tuple(sorted(digits)), frozenset(outer), terms.get(None, 0), tuple(inner))


def _largest(digit: _Digit, extent: int) -> int:
    """The largest value ``digit`` takes for ``v`` in ``range(extent)``."""
    d, m = digit
    top = (extent - 1) // d
    return min(top, m - 1) if m else top


def _as_digit(atom: Expr, var: str) -> Optional[_Digit]:
    """``v``, ``v // d``, ``v % m`` or ``(v // d) % m`` as a digit, else None."""
    if atom == Var(var):
        return 1, 0
    if not (isinstance(atom, BinOp) and isinstance(atom.b, IntImm) and atom.b.value > 0):
        return None
    if atom.op == "//" and atom.a == Var(var):
        return atom.b.value, 0
    if atom.op == "%":
        inner = _as_digit(atom.a, var)
        if inner is not None and inner[1] == 0:
            return inner[0], atom.b.value
    return None


def _determines(digits: Sequence[_Digit], extent: int) -> bool:
    """Whether knowing ``digits`` of ``v`` (in ``range(extent)``) tells ``v``. Known so far:
    ``v % low`` and ``v // high`` (at first ``low = 1``, ``high = extent``: ``v // extent`` is 0);
    ``v`` is told once ``high <= low``: ``v // high`` puts it in a window of ``high`` values,
    which ``v % low`` tells apart. ``v // d`` lowers ``high`` to ``d``; ``(v // d) % m`` raises
    ``low`` to ``d * m`` when ``d`` divides ``low``, and lowers ``high`` to ``d`` when ``high``
    divides ``d * m``."""
    low, high = 1, extent
    for _ in range(len(digits) + 1):  # each pass uses one more digit, or nothing changes
        for d, m in digits:
            if m == 0:
                high = min(high, d)
                continue
            if low % d == 0:
                low = math.lcm(low, d * m)
            if (d * m) % high == 0:
                high = min(high, d)
    return high <= low
