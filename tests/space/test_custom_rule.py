"""A rule a user writes: the README's example, plugged into the default space and
property-tested with metasched.testing."""
import dataclasses
import inspect

from hypothesis import given, strategies as st

from metasched import Schedule, workloads
from metasched.schedule import BlockRV, analysis
from metasched.space import ScheduleRule, cpu_default
from metasched.testing import assert_equivalent, samples


# --- the README's example, verbatim --------------------------------------------------------
@dataclasses.dataclass
class TileSpatial(ScheduleRule):
    """Tile a block without reduction (2-D or more) in sampled square-ish tiles, so that an input
    read transposed (``B[j, i]``) uses whole cache lines, as ``handwritten.tiled_transpose``
    does by hand. The default space tiles such a block only where a read crosses the memory
    order (``TransposedReadTiling``)."""

    max_tile: int = 32

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if info.is_reduction or info.attached_to or len(info.loops) < 2 or \
                any(lp.kind != "serial" for lp in info.loops):
            return [sch]
        tiled = sch.copy()
        *outer, i, j = tiled.get_loops(block)
        i0, i1 = tiled.split(i, tiled.sample_perfect_tile(i, n=2, max_innermost_factor=self.max_tile))
        j0, j1 = tiled.split(j, tiled.sample_perfect_tile(j, n=2, max_innermost_factor=self.max_tile))
        tiled.reorder(i0, j0, i1, j1)
        return [sch, tiled]
# --------------------------------------------------------------------------------------------


def test_the_rule_is_short():
    assert len(inspect.getsource(TileSpatial).splitlines()) <= 40


def space_with_the_rule():
    space = cpu_default()
    space.rules.insert(1, TileSpatial(max_tile=16))  # right after AutoInline
    return space


SPACE = space_with_the_rule()
WL = workloads.get("transpose_add", M=9, N=14)


def test_it_adds_tiled_sketches():
    # The rule forks C untouched and tiled; the default space's TransposedReadTiling then forks
    # the untouched one again (the tiled one's loops are no longer its axes): one sketch more.
    plain, tiled = len(cpu_default().generate(WL)), SPACE.generate(WL)
    assert len(tiled) == plain + 1
    assert any("sample_perfect_tile" in str(sch.trace) for sch in tiled)


@given(sch=samples(SPACE, WL))
def test_every_program_of_the_space_computes_the_reference(sch):
    assert_equivalent(sch)


@given(name=st.sampled_from(["softmax", "matmul_relu", "layernorm"]), data=st.data())
def test_it_composes_with_the_other_rules(name, data):
    from conftest import SMALL_PARAMS
    wl = workloads.get(name, **SMALL_PARAMS[name])
    assert_equivalent(data.draw(samples(SPACE, wl)))


def test_a_rule_without_apply_cannot_be_made():
    import pytest

    @dataclasses.dataclass
    class Forgetful(ScheduleRule):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Forgetful()


def test_editing_the_list_after_sampling_changes_the_space():
    space = cpu_default()
    space.sample(WL, 0)
    space.rules.insert(1, TileSpatial(max_tile=16))
    tiled = [space.sample(WL, seed).trace for seed in range(12)]
    assert any("sample_perfect_tile" in str(trace) for trace in tiled)
