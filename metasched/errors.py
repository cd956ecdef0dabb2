"""The exceptions users see. Every layer raises one of these for bad input, never a bare
traceback from deep inside; and the checks that public functions make of their arguments at
the door, so that a wrong one is named in one line, never met deep inside."""
from __future__ import annotations

import numbers
from typing import Optional, Union


class MetaschedError(Exception):
    """Base of every error metasched raises on purpose."""


class ParseError(MetaschedError):
    """A workload text is malformed; carries where (file, line, column, 1-based) and shows the
    offending line with a caret under the column."""

    def __init__(self, message: str, file: str = "<string>", line: int = 0, column: int = 0,
                 source_line: Optional[str] = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}: " if self.line else f"{self.file}: "
        text = where + self.message
        if self.source_line is not None and self.line:
            text += "\n    " + self.source_line.rstrip("\n")
            text += "\n    " + " " * max(self.column - 1, 0) + "^"
        return text


class UnknownWorkloadError(MetaschedError, KeyError):
    """No built-in workload has that name; the message lists the names there are."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ScheduleError(MetaschedError):
    """A schedule primitive's precondition does not hold (or a trace cannot be replayed)."""


class TraceError(MetaschedError, ValueError):
    """A trace is malformed: its text, its JSON form or a decision given to it. ``line`` and
    ``column`` (1-based) locate the mistake in a trace's text; both are 0 when there is no text,
    and then the message stands alone. ``file`` names the file the trace was read from."""

    def __init__(self, message: str, line: int = 0, column: int = 0,
                 source_line: Optional[str] = None, file: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.file = file
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.line:
            return f"{self.file}: {self.message}" if self.file else self.message
        where = f"{self.file}:{self.line}:{self.column}" if self.file else \
            f"line {self.line}, column {self.column}"
        text = f"{where}: {self.message}"
        if self.source_line is not None:
            text += "\n    " + self.source_line.rstrip("\n")
            text += "\n    " + " " * max(self.column - 1, 0) + "^"
        return text


class CodegenError(MetaschedError, ValueError):
    """A loop program cannot be compiled: it is malformed (an unknown buffer or variable, a wrong
    number of indices, an unsupported dtype). Lowering never produces one; hand-built IR may."""


class KernelArgumentError(MetaschedError, ValueError):
    """A compiled kernel was called with the wrong number, shape, dtype or layout of arrays."""


class MismatchError(MetaschedError, AssertionError):
    """A kernel's outputs differ from the reference beyond the documented tolerance."""


class DatabaseError(MetaschedError):
    """A tuning database cannot be opened, read or written: the file is not a metasched
    database, is damaged or was made by a newer metasched, or a stored entry cannot be read
    back. The message names the file and, for a stored entry, the record or workload."""


class ModelError(MetaschedError, ValueError):
    """A network model cannot be imported or run: the file is not a readable model, an
    operator or attribute is not supported, a shape is not static, or the arrays given to a
    compiled network do not match its inputs. The message names the node or input."""


class ClusterError(MetaschedError):
    """A Dask cluster cannot build or time the candidates: its scheduler cannot be reached or
    went away, no worker holds the runner resource, the runner workers differ in CPU, or no
    worker has the runner's CPU to build for it. The message says which, and what to start."""


class WarmStartError(MetaschedError, ValueError):
    """A warm start that ``tune`` was asked for cannot be made: a workload named is the one
    tuned, the strategy has no cost model of the tuner's making, or the database holds no
    records of those workloads on the target."""


# ---- checks of the public API's arguments, at the door -----------------------------------------

def check_integer(value: object, where: str, name: str, minimum: Optional[int] = None) -> int:
    """``value`` as an int when it is an integer (a bool is not) of at least ``minimum``;
    otherwise a one-line ``TypeError`` or ``ValueError`` that says ``where: name must be ...``."""
    wanted = f"an integer >= {minimum}" if minimum is not None else "an integer"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} must be {wanted}, not {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{where}: {name} must be {wanted}, not {value}")
    return int(value)


def check_type(value: object, where: str, name: str, types: Union[type, tuple[type, ...]], wanted: str) -> None:
    """A one-line ``TypeError`` (``where: name must be wanted, not ...``) unless ``value`` is
    an instance of ``types``."""
    if not isinstance(value, types):
        raise TypeError(f"{where}: {name} must be {wanted}, not {value!r} ({type(value).__name__})")
