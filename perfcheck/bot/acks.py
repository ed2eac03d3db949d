"""Acknowledgements: known changes accepted with a reason, from perfcheck.yml or `/perfcheck ack`.

Pure. An acknowledgement covers findings of its category (and workload, if it names one); it is
shown with who, when and why, and such findings no longer fail the check. A different finding,
of another category or workload, still does. A config ack with a `break:` (an accepted break,
perfcheck/core/compile_accepted.py) covers only the new graph breaks it names, and says which entry
it is; one that names no break of the head is listed as stale. A `/perfcheck ack` covers the head
commit as it was when it was posted: posted before the head existed (perfcheck's first check on
the head started later, by GitHub's clock), it covered an earlier commit, and it is shown as
expired instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from perfcheck.bot.command import CommandError, has_permission, parse_command
from perfcheck.bot.timestamps import instant
from perfcheck.core.causes import by_cause
from perfcheck.core.compare import verdict_of
from perfcheck.core.probes import compile_accepted
from perfcheck.schema import Acknowledgement, ExpiredAck, Finding, Review
from perfcheck.settings import AckEntry


class Ack(BaseModel):
    """One acknowledgement, wherever it comes from: perfcheck.yml (``by`` is "config") or a
    `/perfcheck ack` comment (planned by perfcheck/bot/plan.py, applied at publish)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: str
    workload: str | None = None
    by: str
    reason: str
    at: str | None = None  # when the command was posted (the comment's created_at)
    sha: str | None = None  # the head commit it covers
    expired: bool = False  # posted for an earlier head commit
    entry: str | None = None  # its place in perfcheck.yml (`acks[2]`), for a config ack
    accepted: AckEntry | None = None  # a config ack with a `break:`: the breaks it names only

    def note(self) -> Acknowledgement:
        """What a covered finding shows: who, when and why (and, for an accepted break, the entry)."""
        entry = self.entry if self.accepted is not None else None
        return Acknowledgement(by=self.by, reason=self.reason, at=self.at, sha=self.sha, entry=entry)


@dataclass(frozen=True)
class PostedComment:
    author: str
    created_at: str | None
    body: str


def from_config(entries: Iterable[AckEntry]) -> list[Ack]:
    return [
        Ack(
            category=compile_accepted.covered_category(e),
            workload=e.workload,
            by="config",
            reason=e.reason,
            entry=f"acks[{i}]",
            accepted=e if e.break_ is not None else None,
        )
        for i, e in enumerate(entries)
    ]


def from_comments(
    comments: Iterable[PostedComment],
    permission_of: Callable[[str], str],
    required: str,
    sha: str | None = None,
    head_since: str | None = None,
) -> list[Ack]:
    """`/perfcheck ack` commands by people with ``required`` permission or more; others are ignored.

    ``sha`` is the head commit; ``head_since`` when perfcheck first saw it (its first check run
    started). An ack posted later covers ``sha``; one posted earlier, or when that moment is not
    known, is marked expired."""
    since = instant(head_since)
    out: list[Ack] = []
    for c in comments:
        try:
            cmd = parse_command(c.body)
        except CommandError:
            continue
        if cmd is None or cmd.verb != "ack" or not has_permission(permission_of(c.author), required):
            continue
        posted = instant(c.created_at)
        current = since is not None and posted is not None and posted > since
        out.append(
            Ack(
                category=cmd.category or "",
                workload=cmd.workload,
                by=c.author,
                reason=cmd.reason or "",
                at=c.created_at,
                sha=sha if current else None,
                expired=not current,
            )
        )
    return out


def _covers(ack: Ack, f: Finding) -> bool:
    matcher = ack.accepted.break_ if ack.accepted is not None else None
    return (
        ack.category == f.category
        and (ack.workload is None or ack.workload == f.workload)
        and (matcher is None or compile_accepted.accepts_finding(matcher, f))
    )


def _with_effects(findings: list[Finding], acks: list[Ack]) -> list[Finding]:
    """``findings`` with the effects grouped under a break that one of ``acks`` (`with_effects:
    true`) accepted acknowledged too, saying so: the team accepted the break with what it costs."""
    if not acks:
        return findings
    out = list(findings)
    for group in by_cause(findings):
        leads = [findings[i] for i in group.leads]
        ack = next((a for a in acks if any(_covers(a, f) for f in leads)), None)
        if ack is None or any(f.ack is None for f in leads):
            continue
        for i in group.effects:
            if out[i].ack is None:
                note = ack.note()
                reason = f"{note.reason} (an effect of the accepted break, accepted with it)"
                out[i] = out[i].model_copy(update={"ack": note.model_copy(update={"reason": reason})})
    return out


def apply(review: Review, acks: list[Ack]) -> Review:
    """The review with matching findings acknowledged (the latest ack in force wins) and the verdict
    redone; expired acks that would have covered a finding are listed apart, and config acks with
    a `break:` that name no break of the head (stale) too."""
    if not acks and not review.stale_acks:
        return review
    findings, expired = [], []
    in_force = [a for a in acks if not a.expired]
    for f in review.findings:
        match = next((a for a in reversed(in_force) if _covers(a, f)), None)
        findings.append(f.model_copy(update={"ack": match.note()}) if match else f)
    findings = _with_effects(findings, [a for a in in_force if a.accepted and a.accepted.with_effects])
    for a in acks:
        if a.expired and any(_covers(a, f) and f.ack is None for f in findings):
            expired.append(
                ExpiredAck(category=a.category, workload=a.workload, by=a.by, reason=a.reason, at=a.at)
            )
    return review.model_copy(
        update={
            "findings": findings,
            "verdict": verdict_of(findings, review.inconclusive),
            "expired_acks": expired,
            "stale_acks": compile_accepted.stale(
                review, [(a.entry or "", a.accepted) for a in acks if a.accepted is not None]
            ),
        }
    )
