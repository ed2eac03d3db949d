"""Turn frames from tracebacks and Dynamo's user stacks into repo-relative source locations."""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Iterable
from pathlib import Path

from perfcheck.schema import SourceLocation


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


def to_location(frame: traceback.FrameSummary, tree: Path) -> SourceLocation:
    rel = relative_path(frame.filename, tree)
    code = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip() or None
    return SourceLocation(
        path=rel if rel is not None else frame.filename,
        line=frame.lineno or 0,
        function=frame.name,
        code=code,
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
