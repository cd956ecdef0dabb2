"""The README's cost model and task scheduler of one's own ("A cost model and a task scheduler
of your own"), read from the README itself: its first block saved as the file it names, its
second run as a reader would run it, with real builds and timings."""
import re
import sys
from pathlib import Path

import numpy as np

from metasched import TasksResult
from metasched.search import CostModel
from metasched.tune import TaskScheduler

ROOT = Path(__file__).resolve().parents[1]
HEADING = "### A cost model and a task scheduler of your own"


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(HEADING)
    end = text.index("\n## ", start)
    return re.findall(r"^```python[^\n]*\n(.*?)^```", text[start:end], flags=re.S | re.M)


def test_the_readme_s_model_and_scheduler_tune_two_workloads(tmp_path, monkeypatch):
    module, usage = _blocks()
    first = module.splitlines()[0]
    assert first.startswith("# ") and first[2:].endswith(".py"), "the first block names its file"
    (tmp_path / first[2:]).write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the worker processes import it too
    monkeypatch.delitem(sys.modules, first[2:-3], raising=False)
    namespace = {"__name__": "readme_example"}
    exec(compile(usage, "README.md (A cost model and a task scheduler of your own)", "exec"), namespace)
    user = sys.modules[first[2:-3]]
    assert issubclass(user.LeastSquares, CostModel) and issubclass(user.SlowestFirst, TaskScheduler)
    result = namespace["result"]
    assert isinstance(result, TasksResult) and result.trials == 32
    assert all(task.best_record is not None for task in result.tasks)


def test_the_readme_s_model_learns_and_predicts():
    namespace = {"__name__": "readme_model"}
    exec(_blocks()[0], namespace)
    from metasched.search.cost_model import Measured
    model = namespace["LeastSquares"]()
    assert not model.informed and list(model.predict(np.ones((2, 3)))) == [0, 0]
    rows = np.array([[1, 0, 0], [2, 0, 0], [4, 0, 0]], float)
    model.update(rows, [Measured("w", 4e-3), Measured("w", 2e-3), Measured("w", 1e-3)])
    scores = model.predict(rows)
    assert model.informed and scores[2] > scores[1] > scores[0]
