"""The text form of a trace: each instruction printed as the Python call that made it, and read
back from that text.

Map of this file:
  * printing - ``format_value``, ``format_instruction``: generic, driven by each kind's params.
  * meaning - ``_Reader``: binds each call's arguments to its kind's parameters as Python would,
    resolves names to earlier outputs, checks targets and decisions. (The syntax is
    ``trace_syntax``'s.)
  * ``parse_text`` - the entry point; every mistake becomes a ``TraceError`` at a line and column.

Outputs print as assignment targets: none for a kind that makes nothing, ``x = ...`` for a kind
that makes one value, and a tuple target for a kind that makes a list: ``a, b = ...``, ``a, = ...``
for a list of one, and no target at all for an empty list. All are valid Python that unpacks
what the method returns, and the form alone tells the reader how many outputs there are.
"""
from __future__ import annotations

import difflib
import numbers
from typing import Any, Optional

from metasched.errors import TraceError
from metasched.schedule.instruction import (KINDS, KINDS_BY_METHOD, RV, Instruction, InstructionKind,
                                            decision_problem, output_count)
from metasched.schedule.trace_syntax import Arg, Call, Line, ListValue, Name, SourceError, Value, parse_lines

# ---------------------------------------------------------------------------------------- printing

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def format_value(value: Any) -> str:
    """A literal or random variable as trace text: RVs by name, strings in double quotes,
    floats by ``repr`` (finite ones only: the text has no ``inf``), tuples as lists."""
    if isinstance(value, RV):
        return value.name
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))  # numpy scalars would print as np.float64(...)
    if isinstance(value, str):
        return '"' + "".join(_escape(ch) for ch in value) + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    raise TypeError(f"a trace holds RVs, numbers, strings, None and lists of them, not {value!r}")


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch.isprintable():
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def format_instruction(inst: Instruction, decision: Any = None) -> str:
    """One line: ``outputs = sch.method(args, decision=...)`` (no decision when it is None)."""
    kind = KINDS[inst.kind]
    inputs, attrs = iter(inst.inputs), iter(inst.attrs)
    args = []
    for param in kind.params:
        if param.role == "inputs":
            args.extend(format_value(v) for v in inputs)
            continue
        if param.role == "input_list":
            text = format_value(tuple(inputs))
        else:
            text = format_value(next(inputs if param.role == "input" else attrs))
        args.append(f"{param.name}={text}" if param.keyword else text)
    if decision is not None:
        args.append(f"decision={format_value(decision)}")
    call = f"sch.{kind.method}({', '.join(args)})"
    names = [rv.name for rv in inst.outputs]
    if not names:
        return call
    trailing = "," if kind.outputs == "list" and len(names) == 1 else ""
    return f"{', '.join(names)}{trailing} = {call}"


# ----------------------------------------------------------------------------------------- meaning

