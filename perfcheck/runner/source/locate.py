"""Turn frames from tracebacks and Dynamo's user stacks into repo-relative source locations.

A frame is placed by its code object: its file, its line and the function's qualified name
(``Used.forward``), never by searching for its source text, which two functions can share (two
sibling classes whose ``forward`` bodies read alike). Where a frame comes as a file, line and bare
name (a traceback's, Dynamo's user stack), the qualified name is read from the code objects its
file compiles to, by position: the innermost function of that name whose code holds the line.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

from perfcheck.measures import SourceLocation


def relative_path(filename: str, tree: Path) -> str | None:
    """The path of ``filename`` relative to ``tree``, or None when it lies outside it."""
    if filename.startswith("<"):
        # "<frozen importlib._bootstrap>", "<string>": no file, though resolving the name against
        # the working directory (the tree, in a worker) would make it look like one.
        return None
    try:
        return Path(filename).resolve().relative_to(tree.resolve()).as_posix()
    except (ValueError, OSError):
        return None


def package_path(filename: str) -> str:
    """A file outside the tree as a reader knows it: relative to the import root it was found
    under (``x_transformers/attend.py`` in site-packages), else its name; never this machine's
    absolute path."""
    if filename.startswith("<"):
        return filename
    try:
        path = Path(filename).resolve()
    except OSError:
        return Path(filename).name
    best: Path | None = None
    for entry in sys.path:
        if not entry or Path(entry).resolve() == Path(path.anchor):
            continue
        try:
            rel = path.relative_to(Path(entry).resolve())
        except (ValueError, OSError):
            continue
        if best is None or len(rel.parts) < len(best.parts):
            best = rel
    return best.as_posix() if best is not None else path.name


# Dynamo's name for the code after a graph break in function F (``torch_dynamo_resume_in_F_at_N``),
# and its qualified name (``Cls.torch_dynamo_resume_in_F_at_N``, torch/_dynamo/resume_execution.py).
RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")


def user_name(name: str) -> str:
    """A (qualified) function name as the user wrote it: Dynamo's resume function after a break in
    ``Cls.forward`` is ``Cls.forward``."""
    head, dot, last = name.rpartition(".")
    resumed = RESUME.fullmatch(last)
    return f"{head}{dot}{resumed.group(1)}" if resumed else name


@dataclass(frozen=True)
class _Code:
    qualname: str
    name: str
    depth: int  # how deeply it is nested: 0 for the module
    lines: frozenset[int]  # the lines its own instructions are on, and its first


def _walk(code: CodeType, depth: int, out: list[_Code]) -> None:
    lines = {line for _, _, line in code.co_lines() if line is not None} | {code.co_firstlineno}
    out.append(_Code(code.co_qualname, code.co_name, depth, frozenset(lines)))
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _walk(const, depth + 1, out)


@functools.lru_cache(maxsize=512)
def _codes_of(filename: str, mtime_ns: int, size: int) -> tuple[_Code, ...]:
    """Every code object a file compiles to (compiled, never run), keyed by the file's state."""
    try:
        source = Path(filename).read_bytes()
        top = compile(source, filename, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return ()
    out: list[_Code] = []
    _walk(top, 0, out)
    return tuple(out)


def codes_of(filename: str) -> tuple[_Code, ...]:
    """The code objects of ``filename`` as it is now (none where it cannot be read or compiled)."""
    try:
        stat = Path(filename).stat()
    except OSError:
        return ()
    return _codes_of(filename, stat.st_mtime_ns, stat.st_size)


def qualified_name(filename: str, line: int, name: str | None = None) -> str | None:
    """The qualified name of the innermost function of ``filename`` whose code holds ``line`` (of
    that ``name``, where given; a resume function's is its user function's), or None where no
    function holds it (module level, a file that does not compile, a name of no function there)."""
    wanted = user_name(name) if name is not None else None
    found = [c for c in codes_of(filename) if c.depth > 0 and line in c.lines and wanted in (None, c.name)]
    return max(found, key=lambda c: c.depth).qualname if found else None


def lines_of(filename: str, qualname: str) -> frozenset[int]:
    """The lines of the function or class ``qualname`` of ``filename`` and of everything defined
    inside it (a class's: its methods')."""
    inside = qualname + "."
    return frozenset(
        line
        for c in codes_of(filename)
        if c.depth > 0 and (c.qualname == qualname or c.qualname.startswith(inside))
        for line in c.lines
    )


def to_location(frame: traceback.FrameSummary, tree: Path, qualname: str | None = None) -> SourceLocation:
    """``frame`` as a location: its file relative to the tree, its line, and its function's
    qualified name, ``qualname`` where the caller has the code object, else read by position (in
    the tree; a package's frame keeps its bare name). The code after a graph break (Dynamo's
    resume function) is named as the user's function it resumes."""
    rel = relative_path(frame.filename, tree)
    code = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip() or None
    if qualname is None and rel is not None and frame.lineno:
        qualname = qualified_name(frame.filename, frame.lineno, frame.name)
    return SourceLocation(
        path=rel if rel is not None else package_path(frame.filename),
        line=frame.lineno or 0,
        function=user_name(qualname or frame.name),
        code=code,
        in_tree=rel is not None,
    )


def innermost_user_frame(
    frames: Iterable[traceback.FrameSummary], tree: Path
) -> traceback.FrameSummary | None:
    """The innermost frame inside the side's tree: where the user's own code was when it happened."""
    chosen = None
    for frame in frames:
        if relative_path(frame.filename, tree) is not None:
            chosen = frame
    return chosen


def exception_location(err: BaseException, tree: Path) -> SourceLocation | None:
    frames = traceback.extract_tb(err.__traceback__)
    frame = innermost_user_frame(frames, tree)
    return to_location(frame, tree) if frame is not None else None


def code_location(code: Any, tree: Path) -> SourceLocation:
    """Where a recompiled code object starts, as the user reads it: a resume function's first line
    is the line of the original function where it resumes, and its name is the original's. Named by
    the code object's own qualified name (``Used.forward``), so that two functions that read alike
    are told apart."""
    frame = traceback.FrameSummary(code.co_filename, code.co_firstlineno, code.co_name)
    return to_location(frame, tree, qualname=code.co_qualname)


@dataclass(frozen=True)
class CodeRef:
    """A code object known only by its name, file and first line (Dynamo's warning that a frame hit
    a recompile limit names no more): its qualified name found by position."""

    co_name: str
    co_filename: str
    co_firstlineno: int

    @property
    def co_qualname(self) -> str:
        return qualified_name(self.co_filename, self.co_firstlineno, self.co_name) or self.co_name


def named_code_location(code: tuple[str, str, int], tree: Path) -> SourceLocation:
    """``code_location`` of a code object known by its name, file and first line."""
    return code_location(CodeRef(*code), tree)
