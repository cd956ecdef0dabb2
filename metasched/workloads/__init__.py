"""The built-in suite: the ``.tensor`` files of this package (the public benchmark workloads).

``names()`` lists them, ``get(name, **params)`` parses one with parameter overrides,
``source(name)`` is its text, ``path(name)`` where it lives and ``builtin(workload)`` which of
them a workload is (what comes with a built-in, its numpy baseline and hand-written schedule,
belongs to its program, not to its name)."""
from __future__ import annotations

import functools
import importlib.resources
from typing import TYPE_CHECKING, Optional

from metasched.errors import MetaschedError, UnknownWorkloadError
from metasched.lang import Workload, parse

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_SUFFIX = ".tensor"


@functools.lru_cache(maxsize=None)
def _names() -> tuple[str, ...]:
    folder = importlib.resources.files(__package__)
    return tuple(sorted(f.name[: -len(_SUFFIX)] for f in folder.iterdir() if f.name.endswith(_SUFFIX)))


def names() -> list[str]:
    """The names of the built-in workloads, sorted."""
    return list(_names())


def path(name: str) -> "Traversable":
    """The file of a built-in workload. Raises ``UnknownWorkloadError`` (a ``KeyError``) listing the names for an unknown one."""
    if name not in _names():
        raise UnknownWorkloadError(f"no built-in workload {name!r}; the built-in workloads are: {', '.join(_names())}")
    return importlib.resources.files(__package__) / f"{name}{_SUFFIX}"


@functools.lru_cache(maxsize=None)
def source(name: str) -> str:
    """The text of a built-in workload."""
    return path(name).read_text(encoding="utf-8")


def get(name: str, **params: int) -> Workload:
    """The built-in workload ``name``, with parameter overrides ``params``."""
    return parse(source(name), name, file=str(path(name)), **params)


def builtin(workload: Workload) -> Optional[str]:
    """The name of the built-in workload that ``workload`` is, at its parameters, or None: a
    workload of a built-in's name whose program differs (its ``key``) is not that built-in."""
    name = workload.name
    if name not in _names():
        return None
    try:
        same = get(name, **workload.params)
    except MetaschedError:  # a parameter the built-in does not have, or a value it refuses
        return None
    return name if same.key == workload.key else None
