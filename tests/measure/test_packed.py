"""A task's constant inputs: the builder takes a program's copies of them out (``Packed``), the
runner makes them once before checking and timing the program, and a tuning run of a network's
task records programs timed that way."""
import pytest

from conftest import panel_copy
from metasched.codegen import CodegenOptions
from metasched.lang import parse
from metasched.measure import LocalBuilder, LocalRunner, Packed, TimingConfig
from metasched.measure.builder import build_trace
from metasched.measure.runner import run_artifact
from metasched.tune import TuneTask

DENSE = """workload dense() {
    input X: float32[13, 37]
    input W: float32[37, 24]
    T[i, j] += X[i, k] * W[k, j] where i in 0..13, j in 0..24, k in 0..37
    output Y[i, j] = max(T[i, j], 0.0) where i in 0..13, j in 0..24
}"""


@pytest.fixture(scope="module")
def copying():
    """(the workload, a program that copies W into panels of 8 columns)."""
    workload = parse(DENSE)
    return workload, panel_copy(workload).trace


def test_a_program_copying_a_constant_builds_packed_and_runs_checked(copying):
    workload, trace = copying
    plain = build_trace(workload, trace.to_json(), CodegenOptions())
    packed = build_trace(workload, trace.to_json(), CodegenOptions(), constants=["W"])
    assert not isinstance(plain, Packed) and isinstance(packed, Packed)
    assert [sources for _, sources in packed.packs] == [(1,)]  # made from input 1, W
    config = TimingConfig(repeat=1, number=1)
    assert len(run_artifact(workload, packed, config, seed=0)) == 1  # checked against numpy, then timed
    assert not isinstance(build_trace(workload, trace.to_json(), CodegenOptions(), constants=["X"]), Packed)


def test_programs_that_pack_alike_share_one_compiled_pack(copying):
    workload, trace = copying
    first = build_trace(workload, trace.to_json(), CodegenOptions(), constants=["W"])
    again = build_trace(workload, trace.to_json(), CodegenOptions(), constants=["W"])
    other = build_trace(workload, trace.to_json(), CodegenOptions(opt_level=2), constants=["W"])
    assert again.packs[0][0] is first.packs[0][0] and again.kernel is not first.kernel
    assert other.packs[0][0] is not first.packs[0][0]  # other options, another build


def test_a_packed_program_whose_pack_is_wrong_is_a_failed_trial(copying):
    workload, trace = copying
    packed = build_trace(workload, trace.to_json(), CodegenOptions(), constants=["W"])
    # The pack of another program: it makes the panels from X's place in the inputs, not W's.
    (pack, _), = packed.packs
    wrong = Packed(packed.kernel, ((pack, (0,)),))
    with LocalBuilder(workers=1) as builder, LocalRunner(timing=TimingConfig(repeat=1, number=1)) as runner:
        (built,) = builder.build(workload, [trace], constants=["W"])
        good, bad = runner.run(workload, [built.artifact, wrong])
    assert good.ok and not bad.ok


def test_a_task_names_its_constants_among_its_inputs(copying):
    workload, _ = copying
    assert TuneTask(workload, constants=["W"]).constants == ("W",)
    with pytest.raises(ValueError, match="constants must name inputs of dense"):
        TuneTask(workload, constants=["V"])
