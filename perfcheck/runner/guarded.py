"""Where the tree makes the value a failed guard checks: a buffer's registration, an attribute's
assignment. A recompile is told where the user can change it, not only where the recompiled frame
starts."""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

from perfcheck.measures import SourceLocation
from perfcheck.runner.locate import lines_of, qualified_name, relative_path, to_location, user_name

# The guarded value's name in a failed guard: the last attribute of a path from the frame's
# ``self`` (``self._modules['neuron']._buffers['v']``, ``L['self'].layers[0].mem``).
_GUARDED = re.compile(r"(?:L\['self'\]|\bself)((?:\.\w+|\[[^\]]*\])+)")
_ATTR = re.compile(r"\.(\w+)|\['(\w+)'\]")
_MAX_SOURCES = 2000  # files of the tree searched for where a guarded value is made


def guarded_name(reason: str) -> str | None:
    """The attribute a failed guard checks, or None when it guards a local or an input."""
    match = _GUARDED.search(reason)
    if match is None:
        return None
    names = [a or b for a, b in _ATTR.findall(match.group(1))]
    names = [n for n in names if n not in ("_buffers", "_parameters", "_modules")]
    return names[-1] if names else None


_TENSOR_GUARD = re.compile(r"\b(size|rank|stride|dtype|device|requires_grad) mismatch")


def made_at(name: str, tree: Path, code: Any = None, tensor: bool = False) -> SourceLocation | None:
    """Where the tree makes attribute ``name``: first in the recompiled ``code``'s own class (the
    functions beside it, by the code objects its file compiles to: a sibling class that reads the
    same is another class), then in the rest of its file, then in the tree's other files. For a
    tensor's metadata (``tensor=True``: a size, rank or dtype guard) where it gets the metadata the
    guard expected: its ``register_buffer``/``register_parameter`` call; for a Python value
    (``self.calls == 1``) where it changes: an augmented assignment (``self.calls += 1``); then any
    assignment to ``self.<name>``."""
    escaped = re.escape(name)
    registered = re.compile(rf"""register_(?:buffer|parameter)\(\s*['"]{escaped}['"]""")
    changed = re.compile(rf"\bself\.{escaped}\s*(?:[-+*/%@&|^]|//|\*\*|<<|>>)=")
    assigned = re.compile(rf"\bself\.{escaped}\s*=(?!=)")
    patterns = [registered, changed, assigned] if tensor else [changed, registered, assigned]
    files = sorted(tree.rglob("*.py"))[:_MAX_SOURCES]
    own: Path | None = None
    scopes: list[tuple[Path, frozenset[int] | None]] = []
    if code is not None and relative_path(code.co_filename, tree) is not None:
        own = Path(code.co_filename).resolve()
        qualname = user_name(code.co_qualname)
        owner = qualname.rpartition(".")[0] if "." in qualname else qualname
        scopes.append((own, lines_of(str(own), owner)))  # its class, or the function alone
        scopes.append((own, None))
    scopes += [(f, None) for f in files if f.resolve() != own]
    for file, lines in scopes:
        try:
            text = file.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for pattern in patterns:
            for n, line in enumerate(text, start=1):
                if (lines is None or n in lines) and pattern.search(line):
                    frame = traceback.FrameSummary(str(file), n, "<module>", line=line.strip())
                    return to_location(frame, tree, qualname=qualified_name(str(file), n))
    return None


def guarded_made_at(text: str, code: Any, tree: Path) -> SourceLocation | None:
    """Where the tree makes the value failed guard ``text`` checks, in the recompiled ``code``'s own
    class first (``made_at``)."""
    name = guarded_name(text)
    return made_at(name, tree, code, bool(_TENSOR_GUARD.search(text))) if name else None
