"""`perfcheck bisect --repo DIR --good REV --bad REV`: the first commit of each finding.

Prints one row per finding (the first bad commit, the last good one) and writes OUT/bisect.json
(`perfcheck schema bisect`), OUT/bisect.md (the section a PR comment carries) and the good → bad
review in OUT/review/. Exit codes: 0 every finding found its commit (or there was nothing to
bisect), 3 skipped commits leave some finding between several commits, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from perfcheck.bisect_schema import BisectDoc

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_AMBIGUOUS = 3


def render_table(doc: BisectDoc) -> str:
    """The terminal's table: plain text, one finding per block."""
    if not doc.findings:
        span = f"{doc.good.sha[:10]} → {doc.bad.sha[:10]}"
        return f"nothing to bisect: the review of {span} has no finding that bisects\n"
    lines = [f"{doc.good.sha[:10]} → {doc.bad.sha[:10]}: {doc.commits} commits, {doc.probe_runs} probe runs"]
    for f in doc.findings:
        lines.append("")
        lines.append(f"{f.label} · {f.workload} ({f.category}, {f.probe_runs} probe runs)")
        if f.outcome == "found" and f.first_bad is not None:
            lines.append(
                f"  first bad  {f.first_bad.sha[:10]}  {f.first_bad.subject}  ({f.first_bad.author})"
            )
        elif f.outcome == "ambiguous":
            lines.append("  first bad  one of " + ", ".join(c.sha[:10] for c in f.candidates))
        elif f.outcome == "present_at_good" and f.first_bad is not None:
            lines.append(f"  at good    {f.first_bad.sha[:10]}  {f.note}")
        elif f.outcome == "unfinished" and f.first_bad is not None:
            lines.append(f"  first bad  at or before {f.first_bad.sha[:10]}: {f.note}")
        elif f.note:
            lines.append(f"  {f.note}")
        if f.last_good is not None:
            lines.append(f"  last good  {f.last_good.sha[:10]}  {f.last_good.subject}")
    for s in doc.skipped:
        lines.append(f"\nskipped {s.sha[:10]} ({s.workload}): {s.why}")
    return "\n".join(lines) + "\n"


def _cmd_bisect(args: argparse.Namespace) -> int:
    from perfcheck.bisect import BisectRequest, bisect
    from perfcheck.config import ConfigError, load_config
    from perfcheck.core.bisect import markdown
    from perfcheck.review import UsageError

    try:
        if not args.repo.is_dir():
            raise UsageError(f"--repo {args.repo}: not a folder")
        config = load_config(args.config, None) if args.config else None
        request = BisectRequest(
            repo=args.repo,
            good=args.good,
            bad=args.bad,
            config=config,
            out_dir=args.out,
            workloads=args.workloads,
            probes=args.probes,
            timing=args.timing,
            device=args.device,
        )
        doc, _ = bisect(request, lambda line: print(f"perfcheck bisect: {line}", file=sys.stderr, flush=True))
    except (ConfigError, UsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bisect.json").write_text(doc.model_dump_json(indent=1))
    (args.out / "bisect.md").write_text(markdown(doc), encoding="utf-8")
    print(render_table(doc), end="")
    print(f"perfcheck bisect: wrote {args.out / 'bisect.json'} and bisect.md", file=sys.stderr)
    return EXIT_AMBIGUOUS if any(f.outcome == "ambiguous" for f in doc.findings) else EXIT_OK


def add_bisect_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    names: Callable[[str], tuple[str, ...]],
) -> None:
    """Register `bisect` on the `perfcheck` command's subparsers; ``names`` parses a comma list."""
    p = subparsers.add_parser(
        "bisect",
        help="find the first commit of a range that introduced each finding",
        description="Review GOOD → BAD, then binary-search the first-parent commits between for the first "
        "one that has each of its findings (graph breaks, recompiles, export changes, denied ops, layout and "
        "collective changes; timing only with --timing). Commits are written out with git archive, never "
        "checked out; only the probe that found a finding runs at a commit, and no commit is probed twice. "
        "A commit whose workload does not build is skipped. Writes OUT/bisect.json, OUT/bisect.md and the "
        "review in OUT/review/.",
        epilog="Exit codes: 0 each finding's first commit found (or nothing to bisect), 2 bad input (no "
        "such commit, GOOD not an ancestor of BAD, a bad config), 3 skipped commits leave a finding between "
        "several.",
    )
    p.add_argument("--repo", type=Path, default=Path("."), help="the git repository (default: here)")
    p.add_argument("--good", required=True, help="a commit without the findings (the PR's base)")
    p.add_argument("--bad", required=True, help="a later commit with them (the PR's head)")
    p.add_argument("--config", type=Path, help="settings file (default: perfcheck.yml at GOOD, else at BAD)")
    p.add_argument(
        "--workloads", type=names, default=(), help="comma-separated workload names (default: all)"
    )
    p.add_argument(
        "--probes",
        type=names,
        default=(),
        help="comma-separated probes (default: the default ones but timing)",
    )
    p.add_argument(
        "--timing",
        action="store_true",
        help="add the timing probe and search its findings too: each step is the gate's paired runs of "
        "GOOD against the commit (slow); a step it cannot decide is skipped, saying why",
    )
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default %(default)s)"
    )
    p.add_argument(
        "--out", type=Path, default=Path("perfcheck-bisect"), help="output folder (default %(default)s)"
    )
    p.set_defaults(func=_cmd_bisect)
