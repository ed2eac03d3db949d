"""Readable kernel names for tables and messages; the full name stays the key everywhere else."""

from __future__ import annotations


def _without_templates(name: str) -> str:
    out, depth = [], 0
    for ch in name.replace("->", "→"):
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out).replace("→", "->")


def _without_parameters(name: str) -> str:
    """Drop a trailing ``(...)``: the parameter list of a C++ signature."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip() or name
    return name


def short_name(name: str, width: int = 0) -> str:
    """``void ns::kernel<float, 4>(float*, int)`` -> ``ns::kernel``; memcpy/memset names and
    names without C++ decoration are left as they are. ``width`` > 0 caps the length."""
    short = name
    if not short.startswith(("Memcpy", "Memset")):
        short = _without_parameters(_without_templates(short.removeprefix("void "))).strip() or name
    if width and len(short) > width:
        short = short[: width - 1] + "…"
    return short
