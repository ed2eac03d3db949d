"""The `/perfcheck` slash command: parsed from the first line of a PR comment, never executed.

The parser raises instead of exiting, so a malformed command becomes a reply with the usage.
Torch-free, and no shell ever sees the text: it is split with shlex and matched here.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass

from perfcheck.config import finding_categories, probe_names

PREFIX = "/perfcheck"
# GitHub's repository roles, weakest first; a command needs its configured role or a stronger one.
PERMISSIONS = ("none", "read", "triage", "write", "maintain", "admin")


def has_permission(granted: str | None, required: str) -> bool:
    if granted not in PERMISSIONS:
        return False
    return PERMISSIONS.index(granted) >= PERMISSIONS.index(required)


def usage() -> str:
    """The command's help, naming every probe registered now."""
    return f"""\
`{PREFIX}` or `{PREFIX} run [--workloads a,b] [--probes {",".join(probe_names())}] [--device cpu|cuda]`\
 `[--sha SHA]`
: review this PR's head commit now; from a fork, approves probing it on self-hosted runners: the
head as it was when you commented, or exactly `--sha`
`{PREFIX} bisect [--workloads a,b] [--probes …] [--device cpu|cuda] [--sha SHA]`
: the same review, then the first commit of this PR that has each finding; from a fork, approves
probing every commit of the PR up to that head
`{PREFIX} ack CATEGORY [WORKLOAD] -- REASON`
: accept a known change, recorded with who, when and the commit (a CATEGORY that is none is
answered with the list of categories)
`{PREFIX} help`
: this message"""


class CommandError(ValueError):
    """The comment starts with /perfcheck but is not a valid command; the message says why."""


@dataclass(frozen=True)
class Command:
    verb: str  # run | bisect | ack | help
    workloads: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    device: str | None = None
    sha: str | None = None  # run: the head commit the writer approves, 7 to 40 hex digits
    category: str | None = None
    workload: str | None = None
    reason: str | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise CommandError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise CommandError(message or "")


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v for v in (x.strip() for x in value.split(",")) if v)


def _run_parser(verb: str) -> _Parser:
    parser = _Parser(prog=f"{PREFIX} {verb}", add_help=False)
    parser.add_argument("--workloads", type=_csv, default=())
    parser.add_argument("--probes", type=_csv, default=())
    parser.add_argument("--device", choices=("cpu", "cuda"))
    parser.add_argument("--sha", type=_sha)
    return parser


def _sha(value: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", value):
        raise argparse.ArgumentTypeError("a commit SHA of 7 to 40 hex digits")
    return value


def _first_line(body: str) -> str:
    return body.strip().splitlines()[0].strip() if body.strip() else ""


def is_command(body: str) -> bool:
    """Whether the comment is meant as a command (its first line starts with /perfcheck)."""
    first = _first_line(body)
    return first == PREFIX or first.startswith(PREFIX + " ")


def parse_command(body: str) -> Command | None:
    """The command on the comment's first line; None when the comment is not a command at all."""
    if not is_command(body):
        return None
    first = _first_line(body)
    try:
        words = shlex.split(first[len(PREFIX) :])
    except ValueError as err:
        raise CommandError(f"cannot read the command: {err}") from None
    verb = words[0] if words else "run"
    rest = words[1:]
    if verb == "help":
        if rest:
            raise CommandError("`help` takes no arguments")
        return Command(verb="help")
    if verb in ("run", "bisect") or verb.startswith("--"):
        args = _run_parser(verb if verb == "bisect" else "run").parse_args(
            rest if verb in ("run", "bisect") else words
        )
        known = probe_names()
        unknown = [p for p in args.probes if p not in known]
        if unknown:
            raise CommandError(f"unknown probe(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return Command(
            verb="bisect" if verb == "bisect" else "run",
            workloads=args.workloads,
            probes=args.probes,
            device=args.device,
            sha=args.sha,
        )
    if verb == "ack":
        if "--" not in rest:
            raise CommandError(
                "`ack` needs a reason after `--`: `/perfcheck ack CATEGORY [WORKLOAD] -- REASON`"
            )
        split = rest.index("--")
        head, reason = rest[:split], " ".join(rest[split + 1 :]).strip()
        if not head or len(head) > 2:
            raise CommandError("`ack` takes a CATEGORY and optionally a WORKLOAD before `--`")
        categories = finding_categories()
        if head[0] not in categories:
            raise CommandError(f"unknown category {head[0]!r}; categories: {', '.join(categories)}")
        if not reason:
            raise CommandError("`ack` needs a reason after `--`")
        return Command(
            verb="ack", category=head[0], workload=head[1] if len(head) == 2 else None, reason=reason
        )
    raise CommandError(f"unknown command {verb!r}")
