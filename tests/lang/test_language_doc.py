"""docs/language.md stays true to the language: every workload it shows parses, and every
keyword and operator of grammar/tensor.lark appears in its grammar summary."""
import re
from pathlib import Path

import pytest

import metasched
from metasched.lang.parser import _definitions

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```[^\n]*\n(.*?)^```", DOC, flags=re.S | re.M)
WORKLOAD_BLOCKS = [b for b in BLOCKS if re.search(r"^workload \w+\(", b, flags=re.M)]


def test_the_page_shows_workloads():
    assert len(WORKLOAD_BLOCKS) >= 2


@pytest.mark.parametrize("block", WORKLOAD_BLOCKS)
def test_every_workload_on_the_page_parses(block):
    for definition in _definitions(block):
        wl = metasched.parse(block, definition.name)
        assert wl.name == definition.name and wl.outputs


def test_the_grammar_summary_names_every_keyword_and_operator():
    grammar = (ROOT / "grammar" / "tensor.lark").read_text(encoding="utf-8")
    literals = set(re.findall(r'"([^"]+)"', grammar))
    summary = next(b for b in BLOCKS if b.startswith("file "))
    missing = sorted(lit for lit in literals if f'"{lit}"' not in summary)
    assert not missing, f"docs/language.md's grammar summary lacks {missing}"
