"""A rule a user writes: the documentation's example ("Writing your own rule"), read from the page
that shows it, run as a reader would run it, plugged into the default space and
property-tested with metasched.testing."""
import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from metasched import workloads
from metasched.space import ScheduleRule, cpu_default
from metasched.testing import assert_equivalent, samples

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^#+ Writing your own rule\s*$", flags=re.M)
MAX_LINES = 40  # "a rule is short": the whole example, imports and the space edit included


def example_section() -> tuple[Path, str]:
    """The page that has the heading, and its text from the heading to the next heading of the
    same or a higher level. Exactly one page of README.md and docs/ may have it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [(page, m) for page in pages
             for m in HEADING.finditer(page.read_text(encoding="utf-8"))]
    assert len(found) == 1, f"'Writing your own rule' should head one section, found {found}"
    page, m = found[0]
    text = page.read_text(encoding="utf-8")
    level = len(m.group(0)) - len(m.group(0).lstrip("#"))
    end = re.compile(rf"^#{{1,{level}}} ", flags=re.M).search(text, m.end())
    return page, text[m.end():end.start() if end else len(text)]


PAGE, SECTION = example_section()
CODE_BLOCKS = re.findall(r"^```python[^\n]*\n(.*?)^```", SECTION, flags=re.S | re.M)
EXAMPLE = "\n".join(CODE_BLOCKS)


def run_example() -> dict:
    """The example's code, executed as a fresh module: what a reader who pastes it gets."""
    namespace = {"__name__": "doc_example"}
    exec(compile(EXAMPLE, f"{PAGE.relative_to(ROOT)} (Writing your own rule)", "exec"), namespace)
    return namespace


NAMESPACE = run_example()
TileSpatial = NAMESPACE["TileSpatial"]
SPACE = NAMESPACE["space"]  # the example's own space: cpu_default() with the rule inserted
WL = workloads.get("transpose_add", M=9, N=14)


def test_the_page_shows_the_rule_in_python():
    assert CODE_BLOCKS, f"{PAGE.name}: no ```python block under 'Writing your own rule'"
    assert "class TileSpatial(ScheduleRule)" in EXAMPLE


def test_the_rule_is_short():
    lines = [line for line in EXAMPLE.splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES, f"the example in {PAGE.name} has {len(lines)} lines"


def test_the_example_makes_a_rule_and_puts_it_in_a_space():
    assert issubclass(TileSpatial, ScheduleRule) and dataclasses.is_dataclass(TileSpatial)
    assert any(isinstance(rule, TileSpatial) for rule in SPACE.rules)
    assert len(SPACE.rules) == len(cpu_default().rules) + 1


def test_it_adds_tiled_sketches():
    # The rule forks C untouched and tiled; the default space's TransposedReadTiling then forks
    # the untouched one again (the tiled one's loops are no longer its axes): one sketch more.
    plain, tiled = len(cpu_default().generate(WL)), SPACE.generate(WL)
    assert len(tiled) == plain + 1
    assert any("sample_perfect_tile" in str(sch.trace) for sch in tiled)


def test_sampling_the_space_gives_valid_programs():
    for seed in range(4):
        assert_equivalent(SPACE.sample(WL, seed))


@given(sch=samples(SPACE, WL))
def test_every_program_of_the_space_computes_the_reference(sch):
    assert_equivalent(sch)


@given(name=st.sampled_from(["softmax", "matmul_relu", "layernorm"]), data=st.data())
def test_it_composes_with_the_other_rules(name, data):
    from conftest import SMALL_PARAMS
    wl = workloads.get(name, **SMALL_PARAMS[name])
    assert_equivalent(data.draw(samples(SPACE, wl)))


def test_a_rule_without_apply_cannot_be_made():
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


def test_tuning_in_the_space_gives_valid_programs():
    """A short tuning run in the example's space (built and measured in worker processes):
    every trial succeeds, and the best program computes the reference."""
    import metasched
    result = metasched.tune(WL, trials=4, space=SPACE, strategy="replay", seed=0, confirm=0)
    assert len(result.history) == 4 and not [t.error for t in result.history if t.error]
    assert_equivalent(result.best_schedule)
