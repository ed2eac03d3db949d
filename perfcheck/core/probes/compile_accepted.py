"""Accepted breaks: an ack's `break:` (perfcheck/settings.py ``BreakMatcher``) against the compile
probe's graph breaks.

A team that accepts the `print` in its logging helper names that break, by what Dynamo says it is
(its graph-break id, or text of its reason) and where it is (a file pattern, optionally the function
and line); a new break it names is acknowledged, saying the entry, and every other new break of the
workload is judged as before. An entry that names no break of the head is stale: listed, so that a
project can drop it once its break is gone.

Pure and torch-free. The patterns are the config's (the base branch's, trusted); the break's text
and place are the PR's code's (untrusted), so they are only searched: a plain substring, fnmatch of
a config glob over a function's name, a gitignore pattern of the config over a path. No text of the
PR is ever read as a pattern. Dynamo's graph-break id is read from the link to its graph-break site
that Dynamo appends to a reason, by one fixed expression; the last link counts, since text before
it can be the PR's own (a message given to ``torch._dynamo.graph_break``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING

from perfcheck.measures import CompileMetrics, GraphBreak, SourceLocation
from perfcheck.schema import Finding, Review, StaleAck, probe_metrics
from perfcheck.settings import AckEntry, BreakMatcher

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

# The findings an ack's `break:` accepts: the compile probe's new graph breaks.
CATEGORY = "graph_break_added"

_GB_LINK = re.compile(r"compile-graph-break-site/gb/(gb\d{4})\.html")


def graph_break_id(reason: str) -> str | None:
    """Dynamo's graph-break id (``GB0124``) from the link that ends its reason, or None."""
    found = _GB_LINK.findall(reason)
    return found[-1].upper() if found else None


@lru_cache(maxsize=256)
def _spec(pattern: str) -> GitIgnoreSpec:
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines([pattern])


def accepts(matcher: BreakMatcher, break_type: str, reason: str, place: SourceLocation | None) -> bool:
    """Whether ``matcher`` names the break Dynamo described so (``break_type``, ``reason``) at
    ``place``: the innermost line of the tree that reached it, as its finding is placed."""
    if place is None:
        return False
    if matcher.id is not None and graph_break_id(reason) != matcher.id:
        return False
    if matcher.message is not None:
        needle = matcher.message.casefold()
        if needle not in break_type.casefold() and needle not in reason.casefold():
            return False
    if matcher.line is not None and place.line != matcher.line:
        return False
    if matcher.function is not None and not _names_function(matcher.function, place.function):
        return False
    return bool(_spec(matcher.file).match_file(place.path))


def _names_function(pattern: str, function: str | None) -> bool:
    """Whether an ack's ``function`` names the break's: its qualified name (``Classifier.forward``)
    or its plain one (``forward``), as a config writer would write either."""
    if function is None:
        return False
    plain = function.rpartition(".")[2]
    return fnmatchcase(function, pattern) or fnmatchcase(plain, pattern)


def accepts_finding(matcher: BreakMatcher, finding: Finding) -> bool:
    """Whether ``matcher`` names the new graph break ``finding`` reports."""
    return finding.category == CATEGORY and accepts(
        matcher,
        str(finding.evidence.get("break_type", "")),
        str(finding.evidence.get("reason", "")),
        finding.location,
    )


def accepts_break(entries: Iterable[AckEntry], workload: str, gb: GraphBreak) -> bool:
    """Whether one of the config's ``entries`` with a `break:` accepts ``gb`` in ``workload``."""
    return any(
        e.break_ is not None
        and e.workload in (None, workload)
        and accepts(e.break_, gb.break_type, gb.reason, gb.location)
        for e in entries
    )


def head_breaks(review: Review, workload: str | None) -> list[GraphBreak] | None:
    """Every graph break the head's compile probe recorded in ``workload`` (every workload for
    None), new or not; None where no such compile result is in the review."""
    found: list[GraphBreak] | None = None
    for wl in review.workloads:
        if workload is not None and wl.name != workload:
            continue
        for result in wl.head:
            metrics = probe_metrics(result, CompileMetrics)
            if metrics is not None:
                found = [*(found or []), *metrics.graph_breaks]
    return found


def category_beside(ack: AckEntry) -> AckEntry:
    """``ack`` where its `category` may stand beside its `break` (none, or CATEGORY), else a
    ValueError in the words of a config error."""
    if ack.break_ is not None and ack.category not in (None, CATEGORY):
        raise ValueError(
            f"`category: {CATEGORY}` or no category beside a `break` (it accepts new graph breaks "
            f"only), got {ack.category!r}"
        )
    return ack


def covered_category(ack: AckEntry) -> str:
    """The category of the findings ``ack`` may cover: its own, or for a `break:` alone, CATEGORY."""
    return ack.category or CATEGORY


def stale(review: Review, entries: Iterable[tuple[str, AckEntry]]) -> list[StaleAck]:
    """The entries (``(entry, ack)``: ``acks[2]`` and its settings) with a `break:` that name no
    graph break of the head, in the workloads they apply to whose compile probe ran. One whose
    workloads have no compile result here (the probe did not run, or --workloads left them out)
    is not judged."""
    out = []
    for entry, ack in entries:
        matcher = ack.break_
        if matcher is None:
            continue
        breaks = head_breaks(review, ack.workload)
        if breaks is None:
            continue
        if not any(accepts(matcher, gb.break_type, gb.reason, gb.location) for gb in breaks):
            out.append(StaleAck(entry=entry, names=matcher.words(), workload=ack.workload, reason=ack.reason))
    return out
