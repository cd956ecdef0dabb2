"""Every relative link of README.md and docs/*.md leads somewhere: to a file or folder of the
repository, and where it names a heading of a Markdown page (``page.md#heading``), to a heading
that page has. Links inside code (fenced blocks and `inline code`) are not links."""
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", flags=re.S)
COMMENT = re.compile(r"<!--.*?-->", flags=re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", flags=re.M)
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*\b(?:href|src)\s*=\s*["']([^"']+)["']""", flags=re.I)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", flags=re.I)


def prose(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", COMMENT.sub("", text)))


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    found = INLINE_LINK.findall(text) + REFERENCE_DEF.findall(text) + HTML_LINK.findall(text)
    return [target for target in found if target and not EXTERNAL.match(target)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[`*_~]|<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    result = set()
    for heading in re.findall(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")  # GitHub numbers repeats
    result |= set(re.findall(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""", text))
    return result


def broken(page: Path, target: str, root: Path = ROOT) -> str | None:
    path, _, fragment = target.partition("#")
    path = unquote(path.split("?", 1)[0])
    dest = (page.parent / path).resolve() if path else page
    if path.startswith("/"):
        return f"{target}: an absolute path (write it relative to {page.name})"
    if not dest.exists():
        return f"{target}: no such file or folder"
    if root not in dest.parents and dest != root:
        return f"{target}: outside the repository"
    if fragment and dest.suffix == ".md" and unquote(fragment) not in anchors(dest):
        return f"{target}: {dest.relative_to(root)} has no heading #{fragment}"
    return None


def test_there_are_pages_and_links():
    assert (ROOT / "README.md").exists() and len(PAGES) > 1
    assert links(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    problems = [problem for target in links(page) if (problem := broken(page, target))]
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name == "docs"], ids=lambda p: p.name)
def test_every_docs_page_is_linked_from_the_readme(page):
    assert f"docs/{page.name}" in links(ROOT / "README.md"), f"README.md does not link docs/{page.name}"


def test_the_checker_sees_broken_links(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A `code` heading, too\n", encoding="utf-8")
    assert broken(page, "page.md#title", tmp_path) is None
    assert broken(page, "#a-code-heading-too", tmp_path) is None
    assert "no heading" in broken(page, "page.md#nope", tmp_path)
    assert "no such file" in broken(page, "missing.md", tmp_path)
    assert "outside" in broken(page, "../" + tmp_path.name + "/../", tmp_path)
    text = "[a](x.md) ![b](img.png \"t\") `[c](no.md)`\n```\n[d](no.md)\n```\n[e]: ref.md\n"
    page.write_text(text, encoding="utf-8")
    assert links(page) == ["x.md", "img.png", "ref.md"]
