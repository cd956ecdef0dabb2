"""The workload language: ``.tensor`` text to a ``Workload`` (``parse``, ``load``), the numpy
oracle that evaluates it (``evaluate``) and the one tolerance rule outputs are compared by."""
from metasched.lang.parser import load, parse
from metasched.lang.reference import evaluate
from metasched.lang.tolerance import assert_outputs_close, outputs_close, tolerance
from metasched.lang.workload import Axis, Statement, TensorDecl, Workload

__all__ = [
    "Axis", "Statement", "TensorDecl", "Workload", "assert_outputs_close", "evaluate", "load",
    "outputs_close", "parse", "tolerance",
]
