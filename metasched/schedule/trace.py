"""``Trace``: the instructions a schedule ran and the decisions of its sampling instructions.

A trace is a value (immutable, comparable, hashable). Replaying it on a workload with the same
decisions gives the same program, always. Map of this file:
  * ``Trace`` - the value; its text form (``str``, ``Trace.parse``; see ``trace_text``), its
    JSON form (``to_json``, ``Trace.from_json``), ``with_decision``, ``simplified``. A trace
    becomes a schedule again through ``metasched.schedule.replay``, which lies above both
    this module and ``Schedule``: a schedule records traces, and nothing here needs one.
  * the JSON decoder (``_JsonReader``), which checks everything the text parser checks.
  * ``diff`` - what differs between two traces, for a person.

The JSON form (``JSON_VERSION`` 1)::

    {"version": 1,
     "insts": [{"kind": "GetBlock", "inputs": [], "attrs": ["C"], "outputs": ["b0"]},
               {"kind": "Split", "inputs": [{"rv": "l1"}, null, 4], "attrs": [], "outputs": ["l2", "l3"]}],
     "decisions": {"4": [16, 32]}}

An input that is a random variable is ``{"rv": name}`` (its class is that of the earlier output
of that name); any other input or attribute is a literal, a tuple written as a list. A literal is
never an object, so the two cannot be confused. Decisions are keyed by instruction index.
"""
from __future__ import annotations

import difflib
import json
import numbers
import os
import uuid
from typing import Any, Iterator, Mapping, Union

from metasched.errors import TraceError, check_type
from metasched.ir.limits import INT64_MAX, INT64_MIN, fits_int64
from metasched.schedule.instruction import KINDS, RV, Instruction, decision_problem, output_count
from metasched.schedule.trace_text import format_instruction, format_value, parse_text

JSON_VERSION = 1
# A byte-order mark: editors on Windows may start a UTF-8 file with one. It is not part of the text.
_BOM = "\ufeff"


def _freeze(decision: Any) -> Any:
    return tuple(decision) if isinstance(decision, list) else decision


