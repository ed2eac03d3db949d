"""docs/layout.md's "Where a change goes" names real files: a newcomer who follows it lands in the
file it names, not in one that moved."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LAYOUT = ROOT / "docs" / "layout.md"
MATRIX = ROOT / "docs" / "matrix.md"


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
