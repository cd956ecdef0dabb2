"""``metasched tune`` with several targets: one budget over them (``NAME:WEIGHT``), the task
table, each task's best against numpy; and what it refuses. One real run in a subprocess, as a
user runs it; the refusals in this process."""
import subprocess
import sys

import pytest

from metasched import Database, load
from metasched.cli import EXIT_OK, EXIT_USER_ERROR, _weighted, main
from metasched.tune import host_target

METASCHED = [sys.executable, "-m", "metasched"]
SCALE = """\
workload scale(N = 64) {
  input X: float32[N]
  output Y[i] = X[i] * 2.0
}
"""
ROWSUM = """\
workload rowsum(M = 8, N = 24) {
  input X: float32[M, N]
  output Y[i] += X[i, j]
}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "scale.tensor").write_text(SCALE)
    (tmp_path / "rowsum.tensor").write_text(ROWSUM)
    return tmp_path


def test_several_targets_share_one_budget_and_end_with_the_table_and_each_best(files):
    db = files / "tasks.db"
    done = subprocess.run([*METASCHED, "tune", "scale.tensor:3", "rowsum.tensor", "softmax:2", "--trials", "20",
                           "--db", str(db), "--strategy", "replay", "--scheduler", "round-robin"],
                          cwd=files, capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_OK, done.stderr
    out = done.stdout
    assert "3 tasks: 20 new trials, 0 earlier ones" in out
    table = out[out.index("ID | task"):]
    for name, weight in (("scale", "3"), ("rowsum", "1"), ("softmax", "2")):
        row = next(line for line in table.splitlines() if f"| {name} " in line)
        assert row.split("|")[2].strip() == weight
    assert "total weighted latency:" in out
    assert "ID | task" in done.stderr  # the live table, drawn as it goes
    best = out[out.index("# each task's best"):]
    assert "scale(N=64):" in best and "no numpy baseline" in best  # a file's workload has none
    assert "x numpy" in best.split("softmax")[1]  # the built-in has one
    target = host_target()
    with Database(db) as database:
        counts = [len(database.records(load(files / f"{n}.tensor"), target)) for n in ("scale", "rowsum")]
    assert sum(counts) <= 20 and min(counts) > 0


@pytest.mark.parametrize("argv, says", [
    (["scale.tensor", "rowsum.tensor", "-p", "N=8"], "-p and --name apply to one target"),
    (["scale.tensor", "rowsum.tensor", "--plot", "c.png"], "--plot draws one workload's curve"),
    (["scale.tensor", "rowsum.tensor", "--warm-start", "matmul"], "--warm-start names"),
    (["scale.tensor", "scale.tensor:2"], "are one workload"),
    (["scale.tensor:0"], "the weight after ':' must be a positive number"),
    (["scale.tensor:-1", "rowsum.tensor"], "the weight after ':' must be a positive number"),
    (["scale.tensor", "--scheduler", "round-robin"], "--scheduler and --trials-per-task share a budget"),
    (["softmax:x"], "no built-in workload has that name"),
])
def test_what_several_targets_refuse(files, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(files)
    assert main(["tune", *argv, "--db", "t.db"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    assert not (files / "t.db").exists()  # refused before the database was made


def test_a_weight_is_what_follows_the_last_colon_when_it_is_a_number():
    assert _weighted("softmax") == ("softmax", None)
    assert _weighted("softmax:2.5") == ("softmax", 2.5)
    assert _weighted("dir:a/b.tensor:3") == ("dir:a/b.tensor", 3.0)
    assert _weighted("dir:a/b.tensor") == ("dir:a/b.tensor", None)
    assert _weighted(":3") == (":3", None)