class Trace:
    """Instructions, and the decision of each sampling instruction by its index."""

    __slots__ = ("_insts", "_decisions")

    def __init__(self, insts: tuple[Instruction, ...] = (), decisions: Mapping[int, Any] = ()) -> None:
        self._insts = tuple(insts)
        self._decisions = tuple(sorted((int(i), _freeze(d)) for i, d in dict(decisions).items()))

    @property
    def insts(self) -> tuple[Instruction, ...]:
        return self._insts

    @property
    def decisions(self) -> dict[int, Any]:
        """Instruction index -> decision (a copy: the trace itself never changes)."""
        return dict(self._decisions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trace) and self._insts == other._insts and self._decisions == other._decisions

    def __hash__(self) -> int:
        return hash((self._insts, self._decisions))

    def __len__(self) -> int:
        return len(self._insts)

    def __getitem__(self, index: int) -> Instruction:
        """The instruction at ``index`` (a slice gives a tuple of instructions; decisions are
        ``trace.decisions[index]``)."""
        return self._insts[index]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self._insts)

    def __repr__(self) -> str:
        return f"<Trace of {len(self._insts)} instruction{'s' * (len(self._insts) != 1)}>"

    def __str__(self) -> str:
        """One line per instruction, as the Python that made it; ``Trace.parse`` reads it back."""
        decisions = self.decisions
        return "\n".join(format_instruction(inst, decisions.get(i)) for i, inst in enumerate(self._insts))

    @classmethod
    def parse(cls, text: str) -> Trace:
        """The trace ``str(trace)`` printed (blank lines and ``#`` comments allowed).

        Raises ``TraceError`` at the line and column of the first mistake: bad syntax, an unknown
        method, a wrong argument or number of targets, a name not defined by an earlier line or
        defined twice, a decision on an instruction that takes none or of the wrong shape, an
        integer outside the signed 64-bit range. A leading byte-order mark is skipped, as
        ``metasched.parse`` skips one."""
        if not isinstance(text, str):
            hint = " (decode bytes first: data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
            raise TraceError(f"Trace.parse needs the trace's text as a str, got {type(text).__name__}{hint}; "
                             "Trace.from_json reads the JSON form")
        insts, decisions = parse_text(text.removeprefix(_BOM))
        return cls(tuple(insts), decisions)

    def to_json(self) -> dict:
        """The JSON form (a dict of lists, strings and numbers; see the module's docstring)."""
        return {
            "version": JSON_VERSION,
            "insts": [{"kind": inst.kind,
                       "inputs": [_json_input(v) for v in inst.inputs],
                       "attrs": [_json_literal(a) for a in inst.attrs],
                       "outputs": [rv.name for rv in inst.outputs]} for inst in self._insts],
            "decisions": {str(i): _json_literal(d) for i, d in self._decisions},
        }

    @classmethod
    def from_json(cls, obj: Any) -> Trace:
        """The trace whose JSON form ``obj`` is (what ``to_json`` made, after any trip through
        ``json``: tuples come back from lists).

        Raises ``TraceError`` for an unknown version or kind and for any malformed entry."""
        return _JsonReader().read(obj)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the trace to ``path``: its JSON form when the name ends with ``.json``, else
        its text form, which reads like the Python that made it and is meant to be edited.
        The file is written whole beside ``path`` and then moved there, so that a failed write
        leaves what was there before. ``TraceError`` naming the file when it cannot be written."""
        check_type(path, "Trace.save", "path", (str, os.PathLike), "a str or os.PathLike")
        path = os.fspath(path)
        text = (json.dumps(self.to_json(), indent=1) if path.endswith(".json") else str(self)) + "\n"
        target = os.path.realpath(path)  # through a link, the file it names is replaced
        partial = f"{target}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial"
        try:
            with open(partial, "x", encoding="utf-8") as out:
                out.write(text)
            os.replace(partial, target)
        except OSError as err:
            if os.path.lexists(partial):
                os.unlink(partial)
            raise TraceError(f"cannot write the trace: {err.strerror or err}", file=path) from None

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> Trace:
        """The trace in the file ``path``, in either form (JSON when its first character is
        ``{``). Raises ``TraceError`` naming the file (and the line and column of a mistake in
        the text form), also when it cannot be read."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read().removeprefix(_BOM)
        except (OSError, UnicodeDecodeError) as err:
            raise TraceError(f"cannot read the trace: {err}", file=path) from None
        try:
            if text.lstrip().startswith("{"):
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as err:
                    raise TraceError(f"not valid JSON: {err}") from None
                return cls.from_json(obj)
            return cls.parse(text)
        except TraceError as err:
            raise TraceError(err.message, err.line, err.column, err.source_line, file=path) from None

    def with_decision(self, index: int, decision: Any) -> Trace:
        """The same trace with the decision of sampling instruction ``index`` replaced (a list
        becomes a tuple; None removes the decision, leaving the sampling free).

        Raises ``TraceError`` (a ``ValueError``) when there is no instruction ``index``, when it
        is not a sampling instruction or when the decision has the wrong shape for it."""
        if not isinstance(index, numbers.Integral) or not 0 <= index < len(self._insts):
            raise TraceError(f"no instruction {index}: the trace has {len(self._insts)}")
        inst, decisions = self._insts[index], self.decisions
        decision = _normalise(decision)
        if decision is not None or not KINDS[inst.kind].sampling:
            problem = decision_problem(inst, decision)
            if problem is not None:
                raise TraceError(f"instruction {index} (`{format_instruction(inst)}`): {problem}")
        if decision is None:
            decisions.pop(int(index), None)
        else:
            decisions[int(index)] = decision
        return Trace(self._insts, decisions)

    def without_decisions(self) -> Trace:
        """The same instructions with every sampling left free: replaying it draws a new
        program from the design space the trace describes."""
        return Trace(self._insts)

    def simplified(self) -> Trace:
        """The trace without the pure instructions (lookups, samplings) whose outputs nothing
        later uses, directly or through other dropped instructions. The remaining instructions
        keep their decisions."""
        used: set[RV] = set()
        kept: list[int] = []
        # Backwards, so that dropping an instruction frees the inputs only it used in one pass.
        for index in range(len(self._insts) - 1, -1, -1):
            inst = self._insts[index]
            if KINDS[inst.kind].pure and used.isdisjoint(inst.outputs):
                continue
            kept.append(index)
            used.update(v for v in inst.inputs if isinstance(v, RV))
        kept.reverse()
        decisions = self.decisions
        return Trace(tuple(self._insts[i] for i in kept),
                     {new: decisions[old] for new, old in enumerate(kept) if old in decisions})


def _normalise(value: Any) -> Any:
    """numpy integers to ints and lists to tuples: decisions and literals compare as plain Python."""
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def _json_input(value: Any) -> Any:
    return {"rv": value.name} if isinstance(value, RV) else _json_literal(value)


_PLAIN_JSON = frozenset({int, float, str, bool, type(None)})  # written as they are


def _json_literal(value: Any) -> Any:
    if type(value) in _PLAIN_JSON:  # most literals: no check against the abstract number types
        return value
    if isinstance(value, tuple):
        return [_json_literal(v) for v in value]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


class _JsonReader:
    """Decodes a JSON form, checking it entry by entry; a mistake names the instruction."""

    def __init__(self) -> None:
        self.defined: dict[str, RV] = {}

    def read(self, obj: Any) -> Trace:
        if not isinstance(obj, dict) or "version" not in obj:
            raise TraceError("a trace's JSON form is an object with a \"version\"")
        if obj["version"] != JSON_VERSION:
            raise TraceError(f"unknown trace version {obj['version']!r}: "
                             f"this metasched reads version {JSON_VERSION}")
        self._keys(obj, {"version", "insts", "decisions"}, "the trace")
        if not isinstance(obj["insts"], list) or not isinstance(obj["decisions"], dict):
            raise TraceError("\"insts\" must be a list and \"decisions\" an object")
        insts = tuple(self._inst(i, entry) for i, entry in enumerate(obj["insts"]))
        decisions = {}
        for key, value in obj["decisions"].items():
            index = int(key) if isinstance(key, str) and key.isdigit() else -1
            if not 0 <= index < len(insts):
                raise TraceError(f"a decision for {key!r}, which is not the index of an instruction")
            decision = self._literal(value, f"the decision of instruction {index}")
            problem = decision_problem(insts[index], decision)
            if problem is not None:
                raise TraceError(f"instruction {index} ({insts[index].kind}): {problem}")
            decisions[index] = decision
        return Trace(insts, decisions)

    def _inst(self, index: int, entry: Any) -> Instruction:
        where = f"instruction {index}"
        if not isinstance(entry, dict):
            raise TraceError(f"{where} must be an object, not {entry!r}")
        self._keys(entry, {"kind", "inputs", "attrs", "outputs"}, where)
        kind = KINDS.get(entry["kind"]) if isinstance(entry["kind"], str) else None
        if kind is None:
            raise TraceError(f"{where} has an unknown kind {entry['kind']!r}")
        where = f"instruction {index} ({kind.name})"
        if not all(isinstance(entry[k], list) for k in ("inputs", "attrs", "outputs")):
            raise TraceError(f"{where}: inputs, attrs and outputs must be lists")
        inputs = tuple(self._input(v, where) for v in entry["inputs"])
        attrs = tuple(self._literal(a, f"{where}: an attribute") for a in entry["attrs"])
        roles = [p.role for p in kind.params]
        fixed = roles.count("input")
        variadic = "inputs" in roles or "input_list" in roles
        if len(attrs) != roles.count("attr") or len(inputs) < fixed or (len(inputs) > fixed and not variadic):
            raise TraceError(f"{where} has {len(inputs)} inputs and {len(attrs)} attributes, "
                             f"which do not fit {kind.method}({', '.join(p.name for p in kind.params)})")
        names = entry["outputs"]
        expected = output_count(kind, inputs, attrs)
        if expected is not None and len(names) != expected:
            raise TraceError(f"{where} makes {expected} outputs, not {len(names)}")
        outputs = []
        for name in names:
            if not isinstance(name, str) or not name.isidentifier() or name in ("None", "True", "False"):
                raise TraceError(f"{where}: an output's name must be an identifier, not {name!r}")
            if name in self.defined or any(rv.name == name for rv in outputs):
                raise TraceError(f"{where} defines {name} again")
            outputs.append(kind.output_class(name))
        self.defined.update((rv.name, rv) for rv in outputs)
        return Instruction(kind.name, inputs, attrs, tuple(outputs))

    def _input(self, value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            return self._literal(value, f"{where}: an input")
        name = value.get("rv")
        if set(value) != {"rv"} or name not in self.defined:
            raise TraceError(f"{where}: input {value!r} is not a random variable "
                             "made by an earlier instruction")
        return self.defined[name]

    def _literal(self, value: Any, what: str) -> Any:
        if isinstance(value, list):
            return tuple(self._literal(v, what) for v in value)
        if isinstance(value, int) and not isinstance(value, bool) and not fits_int64(value):
            raise TraceError(f"{what}: the integer {value} does not fit in 64 bits "
                             f"(from {INT64_MIN} to {INT64_MAX})")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TraceError(f"{what} must be a number, a string, null or a list, not {value!r}")

    @staticmethod
    def _keys(obj: dict, keys: set[str], what: str) -> None:
        if set(obj) != keys:
            missing, extra = keys - set(obj), set(obj) - keys
            wrong = ([f"missing {sorted(missing)}"] * bool(missing)
                     + [f"unexpected {sorted(extra)}"] * bool(extra))
            raise TraceError(f"{what} has the wrong keys: {', '.join(wrong)}")


def diff(a: Trace, b: Trace) -> str:
    """A readable account of how ``b`` differs from ``a``: instructions only in ``a`` (``- i:``)
    or only in ``b`` (``+ j:``) with their text, and the decisions that changed on the
    instructions both share. ``"traces are identical"`` when they are equal."""
    if a == b:
        return "traces are identical"
    lines = []
    da, db = a.decisions, b.decisions
    matcher = difflib.SequenceMatcher(None, a.insts, b.insts, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            lines += [f"- {i}: {format_instruction(a.insts[i], da.get(i))}" for i in range(i1, i2)]
            lines += [f"+ {j}: {format_instruction(b.insts[j], db.get(j))}" for j in range(j1, j2)]
            continue
        for i, j in zip(range(i1, i2), range(j1, j2)):
            if da.get(i) != db.get(j):
                where = f"instruction {i}" if i == j else f"instruction {i} ({j} in the second trace)"
                lines.append(f"decision of {where} (`{format_instruction(a.insts[i])}`): "
                             f"{_shown(da.get(i))} -> {_shown(db.get(j))}")
    return "\n".join(lines)


def _shown(decision: Any) -> str:
    return "none" if decision is None else format_value(decision)
