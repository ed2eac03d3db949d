"""Acknowledgements: known changes accepted with a reason, from perfcheck.yml or `/perfcheck ack`.

Pure. An acknowledgement covers findings of its category (and workload, if it names one); it is
shown with who, when and why, and such findings no longer fail the check. A different finding,
of another category or workload, still does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from perfcheck.bot.command import CommandError, parse_command
from perfcheck.bot.plan import has_permission
from perfcheck.config import AckEntry
from perfcheck.schema import Acknowledgement, Finding, Review, Verdict


@dataclass(frozen=True)
class Ack:
    category: str
    workload: str | None
    note: Acknowledgement


@dataclass(frozen=True)
class PostedComment:
    author: str
    created_at: str | None
    body: str


def from_config(entries: Iterable[AckEntry]) -> list[Ack]:
    return [Ack(e.category, e.workload, Acknowledgement(by="config", reason=e.reason)) for e in entries]


def from_comments(
    comments: Iterable[PostedComment],
    permission_of: Callable[[str], str],
    required: str,
    sha: str | None = None,
) -> list[Ack]:
    """`/perfcheck ack` commands by people with ``required`` permission or more; others are ignored."""
    out: list[Ack] = []
    for c in comments:
        try:
            cmd = parse_command(c.body)
        except CommandError:
            continue
        if cmd is None or cmd.verb != "ack" or not has_permission(permission_of(c.author), required):
            continue
        note = Acknowledgement(by=c.author, reason=cmd.reason or "", at=c.created_at, sha=sha)
        out.append(Ack(cmd.category or "", cmd.workload, note))
    return out


def _covers(ack: Ack, f: Finding) -> bool:
    return ack.category == f.category and (ack.workload is None or ack.workload == f.workload)


def verdict_of(findings: list[Finding], inconclusive: list[str]) -> Verdict:
    if any(f.severity == "error" and f.ack is None for f in findings):
        return "fail"
    return "inconclusive" if inconclusive else "pass"


def apply(review: Review, acks: list[Ack]) -> Review:
    """The review with matching findings acknowledged (the latest ack wins) and the verdict redone."""
    if not acks:
        return review
    findings = []
    for f in review.findings:
        match = next((a for a in reversed(acks) if _covers(a, f)), None)
        findings.append(f.model_copy(update={"ack": match.note}) if match else f)
    return review.model_copy(
        update={"findings": findings, "verdict": verdict_of(findings, review.inconclusive)}
    )
