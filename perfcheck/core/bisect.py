"""What `perfcheck bisect` decides, without I/O: what a finding is (so that it can be looked for at
another commit), which commit to probe next, and what the search found, as Markdown.

Commits are indexed along first-parent history: 0 is `good` (the finding absent by definition:
the review compared against it), n is `bad` (present). A finding's search keeps the last index
known absent and the first known present; each probe run halves what lies between.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from perfcheck.bisect_schema import BisectDoc, Commit, Located
from perfcheck.core.markdown import block, cell, code
from perfcheck.core.matrix import Nature, known, render
from perfcheck.schema import Finding

# The measured findings a search can decide at a commit: the timing probe's, by the gate's own
# paired runs of base against that commit (--timing, bisect.timing). The rest stay listed.
TIMED_PROBE = "timing"

_NUMBERS = re.compile(r"\d+(\.\d+)?")
MAX_CHECKS = 5  # commands shown under an unverified section: one per blamed commit, the first few


@dataclass(frozen=True)
class Target:
    """One thing to look for at other commits."""

    key: str
    label: str
    category: str
    workload: str
    probe: str


def targets(f: Finding) -> list[Target]:
    """What ``f`` is, in terms that hold at any commit: a graph break by its type and source text,
    an op by its name, a changed IR op by op (two commits can each change the IR), else the
    category and where. Line numbers never: earlier commits move lines."""
    where = f.location.code if f.location and f.location.code else ""
    ev = f.evidence
    entry = known().get(f.category)
    if entry is not None and entry.nature == "measured":
        # A measured change has no identity beyond what and where: its figures differ everywhere.
        return [
            Target(
                f"{f.category}|{f.workload}", f.message.splitlines()[0][:160], f.category, f.workload, f.probe
            )
        ]

    def one(what: str, label: str) -> Target:
        return Target(f"{f.category}|{f.workload}|{what}", label, f.category, f.workload, f.probe)

    # Where the category's matrix entry says what tells its findings apart (``identity``).
    identity = entry.identity if entry is not None else None
    if identity is not None and identity.each is not None and identity.label is not None:
        each = ev.get(identity.each)
        if isinstance(each, dict) and each:
            return [
                one(f"{identity.named}={key}", render(identity.label, key=key, value=value))
                for key, value in sorted(each.items())
            ]
    if identity is not None and identity.by is not None:
        said = [str(ev.get(name, ""))[:200] for name in identity.by]
        return [one("|".join([*said, where]), f.message.splitlines()[0][:160])]
    for field_name in ("op", "guard_expression", "parameter", "code"):
        if field_name in ev:
            return [one(f"{field_name}={ev[field_name]}", f.message.splitlines()[0][:160])]
    # Otherwise the message without its numbers (counts and sizes differ between commits).
    return [
        one(f"{where}|{_NUMBERS.sub('#', f.message.splitlines()[0])[:200]}", f.message.splitlines()[0][:160])
    ]


def nature(f: Finding) -> Nature:
    """What ``f`` is to a search, as its category's matrix entry says (``nature``): structural,
    measured or process. A category with no entry is looked at in its log, never searched."""
    entry = known().get(f.category)
    return entry.nature if entry is not None else "process"


def bisectable(f: Finding) -> bool:
    """Structural findings: exact at any commit, so one probe run says present or absent."""
    return f.severity != "info" and nature(f) == "structural"


def measured(f: Finding) -> bool:
    """Timing-class findings: exact nowhere, so searched only on request (see ``searchable``)."""
    return f.severity != "info" and nature(f) == "measured"


def searchable(f: Finding, timing: bool) -> bool:
    """Whether a search looks for ``f``: structural findings always; the timing probe's measured
    ones when asked (each step then costs the gate's paired runs, and may be inconclusive)."""
    return bisectable(f) or (timing and measured(f) and f.probe == TIMED_PROBE)


@dataclass
class Search:
    """One target's interval: ``good`` absent, ``bad`` present, ``skipped`` not probeable."""

    target: Target
    good: int
    bad: int
    skipped: set[int] = field(default_factory=set)
    runs: int = 0

    def open(self) -> list[int]:
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    def done(self) -> bool:
        return not self.open()

    def next(self) -> int | None:
        """The untried commit nearest the middle of the interval."""
        left = self.open()
        if not left:
            return None
        middle = (self.good + self.bad) / 2
        return min(left, key=lambda i: (abs(i - middle), i))

    def record(self, index: int, present: bool | None) -> None:
        """What a probe run at ``index`` showed: present, absent, or None (the commit is skipped)."""
        if not self.good < index < self.bad:
            return
        self.runs += 1
        if present is None:
            self.skipped.add(index)
        elif present:
            self.bad = index
        else:
            self.good = index

    def candidates(self) -> list[int]:
        """Every index that may be the first bad one: ``bad`` and the skipped ones before it."""
        return [i for i in range(self.good + 1, self.bad + 1) if i == self.bad or i in self.skipped]


def next_index(searches: list[Search]) -> int | None:
    """The commit to probe next for one finding path: the first unfinished search's middle."""
    for s in searches:
        nxt = s.next()
        if nxt is not None:
            return nxt
    return None


def merge(docs: list[BisectDoc]) -> BisectDoc | None:
    """One document from the shards' (each searched its own workloads over the same commits);
    None when no shard bisected. ValueError when they searched different ranges."""
    if not docs:
        return None
    first = docs[0]
    for d in docs[1:]:
        if (d.good, d.bad, d.commits, d.span) != (first.good, first.bad, first.commits, first.span):
            raise ValueError(
                f"shards bisected different ranges ({first.good.sha[:10]}..{first.bad.sha[:10]} and "
                f"{d.good.sha[:10]}..{d.bad.sha[:10]})"
            )
    return first.model_copy(
        update={
            "probes": sorted({p for d in docs for p in d.probes}),
            "findings": [f for d in docs for f in d.findings],
            "skipped": [s for d in docs for s in d.skipped],
            "probe_runs": sum(d.probe_runs for d in docs),
        }
    )


def range_problems(doc: BisectDoc) -> list[str]:
    """Why ``doc`` is not a search of its own range, or [] when it is: ``span`` runs from good to
    bad with ``commits`` after good, and every commit an entry blames or clears lies in it, under
    the subject and author the span gives it, in the order a search finds them (the last good
    commit before the first bad one). The document comes from the job that ran PR code: without
    this, it could blame any SHA, of any range, under any name."""
    span = doc.span
    if not span:
        return ["span: expected the commits of good..bad, got none"]
    problems = []
    if span[0] != doc.good or span[-1] != doc.bad:
        problems.append("span: expected to run from good to bad")
    if len(span) != doc.commits + 1:
        problems.append(f"span: expected {doc.commits + 1} commits (good, then `commits`), got {len(span)}")
    index = {c.sha: i for i, c in enumerate(span)}
    if len(index) != len(span):
        problems.append("span: a commit appears twice")

    def at(commit: Commit | None, where: str) -> int | None:
        if commit is None:
            return None
        i = index.get(commit.sha)
        if i is None:
            problems.append(f"{where}: {commit.sha[:12]} is not a commit of the range searched")
        elif span[i] != commit:
            problems.append(f"{where}: {commit.sha[:12]} shown under another subject or author")
        return i

    for n, f in enumerate(doc.findings):
        where = f"findings[{n}]"
        good, bad = at(f.last_good, f"{where}.last_good"), at(f.first_bad, f"{where}.first_bad")
        candidates = [at(c, f"{where}.candidates[{k}]") for k, c in enumerate(f.candidates)]
        why = _out_of_order(f.outcome, good, bad, [c for c in candidates if c is not None])
        if why:
            problems.append(f"{where}: {why}")
    problems += [
        f"skipped[{n}]: {s.sha[:12]} is not a commit of the range searched"
        for n, s in enumerate(doc.skipped)
        if s.sha not in index
    ]
    return problems


@dataclass(frozen=True)
class KnownCommit:
    """A commit as the forge says it is (GitHub's list of a pull request's commits)."""

    subject: str  # as git's %s gives it: the message's first paragraph, its lines joined by spaces
    author: str  # the author's name, as git's %an gives it
    first_parent: str | None


def git_subject(message: str) -> str:
    """What git's ``%s`` shows of a commit message: its first paragraph, lines joined by spaces."""
    paragraph = message.replace("\r\n", "\n").strip("\n").split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines() if line.strip())


