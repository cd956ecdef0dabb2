"""Hypothesis strategies and checks for people who write schedules and search-space modules.

    from hypothesis import given
    from metasched.testing import schedules, assert_equivalent

    @given(schedules(workload, max_steps=8))
    def test_every_schedule_computes_the_reference(sch):
        assert_equivalent(sch)

``schedules`` draws random sequences of every primitive (sampling included) on random blocks
and loops; ``samples(space, workload)`` draws programs from a search space (a rule or
postprocessor you wrote, composed into ``metasched.space.cpu_default()`` or your own list). A drawn step that breaks a precondition raises ``ScheduleError``, which changes
nothing; the strategy skips that step and draws the next one, so every drawn schedule is legal. ``assert_equivalent`` compiles a
schedule and compares its outputs on random inputs with the numpy reference under the tolerance
rule of ``metasched.lang.tolerance``.

It needs hypothesis: ``pip install "metasched[testing]"``.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

try:
    from hypothesis import reject, strategies as st
except ModuleNotFoundError as missing:  # an optional dependency: say how to get it
    raise ModuleNotFoundError(
        "metasched.testing needs hypothesis, which a plain `pip install metasched` does not bring: "
        "install it with `pip install \"metasched[testing]\"` (or `pip install hypothesis`)",
        name=missing.name) from None

from metasched.build import build
from metasched.codegen import CodegenOptions
from metasched.errors import ScheduleError
from metasched.lang import Workload, assert_outputs_close
from metasched.schedule import BlockRV, LoopRV, Schedule, analysis
from metasched.space import SpaceGenerator

# Unrolling copies a body once per iteration: the strategy unrolls only short loops so that
# nested unrolls stay small enough to compile quickly.
MAX_UNROLL_EXTENT = 8


def _factors(draw: Callable, extent: int) -> list[Optional[int]]:
    """Two or three factors that ``split`` accepts: inner factors drawn innermost first, each at
    most what the loop still needs (an imperfect split is guarded), the outermost the extent
    that covers the rest; one factor, often the outermost, left as None to be inferred."""
    count = draw(st.integers(2, 3))
    factors: list[Optional[int]] = []
    inside = 1
    for _ in range(count - 1):
        factor = draw(st.integers(1, -(-extent // inside)))
        factors.insert(0, factor)
        inside *= factor
    factors.insert(0, -(-extent // inside))
    if draw(st.booleans()):
        factors[draw(st.integers(0, count - 1))] = None
    return factors


STEPS = ("split", "split", "sample_tile_split", "fuse", "reorder", "parallel", "vectorize", "unroll",
         "compute_inline", "reverse_compute_inline", "reverse_compute_inline", "compute_at",
         "reverse_compute_at", "reverse_compute_at", "sample_compute_location", "cache_read", "cache_write",
         "transform_layout", "rfactor", "rfactor", "annotate", "unannotate", "get_producers", "get_consumers")


def _block(draw: Callable, sch: Schedule) -> BlockRV:
    return sch.get_block(draw(st.sampled_from(list(analysis.blocks(sch)))))


def _loop(draw: Callable, sch: Schedule) -> Optional[LoopRV]:
    loops = sch.get_loops(_block(draw, sch))
    return draw(st.sampled_from(loops)) if loops else None


def _step(draw: Callable, sch: Schedule) -> None:
    """Draw one primitive with its arguments and apply it (it may raise ScheduleError)."""
    kind = draw(st.sampled_from(STEPS))
    if kind in ("compute_inline", "reverse_compute_inline", "get_producers", "get_consumers"):
        getattr(sch, kind)(_block(draw, sch))
    elif kind in ("compute_at", "reverse_compute_at"):
        # Mostly aim at a loop of a block this one feeds (or is fed by): a random loop of a
        # random block is almost always illegal and would test little.
        block = _block(draw, sch)
        related = sch.get_consumers(block) if kind == "compute_at" else sch.get_producers(block)
        if related and draw(st.integers(0, 4)):
            loops = sch.get_loops(draw(st.sampled_from(related)))
            loop = draw(st.sampled_from(loops)) if loops else None
        else:
            loop = _loop(draw, sch)
        if loop is not None:
            getattr(sch, kind)(block, loop)
    elif kind == "sample_compute_location":
        block = _block(draw, sch)
        sch.compute_at(block, sch.sample_compute_location(block))
    elif kind in ("cache_read", "cache_write"):
        block = _block(draw, sch)
        index = draw(st.integers(0, 2)) if kind == "cache_read" else 0
        getattr(sch, kind)(block, index, draw(st.sampled_from(["global", "local"])))
    elif kind == "transform_layout":
        block = _block(draw, sch)
        sch.transform_layout(block, list(draw(st.permutations(range(len(analysis.block(sch, block).shape))))))
    elif kind == "annotate":
        target = _block(draw, sch) if draw(st.booleans()) else _loop(draw, sch)
        if target is not None:
            value = sch.sample_categorical([0, 16, 64], [0.5, 0.25, 0.25]) if draw(st.booleans()) else 1
            sch.annotate(target, draw(st.sampled_from(["pragma_a", "pragma_b"])), value)
    elif kind == "unannotate":
        target = _block(draw, sch) if draw(st.booleans()) else _loop(draw, sch)
        if target is not None:
            sch.unannotate(target, draw(st.sampled_from(["pragma_a", "pragma_b"])))
    else:
        loop = _loop(draw, sch)
        if loop is None:
            return
        if kind == "split":
            sch.split(loop, _factors(draw, sch.get(loop).extent))
        elif kind == "sample_tile_split":
            sch.split(loop, sch.sample_perfect_tile(loop, n=draw(st.integers(2, 3)),
                                                       max_innermost_factor=draw(st.sampled_from([4, 16]))))
        elif kind == "rfactor":
            reduction = [lp for lp in sch.get_loops(_block(draw, sch)) if sch.get(lp).is_reduction]
            if reduction:
                sch.rfactor(draw(st.sampled_from(reduction)), draw(st.integers(-1, 1)))
        elif kind == "fuse":
            loops = sch.get_loops(_block(draw, sch))
            if len(loops) >= 2:
                start = draw(st.integers(0, len(loops) - 2))
                count = draw(st.integers(2, min(3, len(loops) - start)))
                sch.fuse(*loops[start:start + count])
        elif kind == "reorder":
            loops = sch.get_loops(_block(draw, sch))
            if len(loops) >= 2:
                chosen = draw(st.lists(st.sampled_from(loops), min_size=2, max_size=len(loops), unique=True))
                sch.reorder(*draw(st.permutations(chosen)))
        elif kind == "unroll":
            if sch.get(loop).extent <= MAX_UNROLL_EXTENT:
                sch.unroll(loop)
        else:
            getattr(sch, kind)(loop)


@st.composite
def schedules(draw: Callable, workload: Workload, max_steps: int = 8) -> Schedule:
    """A random legal schedule of ``workload`` made of up to ``max_steps`` primitives."""
    sch = Schedule(workload, seed=draw(st.integers(0, 2**32 - 1)))
    for _ in range(draw(st.integers(0, max_steps))):
        try:
            _step(draw, sch)
        except ScheduleError:
            continue  # an illegal step changes nothing; the schedule stays valid
    return sch


@st.composite
def samples(draw: Callable, space: SpaceGenerator, workload: Workload, max_attempts: int = 20) -> Schedule:
    """A random program of ``space`` for ``workload`` that its postprocessors accept: a drawn
    seed, then the next draws of its stream until one passes (the example is rejected after
    ``max_attempts``, so a space that rejects nearly everything shows as a health-check
    failure, not a pass). Anything ``sample`` raises but ``ScheduleError`` fails the test."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    for _ in range(max_attempts):
        try:
            return space.sample(workload, rng)
        except ScheduleError:
            continue
    reject()


POISONED = CodegenOptions(poison=True)


def assert_equivalent(sch: Schedule, seed: int = 0, options: Optional[CodegenOptions] = POISONED) -> None:
    """Compile ``sch`` and check its outputs against the reference on random inputs; raises
    ``MismatchError`` (an ``AssertionError``) showing the program on a mismatch. By default the
    kernel is built with ``poison``: every buffer starts as NaN, so a kernel that reads memory
    it never wrote fails every time rather than only when the memory held garbage."""
    wl = sch.workload
    inputs = wl.random_inputs(seed)
    got = build(sch, options)(*inputs)
    try:
        assert_outputs_close(wl, got, wl.reference(*inputs))
    except AssertionError as err:
        err.args = (f"{err}\nfor the program\n{sch}",)
        raise
