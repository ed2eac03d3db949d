"""Make untrusted text inert in GitHub Markdown: no markup, no HTML, no @mentions, no broken tables.

Everything a probe reports (break reasons, error messages, source lines) comes from PR code
and is rendered only through these functions.
"""

from __future__ import annotations

import re

# Characters that open inline markup anywhere; block markup is only possible at a line start.
_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^(\s*)([#>+\-=]|\d+[.)])")
_MENTION = re.compile(r"@(?=[\w-])")
_BACKTICKS = re.compile(r"`+")


def _entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_start(m: re.Match[str]) -> str:
    mark = m.group(2)
    return m.group(1) + (f"{mark[:-1]}\\{mark[-1]}" if mark[0].isdigit() else f"\\{mark}")


def cell(value: object) -> str:
    """Plain text inside a line (a table cell, after a label): one line, markup escaped, mentions broken."""
    s = _SPECIAL.sub(r"\\\1", _entities(" ".join(str(value).split())))
    # An empty HTML comment between @ and the name renders as nothing and notifies nobody.
    return _MENTION.sub("@<!-- -->", s)


def text(value: object) -> str:
    """Plain text that may start a paragraph: like ``cell``, and no list, heading or quote either."""
    return _LINE_START.sub(_escape_start, cell(value))


def code(value: object, in_table: bool = False) -> str:
    """An inline code span that no backtick in the value can close early."""
    s = " ".join(str(value).split())
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    if in_table:
        s = s.replace("|", "\\|")
    return f"{fence}{pad}{s}{pad}{fence}"


def block(value: object, lang: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    s = str(value).rstrip("\n")
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{s}\n{fence}"


def cap(body: str, limit: int, pointer: str) -> str:
    """``body`` cut at a line boundary so that it and ``pointer`` fit in ``limit`` characters."""
    if len(body) <= limit:
        return body
    room = limit - len(pointer) - 2
    cut = body.rfind("\n", 0, room)
    head = body[: cut if cut > 0 else room]
    # An unclosed <details> or code fence would swallow the pointer; close what is open.
    closers = ""
    if head.count("```") % 2:
        closers += "\n```"
    closers += "\n</details>" * max(0, head.count("<details>") - head.count("</details>"))
    head = head[: room - len(closers)] if len(head) + len(closers) > room else head
    return f"{head}{closers}\n\n{pointer}"


def url(value: str) -> str:
    """A link target that cannot break out of ``[text](...)``; only http(s) links are kept."""
    from urllib.parse import quote

    s = str(value).strip()
    if not s.lower().startswith(("https://", "http://")):
        return "#"
    return quote(s, safe=":/?#[]@!$&'*+,;=%-._~")
