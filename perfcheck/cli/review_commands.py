"""`perfcheck review`, `probe` and `report`: run the probes on two trees (all of it, or the part
that runs PR code into probes.json shards), and compare shards into the review. Exit codes: 0
pass, 1 fail, 2 bad input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from perfcheck.cli.argtypes import comma_separated, names, positive

EXIT_BAD_INPUT = 2


def _request(args: argparse.Namespace) -> object:
    from perfcheck.config import read_settings
    from perfcheck.review import ReviewRequest, parse_shard

    # Before any probe runs: a first adoption's perfcheck.yml is the PR's as committed.
    # Outside Actions a config being written (not yet committed) is the one tried.
    in_actions = os.environ.get("GITHUB_ACTIONS") == "true"
    settings = read_settings(args.config, args.base, args.head, committed_only=in_actions)
    config = settings.config
    if args.no_compile_latency:
        config = config.model_copy(update={"compile": config.compile.model_copy(update={"measure": "off"})})
    return ReviewRequest(
        base=args.base,
        head=args.head,
        config=config,
        program=_program(),
        rerun=_rerun(args),
        config_origin=settings.origin,
        head_config=settings.head_text,
        out_dir=args.out,
        device=args.device,
        workloads=args.workloads,
        probes=args.probes,
        base_python=args.base_python,
        head_python=args.head_python,
        template_dir=getattr(args, "templates", None),
        jobs=args.jobs,
        shard=parse_shard(getattr(args, "shard", None) or "1/1"),
        head_sha=getattr(args, "head_sha", None),
        record_base=args.record_base,
        reuse_base=args.reuse_base,
    )


def _program() -> str:
    """How this process was started, as the review's commands start perfcheck again: ``perfcheck``
    where that name on PATH is this program, ``python -m perfcheck`` for a module run, else the
    program's path as typed (``.venv/bin/perfcheck`` after ``make demo``, whose venv is not on
    PATH)."""
    started = sys.argv[0]
    if Path(started).name == "__main__.py":
        return "python -m perfcheck"
    on_path = shutil.which("perfcheck")
    if on_path and Path(on_path).resolve() == Path(started).resolve():
        return "perfcheck"
    # A path under the working folder is shown relative to it, as it would be typed there.
    path = Path(started)
    shown = os.path.relpath(path) if not path.is_absolute() or path.is_relative_to(Path.cwd()) else started
    plain = shown.endswith("perfcheck") and all(c.isalnum() or c in "._/-" for c in shown)
    return shown if plain else "perfcheck"


def _rerun(args: argparse.Namespace) -> list[str]:
    """The options a rerun of this review repeats: its settings file, device and interpreters."""
    out: list[str] = []
    if args.config is not None:
        out += ["--config", str(args.config)]
    if args.device != "cpu":
        out += ["--device", args.device]
    for flag, value in (("--base-python", args.base_python), ("--head-python", args.head_python)):
        if value:
            out += [flag, value]
    return out


def _to_actions(review: Any, out: Path, templates: Path | None, config: Any) -> None:
    """Inside Actions: step outputs, and the review in the job summary."""
    from perfcheck.bot.actions_io import write_outputs
    from perfcheck.bot.settings import GitHubSettings
    from perfcheck.core.matrix import merged
    from perfcheck.core.reports import render_job_summary

    write_outputs(
        {
            "verdict": review.verdict,
            "result": out / "result.json",
            "comment": out / "comment.md",
            "report": out / "report.html",
        }
    )
    summary = GitHubSettings.from_environ().step_summary  # the one place the environment is read
    if summary is not None:
        with summary.open("a", encoding="utf-8") as f:
            f.write(render_job_summary(review, templates, matrix=merged(config.matrix)) + "\n")


def _exit_code(review: Any, hint: str = "") -> int:
    """The verdict's exit code; 2 when a workload's own build fails on both sides (bad setup)."""
    from perfcheck.review import EXIT_CODES, broken_workloads

    broken = broken_workloads(review)
    for why in broken:
        print(f"perfcheck: {why}{hint}", file=sys.stderr)
    return EXIT_BAD_INPUT if broken else EXIT_CODES[review.verdict]


def _cmd_review(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.review import UsageError, run

    try:
        request = _request(args)
        review, comment = run(request)  # type: ignore[arg-type]
    except (ConfigError, UsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(comment)
    _to_actions(review, args.out, args.templates, request.config)  # type: ignore[attr-defined]
    print(
        f"perfcheck: {review.verdict} — wrote {args.out / 'result.json'}, {args.out / 'comment.md'} and "
        f"{args.out / 'report.html'}",
        file=sys.stderr,
    )
    return _exit_code(review, f" (see {args.out / 'probes'} for each probe's log)")


def _cmd_probe(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.review import UsageError, probe

    try:
        request = _request(args)
        if args.base_sha is not None and not re.fullmatch(r"[0-9a-fA-F]{7,40}", args.base_sha):
            raise UsageError(f"--base-sha: expected 7 to 40 hex digits, got {args.base_sha!r}")
        probed = probe(request)  # type: ignore[arg-type]
    except (ConfigError, UsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    shown = ", ".join(w.name for w in probed.workloads) or "no workloads (more shards than workloads)"
    print(f"perfcheck: shard {probed.shard}: {shown} — wrote {args.out / 'probes.json'}", file=sys.stderr)
    if args.bisect != "never":
        _bisect_shard(args, request, probed)
    from perfcheck.bot.actions_io import write_outputs

    write_outputs({"probes_file": args.out / "probes.json"})
    return 0


def _bisect_shard(args: argparse.Namespace, request: Any, probed: Any) -> None:
    """probe --bisect: search this shard's findings along the head's commits, and add where they
    came from to probes.json (and OUT/bisect.json, bisect.md). It never fails the step: a search
    that cannot run says why and leaves the probes as they were."""
    from perfcheck.bisect import bisect_probed
    from perfcheck.cli.bisect_command import render_table
    from perfcheck.core.bisect import markdown

    def say(line: str) -> None:
        print(f"perfcheck bisect: {line}", file=sys.stderr, flush=True)

    base_sha = args.base_sha or probed.base.revision
    if base_sha is None:
        say("not bisected: --base is no git checkout and no --base-sha was given")
        return
    doc = bisect_probed(probed, request, base_sha, args.bisect, say)
    if doc is None:
        return
    (args.out / "probes.json").write_text(probed.model_copy(update={"bisect": doc}).model_dump_json(indent=1))
    (args.out / "bisect.json").write_text(doc.model_dump_json(indent=1))
    (args.out / "bisect.md").write_text(markdown(doc), encoding="utf-8")
    print(render_table(doc), end="", file=sys.stderr)


def shard_files(folder: Path) -> list[Path]:
    """Each shard's probes.json under ``folder``: the outermost ones. A probes.json below the folder
    of another (under its ``probes/``, where that shard's sandboxed probes wrote their files) is
    not a shard of the review but a file PR code may have planted: left out, and said."""
    found = sorted(folder.rglob("probes.json"))
    shards = [f for f in found if not any(o.parent in f.parents[1:] for o in found if o is not f)]
    nested = [f for f in found if f not in shards]
    if nested:
        print(
            f"perfcheck: warning: left out {len(nested)} probes.json inside a shard's own folder "
            f"(not a shard; its probes' files): {', '.join(map(str, nested[:3]))}",
            file=sys.stderr,
        )
    return shards


def _planned_scope(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The workloads and probes the run was asked for: --plan-file's plan, else --workloads/--probes."""
    from perfcheck.bot.plan import Plan
    from perfcheck.schema import ContractError, load_model

    if args.plan_file is None:
        return comma_separated(args.workloads), comma_separated(args.probes_asked)
    try:
        planned = load_model(Plan, args.plan_file.read_bytes(), str(args.plan_file))
    except OSError as err:
        raise ContractError(f"{args.plan_file}: cannot read it ({err.strerror})") from None
    return tuple(planned.workloads), tuple(planned.probes)


def _cmd_report(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, review_config
    from perfcheck.core.history import HistoryError
    from perfcheck.review import (
        ShardError,
        UsageError,
        config_of_runs,
        expected_results,
        follow_up_results,
        report,
    )
    from perfcheck.schema import ContractError, load_probe_run

    try:
        config, origin = review_config(args.config, Path.cwd(), None)
        # A folder stands for every shard's probes.json under it: one download folder of all shards'
        # artifacts. Never one inside a shard's own folder (its probes' files, which PR code wrote).
        files = [f for p in args.probes for f in (shard_files(p) if p.is_dir() else [p])]
        if not files:
            raise ContractError(f"no probes.json under {', '.join(map(str, args.probes))}")
        runs = [(str(f), load_probe_run(f)) for f in files]
        if origin == "built-in" and (followed := config_of_runs(runs)) is not None:
            config, origin = followed, "head"
        scope = _planned_scope(args)
        expected, may_add = expected_results(config, *scope), follow_up_results(config, *scope)
        review, comment = report(runs, config, args.out, args.templates, expected, origin, may_add)
    except (ConfigError, ContractError, ShardError, HistoryError, UsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(comment)
    _to_actions(review, args.out, args.templates, config)
    print(
        f"perfcheck: {review.verdict} — merged {len(runs)} shard(s); wrote {args.out / 'result.json'}, "
        f"{args.out / 'comment.md'} and {args.out / 'report.html'}",
        file=sys.stderr,
    )
    return _exit_code(review)


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    from perfcheck.config import default_probes, probe_names

    parser.add_argument(
        "--base", type=Path, required=True, help="the base tree (e.g. the merge base checkout)"
    )
    parser.add_argument("--head", type=Path, required=True, help="the head tree (the PR's checkout)")
    parser.add_argument(
        "--config",
        type=Path,
        help="settings file (default: perfcheck.yml or "
        ".github/perfcheck.yml in the base tree, so a PR cannot loosen its own gate)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("perfcheck-out"),
        help="output folder (default %(default)s): review writes result.json, comment.md and "
        "report.html there, probe writes probes.json; both keep the probes' logs under probes/",
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default %(default)s)"
    )
    parser.add_argument(
        "--workloads", type=names, default=(), help="comma-separated workload names (default: all)"
    )
    parser.add_argument(
        "--probes",
        type=names,
        default=(),
        help=f"comma-separated, of {', '.join(probe_names())} and the config's plugin probes "
        f"(default: each workload's `probes`, else {', '.join(default_probes())}, and amp "
        "for a workload under autocast)",
    )
    parser.add_argument(
        "--no-compile-latency",
        action="store_true",
        help="make no cache-cold compile-latency samples (compile.measure: off for this run): the "
        "review's verify commands pass it unless they verify compile latency",
    )
    parser.add_argument("--base-python", help="python interpreter for the base side (default: this one)")
    parser.add_argument("--head-python", help="python interpreter for the head side (default: this one)")
    parser.add_argument(
        "--record-base",
        type=Path,
        metavar="DIR",
        help="record base's structural results (compile, export, amp, custom_ops) in DIR, keyed by "
        "the content of the files each workload read, the config and the environment, for later "
        "reviews to reuse: only in a trusted run, such as the default branch's (docs/security.md)",
    )
    parser.add_argument(
        "--reuse-base",
        type=Path,
        metavar="DIR",
        help="take base's structural results from records in DIR (--record-base) where this base's "
        "files, config and environment match theirs, instead of probing base again; anything "
        "else is probed (the log says why). Timing and every measure stay paired",
    )
    parser.add_argument(
        "--jobs",
        type=positive,
        default=None,
        help="per-side probes to run at once (default: 1 on a CPU, half the cores up to 8 with "
        "--device cuda; timing always runs alone)",
    )


def add_review_parser(sub: Any) -> None:
    review = sub.add_parser(
        "review",
        help="probe a base and a head tree side by side and write the review",
        description="Run the probes on --base and --head, compare them and print the review comment. "
        "Writes OUT/result.json (the contract, see `perfcheck schema`) and OUT/comment.md. "
        "The same as `perfcheck probe` followed by `perfcheck report`.",
        epilog="Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive.",
    )
    _probe_arguments(review)
    review.add_argument(
        "--templates", type=Path, help="folder with your own comment.md.j2 (falls back to the built-in)"
    )
    review.set_defaults(func=_cmd_review)


def add_probe_parser(sub: Any) -> None:
    probe = sub.add_parser(
        "probe",
        help="run the probes only (the part that runs PR code) and write probes.json",
        description="Run this shard's probes on --base and --head and write OUT/probes.json, raw "
        "measurements for `perfcheck report`. On a fleet, give each runner --shard I/N.",
        epilog="Exit codes: 0 probed (findings are decided by `report`; a bisection that cannot run "
        "says why and changes nothing), 2 bad input.",
    )
    _probe_arguments(probe)
    probe.add_argument(
        "--shard", default="1/1", metavar="I/N", help="run the I-th of N shares of the workloads"
    )
    probe.add_argument(
        "--head-sha",
        metavar="SHA",
        help="the commit the head tree is (recorded when it is no git checkout; checked when it is)",
    )
    probe.add_argument(
        "--bisect",
        choices=("auto", "always", "never"),
        default="never",
        help="afterwards, search the head's first-parent commits since its merge base with --base-sha "
        "for the first one with each finding (`perfcheck bisect`'s search; the head tree must be a "
        "checkout with its history): auto when a finding fails the check, bisect.auto is on and the "
        "range has more than one commit; always for any finding that can be searched for "
        "(default %(default)s)",
    )
    probe.add_argument(
        "--base-sha",
        metavar="SHA",
        help="with --bisect, the base commit (default: the --base checkout's)",
    )
    probe.set_defaults(func=_cmd_probe)


def add_report_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="merge probes.json shards, compare, and write the review",
        description="Validate probe results as untrusted data, merge the shards (refusing a set with a "
        "shard missing or repeated), compare base and head, and write OUT/result.json and OUT/comment.md. "
        "Needs no torch.",
        epilog="Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive.",
    )
    report.add_argument("probes", type=Path, nargs="+", help="probes.json files, or folders holding one")
    report.add_argument(
        "--out",
        type=Path,
        default=Path("perfcheck-out"),
        help="output folder: result.json, comment.md and report.html (default %(default)s)",
    )
    report.add_argument("--config", type=Path, help="settings file (default: perfcheck.yml here)")
    report.add_argument(
        "--plan-file",
        type=Path,
        help="plan.json from `perfcheck plan`: the workloads and probes the run was asked for",
    )
    report.add_argument(
        "--workloads",
        default="",
        help="without --plan-file: the workloads probed (default: all of the config's)",
    )
    report.add_argument(
        "--probes",
        dest="probes_asked",
        default="",
        metavar="PROBES",
        help="without --plan-file: the probes asked for (default: each workload's)",
    )
    report.add_argument("--templates", type=Path, help="folder with your own comment.md.j2")
    report.set_defaults(func=_cmd_report)
