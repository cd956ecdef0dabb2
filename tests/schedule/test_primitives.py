"""Loop primitives: what they do to the loop program, and the errors of illegal uses."""
import pytest

import metasched
from metasched import ScheduleError, Schedule

MATMUL_RELU = """
workload mm(M = 16, N = 12, K = 8) {
    input A: float32[M, K]
    input B: float32[K, N]
    C[i, j] += A[i, k] * B[k, j]
    output D[i, j] = max(C[i, j], 0.0)
}
"""


@pytest.fixture
def sch():
    return Schedule(metasched.parse(MATMUL_RELU))


def loop_names(sch, block):
    return [sch.get(rv).name for rv in sch.get_loops(sch.get_block(block))]


def test_get_loops_in_written_order(sch):
    assert loop_names(sch, "C") == ["i", "j", "k"]
    # the second block's variables get fresh names: loop names are unique in a program
    assert loop_names(sch, "D") == ["i1", "j1"]


def test_split_infers_the_missing_factor(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    outer, inner = sch.split(i, [None, 5])
    assert (sch.get(outer).extent, sch.get(inner).extent) == (4, 5)
    assert "if i_0 * 5 + i_1 < 16:" in str(sch)  # 20 > 16 iterations: guarded


def test_split_that_divides_needs_no_guard(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [2, None, 4])
    assert loop_names(sch, "C") == ["i_0", "i_1", "i_2", "j", "k"]
    assert "if " not in str(sch)
    assert "C[i_0 * 8 + i_1 * 4 + i_2, j]" in str(sch)


def test_fuse_and_reorder(sch):
    i, j = sch.get_loops(sch.get_block("D"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).extent == 16 * 12
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i)
    assert loop_names(sch, "C") == ["k", "j", "i"]


def test_reduction_init_goes_before_the_outermost_reduction_loop(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    text = str(sch)
    lines = [line.strip() for line in text.splitlines()]
    init = lines.index("C[i, j] = 0.0")
    assert lines[init - 1] == "for j in range(12):"
    assert lines[init + 1] == "for k in range(8):"


def test_loop_kinds_show_in_the_program(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.vectorize(j)
    sch.unroll(k)
    text = str(sch)
    assert "for i in parallel(16):" in text
    assert "for j in vectorized(12):" in text
    assert "for k in unrolled(8):" in text


@pytest.mark.parametrize("action, message", [
    (lambda s, L: s.vectorize(L["C"][2]), "reduction loop"),
    (lambda s, L: s.parallel(L["C"][2]), "reduction loop"),
    (lambda s, L: s.reorder(L["C"][0], L["D"][0]), "different blocks"),
    (lambda s, L: s.fuse(L["C"][0], L["D"][1]), "different blocks"),
    (lambda s, L: s.fuse(L["C"][0], L["C"][2]), "adjacent"),
    (lambda s, L: s.fuse(L["C"][1], L["C"][2]), "spatial loop with a reduction loop"),
    (lambda s, L: s.fuse(L["C"][1], L["C"][0]), "adjacent"),
    (lambda s, L: s.reorder(L["C"][0], L["C"][0]), "given twice"),
    (lambda s, L: s.split(L["C"][0], [3, 5]), "cover 15 iterations"),
    (lambda s, L: s.split(L["C"][0], [None, None]), "at most one factor"),
    (lambda s, L: s.split(L["C"][0], [0, 16]), "positive integers"),
    (lambda s, L: s.split(L["C"][0], [16]), "at least 2 factors"),
    (lambda s, L: s.split(L["C"][0], [2.5, None]), "positive integers"),
    (lambda s, L: s.get_loops(L["C"][0]), "expected a BlockRV"),
    (lambda s, L: s.split(s.get_block("C"), [2, None]), "expected a LoopRV"),
    (lambda s, L: s.get_block("Q"), "no block named 'Q'"),
])
def test_illegal_primitives_raise_schedule_error(sch, action, message):
    loops = {b: sch.get_loops(sch.get_block(b)) for b in ("C", "D")}
    before = str(sch)
    with pytest.raises(ScheduleError, match=message):
        action(sch, loops)
    assert str(sch) == before  # a failed primitive changes nothing


def test_a_loop_consumed_by_split_cannot_be_used_again(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [4, 4])
    with pytest.raises(ScheduleError, match="no longer exists: a split replaced it"):
        sch.parallel(i)
    with pytest.raises(ScheduleError, match="no longer exists: a split replaced it"):
        sch.split(i, [2, 8])


def test_a_loop_consumed_by_fuse_cannot_be_used_again(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.fuse(i, j)
    with pytest.raises(ScheduleError, match="a fuse replaced it"):
        sch.reorder(j, k)


def test_a_loop_of_another_schedule_is_rejected(sch):
    other = Schedule(sch.workload)
    loop = other.get_loops(other.get_block("C"))[0]
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        sch.parallel(loop)


def test_loop_kind_cannot_change_once_set(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.parallel(i)  # the same kind again is harmless
    with pytest.raises(ScheduleError, match="already parallel"):
        sch.vectorize(i)
    with pytest.raises(ScheduleError, match="must be serial"):
        sch.fuse(i, j)
