"""The README's "Where a change goes" names real files: a newcomer who follows it lands in the
file it names, not in one that moved."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def where_a_change_goes() -> str:
    text = README.read_text(encoding="utf-8")
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