def outside_pull(doc: BisectDoc, commits: Mapping[str, KnownCommit], complete: bool) -> list[str]:
    """Why ``doc``'s range is not the pull request's own history, or [] when it is: each commit
    after good one of the PR's commits, under the subject and author the forge gives it, and the
    first parent of the one before it back to good. ``range_problems`` checks a document against
    its own span; this checks the span against the forge, so that a probe job that ran PR code
    cannot put a commit of the base branch, or one it made up, in the range it blames from."""
    if not complete:
        return ["the pull request has more commits than the API lists, so its range cannot be checked"]
    problems = []
    for before, commit in itertools.pairwise(doc.span):
        known = commits.get(commit.sha)
        if known is None:
            problems.append(f"{commit.sha[:12]} is not a commit of the pull request")
        elif (known.subject, known.author) != (commit.subject, commit.author):
            problems.append(f"{commit.sha[:12]} is shown under another subject or author than the forge's")
        elif known.first_parent != before.sha:
            problems.append(f"{commit.sha[:12]} does not follow {before.sha[:12]}")
    return problems


def _out_of_order(outcome: str, good: int | None, bad: int | None, candidates: list[int]) -> str | None:
    """Why an entry's commits (indices into the span) are not what a search of ``outcome`` ends at."""
    if outcome == "present_at_good":
        return None if bad == 0 else "expected first_bad to be good, where it was present already"
    if outcome in ("found", "unfinished") and (bad is None or good is None or not good < bad):
        return "expected a last good commit before the first bad one"
    if outcome == "ambiguous" and (
        good is None or len(candidates) < 2 or candidates != sorted(set(candidates)) or candidates[0] <= good
    ):
        return "expected two or more candidates, in order, after the last good commit"
    return None


