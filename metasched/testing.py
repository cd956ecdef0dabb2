"""Hypothesis strategies and checks for people who write schedules and search-space modules.

    from hypothesis import given
    from metasched.testing import schedules, assert_equivalent

    @given(schedules(workload, max_steps=8))
    def test_every_schedule_computes_the_reference(sch):
        assert_equivalent(sch)

``schedules`` draws random sequences of primitives on random blocks and loops. A drawn step that
breaks a precondition raises ``ScheduleError``, which changes nothing; the strategy skips that
step and draws the next one, so every drawn schedule is legal. ``assert_equivalent`` compiles a
schedule and compares its outputs on random inputs with the numpy reference under the tolerance
rule of ``metasched.lang.tolerance``.
"""
from __future__ import annotations

from typing import Callable, Optional

from hypothesis import strategies as st

from metasched.build import build
from metasched.codegen import CodegenOptions
from metasched.errors import ScheduleError
from metasched.lang import Workload, assert_outputs_close
from metasched.schedule import LoopRV, Schedule

# Unrolling copies a body once per iteration: the strategy unrolls only short loops so that
# nested unrolls stay small enough to compile quickly.
MAX_UNROLL_EXTENT = 8


def _factors(draw: Callable, extent: int) -> list[Optional[int]]:
    count = draw(st.integers(2, 3))
    factors: list[Optional[int]] = [draw(st.integers(1, max(1, extent) + 2)) for _ in range(count)]
    if draw(st.booleans()):
        factors[draw(st.integers(0, count - 1))] = None
    return factors


def _step(draw: Callable, sch: Schedule) -> None:
    """Draw one primitive with its arguments and apply it (it may raise ScheduleError)."""
    block = sch.get_block(draw(st.sampled_from([s.name for s in sch.workload.statements])))
    loops: list[LoopRV] = sch.get_loops(block)
    kind = draw(st.sampled_from(["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll"]))
    if not loops:
        return
    if kind == "split":
        loop = draw(st.sampled_from(loops))
        sch.split(loop, _factors(draw, sch.get(loop).extent))
    elif kind == "fuse":
        if len(loops) < 2:
            return
        start = draw(st.integers(0, len(loops) - 2))
        count = draw(st.integers(2, min(3, len(loops) - start)))
        sch.fuse(*loops[start:start + count])
    elif kind == "reorder":
        if len(loops) < 2:
            return
        chosen = draw(st.lists(st.sampled_from(loops), min_size=2, max_size=len(loops), unique=True))
        sch.reorder(*draw(st.permutations(chosen)))
    elif kind == "unroll":
        loop = draw(st.sampled_from(loops))
        if sch.get(loop).extent <= MAX_UNROLL_EXTENT:
            sch.unroll(loop)
    else:
        getattr(sch, kind)(draw(st.sampled_from(loops)))


@st.composite
def schedules(draw: Callable, workload: Workload, max_steps: int = 8) -> Schedule:
    """A random legal schedule of ``workload`` made of up to ``max_steps`` primitives."""
    sch = Schedule(workload)
    for _ in range(draw(st.integers(0, max_steps))):
        try:
            _step(draw, sch)
        except ScheduleError:
            continue  # an illegal step changes nothing; the schedule stays valid
    return sch


def assert_equivalent(sch: Schedule, seed: int = 0, options: Optional[CodegenOptions] = None) -> None:
    """Compile ``sch`` and check its outputs against the reference on random inputs; raises
    ``MismatchError`` (an ``AssertionError``) showing the program on a mismatch."""
    wl = sch.workload
    inputs = wl.random_inputs(seed)
    got = build(sch, options)(*inputs)
    try:
        assert_outputs_close(wl, got, wl.reference(*inputs))
    except AssertionError as err:
        err.args = (f"{err}\nfor the program\n{sch}",)
        raise
