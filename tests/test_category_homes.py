"""A built-in probe's own finding category is named, as a string or a matrix key, only in that
probe's own files (its descriptor, core/probes/<probe>.py, its entries beside it, <probe>.yml, and
the helper modules a descriptor too long for one file is split into, core/probes/<probe>_*.py: the
fsdp probe's layout comparison, say, which raises its dtensor_layout_changed): bisect, explain, the
reports and the charts read what a category is from the registry, so adding or removing one
touches its probe's files alone."""

from __future__ import annotations

import re
from pathlib import Path

from perfcheck.core import probes

PACKAGE = Path(__file__).resolve().parent.parent / "perfcheck"


def naming(category: str) -> re.Pattern[str]:
    # A quoted string ("c" or 'c') or a matrix key (`c:` at a line's start); not the word in prose.
    return re.compile(rf"""["']{category}["']|^{category}:""", re.MULTILINE)


def homes_of(category: str) -> list[str]:
    files = [p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".yml", ".j2")]
    return sorted(str(p.relative_to(PACKAGE)) for p in files if naming(category).search(p.read_text()))


def test_each_built_in_category_is_named_only_by_its_own_probe() -> None:
    strays = {}
    for kind in probes.built_in():
        own = {f"core/probes/{kind.name}.py", f"core/probes/{kind.name}.yml"}
        helper = re.compile(rf"core/probes/{kind.name}_\w+\.py")
        for category in kind.categories:
            elsewhere = [h for h in homes_of(category) if h not in own and not helper.fullmatch(h)]
            if elsewhere:
                strays[category] = elsewhere
    assert strays == {}


def test_the_check_sees_a_category_named_elsewhere() -> None:
    assert "core/probes/compile.yml" in homes_of("graph_break_added")
    assert naming("graph_break_added").search('if f.category == "graph_break_added":')
    assert not naming("graph_break_added").search("a new graph_break_added finding, in prose")
