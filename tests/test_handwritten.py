"""The hand-written schedules compute the reference, at sizes their tiles do not divide."""
import pytest

from metasched import handwritten, workloads
from metasched.testing import assert_equivalent

CASES = [
    ("tiled_matmul", lambda: handwritten.tiled_matmul(workloads.get("matmul", M=20, N=70, K=130))),
    ("tiled_matmul batch", lambda: handwritten.tiled_matmul(workloads.get("batch_matmul", BATCH=3, M=9, K=5, N=33))),
    ("tiled_transpose", lambda: handwritten.tiled_transpose(workloads.get("transpose_add", M=37, N=21))),
    ("cached_matmul", lambda: handwritten.cached_matmul(workloads.get("matmul", M=20, N=70, K=130))),
    ("cached_matmul unpacked", lambda: handwritten.cached_matmul(workloads.get("matmul", M=20, N=70, K=130),
                                                                  pack=False)),
    ("cached_matmul epilogue", lambda: handwritten.cached_matmul(workloads.get("matmul_relu", M=20, N=70, K=9),
                                                                  epilogue="D")),
    ("cached_matmul batch", lambda: handwritten.cached_matmul(workloads.get("batch_matmul", BATCH=3, M=9, K=5, N=33))),
    ("cached_matmul dense", lambda: handwritten.cached_matmul(workloads.get("dense_bias_relu", M=10, K=7, N=40),
                                                               block="Y", epilogue="Z")),
    ("streamed_column_sum", lambda: handwritten.streamed_column_sum(workloads.get("reduce_cols", M=29, N=100),
                                                                     columns=48)),
    ("rfactor_column_sum", lambda: handwritten.rfactor_column_sum(workloads.get("reduce_cols", M=29, N=100))),
    ("tiled_conv2d", lambda: handwritten.tiled_conv2d(workloads.get("conv2d_bias_relu", C=3, H=7, W=11, F=12))),
    ("sampled_matmul", lambda: handwritten.sampled_matmul(workloads.get("matmul_relu", M=24, N=40, K=12), seed=5,
                                                           epilogue="D")),
]


@pytest.mark.parametrize("name, make", CASES, ids=[c[0] for c in CASES])
def test_hand_written_schedule_matches_reference(name, make):
    assert_equivalent(make())


def test_cached_matmul_packs_each_panel_of_b_once_per_outer_tile():
    wl = workloads.get("matmul", M=20, N=70, K=130)
    packed = str(handwritten.cached_matmul(wl).lower())
    # all of K by tile_j columns, allocated and filled inside the parallel loop over the panels
    assert "for j_0 in parallel(3):\n        B_global = allocate([130, 32], 'float32')" in packed
    assert "* B_global[" in packed and "* B[" not in packed
    assert "B_global" not in str(handwritten.cached_matmul(wl, pack=False).lower())


def test_sampled_matmul_trace_has_thirty_instructions():
    sch = handwritten.sampled_matmul(workloads.get("matmul_relu"), seed=1, epilogue="D")
    assert len(sch.trace.insts) == 30


def test_every_hand_schedule_for_the_suite_is_legal_at_default_size():
    for name in workloads.names():
        wl = workloads.get(name)
        sch = handwritten.for_workload(wl)
        if sch is not None:
            sch.lower()  # every primitive's precondition held; lowering succeeds


@pytest.mark.parametrize("vector_bits", [128, 256, 512])
def test_suite_schedules_for_each_vector_width_match_reference(vector_bits):
    """``for_workload`` picks its register tile by the vector width; each compiles to the
    reference (at sizes the 6-row tile of AVX2 does not divide)."""
    for name, params in (("matmul_relu", dict(M=20, N=40, K=9)), ("dense_bias_relu", dict(M=10, K=7, N=40))):
        assert_equivalent(handwritten.for_workload(workloads.get(name, **params), vector_bits))


def test_register_tile_leaves_room_in_the_register_file():
    # AVX-512: 32 registers of 16 floats; AVX2 and SSE: 16 registers (of 8 and 4 floats).
    for vector_bits, registers in ((512, 32), (256, 16), (128, 16)):
        tile_i, tile_j = handwritten.register_tile(vector_bits)
        lanes = vector_bits // 32
        assert tile_j % lanes == 0
        accumulators = tile_i * tile_j // lanes
        assert accumulators + tile_j // lanes + 1 <= registers  # a row of B and a broadcast of A
    assert handwritten.register_tile(512) == (8, 32)  # the tile the benchmarks used before
