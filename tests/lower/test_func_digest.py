"""``ir.func_digest``: one digest for loop programs that compile to one kernel, another for any
change code generation would see; the notes for a person (``attrs``) do not count."""
import dataclasses

import pytest

import metasched
from metasched import Schedule
from metasched.ir import (
    Allocate, BinOp, Buffer, FloatImm, For, ForKind, IfThenElse, IntImm, PrimFunc, Seq, Store, Var, func_digest,
)
from metasched.lower import lower


@pytest.fixture(scope="module")
def func():
    sch = Schedule(metasched.workloads.get("matmul_relu", M=8, N=8, K=8))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(j, [None, 4])
    return lower(sch._state)


def test_the_same_program_made_twice_has_one_digest(func):
    again = Schedule(metasched.workloads.get("matmul_relu", M=8, N=8, K=8))
    i, j, k = again.get_loops(again.get_block("C"))
    again.split(j, [None, 4])
    made = lower(again._state)
    assert made is not func and func_digest(made) == func_digest(func)
    assert func_digest(dataclasses.replace(func, attrs={"block_annotations": {"C": {"x": 1}}})) == func_digest(func)


def _first_loop(stmt):
    return stmt if isinstance(stmt, For) else _first_loop(stmt.stmts[0] if isinstance(stmt, Seq) else stmt.body)


def _with_first_loop(func, **changes):
    first = _first_loop(func.body)

    def swap(stmt):
        if stmt is first:
            return dataclasses.replace(stmt, **changes)
        if isinstance(stmt, Seq):
            return Seq(tuple(swap(s) for s in stmt.stmts))
        if isinstance(stmt, (For, Allocate)):
            return dataclasses.replace(stmt, body=swap(stmt.body))
        return stmt

    return dataclasses.replace(func, body=swap(func.body))


@pytest.mark.parametrize("changes", [
    dict(kind=ForKind.PARALLEL), dict(kind=ForKind.UNROLLED), dict(extent=4), dict(var="other"),
    dict(annotations=(("pragma", 1),)),
])
def test_any_change_to_a_loop_changes_the_digest(func, changes):
    assert func_digest(_with_first_loop(func, **changes)) != func_digest(func)


def test_statements_and_constants_count_exactly():
    out = Buffer("C", (4,), "float32")

    def program(body):
        return PrimFunc("f", (), (out,), (), body)

    i = Var("i")
    store = Store("C", (i,), FloatImm(0.0))
    digests = {func_digest(program(body)) for body in [
        For("i", 4, ForKind.SERIAL, store),
        For("i", 4, ForKind.SERIAL, Store("C", (i,), FloatImm(0.0, "float64"))),  # the constant's dtype
        For("i", 4, ForKind.SERIAL, Store("C", (i,), FloatImm(1.0))),
        For("i", 4, ForKind.SERIAL, Seq((store, store))),
        For("i", 4, ForKind.SERIAL, IfThenElse(BinOp("<", i, IntImm(2)), store)),
        For("i", 4, ForKind.SERIAL, IfThenElse(BinOp("<", i, IntImm(2)), store, store)),
        For("i", 4, ForKind.SERIAL, Allocate(Buffer("T", (4,), "float32"), store)),
        Seq((For("i", 2, ForKind.SERIAL, store), For("i", 4, ForKind.SERIAL, store))),
        Seq((For("i", 4, ForKind.SERIAL, store), For("i", 2, ForKind.SERIAL, store))),
    ]}
    assert len(digests) == 9
    assert func_digest(PrimFunc("g", (), (out,), (), store)) != func_digest(program(store))
