"""Value numbering: a pure operation on the same operands is emitted once per function and reused
wherever that first instruction dominates.

Unrolled loops are copied out one iteration at a time, and every copy of a body asks for the same
index arithmetic (``fused // 49``, the row offsets of a tile...). Emitting it again in each copy
made most of a tiled kernel's IR, and building the IR in Python and printing it was the larger
part of a build. LLVM would merge the copies anyway; not emitting them saves that time.

Dominance comes from the structure of the emitted code. Every branch of control flow (a loop
body, the arm of an ``if``) is a *region*; a value emitted in a region dominates everything
emitted after it in the same region and in the regions nested in it, and nothing once the region
is closed. ``ValueTable`` keeps the open regions as a stack of tokens and answers a lookup only
while the region of the entry is still open. Every emitter that opens control flow must do so in
``ValueTable.region()`` (``FunctionEmitter.loop``, ``if_then``, ``if_else`` and ``choose`` do);
one that forgot would make LLVM's verifier refuse the module, not compute a wrong answer.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Hashable, Iterator

from llvmlite import ir


def operand_key(value: ir.Value) -> Hashable:
    """What identifies an operand: a constant by its type and value (equal constants are often
    distinct objects), any other value by its identity (instructions, arguments and phis live as
    long as the module; the table also keeps its entries' operands alive)."""
    if isinstance(value, ir.Constant):
        return ("constant", str(value.type), str(value.constant))
    return id(value)


class ValueTable:
    """The values emitted so far in one function, by operation and operands."""

    def __init__(self) -> None:
        self._regions: list[object] = [object()]
        # key -> (value, depth of its region, the region's token, operands kept alive)
        self._values: dict[Hashable, tuple[ir.Value, int, object, tuple[ir.Value, ...]]] = {}

    @contextmanager
    def region(self) -> Iterator[None]:
        """A branch of control flow: what is emitted in it is forgotten when it closes."""
        self._regions.append(object())
        try:
            yield
        finally:
            self._regions.pop()

    def numbered(self, operation: Hashable, operands: tuple[ir.Value, ...],
                 emit: Callable[[], ir.Value]) -> ir.Value:
        """The value of ``operation`` on ``operands``: emitted by ``emit()`` the first time,
        the same value again where that one dominates. ``operation`` must say everything that
        decides the result besides the operands (operator, result type...), and the operation
        must be pure: no memory read, no side effect."""
        key = (operation, *map(operand_key, operands))
        hit = self._values.get(key)
        if hit is not None:
            value, depth, token, _ = hit
            if depth < len(self._regions) and self._regions[depth] is token:
                return value
        value = emit()
        depth = len(self._regions) - 1
        self._values[key] = (value, depth, self._regions[depth], operands)
        return value
