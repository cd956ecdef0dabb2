"""Instructions: one recorded call of a schedule primitive, and the table of their kinds.

An ``Instruction`` is a value: its kind (MetaSchedule's name, e.g. ``"SamplePerfectTile"``),
its inputs (random variables or literals, in call order), its attributes (literals) and its
outputs (the random variables it made). A ``Trace`` is a sequence of them plus the decisions
of the sampling instructions.

Each ``InstructionKind`` knows the Python method that applies it and that method's signature.
A primitive is defined once, as a ``Schedule`` method marked ``@primitive(kind)``: the kind is
derived from the method's signature and registered in ``KINDS``, and the decorator records
every call, so one table serves replay, printing and parsing alike.
"""
from __future__ import annotations

import collections.abc
import functools
import inspect
import numbers
from dataclasses import dataclass
from typing import (Any, Callable, Generic, Optional, Sequence, TypeVar, Union, get_args, get_origin,
                    get_type_hints)

# A literal an instruction may carry: an int, a float, a string, None, or a tuple of literals.
Literal = Union[int, float, str, None, tuple]


class RV:
    """A random variable: a name that a schedule maps to a block, a loop or an integer.

    Two random variables of one class and name are equal, so that traces compare by value;
    a schedule still rejects a variable made by another schedule, unless it is one of the
    handles in its trace (a replayed schedule's trace holds the handles of the trace replayed)."""

    __slots__ = ("name", "owner")
    prefix = "v"

    def __init__(self, name: str, owner: Optional[int] = None) -> None:
        self.name = name
        self.owner = owner

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.name)  # equal variables have equal names (str caches its hash)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def __reduce__(self) -> tuple:
        # Pickled as a call (search sends traces between processes): a tenth of the default's
        # work for a class with slots.
        return type(self), (self.name, self.owner)

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

    def __reduce__(self) -> tuple:
        # Pickled as a call, without what ``literals_normal`` kept.
        return Instruction, (self.kind, self.inputs, self.attrs, self.outputs)

    @functools.cached_property
    def literals_normal(self) -> bool:
        """Whether every literal input and attribute is as a primitive call records it
        (``is_normal``), as in any trace but one built by hand. Replay asks for every
        instruction it replays, and the samples and mutants of a design space replay the
        same instruction objects, so the answer is kept (the instruction never changes)."""
        return all(is_normal(v) for v in self.inputs if not isinstance(v, RV)) and \
            all(is_normal(a) for a in self.attrs)

    @functools.cached_property
    def call(self) -> Call:
        """How replay calls this instruction's primitive (``Call``): the same for every replay
        of this instruction object, so worked out once (the samples and mutants of a design
        space replay the same instruction objects, a few dozen per candidate)."""
        return Call.of(self)


