"""How deep in control flow a line is: the `if`/`for`/`while`/`with`/`try`/`match` blocks (and
their `async` forms) around it within its own function, read with ``ast`` from the source file.

A graph break's depth says where in the frame Dynamo splits it: at depth 0 the frame is cut in
two, inside a loop every iteration pays the split (the design's nesting-depth × split-point
mapping). It is computed in the probe process, from the side's own tree, where the break's
location is resolved; the report job only reads the figures (it never parses PR code).

Only the frame's own function counts: a nested ``def`` (or a lambda, a generator expression) is a
frame of its own, so the blocks of the function that defines it do not count for lines in it.
An ``elif`` is a branch of its ``if``, as the eye reads it, not an ``if`` inside the ``else``; a
``try``'s handlers, ``else`` and ``finally`` are in the ``try`` block. A header's own line (the
``if``'s test, the ``for``'s iterable, the ``with``'s context managers) is outside its block: it
runs before the block is entered.
"""

from __future__ import annotations

import ast
import functools
import re
import tokenize
from dataclasses import dataclass

# The compound statements that open a block a line can be inside of, by the word that opens them.
_KINDS: dict[type[ast.AST], str] = {
    ast.If: "if",
    ast.For: "for",
    ast.AsyncFor: "async for",
    ast.While: "while",
    ast.With: "with",
    ast.AsyncWith: "async with",
    ast.Try: "try",
    ast.Match: "match",
}
if hasattr(ast, "TryStar"):  # `except*`, Python 3.11
    _KINDS[ast.TryStar] = "try"

KINDS = tuple(sorted(set(_KINDS.values())))

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Frames of their own that hold no statement: a line in one is at depth 0 of its frame.
_EXPRESSION_FRAMES: dict[type[ast.AST], str] = {
    ast.Lambda: "<lambda>",
    ast.GeneratorExp: "<genexpr>",
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
}
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")
_MAX_BYTES = 4_000_000  # a source file larger than this is not parsed: its depth stays unknown
_CODE_MAX = 200


@dataclass(frozen=True)
class Block:
    """One block around a line: its kind and the line (and text) of the header that opens it (for
    a branch of an ``if``, the ``if`` or ``elif`` it belongs to)."""

    kind: str
    line: int
    code: str


@functools.lru_cache(maxsize=64)
def _parsed(filename: str) -> tuple[ast.Module, tuple[str, ...]] | None:
    """The file's syntax tree and lines, or None where it cannot be read or parsed."""
    try:
        with tokenize.open(filename) as f:  # the encoding its coding line declares
            source = f.read(_MAX_BYTES + 1)
        if len(source) > _MAX_BYTES:
            return None
        return ast.parse(source, filename), tuple(source.splitlines())
    except (OSError, SyntaxError, ValueError, UnicodeError, RecursionError, MemoryError):
        return None


def blocks_in_file(filename: str, line: int, function: str | None) -> list[Block] | None:
    """The blocks around ``line`` of ``filename`` within ``function``'s frame, outermost first; None
    where the file cannot be read or parsed (a frame of a ``<string>``, a file gone since)."""
    if not filename or filename.startswith("<") or line < 1:
        return None
    parsed = _parsed(filename)
    if parsed is None:
        return None
    tree, lines = parsed
    try:
        return _blocks(tree, lines, line, function)
    except RecursionError:
        return None


def blocks_around(source: str, line: int, function: str | None = None) -> list[Block]:
    """The blocks around ``line`` of ``source`` within the frame named ``function`` (a traceback's
    frame name: a function's name, ``<lambda>``, ``<module>``, a resume function of Dynamo's),
    outermost first. Raises SyntaxError where the source does not parse."""
    return _blocks(ast.parse(source), tuple(source.splitlines()), line, function)


