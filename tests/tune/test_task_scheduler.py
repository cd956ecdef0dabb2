"""The task schedulers on synthetic tasks, no tuning: the round-robin warm-up, a task without a
correct program first, the gradient's choice (the larger expected cut in weighted latency, a
heavier weight, a task far behind a similar one), finished tasks skipped, seeded ties; and over
synthetic latency curves, the gradient spends a budget better than round-robin."""
import math

import pytest

from metasched import parse
from metasched.tune import GradientBased, RoundRobin, TaskState, TuneTask


def _workload(name: str, n: int, kind_op: str = "*"):
    """A workload of ``n * n * 8`` multiply-adds; ``kind_op`` changes its kind."""
    return parse(f"""
workload {name}(N = {n}) {{
    input A: float32[N, 8]
    input B: float32[8, N]
    C[i, j] += A[i, k] {kind_op} B[k, j]
    output D[i, j] = C[i, j] + 1.0
}}
""")


def _states(*specs) -> list[TaskState]:
    """States of tasks given as (history, weight) or (history, weight, workload)."""
    states = []
    for i, spec in enumerate(specs):
        history, weight = spec[0], spec[1]
        wl = spec[2] if len(spec) > 2 else _workload(f"t{i}", 16 + i)
        states.append(TaskState(i, TuneTask(wl, weight), trials=16 * len(history), history=list(history)))
    return states


def _started(scheduler, states, seed=0):
    scheduler.start(states, seed)
    return scheduler


def test_round_robin_takes_the_unfinished_tasks_in_turn():
    states = _states(([], 1), ([], 1), ([], 1))
    scheduler = _started(RoundRobin(), states)
    picked = [scheduler.next_task(states) for _ in range(4)]
    assert picked == [0, 1, 2, 0]
    states[1].finished = True
    assert [scheduler.next_task(states) for _ in range(3)] == [2, 0, 2]
    for s in states:
        s.finished = True
    assert scheduler.next_task(states) is None


def test_the_warm_up_gives_every_task_a_round_in_order_skipping_those_resumed():
    states = _states(([], 1), ([2e-3], 1), ([], 5))
    scheduler = _started(GradientBased(), states)
    order = []
    for _ in range(2):
        i = scheduler.next_task(states)
        order.append(i)
        states[i].history.append(1e-3)
        scheduler.tuned(states[i])
    assert order == [0, 2]  # task 1 has a round from the database already


def test_a_task_with_no_correct_program_comes_first():
    states = _states(([1e-3, 1e-3], 100), ([None, None], 1), ([5e-3], 1))
    assert _started(GradientBased(), states).next_task(states) == 1


def test_the_task_whose_time_falls_fastest_is_picked():
    falling = [8e-3, 4e-3, 2e-3, 1e-3]
    flat = [1.1e-3] * 4
    states = _states((flat, 1), (falling, 1))
    scheduler = _started(GradientBased(), states)
    assert scheduler.next_task(states) == 1
    g_flat, g_falling = (scheduler.gradient(s, states) for s in states)
    # backward: (8 - 1) / 3 ms per round for the falling one, 0 for the flat one;
    # forward: best / rounds for both
    assert g_falling == pytest.approx(0.2 * 7e-3 / 3 + 0.8 * 1e-3 / 4)
    assert g_flat == pytest.approx(0.8 * 1.1e-3 / 4)


def test_a_heavier_weight_wins():
    curve = [4e-3, 3e-3, 2e-3, 1e-3]
    states = _states((curve, 1), (curve, 3), (curve, 2))
    assert _started(GradientBased(), states).next_task(states) == 1


def test_a_task_far_below_a_similar_task_s_speed_is_worth_more():
    a, b = _workload("a", 32), _workload("b", 32)  # one kind, one FLOP count
    other = _workload("c", 32, kind_op="+")  # another kind, same FLOPs
    flat = [1e-3] * 6
    # b reached 8 times a's speed: a could save most of its time by reaching half of b's
    states = _states((flat, 1, a), ([1.25e-4] * 6, 1, b))
    scheduler = _started(GradientBased(), states)
    assert scheduler.gradient(states[0], states) == pytest.approx(0.8 * (1e-3 - 2 * 1.25e-4))
    alone = _states((flat, 1, a), ([1.25e-4] * 6, 1, other))
    scheduler = _started(GradientBased(), alone)
    assert scheduler.gradient(alone[0], alone) == pytest.approx(0.8 * 1e-3 / 6)