class _Reader:
    """Turns syntax lines into instructions, one line at a time, remembering which names the
    earlier lines defined (and so the class of each)."""

    def __init__(self) -> None:
        self.defined: dict[str, tuple[RV, int]] = {}  # name -> (its RV, the line defining it)
        self.insts: list[Instruction] = []
        self.decisions: dict[int, Any] = {}

    def read(self, line: Line) -> None:
        kind = self._kind(line.call)
        bound, decision = self._bind(kind, line.call)
        inputs: list[Any] = []
        attrs: list[Any] = []
        for param in kind.params:
            value = bound[param.name]
            if param.role == "input":
                inputs.append(self._input(value))
            elif param.role == "inputs":
                inputs.extend(self._input(v) for v in value)
            elif param.role == "input_list":
                if not isinstance(value, ListValue):
                    raise SourceError(f"{param.name} of {kind.method} is a list: write [...]", value)
                inputs.extend(self._input(v) for v in value.items)
            else:
                attrs.append(self._literal(value, f"{param.name} of {kind.method}"))
        outputs = self._outputs(kind, line, tuple(inputs), tuple(attrs))
        inst = Instruction(kind.name, tuple(inputs), tuple(attrs), outputs)
        if decision is not None:
            value = self._literal(decision.value, "a decision")
            problem = decision_problem(inst, value)
            if not kind.sampling:
                raise SourceError(problem, decision)
            if value is not None:  # decision=None leaves the sampling free, as in Python
                if problem is not None:
                    raise SourceError(problem, decision.value)
                self.decisions[len(self.insts)] = value
        for rv in outputs:
            self.defined[rv.name] = (rv, line.line)
        self.insts.append(inst)

    def _kind(self, call: Call) -> InstructionKind:
        if call.receiver is None or call.receiver.name != "sch":
            where = call.receiver or call
            written = f"{call.receiver.name}.{call.method}" if call.receiver else call.method
            hint = f"; did you mean sch.{call.method}(...)?" if call.method in KINDS_BY_METHOD else ""
            raise SourceError(f"{written}(...) is not an instruction: instructions are methods of sch{hint}",
                              where)
        if call.method not in KINDS_BY_METHOD:
            close = difflib.get_close_matches(call.method, list(KINDS_BY_METHOD), n=3)
            hint = "; did you mean " + " or ".join(f"sch.{m}" for m in close) + "?" if close else ""
            raise SourceError(f"unknown instruction sch.{call.method}{hint}", call)
        return KINDS_BY_METHOD[call.method]

    def _bind(self, kind: InstructionKind, call: Call) -> tuple[dict[str, Any], Optional[Arg]]:
        """Arguments to parameters, as Python binds them; the ``decision=`` argument apart."""
        bound: dict[str, Any] = {}
        positional = [a for a in call.args if a.keyword is None]
        keywords = [a for a in call.args if a.keyword is not None]
        for before, arg in zip(call.args, call.args[1:]):
            if before.keyword is not None and arg.keyword is None:
                raise SourceError("a positional argument follows a keyword argument", arg)
        taken = 0
        for param in kind.params:
            if param.role == "inputs":  # *args: takes every remaining positional argument
                bound[param.name] = tuple(a.value for a in positional[taken:])
                taken = len(positional)
            elif taken < len(positional):
                bound[param.name] = positional[taken].value
                taken += 1
        if taken < len(positional):
            raise SourceError(f"{kind.method} takes {taken} positional argument{'s' * (taken != 1)}, "
                           f"not {len(positional)}", positional[taken])
        decision = None
        params = {p.name: p for p in kind.params}
        for arg in keywords:
            if arg.keyword == "decision":
                if decision is not None:
                    raise SourceError(f"{kind.method} got two decisions", arg)
                decision = arg
                continue
            param = params.get(arg.keyword)
            if param is None or param.role == "inputs":  # *args cannot be passed by keyword
                names = ", ".join(p.name for p in kind.params if p.role != "inputs") or "none"
                raise SourceError(f"{kind.method} has no keyword argument {arg.keyword} "
                               f"(its keywords: {names}{', decision' * kind.sampling})", arg)
            if arg.keyword in bound:
                raise SourceError(f"{kind.method} got two values for {arg.keyword}", arg)
            bound[arg.keyword] = arg.value
        missing = [p.name for p in kind.params if p.name not in bound]
        if missing:
            raise SourceError(f"{kind.method} is missing {', '.join(missing)}", call)
        return bound, decision

    def _input(self, value: Value) -> Any:
        if isinstance(value, Name):
            if value.name not in self.defined:
                raise SourceError(f"{value.name} is not defined by an earlier instruction", value)
            return self.defined[value.name][0]
        return self._literal(value, "an input")

    def _literal(self, value: Value, what: str) -> Any:
        if isinstance(value, Name):
            raise SourceError(f"{what} must be a constant (a number, string, None or list), "
                           f"not the name {value.name}", value)
        if isinstance(value, ListValue):
            return tuple(self._literal(v, what) for v in value.items)
        return value.value

    def _outputs(self, kind: InstructionKind, line: Line, inputs: tuple, attrs: tuple) -> tuple[RV, ...]:
        targets, call = line.targets, line.call
        if kind.outputs == "none" and targets:
            raise SourceError(f"{kind.method} returns nothing: drop the '... ='", targets[0])
        if kind.outputs == "one" and (line.tuple_targets or not targets):
            raise SourceError(f"{kind.method} returns one value: write 'x = sch.{kind.method}(...)'",
                           targets[0] if targets else call)
        if kind.outputs == "list" and targets and not line.tuple_targets:
            raise SourceError(f"{kind.method} returns a list: unpack it, as in 'a, b = ...' or 'a, = ...'",
                           targets[0])
        expected = output_count(kind, inputs, attrs)
        if expected is not None and len(targets) != expected:
            raise SourceError(f"{kind.method} here makes {expected} {kind.output_class.__name__}"
                           f"{'s' * (expected != 1)}, "
                           f"but {len(targets)} name{'s are' if len(targets) != 1 else ' is'} given",
                           targets[0] if targets else call)
        outputs = []
        for target in targets:
            if target.name in self.defined or any(rv.name == target.name for rv in outputs):
                first = self.defined.get(target.name, (None, target.line))[1]
                raise SourceError(f"{target.name} is already defined (line {first})", target)
            outputs.append(kind.output_class(target.name))
        return tuple(outputs)


def parse_text(text: str) -> tuple[list[Instruction], dict[int, Any]]:
    """The instructions and decisions that ``text`` writes. Raises ``TraceError`` with the line
    and column of the first mistake."""
    try:
        reader = _Reader()
        for line in parse_lines(text):
            reader.read(line)
        return reader.insts, reader.decisions
    except SourceError as e:
        source = text.split("\n")  # as lark counts lines
        shown = source[e.line - 1].rstrip("\r") if 1 <= e.line <= len(source) else None
        raise TraceError(e.message, e.line, e.column, shown) from None


