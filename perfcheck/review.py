"""`perfcheck review`: probe base and head, compare, and write result.json and comment.md."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from perfcheck import __version__
from perfcheck.bot.compare import compare
from perfcheck.bot.render import headline, render_comment
from perfcheck.config import PROBE_NAMES, Config, WorkloadConfig
from perfcheck.runner.orchestrate import ReviewRun, SideSetup, run_review
from perfcheck.schema import Review, SideInfo, WorkloadReview

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
    jobs: int = 1


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
    unknown = [n for n in names if n not in PROBE_NAMES]
    if unknown:
        raise UsageError(f"--probes: unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBE_NAMES)}")
    return names or PROBE_NAMES


def check_tree(path: Path, flag: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{flag} {path}: not a directory")
    return path.resolve()


def assemble(request: ReviewRequest, workloads: list[WorkloadReview]) -> Review:
    comparison = compare(workloads, request.config)
    draft = Review(
        tool_version=__version__,
        verdict=comparison.verdict,
        summary="",
        base=SideInfo(tree=str(request.base), revision=git_revision(request.base)),
        head=SideInfo(tree=str(request.head), revision=git_revision(request.head)),
        workloads=[
            wl.model_copy(update={"timing_change": comparison.timing_changes.get(wl.name)})
            for wl in workloads
        ],
        findings=comparison.findings,
        inconclusive=comparison.inconclusive,
    )
    return draft.model_copy(update={"summary": headline(draft)})


def run(request: ReviewRequest) -> tuple[Review, str]:
    base = check_tree(request.base, "--base")
    head = check_tree(request.head, "--head")
    chosen = select_workloads(request.config, request.workloads)
    probes = select_probes(request.probes)
    request.out_dir.mkdir(parents=True, exist_ok=True)
    workloads = run_review(
        ReviewRun(
            base=SideSetup("base", base, request.base_python or sys.executable),
            head=SideSetup("head", head, request.head_python or sys.executable),
            config=request.config,
            device=request.device,
            workloads=chosen,
            probes=probes,
            out_dir=request.out_dir,
            jobs=request.jobs,
        )
    )
    review = assemble(request, workloads)
    comment = render_comment(review, request.template_dir)
    (request.out_dir / "result.json").write_text(review.model_dump_json(indent=1))
    (request.out_dir / "comment.md").write_text(comment)
    return review, comment
