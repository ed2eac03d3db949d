"""The lines a change made, read from both trees (perfcheck/runner/source/changes.py): fast, no process."""

from __future__ import annotations

import os
from pathlib import Path

from perfcheck.runner.source.changes import changed_lines, read_lines


def test_the_lines_a_change_added_or_rewrote_are_changed_and_moved_lines_are_not() -> None:
    base = ["import torch", "", "def f(x):", "    return x", ""]
    head = ["import torch", "# a comment above", "", "def f(x):", "    x = check(x)", "    return x", ""]
    # The comment and the call are new; the lines below them only moved.
    assert changed_lines(head, base) == {2, 5}
    assert changed_lines(base, head) == frozenset()  # nothing of base's was rewritten or removed in place
    assert changed_lines(["a", "b"], None) == {1, 2}  # a file new on this side


def test_a_file_is_read_only_when_it_is_a_regular_file_of_bounded_size(tmp_path: Path) -> None:
    plain = tmp_path / "model.py"
    plain.write_text("x = 1\ny = 2  \n")
    assert read_lines(plain) == ["x = 1", "y = 2"]
    link = tmp_path / "link.py"
    link.symlink_to(plain)
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    for refused in (link, fifo, tmp_path, tmp_path / "missing.py"):
        assert read_lines(refused) is None  # not followed, never blocks
