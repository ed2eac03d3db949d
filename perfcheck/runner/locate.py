"""Turn frames from tracebacks and Dynamo's user stacks into repo-relative source locations."""

from __future__ import annotations

import linecache
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path

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


def to_location(frame: traceback.FrameSummary, tree: Path) -> SourceLocation:
    rel = relative_path(frame.filename, tree)
    code = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip() or None
    return SourceLocation(
        path=rel if rel is not None else package_path(frame.filename),
        line=frame.lineno or 0,
        function=frame.name,
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