@dataclass(frozen=True)
class Call:
    """How replaying an instruction calls its kind's method: ``slots`` says, for each
    parameter in order, where its value comes from (``role`` as ``Param.role``, the index of
    the first input or attribute it takes) and its keyword (None: positional); ``taken`` is
    how many inputs and attributes the call takes; ``as_is``: whether the call takes all of
    them and the literals are as a call records them, so that replay may record the
    instruction itself (``replay._recorded``, which still checks the handles' classes)."""

    slots: tuple[tuple[str, int, Optional[str]], ...]
    taken: tuple[int, int]
    as_is: bool

    @staticmethod
    def of(inst: Instruction) -> Call:
        """The call of ``inst`` (``KeyError`` for an unknown kind). An instruction with fewer
        inputs or attributes than the method takes gets slots past its end: ``arguments``
        then raises ``IndexError``, as indexing them always did."""
        slots = []
        taken = attrs_taken = 0
        for param in KINDS[inst.kind].params:
            if param.role == "input":
                slots.append(("input", taken, param.name if param.keyword else None))
                taken += 1
            elif param.role in ("inputs", "input_list"):
                slots.append((param.role, taken, param.name if param.keyword else None))
                taken = len(inst.inputs)
            else:
                slots.append(("attr", attrs_taken, param.name if param.keyword else None))
                attrs_taken += 1
        as_is = taken == len(inst.inputs) and attrs_taken == len(inst.attrs) and inst.literals_normal
        return Call(tuple(slots), (taken, attrs_taken), as_is)

    def arguments(self, inputs: list, attrs: tuple) -> tuple[list, dict]:
        """The positional and keyword arguments of the method for these inputs (handles of
        the replaying schedule, literals as the trace holds them) and attributes."""
        args: list = []
        keywords: dict = {}
        for role, at, keyword in self.slots:
            if role == "input":
                value = inputs[at]
            elif role == "attr":
                value = attrs[at]
            elif role == "inputs":
                args.extend(inputs[at:])
                continue
            else:  # input_list
                value = inputs[at:]
            if keyword is None:
                args.append(value)
            else:
                keywords[keyword] = value
        return args, keywords


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
    decision. ``count``: how many outputs a call with given inputs and attributes makes,
    when that is fixed for a kind with a list of outputs."""

    name: str
    method: str
    params: tuple[Param, ...]
    output_class: Optional[type]
    outputs: str = "none"
    pure: bool = False
    sampling: bool = False
    count: Optional[Callable[[tuple, tuple], Optional[int]]] = None


# Every kind, by name, registered by ``primitive`` when the ``Schedule`` class is defined.
KINDS: dict[str, InstructionKind] = {}
KINDS_BY_METHOD: dict[str, InstructionKind] = {}
# The undecorated method of each kind, by name (see ``apply``).
_METHODS: dict[str, Callable] = {}

T = TypeVar("T")


@dataclass(frozen=True)
class Decided(Generic[T]):
    """What the method of a sampling primitive returns: its outputs and the decision it took
    (``primitive`` records the decision and hands the caller only the outputs)."""

    outputs: T
    decision: Any


def primitive(name: str, *, pure: bool = False,
              count: Optional[Callable[[tuple, tuple], Optional[int]]] = None) -> Callable:
    """Make a ``Schedule`` method the primitive of instruction kind ``name`` (MetaSchedule's
    name), the one place a primitive is defined: its kind is derived from the method's
    signature, and each successful call is recorded in the schedule's trace.

    How the signature is read: a parameter annotated with a random-variable class (or a union
    holding one) is an input; ``*args`` are the remaining inputs; a sequence of values that may
    be random variables (``Sequence[Factor]``) is the remaining inputs as one list; any other
    parameter is an attribute (a literal). Keyword-only parameters are written ``name=value``
    in the text form. A parameter named ``decision`` makes the kind a sampling kind: the
    method then returns ``Decided(outputs, decision)``. The return annotation gives the
    outputs: ``None``, one random variable or a ``list`` of them. ``pure``: the call changes
    nothing but makes its outputs (a lookup, a sampling), so ``Trace.simplified`` may drop it
    when nothing uses them. ``count(inputs, attrs)``: the number of outputs, where fixed."""

    def wrap(method: Callable) -> Callable:
        kind, public_return = _derive(name, method, pure, count)
        if name in KINDS or kind.method in KINDS_BY_METHOD:
            raise ValueError(f"instruction kind {name} ({kind.method}) is defined twice")
        KINDS[name] = KINDS_BY_METHOD[kind.method] = kind
        _METHODS[name] = method
        binder = _Binder(method)

        @functools.wraps(method)
        def run(self, *args: Any, **kwargs: Any) -> Any:
            if self._applying:  # a primitive used inside another records nothing of its own
                result = method(self, *args, **kwargs)
                return result.outputs if kind.sampling else result
            arguments = binder.bind(self, args, kwargs)
            result, decision = apply(self, kind, args, kwargs)
            inputs, attrs = _split_arguments(kind, arguments)
            self._record(kind, Instruction(kind.name, inputs, attrs, flatten(result)), decision)
            return result

        run.__annotations__ = {**method.__annotations__, "return": public_return}
        run.kind = kind
        return run

    return wrap


def apply(sch: Any, kind: InstructionKind, args: Sequence[Any], keywords: dict[str, Any]) -> tuple[Any, Any]:
    """Run the primitive of ``kind`` on schedule ``sch`` as calling its method does, but record
    nothing: returns what the method returns to its caller and the decision it took (None
    but for a sampling kind). ``replay`` records the instruction it replays itself, so that
    the arguments a trace already holds need no binding and no conversion."""
    if not kind.pure:
        sch._state_changing(kind)
    sch._applying = True
    try:
        result = _METHODS[kind.name](sch, *args, **keywords)
    finally:
        sch._applying = False
    if kind.sampling:
        return result.outputs, result.decision
    return result, None


class _Binder:
    """Binds the arguments of a call of a primitive to its parameter names, as
    ``inspect.Signature.bind`` followed by ``apply_defaults`` would (``*args`` as a tuple,
    every parameter present), with what that needs read from the signature once.

    Every primitive call binds its arguments (some fifty calls per candidate of the search,
    most of them by replay), and ``Signature.bind`` took a tenth of a candidate's time. A call that is not
    plain (too many positional arguments, an unknown or repeated keyword, a missing
    argument) is handed to ``Signature.bind``, so that it raises the ``TypeError`` it always
    did."""

    def __init__(self, method: Callable) -> None:
        self.signature = inspect.signature(method)
        params = list(self.signature.parameters.values())[1:]  # after self
        kinds = {p.kind for p in params}
        # Positional-only parameters and **kwargs are not handled here: their calls all go to
        # Signature.bind (no primitive has them).
        self.plain = not kinds & {inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_KEYWORD}
        self.positional = tuple(p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.var_positional = next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
        self.keywords = frozenset(p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                                        inspect.Parameter.KEYWORD_ONLY))
        self.defaults = tuple((p.name, p.default) for p in params if p.default is not inspect.Parameter.empty)
        self.count = len(params)

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Parameter name -> value for ``method(instance, *args, **kwargs)``."""
        if not self.plain or (len(args) > len(self.positional) and self.var_positional is None):
            return self._bind_slowly(instance, args, kwargs)
        arguments = dict(zip(self.positional, args))
        if self.var_positional is not None:
            arguments[self.var_positional] = args[len(self.positional):]
        for key, value in kwargs.items():
            if key not in self.keywords or key in arguments:
                return self._bind_slowly(instance, args, kwargs)
            arguments[key] = value
        for key, default in self.defaults:
            arguments.setdefault(key, default)
        if len(arguments) < self.count:  # a parameter without a default was not given
            return self._bind_slowly(instance, args, kwargs)
        return arguments

    def _bind_slowly(self, instance: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = self.signature.bind(instance, *args, **kwargs)  # raises the TypeError
        bound.apply_defaults()
        return bound.arguments


def _is_rv_type(annotation: Any) -> bool:
    if isinstance(annotation, type):
        return issubclass(annotation, RV)
    return any(_is_rv_type(arg) for arg in get_args(annotation))


def _derive(name: str, method: Callable, pure: bool, count: Any) -> tuple[InstructionKind, Any]:
    hints = get_type_hints(method)
    params = []
    sampling = False
    for p in list(inspect.signature(method).parameters.values())[1:]:  # after self
        if p.name == "decision":
            sampling = True
            continue
        hint = hints.get(p.name)
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            role = "inputs"
        elif get_origin(hint) in (list, tuple, Sequence, collections.abc.Sequence) and _is_rv_type(hint):
            role = "input_list"
        elif _is_rv_type(hint):
            role = "input"
        else:
            role = "attr"
        params.append(Param(p.name, role, p.kind is inspect.Parameter.KEYWORD_ONLY))
    returned = hints.get("return", type(None))
    if get_origin(returned) is Decided:
        returned, = get_args(returned)
    if returned is type(None):
        outputs, output_class = "none", None
    elif get_origin(returned) is list:
        outputs, (output_class,) = "list", get_args(returned)
    else:
        outputs, output_class = "one", returned
    kind = InstructionKind(name, method.__name__, tuple(params), output_class, outputs, pure, sampling, count)
    return kind, returned


# The types of the literals a trace holds as they are given.
_PLAIN_LITERALS = frozenset({int, float, str, type(None)})


def normalise(value: Any) -> Any:
    """An argument as a trace holds it: sequences (numpy arrays too) become tuples, numpy
    numbers plain Python numbers."""
    if type(value) in _PLAIN_LITERALS:  # most arguments: nothing to do, and no attribute lookup
        return value
    if hasattr(value, "tolist") and not isinstance(value, RV):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(normalise(v) for v in value)
    return value


def is_normal(value: Any) -> bool:
    """Whether ``normalise(value)`` is ``value`` itself or, for a tuple, an equal tuple of
    values of the same types: so a trace holding ``value`` holds what recording it would."""
    kind = type(value)
    if kind in _PLAIN_LITERALS or kind is bool:
        return True
    return kind is tuple and all(is_normal(v) for v in value)


def _split_arguments(kind: InstructionKind, arguments: dict) -> tuple[tuple, tuple]:
    inputs: list = []
    attrs: list = []
    for param in kind.params:
        value = arguments[param.name]
        if param.role == "input":
            inputs.append(value if isinstance(value, RV) else normalise(value))
        elif param.role in ("inputs", "input_list"):
            inputs.extend(normalise(v) if not isinstance(v, RV) else v for v in value)
        else:
            attrs.append(normalise(value))
    return tuple(inputs), tuple(attrs)


def flatten(result: Any) -> tuple[RV, ...]:
    """The outputs of a primitive's result (None, one random variable or a list) as a tuple."""
    if result is None:
        return ()
    return tuple(result) if isinstance(result, list) else (result,)


def output_count(kind: InstructionKind, inputs: tuple[Any, ...], attrs: tuple[Literal, ...]) -> Optional[int]:
    """How many outputs an instruction of ``kind`` with these arguments makes, when that is fixed
    (None when only running it can tell, as for ``get_loops``). The text and JSON forms check
    it, so that a malformed trace is caught where it is written rather than on replay."""
    if kind.outputs != "list":
        return 1 if kind.outputs == "one" else 0
    return None if kind.count is None else kind.count(inputs, attrs)


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
    if type(value) is int:  # the usual case, without the slower check against the abstract class
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