def kept(doc: BisectDoc, findings: list[Finding], head_revision: str | None) -> BisectDoc | None:
    """What of a probe job's document the review may show: it was written where the PR's code
    ran, so only a search of this head (when its commit is known) and only entries for findings
    the review itself found, each once. ValueError when it is no search of its own range
    (range_problems)."""
    if head_revision is not None and doc.bad.sha != head_revision:
        return None
    problems = range_problems(doc)
    if problems:
        shown = "; ".join(problems[:5]) + (f" and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ValueError(f"bisect: not a search of {doc.good.sha[:10]}..{doc.bad.sha[:10]}: {shown}")
    known = {t.key for f in findings for t in targets(f)}
    seen: set[str] = set()
    entries = []
    for entry in doc.findings:
        if entry.key in known and entry.key not in seen:
            seen.add(entry.key)
            entries.append(entry)
    return doc.model_copy(update={"findings": entries}) if entries else None


def check_command(entry: Located) -> str | None:
    """The command that checks one entry's blame on a machine of the reader's own: a search of
    its last good commit against its first bad one (the commit right after it), for that finding's
    workload and probe. None where the entry blames no single commit."""
    if entry.outcome != "found" or entry.first_bad is None or entry.last_good is None:
        return None
    args = [
        "perfcheck",
        "bisect",
        "--good",
        entry.last_good.sha,
        "--bad",
        entry.first_bad.sha,
        "--workloads",
        entry.workload,
        "--probes",
        entry.probe,
    ]
    if entry.probe == TIMED_PROBE:
        args.append("--timing")  # a timing finding is searched only when asked
    return " ".join(shlex.quote(a) for a in args)


def markdown(doc: BisectDoc, from_probe_job: bool = False) -> str:
    """The review comment's section: where each finding came from. ``from_probe_job``: the document
    came from the job that ran the PR's code, and the report showing it re-ran nothing (it cannot:
    it runs no PR code), so the section says so and gives the command that checks each blame."""
    if not doc.findings:
        return ""
    lines = [
        f"#### Where each finding came from ({doc.commits} commit{'s' if doc.commits != 1 else ''}, "
        f"{doc.probe_runs} probe run{'s' if doc.probe_runs != 1 else ''})",
        "",
        "| finding | first bad commit | last good commit |",
        "|---|---|---|",
    ]
    for f in doc.findings:
        if f.outcome == "found" and f.first_bad is not None:
            sha = code(f.first_bad.sha[:10], in_table=True)
            bad = f"{sha} {cell(f.first_bad.subject)} ({cell(f.first_bad.author)})"
        elif f.outcome == "ambiguous":
            bad = (
                "one of "
                + ", ".join(code(c.sha[:10], in_table=True) for c in f.candidates)
                + " (skipped commits between)"
            )
        elif f.outcome == "present_at_good" and f.first_bad is not None:
            bad = f"{cell(f.note or '')} ({code(f.first_bad.sha[:10], in_table=True)})"
        elif f.outcome == "unfinished" and f.first_bad is not None:
            bad = f"at or before {code(f.first_bad.sha[:10], in_table=True)}: {cell(f.note or '')}"
        else:
            bad = cell(f.note or "not bisected")
        good = code(f.last_good.sha[:10], in_table=True) if f.last_good else "—"
        lines.append(f"| {cell(f.label)} · {cell(f.workload)} | {bad} | {good} |")
    if doc.skipped:
        shown = ", ".join(f"{code(s.sha[:10])} ({cell(s.why[:80])})" for s in doc.skipped[:5])
        lines += ["", f"Skipped (could not be probed): {shown}"]
    if from_probe_job:
        commands = [c for c in (check_command(f) for f in doc.findings) if c is not None]
        lines += [
            "",
            "**Unverified:** these commits were found by the probe job's own runs, which ran the PR's "
            "code; the report that wrote this re-ran none of them."
            + (" To check a blame, run on a machine of your own:" if commands else ""),
        ]
        if commands:
            lines += ["", block("\n".join(dict.fromkeys(commands[:MAX_CHECKS])), "sh")]
    return "\n".join(lines) + "\n"
