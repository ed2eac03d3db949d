"""`perfcheck bisect`: the first commit of a range that introduced each finding of its review.

The good → bad review runs first (perfcheck.review, both trees as commits of the repository).
Each of its findings (structural ones; see perfcheck/core/bisect.py) is then searched for along the
first-parent commits between: a commit's tree is written out with ``git archive`` (the user's
work tree and index are never touched), only the probe that found it runs there, on that side
alone, and its result is compared with good's as the review compares head with base. One probe
run at a commit serves every finding of that workload and probe, and no commit is probed twice.
A commit whose workload does not build is skipped, as ``git bisect skip`` does. With timing
asked for, the timing probe's findings are searched with the gate's paired runs of good against
each commit; a step the gate cannot decide is skipped the same way, with its reason.

``bisect_probed`` is the workflow's form: the probe job, having probed base and head, searches
the head checkout's history from its merge base with base, reusing those results.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perfcheck.bisect_schema import MAX_COMMITS, BisectDoc, Commit, Located, Skipped
from perfcheck.config import Config
from perfcheck.core import bisect as search
from perfcheck.core import probes as probe_kinds
from perfcheck.core.compare import compare_workload
from perfcheck.review import ReviewRequest, UsageError, sandboxed, select_probes, select_workloads
from perfcheck.review import run as run_review
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.probe_process import probe_spec, run_probe
from perfcheck.runner.review_run import ReviewRun, SideSetup
from perfcheck.schema import Finding, ProbeResult, ProbeRun, Review, WorkloadReview
from perfcheck.settings import WorkloadConfig


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done.stdout


def resolve(repo: Path, rev: str, flag: str) -> str:
    if rev.startswith("-"):
        raise UsageError(f"{flag} {rev!r}: expected a revision, not an option")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except UsageError:
        raise UsageError(f"{flag} {rev!r}: no such commit in {repo}") from None


def commit_info(repo: Path, sha: str) -> Commit:
    subject, author = _git(repo, "show", "-s", "--format=%s%x00%an", sha).rstrip("\n").split("\0", 1)
    return Commit(sha=sha, subject=subject, author=author)


def first_parent_range(repo: Path, good: str, bad: str) -> list[str]:
    """good, then each first-parent commit after it up to bad. Refuses a good that is not an
    ancestor of bad (the range would not be a history)."""
    if subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", good, bad], capture_output=True, check=False
    ).returncode:
        raise UsageError(
            f"--good {good[:10]} is not an ancestor of --bad {bad[:10]}: nothing to bisect between"
        )
    after = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not after:
        raise UsageError("--good and --bad are the same commit: nothing to bisect")
    return [good, *after]


def write_tree(repo: Path, sha: str, dest: Path) -> Path:
    """The commit's files under ``dest`` (``git archive``: no checkout, no index)."""
    if dest.is_dir():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with subprocess.Popen(
        ["git", "-C", str(repo), "archive", "--format=tar", sha], stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(partial, filter="data")
    if proc.returncode:
        raise UsageError(f"git archive {sha[:10]} failed")
    partial.rename(dest)
    return dest


@dataclass(frozen=True)
class BisectRequest:
    repo: Path
    good: str
    bad: str
    config: Config | None  # None: the good commit's perfcheck.yml (the gate), else the built-in
    out_dir: Path
    workloads: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    timing: bool = False
    device: str = "cpu"


Progress = Callable[[str], None]


class _Probed:
    """Every probe run of the search, by commit index, workload and probe: none runs twice. A
    per-side probe runs at the commit alone and is compared with the review's base result; the
    timing probe runs base against the commit in the gate's paired processes, as the review did."""

    def __init__(
        self, run: ReviewRun, trees: Callable[[int], Path], workdir: Path, forks: ForkServers
    ) -> None:
        self.run, self.trees, self.workdir, self.forks = run, trees, workdir, forks
        self.results: dict[tuple[int, str, str], WorkloadReview] = {}
        self.count = 0

    def get(self, index: int, wl: WorkloadConfig, base: ProbeResult) -> WorkloadReview:
        """Base and the commit's result side by side, ready for compare_workload."""
        key = (index, wl.name, base.probe)
        if key not in self.results:
            side = SideSetup("head", self.trees(index), self.run.head.python)
            folder = self.workdir / f"commit-{index}"
            folder.mkdir(parents=True, exist_ok=True)
            spec = probe_spec(self.run, wl, base.probe, side)
            kind = probe_kinds.get(base.probe)
            if kind is not None and kind.paired:
                from perfcheck.runner.timing.pairs import run_paired

                base_spec = probe_spec(self.run, wl, base.probe, self.run.base)
                pair = run_paired(base_spec, spec, self.run.base, side, folder, self.run.config.budgets)
                self.results[key] = WorkloadReview(name=wl.name, base=[pair.base], head=[pair.head])
            else:
                result = run_probe(spec, side.python, wl.timeout_s, folder, forks=self.forks)
                self.results[key] = WorkloadReview(name=wl.name, base=[base], head=[result])
            self.count += 1
        return self.results[key]


@dataclass(frozen=True)
class _Range:
    """The commits searched: ``shas[0]`` the last one without the PR's changes, ``shas[-1]`` the head."""

    repo: Path
    shas: list[str]
    trees: Callable[[int], Path]


def _default_probes(timing: bool) -> tuple[str, ...]:
    return tuple(p for p in probe_kinds.defaults() if timing or p != "timing")


def _git_repo(repo: Path, flag: str) -> Path:
    inside = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise UsageError(f"{flag} {repo}: not a git repository")
    return repo.resolve()


def bisect(request: BisectRequest, progress: Progress) -> tuple[BisectDoc, Review]:
    repo = _git_repo(request.repo, "--repo")
    select_probes(request.probes)  # before any tree is written out
    good = resolve(repo, request.good, "--good")
    bad = resolve(repo, request.bad, "--bad")
    shas = first_parent_range(repo, good, bad)
    if len(shas) > MAX_COMMITS + 1:
        raise UsageError(
            f"{len(shas) - 1} commits between --good and --bad: at most {MAX_COMMITS} are searched"
        )
    out = request.out_dir
    trees_dir = out / "trees"

    def tree(index: int) -> Path:
        return write_tree(repo, shas[index], trees_dir / shas[index][:12])

    from perfcheck.config import review_config

    config, origin = (
        (request.config, "given") if request.config else review_config(None, tree(0), tree(len(shas) - 1))
    )
    probes = request.probes or _default_probes(request.timing)
    progress(f"review {good[:10]} → {bad[:10]} ({len(shas) - 1} commits), probes {', '.join(probes)}")
    with ForkServers(out) as forks:  # the review's and the search's probes share them
        review, _ = run_review(
            ReviewRequest(
                base=tree(0),
                head=tree(len(shas) - 1),
                config=config,
                out_dir=out / "review",
                device=request.device,
                workloads=request.workloads,
                probes=probes,
                config_origin=origin,
            ),
            forks,
        )
        run = ReviewRun(
            base=SideSetup("base", tree(0)),
            head=SideSetup("head", tree(len(shas) - 1)),
            config=config,
            device=request.device,
            workloads=select_workloads(config, request.workloads),
            probes=probes,
            out_dir=out,
            sandboxed=sandboxed(),
        )
        span = _Range(repo, shas, tree)
        doc = _search(span, review.workloads, review.findings, run, progress, forks, timing=request.timing)
    return doc, review


def _search(
    span: _Range,
    reference: list[WorkloadReview],
    findings: list[Finding],
    run: ReviewRun,
    progress: Progress,
    forks: ForkServers,
    budget_s: float | None = None,
    check_good: bool = False,
    timing: bool = False,
) -> BisectDoc:
    """Where each of ``findings`` (of a review whose base results are ``reference``) first
    appears along ``span``. ``check_good``: the range starts at a commit other than the review's
    base (a PR's merge base), so a finding may be there already; it is probed first. No probe run
    starts after ``budget_s``: what is not narrowed down by then is `unfinished`. ``timing``: the
    timing probe's findings are searched too (else listed as not bisected)."""
    shas, n = span.shas, len(span.shas) - 1
    # Every commit the document names is one of these, read once: the report checks it so.
    commits = [commit_info(span.repo, sha) for sha in shas]
    deadline = None if budget_s is None else time.monotonic() + budget_s
    workloads = {w.name: w for w in run.workloads}
    bases = {w.name: w for w in reference}
    probed = _Probed(run, span.trees, (run.out_dir / "bisect-probes").resolve(), forks)
    located: list[Located] = []
    skipped: dict[tuple[int, str], str] = {}
    paths: dict[tuple[str, str], list[search.Search]] = {}
    for f in findings:
        if not search.searchable(f, timing):
            if search.measured(f):
                located.append(_not_bisected(f, timing))
            continue
        for t in search.targets(f):
            paths.setdefault((t.workload, t.probe), []).append(search.Search(t, good=0, bad=n))
    config = run.config

    def present_at(index: int, wl: WorkloadConfig, base: ProbeResult) -> set[str] | None:
        progress(f"commit {index}/{n} {shas[index][:10]} · {wl.name} · {base.probe}")
        found, why = _present(probed.get(index, wl, base), config)
        if found is None:
            skipped[(index, wl.name)] = why[:300]
        return found

    for (wl_name, probe), searches in paths.items():
        wl = workloads.get(wl_name)
        base = next((r for r in bases[wl_name].base if r.probe == probe), None) if wl_name in bases else None
        if base is None or wl is None:
            continue
        if check_good and n > 0 and (at_good := present_at(0, wl, base)):
            located += [_at_good(s, commits) for s in searches if s.target.key in at_good]
            searches = [s for s in searches if s.target.key not in at_good]
        while (index := search.next_index(searches)) is not None:
            if deadline is not None and time.monotonic() > deadline:
                break
            present = present_at(index, wl, base)
            for s in searches:
                s.record(index, None if present is None else s.target.key in present)
        located += [_located(s, commits, budget_s) for s in searches]
    return BisectDoc(
        good=commits[0],
        bad=commits[-1],
        commits=n,
        span=commits,
        probes=list(run.probes) or sorted({probe for _, probe in paths}),
        findings=located,
        skipped=[Skipped(sha=shas[i], workload=w, why=why) for (i, w), why in sorted(skipped.items())],
        probe_runs=probed.count,
        budget_s=budget_s,
    )


BisectMode = Literal["auto", "always", "never"]


def failing(findings: list[Finding], timing: bool) -> bool:
    """Whether a bisection is worth its time by default: a finding that fails the check and can
    be searched for."""
    return any(f.severity == "error" and search.searchable(f, timing) for f in findings)


def bisect_probed(
    probed: ProbeRun,
    request: ReviewRequest,
    base_sha: str,
    mode: BisectMode,
    progress: Progress,
) -> BisectDoc | None:
    """The probe job's bisection: this shard's findings, searched along the head checkout's
    first-parent history from its merge base with ``base_sha``. Returns None (saying why) when
    there is nothing to search or no history to search in: bisection adds to a review, it never
    fails one."""
    config = request.config
    findings = [f for wl in probed.workloads for f in compare_workload(wl, config).findings]
    timing = config.bisect.timing
    if mode == "never" or (mode == "auto" and not (config.bisect.auto and failing(findings, timing))):
        return None
    if not any(search.searchable(f, timing) for f in findings):
        progress("nothing to bisect: no finding of this shard can be searched for")
        return None
    try:
        repo = _git_repo(request.head, "--head")
        head = resolve(repo, "HEAD", "--head")
        base = resolve(repo, base_sha, "--base-sha")
        good = _git(repo, "merge-base", base, head).strip()
        shas = first_parent_range(repo, good, head)
    except UsageError as err:
        progress(
            f"not bisected: {err} (the probe job needs the head's history: check it out with fetch-depth: 0)"
        )
        return None
    if mode == "auto" and len(shas) <= 2:
        progress("not bisected: the pull request has one commit")
        return None
    if len(shas) > MAX_COMMITS + 1:
        progress(f"not bisected: {len(shas) - 1} commits, more than the {MAX_COMMITS} a search covers")
        return None
    trees_dir = request.out_dir / "bisect-trees"

    def tree(index: int) -> Path:
        return (
            request.head
            if index == len(shas) - 1
            else write_tree(repo, shas[index], trees_dir / shas[index][:12])
        )

    probed_names = {w.name for w in probed.workloads}
    run = ReviewRun(
        base=SideSetup("base", request.base, request.base_python or sys.executable),
        head=SideSetup("head", request.head, request.head_python or sys.executable),
        config=config,
        device=request.device,
        workloads=[w for w in select_workloads(config, request.workloads) if w.name in probed_names],
        probes=select_probes(request.probes),
        out_dir=request.out_dir,
        sandboxed=sandboxed(),
    )
    progress(
        f"bisecting {len(shas) - 1} commits from the merge base {good[:10]} "
        f"(budget {config.bisect.budget_s:.0f} s)"
    )
    with ForkServers(request.out_dir) as forks:
        return _search(
            _Range(repo, shas, tree),
            probed.workloads,
            findings,
            run,
            progress,
            forks,
            budget_s=config.bisect.budget_s,
            check_good=good != base,
            timing=timing,
        )


def _present(pair: WorkloadReview, config: Config) -> tuple[set[str] | None, str]:
    """The keys of what comparing the commit's result with base finds, or None and why the commit
    is skipped: its workload does not build, its probe did not finish, or the timing gate could
    not decide there (which says so, rather than calling the commit good or bad)."""
    [result] = pair.head
    if result.status != "ok" and (result.workload_failed or result.status in ("crashed", "timeout")):
        return None, (result.message or result.status).splitlines()[0]
    compared = compare_workload(pair, config)
    if compared.inconclusive:
        return None, f"{result.probe}: inconclusive here: {compared.inconclusive[0]}"
    return {t.key for f in compared.findings for t in search.targets(f)}, ""


def _not_bisected(f: Finding, timing: bool) -> Located:
    why = (
        "a measured finding of the timing probe: bisected with --timing (bisect.timing in the workflow)"
        if f.probe == search.TIMED_PROBE and not timing
        else f"a measured finding of the {f.probe} probe: not bisected"
    )
    return Located(
        key=f"{f.category}|{f.workload}",
        label=f.message.splitlines()[0][:160],
        category=f.category,
        workload=f.workload,
        probe=f.probe,
        outcome="not_bisected",
        note=why,
    )


def _at_good(s: search.Search, commits: list[Commit]) -> Located:
    t = s.target
    return Located(
        key=t.key,
        label=t.label,
        category=t.category,
        workload=t.workload,
        probe=t.probe,
        outcome="present_at_good",
        first_bad=commits[0],
        probe_runs=1,
        note="already at the merge base: the base branch changed since this PR branched off (merge or "
        "rebase it onto the base branch)",
    )


def _located(s: search.Search, commits: list[Commit], budget_s: float | None = None) -> Located:
    t = s.target
    last_good = commits[s.good]
    common: dict[str, Any] = {
        "key": t.key,
        "label": t.label,
        "category": t.category,
        "workload": t.workload,
        "probe": t.probe,
        "last_good": last_good,
        "probe_runs": s.runs,
    }
    if not s.done():
        between = len(s.open())
        return Located(
            **common,
            outcome="unfinished",
            first_bad=commits[s.bad],
            note=f"the time budget ({budget_s or 0:.0f} s) ran out with {between} commit"
            f"{'s' if between != 1 else ''} between the last good one and this one unprobed",
        )
    candidates = s.candidates()
    ambiguous = len(candidates) > 1
    return Located(
        **common,
        outcome="ambiguous" if ambiguous else "found",
        first_bad=None if ambiguous else commits[s.bad],
        candidates=[commits[i] for i in candidates] if ambiguous else [],
        note="skipped commits lie between the last good and the first bad one" if ambiguous else None,
    )