def _blocks(tree: ast.Module, lines: tuple[str, ...], line: int, function: str | None) -> list[Block]:
    scope = _frame(tree, line, _frame_name(function))
    if not isinstance(scope, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
        return []  # a lambda or a comprehension: an expression, no block inside it
    out: list[Block] = []
    _walk(scope.body, line, lines, out)
    return out


def _frame_name(function: str | None) -> str | None:
    """The name of the function a frame runs: a resume function of Dynamo's (the code after a
    break, ``torch_dynamo_resume_in_forward_at_12``) runs the rest of ``forward``."""
    if not function or function == "?":
        return None
    match = _RESUME.match(function)
    return match.group(1) if match else function


def _contains(node: ast.AST, line: int) -> bool:
    start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    return start is not None and end is not None and start <= line <= end


def _frame(tree: ast.Module, line: int, name: str | None) -> ast.AST:
    """The node whose code runs ``line`` in the frame named ``name``: the innermost function (or
    lambda, comprehension) of that name around the line; where no such one is (a name Dynamo made,
    none given), the innermost ``def`` around it; else the module. A decorator's line is outside
    the function it decorates: the function that defines it runs it."""
    named: ast.AST | None = None
    innermost_def: ast.AST | None = None
    # Down the tree through the nodes around the line only, so each found is inside the one before.
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not _contains(child, line):
                continue
            if isinstance(child, _FUNCTIONS):
                innermost_def = child
                named = child if child.name == name else named
            elif type(child) in _EXPRESSION_FRAMES and _EXPRESSION_FRAMES[type(child)] == name:
                named = child
            stack.append(child)
    return named or innermost_def or tree


def _start(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _in(body: list[ast.stmt], line: int) -> bool:
    return bool(body) and _start(body[0]) <= line <= (body[-1].end_lineno or body[-1].lineno)


def _header(lines: tuple[str, ...], node: ast.stmt) -> str:
    text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    return text if len(text) <= _CODE_MAX else text[: _CODE_MAX - 1] + "…"


def _is_elif(lines: tuple[str, ...], node: ast.If) -> bool:
    """An ``if`` that is the ``elif`` of the one before (it starts at the word ``elif``)."""
    text = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else ""
    return text[node.col_offset :].startswith("elif")


def _walk(body: list[ast.stmt], line: int, lines: tuple[str, ...], out: list[Block]) -> None:
    """Down through the statements of ``body`` to the one at ``line``, adding each block entered."""
    while True:
        stmt = next((s for s in body if _start(s) <= line <= (s.end_lineno or s.lineno)), None)
        kind = _KINDS.get(type(stmt)) if stmt is not None else None
        if stmt is None or kind is None:
            return  # a simple statement, a def or a class: the line is at this depth
        inner = _branch(stmt, line, lines)
        if inner is None:
            return  # in the header: outside the block it opens
        opened_by, body = inner
        out.append(Block(kind, opened_by.lineno, _header(lines, opened_by)))


def _branch(stmt: ast.stmt, line: int, lines: tuple[str, ...]) -> tuple[ast.stmt, list[ast.stmt]] | None:
    """The body of ``stmt`` that holds ``line`` and the header it belongs to; None where the line is
    in a header."""
    if isinstance(stmt, ast.If):
        node = stmt
        while True:
            if _in(node.body, line):
                return node, node.body
            elif_ = node.orelse[0] if len(node.orelse) == 1 else None
            if isinstance(elif_, ast.If) and _is_elif(lines, elif_):
                if not _contains(elif_, line):
                    return None
                node = elif_  # an elif: a branch of the same block
                continue
            return (node, node.orelse) if _in(node.orelse, line) else None
    bodies: list[list[ast.stmt]] = []
    if isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
        bodies = [stmt.body, stmt.orelse]
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        bodies = [stmt.body]
    elif isinstance(stmt, ast.Match):
        bodies = [case.body for case in stmt.cases]
    elif isinstance(stmt, tuple(t for t, k in _KINDS.items() if k == "try")):
        bodies = [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]  # type: ignore[attr-defined]
    return next(((stmt, b) for b in bodies if _in(b, line)), None)
