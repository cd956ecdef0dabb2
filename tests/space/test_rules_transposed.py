"""TransposedReadTiling: where it applies, that its tiled form is the hand-written
``tiled_transpose``, and that programs sampled from it compute the reference."""
import pathlib
import sys

import pytest
from hypothesis import given

from metasched import handwritten, parse, replay, workloads
from metasched.schedule import analysis
from metasched.space import AutoInline, PostOrderApply, TransposedReadTiling
from metasched.space.transposed_read import crossing_axis
from metasched.testing import assert_equivalent

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "lang"))
from workload_strategies import workload_texts  # noqa: E402

SPACE = PostOrderApply(rules=[AutoInline(), TransposedReadTiling(max_tile=64)])


def test_the_tiled_form_is_the_hand_written_transpose():
    wl = workloads.get("transpose_add")
    plain, tiled = SPACE.generate(wl)
    assert "split" not in str(plain.trace)
    tiles = iter([[128, 16], [128, 16]])  # tiled_transpose's 16 x 16 tiles
    sch = replay(wl, tiled.trace.without_decisions(),
                 decision_provider=lambda s, index, inst, inputs, decision: next(tiles))
    i0, j0, i1, j1 = sch.get_loops(sch.get_block("C"))
    sch.vectorize(j1)
    sch.parallel(i0)
    assert str(sch) == str(handwritten.tiled_transpose(wl))


@pytest.mark.parametrize("text, crossing", [
    # A 3-D transpose of the last two axes, with a batch axis outside.
    ("workload w(B = 3, M = 6, N = 10) { input A: float32[B, N, M]\n output C[b, i, j] = A[b, j, i] }", "i"),
    # The outer axis read last: a transpose of a 3-D tensor's first and last axes.
    ("workload w(B = 4, M = 6, N = 10) { input A: float32[N, M, B]\n output C[b, i, j] = A[j, i, b] + 1.0 }",
     "b"),
    # A row broadcast is not a transpose: r[i] is not indexed by every axis.
    ("workload w(M = 6, N = 10) { input A: float32[M, N]\n input r: float32[M]\n"
     " output C[i, j] = A[i, j] * r[i] }", None),
    # Reads along the memory order: nothing to tile.
    ("workload w(M = 6, N = 10) { input A: float32[M, N]\n output C[i, j] = A[i, j] * 2.0 }", None),
    # A reduction is MultiLevelTiling's and the reduction rules' business.
    ("workload w(M = 6, N = 10) { input A: float32[N, M]\n output S[i] += A[j, i] where i in 0..M }", None),
    # An axis of extent 1 crosses nothing.
    ("workload w(M = 1, N = 10) { input A: float32[N, M]\n output C[i, j] = A[j, i] }", None),
])
def test_where_it_applies(text, crossing):
    wl = parse(text)
    sch = PostOrderApply(rules=[AutoInline()]).generate(wl)[0]
    names = analysis.blocks(sch)
    assert crossing_axis(analysis.block(sch, sch.get_block(names[0]))) == crossing
    sketches = SPACE.generate(wl)
    assert len(sketches) == (1 if crossing is None else 2)
    for sketch in sketches:
        for k in range(3):
            assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=k))


def test_programs_of_the_tiled_form_compute_the_reference_with_vector_lanes():
    wl = workloads.get("transpose_add", M=37, N=24)  # 37: prime, the row tiles are 1 or 37
    _, tiled = SPACE.generate(wl)
    for k in range(6):
        sch = replay(wl, tiled.trace.without_decisions(), rng=k)
        loops = sch.get_loops(sch.get_block("C"))
        sch.vectorize(loops[-1])
        sch.parallel(loops[0])
        assert_equivalent(sch)


@given(text=workload_texts())
def test_it_never_fails_on_random_workloads(text):
    wl = parse(text)
    for sketch in SPACE.generate(wl):
        assert_equivalent(replay(wl, sketch.trace.without_decisions(), rng=1))
