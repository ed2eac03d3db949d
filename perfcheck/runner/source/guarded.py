"""Where the tree makes the value a failed guard checks: a buffer's registration, an attribute's
assignment. A recompile is told where the user can change it, not only where the recompiled frame
starts.

Placed from the running objects first: the guard names a path from the frame's ``self``
(``self._modules['neuron']._buffers['syn']``); the probe process holds the model, so the object
that path ends at is followed from each module whose class (its type's MRO) defines the recompiled
code, and the value is placed in that object's own classes, most derived first, each by its code
objects' lines in its own file. A sibling class whose method reads the same, in another file, is
another class. Only where no such object is found (a frame that is not a method of the model's
modules, a path that no longer resolves) is the tree's source searched by text.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfcheck.measures import SourceLocation
from perfcheck.runner.source.locate import lines_of, qualified_name, relative_path, to_location, user_name

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
    patterns = _patterns(name, tensor)
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
        found = _search(file, lines, patterns, tree)
        if found is not None:
            return found
    return None


def _patterns(name: str, tensor: bool) -> list[re.Pattern[str]]:
    """How the tree makes attribute ``name``, in the order ``made_at`` tries them."""
    escaped = re.escape(name)
    registered = re.compile(rf"""register_(?:buffer|parameter)\(\s*['"]{escaped}['"]""")
    changed = re.compile(rf"\bself\.{escaped}\s*(?:[-+*/%@&|^]|//|\*\*|<<|>>)=")
    assigned = re.compile(rf"\bself\.{escaped}\s*=(?!=)")
    return [registered, changed, assigned] if tensor else [changed, registered, assigned]


def _search(
    file: Path, lines: frozenset[int] | None, patterns: list[re.Pattern[str]], tree: Path
) -> SourceLocation | None:
    """The first line of ``file`` (of ``lines``, where given) a pattern matches, patterns in order."""
    try:
        text = file.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for pattern in patterns:
        for n, line in enumerate(text, start=1):
            if (lines is None or n in lines) and pattern.search(line):
                frame = traceback.FrameSummary(str(file), n, "<module>", line=line.strip())
                return to_location(frame, tree, qualname=qualified_name(str(file), n))
    return None


def guarded_made_at(text: str, code: Any, tree: Path, model: Any = None) -> SourceLocation | None:
    """Where the tree makes the value failed guard ``text`` checks: in the classes of the object
    holding it, where ``model`` (the probe's running model) has one (``made_in_classes``), else in
    the recompiled ``code``'s own class first, then the tree's files (``made_at``)."""
    name = guarded_name(text)
    if name is None:
        return None
    tensor = bool(_TENSOR_GUARD.search(text))
    if model is not None:
        with contextlib.suppress(Exception):  # the model's own objects: a __getattr__ may raise anything
            for holder in holders(text, code, model):
                found = made_in_classes(name, type(holder), tree, tensor)
                if found is not None:
                    return found
    return made_at(name, tree, code, tensor)


# One step of a guard's path: ``.name``, ``['key']`` or ``[0]``.
_STEP = re.compile(r"\.(\w+)|\['([^']*)'\]|\[(\d+)\]")
# The containers a module keeps its attributes in: the value's holder is the object around them.
_CONTAINERS = ("_buffers", "_parameters", "_modules", "__dict__")


def _steps(text: str) -> list[str | int] | None:
    """The path a guard takes from the frame's ``self``, step by step (an attribute or key as a
    string, an index as an int), or None where it starts elsewhere."""
    match = _GUARDED.search(text)
    if match is None:
        return None
    out: list[str | int] = []
    for attr, key, index in _STEP.findall(match.group(1)):
        out.append(int(index) if index else attr or key)
    return out


def _defines(cls: type, code: Any) -> bool:
    """Whether ``cls`` itself defines the function whose code ``code`` is, or whose code after a
    graph break (Dynamo's resume function, ``torch_dynamo_resume_in_F_at_N``) it is."""
    resumed = user_name(code.co_name)
    for value in vars(cls).values():
        inner = getattr(getattr(value, "__func__", value), "__code__", None)
        if inner is None or inner.co_filename != code.co_filename:
            continue
        if inner is code or (inner.co_name, inner.co_firstlineno) == (code.co_name, code.co_firstlineno):
            return True
        lines = {line for _, _, line in inner.co_lines() if line is not None}
        if resumed != code.co_name and inner.co_name == resumed and code.co_firstlineno in lines:
            return True
    return False


def holders(text: str, code: Any, model: Any) -> Iterator[object]:
    """The objects holding the value failed guard ``text`` checks: its path followed from each of
    ``model``'s modules whose type's MRO defines ``code``, in the model's order."""
    steps = _steps(text)
    if not steps:
        return
    last = 2 if len(steps) >= 2 and steps[-2] in _CONTAINERS else 1
    path = steps[:-last]
    seen: set[int] = set()
    for module in model.modules():
        if not any(_defines(cls, code) for cls in type(module).__mro__):
            continue
        obj: Any = module
        try:
            for step in path:
                obj = obj[step] if isinstance(step, int) or isinstance(obj, dict) else getattr(obj, step)
        except (AttributeError, KeyError, IndexError, TypeError):
            continue
        if id(obj) not in seen:
            seen.add(id(obj))
            yield obj


def made_in_classes(name: str, cls: type, tree: Path, tensor: bool) -> SourceLocation | None:
    """Where one of ``cls``'s classes of the tree (its MRO, most derived first) makes attribute
    ``name``, read from that class's own lines of its own file (``made_at``'s patterns)."""
    patterns = _patterns(name, tensor)
    for klass in cls.__mro__:
        try:
            filename = inspect.getsourcefile(klass)
        except (TypeError, OSError):
            continue
        if filename is None or relative_path(filename, tree) is None:
            continue
        lines = lines_of(filename, klass.__qualname__)
        found = _search(Path(filename), lines, patterns, tree)
        if found is not None:
            return found
    return None