def test_a_task_that_stays_far_behind_its_group_leaves_it():
    a, b = _workload("a", 32), _workload("b", 32)
    states = _states(([1e-3] * 7, 1, a), ([1e-4], 1, b))
    scheduler = _started(GradientBased(), states)
    before = scheduler.gradient(states[0], states)
    scheduler.tuned(states[0])  # 7 rounds > 5 + b's 1, at a tenth of b's speed
    assert scheduler.gradient(states[0], states) < before
    assert scheduler.gradient(states[0], states) == pytest.approx(0.8 * 1e-3 / 7)


def test_finished_tasks_are_never_picked():
    states = _states(([8e-3, 4e-3, 2e-3, 1e-3], 10), ([1e-3] * 4, 1), ([1e-3] * 4, 1))
    states[0].finished = True
    scheduler = _started(GradientBased(), states)
    assert scheduler.next_task(states) in (1, 2)
    states[1].finished = states[2].finished = True
    assert scheduler.next_task(states) is None


def test_ties_are_drawn_from_the_seed():
    def picks(seed):
        states = _states(*[([1e-3] * 4, 1)] * 5)
        scheduler = _started(GradientBased(), states, seed)
        return [scheduler.next_task(states) for _ in range(12)]

    assert picks(3) == picks(3)
    assert picks(3) != picks(4)
    assert len(set(picks(3))) > 1


def _simulate(scheduler, curves, weights, budget, batch=16) -> list[float]:
    """Tune synthetic tasks: task ``i`` after ``t`` trials has the best time ``curves[i](t)``.
    The weighted latency after every round."""
    states = [TaskState(i, TuneTask(_workload(f"t{i}", 16 + i), w)) for i, w in enumerate(weights)]
    scheduler.start(states, 0)
    spent, sums = 0, []
    while spent < budget:
        i = scheduler.next_task(states)
        state = states[i]
        state.trials += batch
        state.history.append(curves[i](state.trials))
        scheduler.tuned(state)
        spent += batch
        sums.append(sum(s.weight * (s.best_seconds or curves[s.index](0)) for s in states))
    return sums


def test_over_synthetic_curves_the_gradient_beats_round_robin():
    # A heavy task whose time keeps falling, and light ones that settle at once: the
    # gradient should spend the budget on the heavy one.
    def curve(start, floor, tau):
        return lambda t: floor + (start - floor) * math.exp(-t / tau)

    curves = [curve(40e-3, 4e-3, 160), curve(2e-3, 1e-3, 16), curve(2e-3, 1e-3, 16), curve(2e-3, 1e-3, 16)]
    weights = [4, 1, 1, 1]
    gradient = _simulate(GradientBased(), curves, weights, 320)
    robin = _simulate(RoundRobin(), curves, weights, 320)
    assert gradient[-1] < 0.8 * robin[-1]
    assert all(b <= a for a, b in zip(gradient, gradient[1:]))


def test_tasks_without_floating_point_work_are_compared_by_time_alone():
    copies = [parse(f"""
workload copy{i}(N = 16) {{
    input A: float32[N]
    output B[i] = A[i]
}}
""") for i in range(2)]
    assert copies[0].flops == 0 and copies[0].kind == copies[1].kind
    states = _states(([2e-3] * 7, 1, copies[0]), ([1e-3], 1, copies[1]))
    scheduler = _started(GradientBased(), states)
    assert scheduler.next_task(states) == 1  # best / rounds: 1 ms against 2 / 7 ms
    scheduler.tuned(states[0])
    assert scheduler.gradient(states[0], states) == pytest.approx(0.8 * 2e-3 / 7)
