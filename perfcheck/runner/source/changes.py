"""Which lines of a graph break's stack the pull request changed, read from both trees.

Base and head are both at hand in the probe job, so the lines a change made are known: a line of
one side's file that the other side's file of the same path does not have in the same place
(difflib's opcodes over the two files' lines; a file the other side lacks is changed whole). A
break's stack (its callers and its own line, as the compile probe recorded them) is marked with
the innermost frame whose line changed (``GraphBreak.changed_at``), where that is not the break's
own line: two breaks in an unchanged helper, both reached through the one call a PR added, are
one change, which the compile probe's comparator reports once, at that line.

Read after the probes ended, from the trees the review was given: only the files a break's stack
names, each a regular file opened without following a link, and bounded.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from perfcheck.measures import CompileMetrics, GraphBreak, SourceLocation
from perfcheck.schema import WorkloadReview, probe_metrics

MAX_FILE_BYTES = 2_000_000  # a source file larger than this is not compared (its lines unknown)
MAX_FILES = 200  # files compared per review


def changed_lines(mine: list[str], other: list[str] | None) -> frozenset[int]:
    """The lines (1-based) of ``mine`` that ``other`` does not have where ``mine`` has them: every
    line where ``other`` is None (the file is new on this side)."""
    if other is None:
        return frozenset(range(1, len(mine) + 1))
    matcher = difflib.SequenceMatcher(None, other, mine, autojunk=False)
    out: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            out.update(range(j1 + 1, j2 + 1))
    return frozenset(out)


def read_lines(path: Path) -> list[str] | None:
    """``path``'s lines, or None where it is not a regular file of at most MAX_FILE_BYTES (a link,
    a FIFO, a folder, missing), or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return [line.rstrip() for line in data.decode("utf-8", errors="replace").splitlines()]


class _Diff:
    """The changed lines of one side's files against the other side's, read once per path."""

    def __init__(self, tree: Path, other: Path) -> None:
        self.tree, self.other = tree, other
        self.known: dict[str, frozenset[int] | None] = {}

    def changed(self, loc: SourceLocation) -> bool:
        if not loc.in_tree or loc.line < 1:
            return False
        if loc.path not in self.known:
            if len(self.known) >= MAX_FILES or not _plain(loc.path):
                return False
            mine = read_lines(self.tree / loc.path)
            new_here = not os.path.lexists(self.other / loc.path)
            theirs = None if new_here else read_lines(self.other / loc.path)
            unknown = mine is None or (theirs is None and not new_here)
            self.known[loc.path] = None if unknown else changed_lines(mine or [], theirs)
        lines = self.known[loc.path]
        return lines is not None and loc.line in lines


def _plain(path: str) -> bool:
    """A tree-relative path that stays in its tree."""
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and ".." not in parts


def _marked(gb: GraphBreak, diff: _Diff) -> GraphBreak:
    if gb.location is None or diff.changed(gb.location):
        return gb  # its own line changed (or it has none): the break is the change's own
    inner = next((loc for loc in reversed(gb.callers) if diff.changed(loc)), None)
    return gb.model_copy(update={"changed_at": inner}) if inner is not None else gb


def mark_changes(workloads: Iterable[WorkloadReview], base: Path, head: Path) -> list[WorkloadReview]:
    """``workloads`` with each compile result's graph breaks marked where the stack passes through
    a line the change made: head's against base's tree, base's against head's."""
    diffs = {"base": _Diff(base, head), "head": _Diff(head, base)}
    out = []
    for wl in workloads:
        sides = {}
        for side in ("base", "head"):
            results = []
            for result in getattr(wl, side):
                metrics = probe_metrics(result, CompileMetrics)
                if metrics is not None and metrics.graph_breaks:
                    breaks = [_marked(gb, diffs[side]) for gb in metrics.graph_breaks]
                    result = result.with_metrics(metrics.model_copy(update={"graph_breaks": breaks}))
                results.append(result)
            sides[side] = results
        out.append(wl.model_copy(update=sides))
    return out
