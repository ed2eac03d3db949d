"""Kernel names: readable ones for tables and messages, and HolisticTraceAnalysis's short name,
a key that diff rows can be grouped by so that they line up with HTA's ``TraceDiff`` rows. The
full name stays the key everywhere else."""

from __future__ import annotations

# HTA leaves memory activity names whole (its MEMORY_KERNEL_RE: ^Memcpy, ^Memset, ^dma).
_MEMORY_PREFIXES = ("Memcpy", "Memset", "dma")
_CLOSES = {">": "<", ")": "("}


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis; ``width`` 0: uncut."""
    return text[: width - 1] + "…" if width and len(text) > width else text


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
    return clip(short, width)


def hta_short_name(name: str) -> str:
    """The name HolisticTraceAnalysis 0.5.0 groups by with ``TraceDiff.compare_traces(...,
    use_short_name=True)`` (its ``hta.utils.utils.shorten_name``), reproduced rule for rule so
    that rows keyed by it are HTA's rows, quirks included:

    - a name starting with Memcpy, Memset or dma, or with neither ``<`` nor ``(``, stays whole;
    - every ``->`` is deleted;
    - a ``>`` deletes the text back to the nearest unclosed ``<`` before it, that ``<`` included,
      and a ``)`` likewise back to the nearest ``(``: bracket kinds are not matched against each
      other, and a closer with no opener before it deletes everything before it;
    - of what is left, the text after the last space (the return type goes: ``void f`` -> ``f``;
      a name that ends in a space becomes empty).

    ``void at::native::(anonymous namespace)::f<int>(int)`` -> ``at::native::::f``.
    """
    if name.startswith(_MEMORY_PREFIXES) or ("<" not in name and "(" not in name):
        return name
    kept: list[str] = []
    # Where each opener still kept sits in ``kept``, innermost last.
    openers: dict[str, list[int]] = {"<": [], "(": []}
    for ch in name.replace("->", ""):
        opener = _CLOSES.get(ch)
        if opener is None:
            if ch in openers:
                openers[ch].append(len(kept))
            kept.append(ch)
            continue
        marks = openers[opener]
        cut = marks.pop() if marks else 0
        del kept[cut:]
        # Openers of the other kind inside the deleted text went with it.
        for other in openers.values():
            while other and other[-1] >= cut:
                other.pop()
    return "".join(kept).rpartition(" ")[2]
