"""``metasched tune MODEL.onnx`` and ``metasched run MODEL.onnx``: a network tuned and run from
the command line, as a user does it (one real run in a subprocess), and the one-line errors of
bad models (exit 2) in this process."""
from __future__ import annotations

import subprocess
import sys

import pytest

from onnx_cases import helper, model
from metasched.cli import EXIT_OK, EXIT_USER_ERROR, main
from metasched.graph import examples

METASCHED = [sys.executable, "-m", "metasched"]


@pytest.fixture
def mlp_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(examples.mlp(batch=3, sizes=(10, 12, 5)).SerializeToString())
    return path


def test_tune_then_run_a_model(mlp_file, tmp_path):
    db = tmp_path / "net.db"
    done = subprocess.run([*METASCHED, "tune", str(mlp_file), "--trials", "12", "--trials-per-task", "4",
                           "--db", str(db), "--strategy", "replay"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_OK, done.stderr
    assert "3 tasks, 12 new trials" in done.stdout and f"run it: metasched run {mlp_file} --db {db}" in done.stdout
    done = subprocess.run([*METASCHED, "run", str(mlp_file), "--db", str(db)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == EXIT_OK, done.stderr
    assert "3 tasks (3 tuned), 3 kernel calls; latency" in done.stdout
    assert "largest difference from onnxruntime" in done.stdout and "all kernels" in done.stdout


def test_run_without_a_database_uses_default_schedules(mlp_file, capsys):
    assert main(["run", str(mlp_file)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "3 tasks (0 tuned)" in out and out.count("default (untuned)") == 3


def test_bad_models_are_one_line_errors(tmp_path, capsys):
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(b"\x08\x07garbage that is not a model")
    node = helper.make_node
    unsupported = tmp_path / "nms.onnx"
    unsupported.write_bytes(model([node("NonMaxSuppression", ["x", "x"], ["y"])], {"x": [1, 2, 4]},
                                  {"y": None}).SerializeToString())
    symbolic = tmp_path / "symbolic.onnx"
    symbolic.write_bytes(model([node("Relu", ["x"], ["y"])], {"x": ["batch", 3]}, {"y": None}).SerializeToString())
    cases = [(["run", str(damaged)], "damaged.onnx"),
             (["run", str(tmp_path / "missing.onnx")], "no such model file"),
             (["run", str(unsupported)], "node 'NonMaxSuppression_0' (NonMaxSuppression): operator NonMaxSuppression "
                                         "is not supported"),
             (["run", str(symbolic)], "input 'x' has symbolic dimensions ['batch']"),
             (["run", str(symbolic), "--shape", "x=2"], "shape [2] given, the model says ['batch', 3]"),
             (["tune", str(symbolic), "--db", str(tmp_path / "t.db"), "-p", "N=3"], "-p applies to a workload"),
             (["run", str(symbolic), "--db", str(tmp_path / "none.db"), "--shape", "x=2,3"], "no tuning database")]
    for argv, message in cases:
        assert main(argv) == EXIT_USER_ERROR, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["run", str(symbolic), "--shape", "x=2,3"]) == EXIT_OK
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "none.db").exists()


def test_shape_option_is_checked(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "m.onnx", "--shape", "x=a,b"])
    assert stop.value.code == EXIT_USER_ERROR
    assert "wants NAME=D,D,..." in capsys.readouterr().err


def test_a_network_tuning_run_killed_mid_run_loses_nothing_and_the_next_one_goes_on(mlp_file, tmp_path):
    import signal

    from conftest import kill_when_recorded
    from metasched.database import Database
    from metasched.graph import import_onnx, plan
    db = tmp_path / "net.db"
    command = [*METASCHED, "tune", str(mlp_file), "--trials", "12", "--db", str(db), "--strategy", "replay"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    seen = kill_when_recorded(process, db, 3, seconds=180)  # the tuner and its workers, mid-run
    assert seen >= 3, "the tuning process did not commit three records in time"
    assert process.returncode == -signal.SIGKILL and seen < 12  # killed, not finished
    workloads = [task.workload for task in plan(import_onnx(str(mlp_file))).tasks]
    with Database(db) as opened:
        kept = {wl.name: [r.program for r in opened.records(wl)] for wl in workloads}
    assert sum(map(len, kept.values())) >= seen
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_OK, done.stderr
    with Database(db) as opened:
        after = {wl.name: [r.program for r in opened.records(wl)] for wl in workloads}
    assert all(after[name][:len(programs)] == programs for name, programs in kept.items())  # nothing lost
    assert sum(map(len, after.values())) == 12  # the budget counts what the killed run recorded
    assert all(len(programs) == len(set(programs)) for programs in after.values())
