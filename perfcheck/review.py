"""`perfcheck review` = `probe` + `report`: measure base and head, then compare and render.

`probe` is the part that runs PR code (on the GPU runner); it writes probes.json, raw measurements
for its shard of the workloads. `report` is torch-free: it merges the shards (refusing a set with a
shard missing or repeated), compares, and writes result.json and comment.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfcheck import __version__, preflight
from perfcheck.bisect_schema import BisectDoc
from perfcheck.bot import acks
from perfcheck.config import Config, first_adoption_config, follow_up_probes, planned_probes, probe_names
from perfcheck.core import bisect as bisect_search
from perfcheck.core import history
from perfcheck.core.causes import by_cause
from perfcheck.core.compare import compare, verdict_of
from perfcheck.core.matrix import merged
from perfcheck.core.render import headline, render_comment
from perfcheck.core.reports import render_html
from perfcheck.core.setup_faults import both_sides_missing
from perfcheck.runner.budget import Budget
from perfcheck.runner.latency.callgrind import valgrind
from perfcheck.runner.orchestrate import grouped, run_review
from perfcheck.runner.process import sandbox
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.sides import probe_env, side_walls
from perfcheck.runner.reuse.store import store_problem
from perfcheck.runner.review_run import ReviewRun, SideSetup
from perfcheck.runner.source.changes import mark_changes
from perfcheck.schema import ProbeResult, ProbeRun, Review, Shard, SideInfo, WorkloadReview
from perfcheck.settings import WorkloadConfig
from perfcheck.stopping import STOPS, stop_name

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3}


class UsageError(ValueError):
    """Bad input on the command line; the CLI exits 2 with this message."""


@dataclass(frozen=True)
class ReviewRequest:
    base: Path
    head: Path
    config: Config
    out_dir: Path
    device: str = "cpu"
    workloads: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    base_python: str | None = None
    head_python: str | None = None
    template_dir: Path | None = None
    jobs: int | None = None  # None: default_jobs(device)
    shard: Shard = field(default_factory=lambda: Shard(index=1, count=1))
    head_sha: str | None = None  # the commit the plan pinned, which the head tree must be
    config_origin: str = "given"  # a ConfigOrigin: where ``config`` came from
    program: str = "perfcheck"  # how perfcheck was started, as its verify commands start it
    rerun: list[str] = field(default_factory=list)  # the options a rerun repeats (--config, --device)
    # With config_origin "head": the PR's perfcheck.yml as read before any probe ran (from the head
    # commit where it is a checkout), which probes.json carries to the report job.
    head_config: str | None = None
    # The store of base's structural results (perfcheck/runner/reuse/store.py).
    record_base: Path | None = None
    reuse_base: Path | None = None


def git_revision(tree: Path) -> str | None:
    """The commit of ``tree`` when it is the top of a git checkout; None otherwise."""
    try:
        top = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = top.stdout.split()
    if top.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != tree.resolve():
        return None
    return lines[1]


def select_workloads(config: Config, names: tuple[str, ...]) -> list[WorkloadConfig]:
    if not names:
        return list(config.workloads)
    known = {w.name for w in config.workloads}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"--workloads: unknown workload(s) {', '.join(unknown)}; "
            f"{config.source} defines {', '.join(sorted(known))}"
        )
    return [config.workload(n) for n in names]


def select_probes(names: tuple[str, ...]) -> tuple[str, ...]:
    known = probe_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--probes: unknown probe(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names  # empty: each workload's own `probes`, else the default ones


def check_python(python: str | None, flag: str) -> str:
    """The interpreter a side's probes run under, checked before any of them starts."""
    if python is None:
        return sys.executable
    found = shutil.which(python)
    if found is None:
        raise UsageError(f"{flag} {python}: no such executable file")
    return found


