"""Which files of its tree a probe process read: every module it imported from there and every
file it opened there to read, seen by an audit hook (``open`` events, which imports raise too)
and, after the run, by the modules' ``__file__``. The paths key a record of base's result
(perfcheck/core/records.py); the orchestrator hashes the files itself, after the process ended.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from perfcheck.schema import MAX_READ_FILES

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Reads:
    """The tree's files this process reads, from ``start`` on (audit hooks cannot be removed: this
    is for a process that runs one probe)."""

    def __init__(self, tree: Path) -> None:
        self.tree = os.path.realpath(tree)
        self.seen: set[str] = set()
        self.overflow = False

    def start(self) -> None:
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or self.overflow:
            return
        path, mode, flags = (*args, None, None, None)[:3]
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            return
        if mode is None and isinstance(flags, int) and flags & _WRITING:
            return
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, str):
            self._add(path)

    def _add(self, path: str) -> None:
        if len(self.seen) > 4 * MAX_READ_FILES:
            self.overflow = True  # a process reading thousands of files: not recorded, and cheap
            return
        self.seen.add(os.path.abspath(path))

    def files(self) -> list[str] | None:
        """The regular files of the tree read so far, relative, sorted; None where there were more
        than MAX_READ_FILES (or too many opens to follow)."""
        for module in list(sys.modules.values()):
            name = getattr(module, "__file__", None)
            if isinstance(name, str):
                self._add(name)
        if self.overflow:
            return None
        found = set()
        for path in self.seen:
            real = os.path.realpath(path)
            if not real.startswith(self.tree + os.sep) or not os.path.isfile(real):
                continue
            rel = os.path.relpath(real, self.tree).replace(os.sep, "/")
            # Compiled bytecode is made from the source beside it (and holds its mtime): the source counts.
            if "__pycache__" in rel.split("/") or rel.endswith(".pyc"):
                continue
            found.add(rel)
        return sorted(found) if len(found) <= MAX_READ_FILES else None
