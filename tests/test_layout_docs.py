"""The documentation names real files: "Where a change goes" (docs/layout.md) names files a
newcomer who follows it lands in, not ones that moved; the README stays a short front page whose
relative links, and those of every page under docs/, reach a file (and a heading) that is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LAYOUT = ROOT / "docs" / "layout.md"
MATRIX = ROOT / "docs" / "matrix.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def where_a_change_goes() -> str:
    text = LAYOUT.read_text(encoding="utf-8")
    start = text.index("#### Where a change goes")
    end = text.index("\n#", start + 1)
    return text[start:end]


def named_paths(section: str) -> list[str]:
    """Every code span in ``section`` that names a path in the tree (it has a slash or a file
    suffix; not the slash command, `/perfcheck`); ``<probe>`` stands for each probe's name."""
    spans = re.findall(r"`([^`\s]+)`", section)
    return [s for s in spans if not s.startswith("/") and ("/" in s or re.search(r"\.(py|yml|j2)$", s))]


def test_where_a_change_goes_names_files_that_exist() -> None:
    paths = named_paths(where_a_change_goes())
    assert len(paths) >= 10, paths  # the section is there and names files
    missing = []
    for path in paths:
        if "<probe>" in path:
            matches = list(ROOT.glob(path.replace("<probe>", "*")))
            if not matches:
                missing.append(path)
        elif not (ROOT / path).exists():
            missing.append(path)
    assert missing == []


def test_the_check_sees_a_path_that_is_gone() -> None:
    section = "- **A thing**: `perfcheck/core/no_such_module.py` and `perfcheck/core/matrix.yml`"
    assert named_paths(section) == ["perfcheck/core/no_such_module.py", "perfcheck/core/matrix.yml"]
    assert not (ROOT / named_paths(section)[0]).exists()


def what_it_catches(page: Path) -> dict[str, str]:
    """The categories of a page's "What it catches" table, each with the severity it gives."""
    text = page.read_text(encoding="utf-8")
    start = text.index("## What it catches")
    table = text[start : text.index("\n\n", text.index("| finding |", start))]
    listed: dict[str, str] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first, _probe, severity = (cell.strip() for cell in line.strip().strip("|").split(" | ")[:3])
        names = re.findall(r"`([a-z_0-9]+)`", first)
        said = severity.split(" / ")
        listed |= dict(zip(names, said if len(said) == len(names) else said * len(names), strict=True))
    return listed


def test_what_it_catches_lists_every_built_in_category_with_its_own_severity() -> None:
    # The tables, the README's summary and docs/matrix.md's in full, are written by hand; a
    # category's severity is said once, in its entry.
    from perfcheck.core import probes
    from perfcheck.core.matrix import known

    entries = known()
    raised = {c for kind in probes.built_in() for c in kind.raised()}
    for page in (README, MATRIX):
        listed = what_it_catches(page)
        assert set(listed) == raised, page.name
        assert {c: s for c, s in listed.items() if entries[c].severity != s} == {}, page.name


def test_the_readme_is_a_front_page_that_keeps_its_two_command_quick_start() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    quick_start = text[text.index("## Quick start") : text.index("\n## ", text.index("## Quick start"))]
    assert "make demo   # " in quick_start and "make test   # " in quick_start


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def without_code(text: str) -> str:
    """The text outside code blocks and code spans, where a link is a link."""
    return re.sub(r"`[^`\n]*`", "", without_code_blocks(text))


def anchors_of(page: Path) -> set[str]:
    return heading_anchors(without_code_blocks(page.read_text(encoding="utf-8")))


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not a file of the tree
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors_of(file)):
            broken.append(target)
    return broken


def test_every_relative_link_of_the_readme_and_the_docs_resolves() -> None:
    assert len(PAGES) >= 10  # the README and the pages it points to
    assert {page.name: broken_links(page) for page in PAGES if broken_links(page)} == {}


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Its part: `one`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[a](other.md#its-part-one) [b](other.md#gone) [c](gone.md) [d](#page) [e](#nope)\n"
        "[f](https://example.com/x) `[g](gone.md)`\n\n```\n[h](gone.md)\n```\n"
    )
    assert broken_links(page) == ["other.md#gone", "gone.md", "#nope"]