def check_tree(path: Path, flag: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{flag} {path}: not a directory")
    return path.resolve()


def default_jobs(device: str) -> int:
    """Per-side probes at once where ``--jobs`` does not say: one on a CPU, where every core is
    the probes' own (timing and compile latency included); on a GPU runner half the cores, up to
    eight, since the GPU idles while they compile (each gets its share of the compile workers)."""
    if device != "cuda":
        return 1
    return max(1, min(8, len(os.sched_getaffinity(0)) // 2))


def shard_of(workloads: list[WorkloadConfig], shard: Shard) -> list[WorkloadConfig]:
    """Round-robin in config order, so shards stay balanced when workloads are listed by size."""
    return workloads[shard.index - 1 :: shard.count]


def parse_shard(text: str) -> Shard:
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise UsageError(f"--shard: expected I/N with 1 <= I <= N, e.g. 2/4; got {text!r}")
    return Shard(index=int(index), count=int(count))


def assemble(
    workloads: list[WorkloadReview],
    config: Config,
    base: SideInfo,
    head: SideInfo,
    undecided: Sequence[str] = (),
) -> Review:
    """The review of ``workloads``; ``undecided``: reasons besides the comparison's own that the
    verdict cannot be a pass (a run stopped before its end)."""
    comparison = compare(workloads, config)
    inconclusive = [*undecided, *comparison.inconclusive]
    draft = Review(
        tool_version=__version__,
        verdict=verdict_of(comparison.findings, inconclusive),
        summary="",
        base=base,
        head=head,
        workloads=[
            wl.model_copy(
                update={
                    "timing": comparison.timing_changes.get(wl.name),
                    "compile_latency": comparison.compile_latency_changes.get(wl.name),
                }
            )
            for wl in workloads
        ],
        findings=comparison.findings,
        causes=by_cause(comparison.findings),
        inconclusive=inconclusive,
    )
    return draft.model_copy(update={"summary": headline(draft)})


def head_revision(head: Path, pinned: str | None) -> str | None:
    """The head tree's commit: git's, which must be the pinned one when both are known; else the
    pinned one (a tree copied out of a checkout)."""
    found = git_revision(head)
    if pinned is None:
        return found
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", pinned):
        raise UsageError(f"--head-sha: expected 7 to 40 hex digits, got {pinned!r}")
    if found is not None and not found.startswith(pinned.lower()):
        raise UsageError(f"--head {head} is a checkout of {found[:12]}, not of --head-sha {pinned[:12]}")
    return found or pinned.lower()


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all: written beside it, then renamed, so a review
    stopped while writing (Ctrl-C, SIGTERM) leaves no half-written result for a later step."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def sandboxed() -> bool:
    """Whether this run's probes get a sandbox per side; says so where they do not."""
    try:
        isolated, warning = preflight.sandboxed(os.environ, sandbox.unavailable)
    except preflight.SetupError as err:
        raise UsageError(str(err)) from None
    if warning is not None:
        print(f"perfcheck: warning: {warning}", file=sys.stderr)
    return isolated


def check_walls(run: ReviewRun) -> None:
    """Each side's imports as its sandboxed probes will see them (preflight.check_sandboxed_imports),
    before any probe: a folder the walls hide is bad input, named."""
    for side in (run.base, run.head):
        walls = side_walls(run, side)
        if walls is None:
            continue
        flag = f"--{side.side}"
        env = probe_env(run.out_dir.resolve() / "probes" / "cache" / f"{side.side}-preflight")
        other = run.head if side is run.base else run.base
        try:
            preflight.check_sandboxed_imports(
                side.python, flag, side.tree, other.tree, walls.model_dump_json(), env, run.workloads
            )
        except preflight.SetupError as err:
            raise UsageError(str(err)) from None


def probe(request: ReviewRequest, forks: ForkServers | None = None) -> ProbeRun:
    """Run this shard's probes on both sides and write OUT/probes.json."""
    base = check_tree(request.base, "--base")
    head = check_tree(request.head, "--head")
    revision = head_revision(head, request.head_sha)
    for folder, flag, reading in (
        (request.record_base, "--record-base", False),
        (request.reuse_base, "--reuse-base", True),
    ):
        if folder is not None and (
            problem := store_problem(folder, flag, (base, head), request.out_dir, reading)
        ):
            raise UsageError(problem)
    if request.record_base is not None:
        request.record_base.mkdir(parents=True, exist_ok=True)  # before the walls that hide it are built
    chosen = select_workloads(request.config, request.workloads)
    probes = select_probes(request.probes)
    base_python = check_python(request.base_python, "--base-python")
    head_python = check_python(request.head_python, "--head-python")
    mine = shard_of(chosen, request.shard)
    try:
        same_interpreter = base_python == head_python == sys.executable
        preflight.check_workloads(mine, request.config.source, base, head, same_interpreter)
        preflight.check_compile_measure(
            request.config.compile.measure, request.config.source, request.device, valgrind() is not None
        )
        for python, flag in {base_python: "--base-python", head_python: "--head-python"}.items():
            preflight.check_interpreter(python, flag, request.device)
    except preflight.SetupError as err:
        raise UsageError(str(err)) from None
    isolated = sandboxed()
    request.out_dir.mkdir(parents=True, exist_ok=True)
    run = ReviewRun(
        base=SideSetup("base", base, base_python),
        head=SideSetup("head", head, head_python),
        config=request.config,
        device=request.device,
        workloads=mine,
        probes=probes,
        out_dir=request.out_dir,
        jobs=request.jobs or default_jobs(request.device),
        sandboxed=isolated,
        record_base=request.record_base,
        reuse_base=request.reuse_base,
        base_revision=git_revision(base),
    )
    if isolated and mine:
        check_walls(run)
    budget = Budget(request.config.review.time_budget_s)
    partial: list[ProbeResult] = []

    def probe_run(workloads: list[WorkloadReview], **stop: Any) -> ProbeRun:
        return ProbeRun(
            tool_version=__version__,
            shard=request.shard,
            workload_set=[w.name for w in chosen],
            base=SideInfo(tree=str(request.base), revision=git_revision(base)),
            head=SideInfo(tree=str(request.head), revision=revision),
            workloads=mark_changes(workloads, base, head),
            config_origin=request.config_origin,  # type: ignore[arg-type]
            program=request.program,
            rerun=request.rerun,
            # Read before the probes ran (config.read_settings): never the tree PR code has written to.
            head_config=request.head_config if request.config_origin == "head" else None,
            costs=budget.costs(),
            **stop,
        )

    try:
        workloads = (
            run_review(
                run,
                forks=forks,
                budget=budget,
                partial=partial,
            )
            if mine
            else []
        )
    except STOPS as stop:
        # What finished before the stop, kept: probes.json says it was stopped, and the review
        # made of it (``run``) is inconclusive at best. Where nothing finished, nothing is written.
        if not partial:
            raise
        stopped = probe_run(
            grouped(mine, partial), stopped=stop_name(stop), stopped_after_s=round(budget.spent(), 1)
        )
        write_whole(request.out_dir / "probes.json", stopped.model_dump_json(indent=1))
        stop.partial_run = stopped  # type: ignore[union-attr]
        stop.written = f"{request.out_dir / 'probes.json'} ({len(partial)} probe results)"  # type: ignore[union-attr]
        raise
    result = probe_run(workloads)
    write_whole(request.out_dir / "probes.json", result.model_dump_json(indent=1))
    return result


def config_of_runs(runs: list[tuple[str, ProbeRun]]) -> Config | None:
    """The PR's settings the probe job followed because base had none, or None. The report job
    runs on base's checkout, which has no copy. The text comes from the job that ran PR code, so
    it is parsed as a first adoption's (config.first_adoption_config): nothing in it can make
    this job import or write anything, accept a finding, or judge more loosely than the defaults."""
    texts = {r.head_config for _, r in runs if r.config_origin == "head" and r.head_config}
    if len(texts) != 1 or len(runs) != sum(1 for _, r in runs if r.config_origin == "head"):
        return None
    return first_adoption_config(texts.pop(), "the pull request's perfcheck.yml (in probes.json)")


def broken_workloads(review: Review) -> list[str]:
    """Workloads whose own import or build() fails on both sides in every probe, or that miss a
    module on both sides: the setup is wrong (bad input), not the PR. On one side only it is that
    side's finding."""
    out = []
    for wl in review.workloads:
        sides = [wl.base, wl.head]
        missing = both_sides_missing(wl)
        if missing is not None:
            out.append(missing)
        elif all(results and all(r.workload_failed for r in results) for results in sides):
            first = ((wl.head[0].message or "").strip().splitlines() or ["it fails"])[0]
            out.append(f"workload {wl.name!r} fails on base and head before any probe measured it: {first}")
    return out


class ShardError(ValueError):
    """The probe runs given to `report` are not one complete set of shards."""


def merge_shards(runs: list[tuple[str, ProbeRun]]) -> tuple[list[WorkloadReview], SideInfo, SideInfo]:
    """One run's workloads from a complete set of shards, in the set's order; ShardError otherwise."""
    if not runs:
        raise ShardError("no probe results given")
    first_src, first = runs[0]
    counts = {r.shard.count for _, r in runs}
    if len(counts) != 1:
        raise ShardError(f"shards of different sets: counts {sorted(counts)}")
    seen: dict[int, str] = {}
    for src, r in runs:
        if r.shard.index in seen:
            raise ShardError(f"shard {r.shard} given twice: {seen[r.shard.index]} and {src}")
        seen[r.shard.index] = src
        for key in ("workload_set", "base", "head"):
            if getattr(r, key) != getattr(first, key):
                raise ShardError(f"{src} and {first_src} come from different runs ({key} differs)")
    missing = sorted(set(range(1, first.shard.count + 1)) - set(seen))
    if missing:
        raise ShardError(
            f"shard(s) {', '.join(f'{i}/{first.shard.count}' for i in missing)} missing: "
            "a partial set would pass workloads that were never measured"
        )
    by_name: dict[str, WorkloadReview] = {}
    for src, r in runs:
        expected = {w for w in first.workload_set[r.shard.index - 1 :: r.shard.count]}
        got = [w.name for w in r.workloads]
        if set(got) != expected or len(got) != len(set(got)):
            raise ShardError(f"{src}: shard {r.shard} holds {sorted(got)}, expected {sorted(expected)}")
        by_name.update((w.name, w) for w in r.workloads)
    return [by_name[n] for n in first.workload_set], first.base, first.head


def result_keys(workloads: list[WorkloadReview]) -> list[tuple[str, str, str]]:
    """(workload, probe, side) of every result the workloads hold, repeats included."""
    return [
        (wl.name, r.probe, side) for wl in workloads for side in ("base", "head") for r in getattr(wl, side)
    ]


def stop_words(
    run: ProbeRun, workloads: list[WorkloadReview], expected: AbstractSet[tuple[str, str, str]]
) -> str:
    """Why a review of a run stopped before its end (Ctrl-C, SIGTERM: a job's time limit) decides
    nothing it did not measure: when it stopped, and what it had not made by then."""
    missing = len(expected - set(result_keys(workloads)))
    return f"the review was stopped by {run.stopped} after {run.stopped_after_s or 0:.0f} s: " + (
        f"{missing} of the {len(expected)} probe results asked for were not made"
        if missing
        else "every probe result asked for was made; what comes after them (compile latency) was not"
    )


def check_complete(
    workloads: list[WorkloadReview],
    expected: set[tuple[str, str, str]],
    may_add: AbstractSet[tuple[str, str, str]] = frozenset(),
) -> None:
    """ShardError unless the results hold exactly one of each (workload, probe, side) expected.

    The results come from the job that ran PR code; what was asked for comes from the trusted
    config (and plan). A missing probe would pass what was never measured, an extra or repeated
    one could stand in for the real result."""
    found = result_keys(workloads)
    repeated = sorted({k for k in found if found.count(k) > 1})
    # A follow-up probe (custom_ops, once export saw a custom op) may be there, on both sides or
    # neither: it adds findings and can stand in for nothing that was asked for.
    present = set(found)
    added = present & may_add
    halves = {(w, p) for w, p, _ in added}
    lopsided = sorted(k for k in may_add - added if (k[0], k[1]) in halves)
    missing = sorted(expected - present) + lopsided
    extra = sorted(present - expected - may_add)

    def show(keys: list[tuple[str, str, str]]) -> str:
        listed = ", ".join(f"{w}/{p}/{s}" for w, p, s in keys[:8])
        return listed + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")

    problems = [
        f"{label}: {show(keys)}"
        for label, keys in (("missing", missing), ("not asked for", extra), ("given twice", repeated))
        if keys
    ]
    if problems:
        raise ShardError("the probe results are not the set the config asks for — " + "; ".join(problems))


def follow_up_results(
    config: Config, workloads: tuple[str, ...] = (), probes: tuple[str, ...] = ()
) -> set[tuple[str, str, str]]:
    """(workload, probe, side) a run may add to what was asked for, once earlier results call for them."""
    chosen = select_workloads(config, workloads)
    asked = planned_probes(chosen, select_probes(probes))
    return {
        (wl.name, p, side)
        for wl in chosen
        for p in follow_up_probes(config, wl, {q for w, q in asked if w.name == wl.name}, probes)
        for side in ("base", "head")
    }


def expected_results(
    config: Config, workloads: tuple[str, ...] = (), probes: tuple[str, ...] = ()
) -> set[tuple[str, str, str]]:
    """(workload, probe, side) a run of the trusted config asks for (``workloads``/``probes``: as
    planned, e.g. by a `/perfcheck run` command; empty means all of them, as in the config)."""
    chosen = select_workloads(config, workloads)
    return {
        (wl.name, p, side)
        for wl, p in planned_probes(chosen, select_probes(probes))
        for side in ("base", "head")
    }


def _bisected(runs: list[tuple[str, ProbeRun]], review: Review) -> BisectDoc | None:
    """The shards' bisections as one, reduced to what this review found (core.bisect.kept)."""
    try:
        merged = bisect_search.merge([r.bisect for _, r in runs if r.bisect is not None])
        return None if merged is None else bisect_search.kept(merged, review.findings, review.head.revision)
    except ValueError as err:
        raise ShardError(str(err)) from None


def report(
    runs: list[tuple[str, ProbeRun]],
    config: Config,
    out_dir: Path,
    template_dir: Path | None = None,
    expected: set[tuple[str, str, str]] | None = None,
    config_origin: str | None = None,
    may_add: set[tuple[str, str, str]] | None = None,
    program: str | None = None,
) -> tuple[Review, str]:
    """``program``: how the review's commands start perfcheck, where the caller knows it (the
    process that ran the probes itself); else as ``rerun_of`` reads it from the shards."""
    workloads, base, head = merge_shards(runs)
    expected = expected if expected is not None else expected_results(config)
    # A run stopped before its end is what it measured before: its findings stand, and it passes
    # nothing it did not measure (the job that ran PR code says it stopped: never a way to a pass).
    stopped = next((r for _, r in runs if r.stopped is not None), None)
    if stopped is None:
        check_complete(workloads, expected, may_add if may_add is not None else follow_up_results(config))
    undecided = [stop_words(stopped, workloads, expected)] if stopped is not None else []
    review = acks.apply(assemble(workloads, config, base, head, undecided), acks.from_config(config.acks))
    costs = [r.costs for _, r in sorted(runs, key=lambda x: x[1].shard.index) if r.costs is not None]
    review = review.model_copy(update={"bisect": _bisected(runs, review), "costs": costs})
    # The folder as given: the review's commands name it the way its user typed it.
    read_program, rerun = rerun_of(runs)
    program = program or read_program
    review = review.model_copy(
        update={
            "summary": headline(review),
            "out_dir": str(out_dir),
            "config_origin": config_origin,
            "program": program,
            "rerun": rerun,
            # This side's own environment, not the shards' (written where PR code ran).
            "rerun_env": rerun_environment(),
        }
    )
    # The A/A runs recorded before this review: the gate's measured error rates on its runner.
    noise = history.noise_footer(Path(config.history.path), review, _warn) if config.history.enabled else []
    comment = render_comment(review, template_dir, matrix=merged(config.matrix), noise=noise)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The review is on disk before anything else can fail (a busy history store, say).
    write_whole(out_dir / "result.json", review.model_dump_json(indent=1))
    write_whole(out_dir / "comment.md", comment)
    heatmap, aa_runs = None, None
    if config.history.enabled and stopped is None:  # a stopped review's figures are no trend
        with contextlib.closing(history.open_store(Path(config.history.path))) as store:
            history.record(store, review, repository=None, pr=None)
            heatmap, aa_runs = history.break_heatmap(store, 50), history.aa_runs(store)
    html = render_html(review, heatmap, template_dir, merged(config.matrix), aa_runs)
    (out_dir / "report.html").write_text(html)
    return review, comment


def _warn(line: str) -> None:
    print(f"perfcheck: warning: {line}", file=sys.stderr)


RERUN_OPTIONS = ("--config", "--device", "--base-python", "--head-python")


def rerun_environment() -> dict[str, str]:
    """The variables of this process's environment that decide what the probes (which inherit
    it) import, as a rerun of the review sets them: PYTHONPATH, say. Read here, on the side that
    prints the commands, never from what the job that ran PR code wrote (probes.json)."""
    from pydantic import TypeAdapter, ValidationError

    from perfcheck.schema import RERUN_ENV_NAMES, RerunArg

    shown = TypeAdapter(RerunArg)
    out: dict[str, str] = {}
    for name in RERUN_ENV_NAMES:
        value = os.environ.get(name)
        try:
            out |= {name: shown.validate_python(value)} if value else {}
        except ValidationError:  # no line a command can show (a newline, a backquote): left out
            continue
    return out


def rerun_of(runs: list[tuple[str, ProbeRun]]) -> tuple[str, list[str]]:
    """How the review's commands run perfcheck again, from the first shard's probes.json: the
    program only as a name on PATH or a module run (a path from the job that ran PR code could
    point anywhere), and only the options a rerun repeats, as pairs."""
    if not runs:
        return "perfcheck", []
    first = runs[0][1]
    program = (
        first.program
        if first.program in ("perfcheck", "python -m perfcheck", "python3 -m perfcheck")
        else "perfcheck"
    )
    pairs = zip(first.rerun[::2], first.rerun[1::2], strict=False)
    return program, [t for flag, value in pairs if flag in RERUN_OPTIONS for t in (flag, value)]


def run(request: ReviewRequest, forks: ForkServers | None = None) -> tuple[Review, str]:
    """Probe and report; ``forks``: fork servers kept across several reviews
    (perfcheck/runner/process/forkserver.py)."""
    scope = (request.config, request.workloads, request.probes)

    def reported(probed: ProbeRun) -> tuple[Review, str]:
        return report(
            [("probes.json", probed)],
            request.config,
            request.out_dir,
            request.template_dir,
            expected_results(*scope),
            request.config_origin,
            follow_up_results(*scope),
            program=request.program,
        )

    try:
        probed = probe(request, forks)
    except STOPS as stop:
        stopped: ProbeRun | None = getattr(stop, "partial_run", None)
        if stopped is not None:
            review, _ = reported(stopped)
            stop.written = f"{request.out_dir / 'result.json'} ({review.verdict})"  # type: ignore[union-attr]
        raise
    return reported(probed)
