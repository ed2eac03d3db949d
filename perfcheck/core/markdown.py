"""Make untrusted text inert in GitHub Markdown: no markup, no HTML, no @mentions, no broken tables.

Everything a probe reports (break reasons, error messages, source lines) comes from PR code
and is rendered only through these functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Characters that open inline markup anywhere; block markup is only possible at a line start.
_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^(\s*)([#>+\-=]|\d+[.)])")
_MENTION = re.compile(r"@(?=[\w-])")
# Issue and pull request references GitHub links (and cross-references, which notify): #12,
# owner/repo#12, GH-12.
_REFERENCE = re.compile(r"(#|\bGH-)(?=\d)", re.IGNORECASE)
# What GitHub autolinks in plain text (GFM's extended autolinks): a scheme before ://, and www.
# It reads the raw text back from the ':' (on from the 'w'), so a comment in between leaves the
# words and no link. No word boundary asked: `_www.` links too (the _ is escaped, still there),
# and breaking `xhttps://` costs nothing. Emails already lose their @ to _MENTION.
_AUTOLINK = re.compile(r"(?:https?|ftp)(?=://)|www(?=\.)", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")
# Control characters (ESC of terminal escape sequences among them), except tab and newline; and
# with them, for text that must stay on one line (a table cell a newline would forge a row in).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Figure:
    """A measured value with its unit, as a probe's table row carries it: formatted here, once,
    for the comment, the summaries and the HTML report alike (``str`` of it, so a template's
    ``cell`` filter or HTML escaping prints it formatted, and a project's own template can read
    ``value`` and ``unit``)."""

    value: float
    unit: str = ""  # after a space: "ms", "MB", "/s"; "" for a count
    places: int = 0  # decimals shown
    signed: bool = False  # a change: its sign always shown

    def __str__(self) -> str:
        return figure(self)


def figure(f: Figure) -> str:
    """``1,234.567 ms``, ``+12 MB``, ``3,072``: thousands separated, the figure's decimals, its
    unit after a space."""
    number = f"{f.value:{'+' if f.signed else ''},.{f.places}f}"
    return f"{number} {f.unit}" if f.unit else number


def count(n: float, signed: bool = False) -> Figure:
    """A count per step (or, ``signed``, its change): whole where it is whole, else to a tenth (a
    median over processes)."""
    return Figure(n, places=0 if float(n).is_integer() else 1, signed=signed)


def size(nbytes: float) -> Figure:
    """A number of bytes in the unit that keeps it under 1,024 (``512 B``, ``1.5 KB``), up to GB."""
    n = float(nbytes)
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return Figure(n, unit, 0 if unit == "B" else 1)
        n /= 1024
    return Figure(n, "GB", 1)


# How a compound cell joins its two values: ``3 (1.5 KB)``, ``2 fp32 / 10 bf16``, ``3 of 4 pass``.
_JOINS = {"paren": "{} ({})", "slash": "{} / {}", "of": "{} of {}"}


@dataclass(frozen=True)
class Compound:
    """A cell of two values, each a ``Figure`` or text (a hash, a dtype), joined one of a few
    fixed ways (``how``); formatted here like a Figure, and read apart by a template or a report
    that wants the numbers (``first``, ``then``)."""

    first: Figure | str
    then: Figure | str
    how: str = "paren"  # one of _JOINS

    def __post_init__(self) -> None:
        if self.how not in _JOINS:
            raise ValueError(f"a compound cell joins as one of {', '.join(_JOINS)}, not {self.how!r}")

    def __str__(self) -> str:
        return _JOINS[self.how].format(self.first, self.then)


# The most one field may take of a comment: a 200 KB line in one finding must not crowd out the rest.
CELL_LIMIT = 2_000
CODE_LIMIT = 500
BLOCK_LIMIT = 8_000
# A command a reviewer pastes: clipped, it no longer runs as printed, so it may be longer than other
# code (two absolute trees, the review's PYTHONPATH, a tlparse after it pass 500 characters).
COMMAND_LIMIT = 4_000


def visible(text: str, one_line: bool = False) -> str:
    """Control characters as their Unicode pictures (ESC as ␛), C1 ones as �: seen, never obeyed by a
    terminal. One character for one, so that widths and clipping stay as they were; ``one_line``
    shows tab and newline too (␉, ␊). The one place where probe text is made harmless to a
    terminal: the comment, the `perfcheck trace` and `history` tables and the HTML report use it."""
    return (_CONTROL_ANY if one_line else _CONTROL).sub(
        lambda m: chr(0x2400 + ord(m.group())) if ord(m.group()) < 0x20 else "\ufffd", text
    )


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_start(m: re.Match[str]) -> str:
    mark = m.group(2)
    return m.group(1) + (f"{mark[:-1]}\\{mark[-1]}" if mark[0].isdigit() else f"\\{mark}")


def cell(value: object, limit: int = CELL_LIMIT) -> str:
    """Plain text inside a line (a table cell, after a label): one line, markup escaped, mentions,
    issue references and URLs broken (they read the same, link nothing), at most ``limit``
    characters of it."""
    s = _SPECIAL.sub(r"\\\1", _entities(_bounded(visible(" ".join(str(value).split())), limit)))
    # An empty HTML comment renders as nothing: after @ it notifies nobody, after # links nothing.
    s = _MENTION.sub("@<!-- -->", s)
    s = _AUTOLINK.sub(lambda m: f"{m.group()}<!-- -->", s)
    return _REFERENCE.sub(lambda m: f"{m.group(1)}<!-- -->", s)


def text(value: object) -> str:
    """Plain text that may start a paragraph: like ``cell``, and no list, heading or quote either."""
    return _LINE_START.sub(_escape_start, cell(value))


def code(value: object, in_table: bool = False, limit: int = CODE_LIMIT) -> str:
    """An inline code span that no backtick in the value can close early."""
    s = _bounded(visible(" ".join(str(value).split())), limit)
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    if in_table:
        s = s.replace("|", "\\|")
    return f"{fence}{pad}{s}{pad}{fence}"


def command(value: object) -> str:
    """A command to paste, as an inline code span (``code``) of up to ``COMMAND_LIMIT`` characters."""
    return code(value, limit=COMMAND_LIMIT)


def block(value: object, lang: str = "", limit: int = BLOCK_LIMIT) -> str:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    s = _bounded(visible(str(value).rstrip("\n")), limit)
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{s}\n{fence}"


def _open_fence(text: str) -> str | None:
    """The fence of a code block still open at the end of ``text``, as it was opened; None if none.

    A fence closes only on a line of the same character, at least as long, and nothing else; a
    longer fence may hold shorter ones as text."""
    open_fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m is None:
            continue
        run = m.group(1)
        if open_fence is None:
            open_fence = run
        elif run[0] == open_fence[0] and len(run) >= len(open_fence) and not line.strip()[len(run) :].strip():
            open_fence = None
    return open_fence


def cap(body: str, limit: int, pointer: str) -> str:
    """``body`` cut at a line boundary so that it and ``pointer`` fit in ``limit`` characters."""
    if len(body) <= limit:
        return body
    room = limit - len(pointer) - 2
    for _ in range(3):  # the closers take room too: cut again if they do not fit
        cut = body.rfind("\n", 0, room)
        head = body[: cut if cut > 0 else room]
        # An unclosed code fence or <details> would swallow the pointer; close what is open.
        fence = _open_fence(head)
        closers = f"\n{fence}" if fence else ""
        closers += "\n</details>" * max(0, head.count("<details>") - head.count("</details>"))
        if len(head) + len(closers) <= limit - len(pointer) - 2:
            return f"{head}{closers}\n\n{pointer}"
        room -= len(closers)
    return f"{head[: max(0, room - len(closers))]}{closers}\n\n{pointer}"


def url(value: str) -> str:
    """A link target that cannot break out of ``[text](...)``; only http(s) links are kept."""
    from urllib.parse import quote

    s = str(value).strip()
    if not s.lower().startswith(("https://", "http://")):
        return "#"
    return quote(s, safe=":/?#[]@!$&'*+,;=%-._~")
