"""The `perfcheck` command line. Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from perfcheck import __version__
from perfcheck.argtypes import positive
from perfcheck.stopping import STOPS, Terminated, stop_name

EXIT_BAD_INPUT = 2
# Commands that run probes: Ctrl-C and SIGTERM end every process of theirs and say so in a line.
STOPPABLE = frozenset({"_cmd_review", "_cmd_probe", "_cmd_bisect", "_cmd_sweep"})
EXIT_GITHUB = 1  # publish/plan: GitHub refused or could not be reached, after retries

# Every subcommand, in the order `perfcheck --help` lists them, with the line it shows there.
# Only the command being run has its parser built in full, and only its module imported (the
# review's needs the config and every probe; bisect's, sweep's and history's their own code):
# the others are listed by name and this line, all that `perfcheck --help` shows of them. The
# lines of the commands other modules define are theirs, copied; tests/test_startup.py holds
# each to its module's.
COMMANDS: dict[str, str] = {
    "review": "probe a base and a head tree side by side and write the review",
    "probe": "run the probes only (the part that runs PR code) and write probes.json",
    "report": "merge probes.json shards, compare, and write the review",
    "schema": "print the JSON Schema of result.json, probes.json or a --json output",
    "plan": "decide from a GitHub event whether and what to review",
    "publish": "post a review: the sticky PR comment and the check run with annotations",
    "serve": "run as a GitHub App: receive webhooks and answer them",
    "render": "render the comment from a result.json",
    "trace": "summarise or diff PyTorch profiler (Kineto) traces",
    "history": "trends of a metric over recorded reviews; `history record` stores a result",
    "html": "render a result.json as one self-contained HTML report",
    "sweep": "time one workload across compile settings and show the Pareto front",
    "bisect": "find the first commit of a range that introduced each finding",
}


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _names(value: str) -> tuple[str, ...]:
    """A --workloads/--probes value: at least one name. An empty one must not mean "all"."""
    names = _csv(value)
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {value!r}")
    return names


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
    names = ", ".join(w.name for w in probed.workloads) or "no workloads (more shards than workloads)"
    print(f"perfcheck: shard {probed.shard}: {names} — wrote {args.out / 'probes.json'}", file=sys.stderr)
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
    from perfcheck.bisect_cli import render_table
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
        return _csv(args.workloads), _csv(args.probes_asked)
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


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from perfcheck.schema import json_schema

    print(json.dumps(json_schema(args.document), indent=2))
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, load_config
    from perfcheck.core.matrix import merged
    from perfcheck.core.render import render_comment
    from perfcheck.schema import ContractError, load_review

    try:
        config = load_config(args.config, Path.cwd())  # first: its plugins' categories are known then
        review = load_review(args.result)
    except (ConfigError, ContractError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(render_comment(review, args.templates, matrix=merged(config.matrix)))
    return 0


def _github_port(settings: object, repository: str) -> Any:
    from perfcheck.bot.gateway import GitHubGateway
    from perfcheck.bot.retry import RetryPolicy
    from perfcheck.bot.settings import GitHubSettings, token_client

    assert isinstance(settings, GitHubSettings)
    return GitHubGateway(token_client(settings), repository, policy=RetryPolicy(attempts=settings.attempts))


def _cmd_plan(args: argparse.Namespace) -> int:
    from perfcheck.bot import plan_flow
    from perfcheck.bot.settings import GitHubSettings

    env = GitHubSettings.from_environ()
    try:
        settings = plan_flow.settings_from(
            args.event_name, args.event_path, args.config, args.respond, args.out, env, Path.cwd()
        )
    except plan_flow.PlanInputError as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    port = _github_port(env, settings.repository) if env.token else None
    return plan_flow.run(settings, port, _say, print)


def _cmd_publish(args: argparse.Namespace) -> int:
    from perfcheck.bot import publish_flow
    from perfcheck.bot.gateway import DryRunGitHub
    from perfcheck.bot.settings import GitHubSettings

    env = GitHubSettings.from_environ()
    flags = publish_flow.PublishFlags(
        report=args.report,
        sha=args.sha,
        plan_file=args.plan_file,
        pr=args.pr,
        repo=args.repo,
        config=args.config,
        templates=args.templates,
        status=args.status,
        summary=args.summary,
        planned_by=args.planned_by,
        no_comment=args.no_comment,
        dry_run=args.dry_run,
    )
    try:
        settings = publish_flow.settings_from(flags, env, Path.cwd())
    except publish_flow.PublishInputError as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    repo = settings.repository
    port = DryRunGitHub(repo) if settings.dry_run else _github_port(env, repo)
    return publish_flow.publish(settings, port, _say, print)


def _say(line: str) -> None:
    print(f"perfcheck: {line}", file=sys.stderr)


def _cmd_serve(args: argparse.Namespace) -> int:
    from perfcheck.bot.app import AppSettings, SettingsError, handle_delivery, installation_port
    from perfcheck.bot.server import bounds_notice, make_server
    from perfcheck.bot.webhook import WebhookApp, Worker
    from perfcheck.config import ConfigError, load_config

    try:
        settings = AppSettings.from_environ()
        config = load_config(args.config, None)
    except (SettingsError, ConfigError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def port_for(repository: str, installation: int) -> object:
        return installation_port(settings, repository, installation)

    worker = Worker(lambda d: handle_delivery(d, config, port_for)).start()  # type: ignore[arg-type]
    app = WebhookApp(settings.webhook_secret, worker)
    try:
        server = make_server(app, args.host, args.port)
    except OSError as err:
        print(f"perfcheck serve: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        worker.stop()
        return EXIT_BAD_INPUT
    print(f"perfcheck serve: listening on http://{args.host}:{server.effective_port}/", file=sys.stderr)
    print(f"perfcheck serve: {bounds_notice()}", file=sys.stderr)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
    finally:
        server.close()
        worker.stop()
    return 0


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
        "--workloads", type=_names, default=(), help="comma-separated workload names (default: all)"
    )
    parser.add_argument(
        "--probes",
        type=_names,
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
        "--jobs",
        type=positive,
        default=None,
        help="per-side probes to run at once (default: 1 on a CPU, half the cores up to 8 with "
        "--device cuda; timing always runs alone)",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line: every subcommand's parser, or, given ``command``, that one's alone (none
    for a string that names no command). The rest are listed by name and their line of
    ``COMMANDS``, all that ``perfcheck --help`` and argparse's errors show of them."""
    if command in COMMANDS and command != "trace":
        # Every command but trace reads findings (a result, an ack, a slash command, the
        # root-cause matrix), whose vocabulary the probe registry completes as it loads (the
        # fsdp probe's categories and matrix entries): load it first, as building the review's
        # parser for every command used to.
        from perfcheck.core import probes  # noqa: F401
    parser = argparse.ArgumentParser(
        prog="perfcheck",
        description="Performance and IR review of changes to PyTorch compiler paths.",
        epilog="Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive.",
    )
    parser.add_argument("--version", action="version", version=f"perfcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, add in _PARSERS.items():
        if command is None or command == name:
            add(sub)
        else:
            sub.add_parser(name, help=COMMANDS[name])
    return parser


def _command_of(argv: Sequence[str]) -> str:
    """The subcommand an argument list runs: its first argument that is no option (the top level
    takes none with a value)."""
    return next((a for a in argv if not a.startswith("-")), "")


def _add_trace_parser(sub: Any) -> None:
    from perfcheck.trace_cli import add_trace_parser

    add_trace_parser(sub)


def _add_history_parser(sub: Any) -> None:
    from perfcheck.history_cli import add_history_parser

    add_history_parser(sub)


def _add_html_parser(sub: Any) -> None:
    from perfcheck.report_cli import add_html_parser

    add_html_parser(sub)


def _add_sweep_parser(sub: Any) -> None:
    from perfcheck.sweep_cli import add_sweep_parser

    add_sweep_parser(sub)


def _add_bisect_parser(sub: Any) -> None:
    from perfcheck.bisect_cli import add_bisect_parser

    add_bisect_parser(sub, _names)


def _add_review_parser(sub: Any) -> None:
    review = sub.add_parser(
        "review",
        help=COMMANDS["review"],
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


def _add_probe_parser(sub: Any) -> None:
    probe = sub.add_parser(
        "probe",
        help=COMMANDS["probe"],
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


def _add_report_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help=COMMANDS["report"],
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


def _add_schema_parser(sub: Any) -> None:
    schema = sub.add_parser(
        "schema",
        help=COMMANDS["schema"],
        description="Print the JSON Schema of one of perfcheck's documents: the review result "
        "(result.json, the default), a probe run (probes.json), or what `perfcheck trace summary "
        "--json` and `trace diff --json` print.",
        epilog="Exit codes: 0 printed, 2 an unknown document.",
    )
    schema.add_argument(
        "document",
        nargs="?",
        default="result",
        choices=("result", "probe-run", "trace-summary", "trace-diff", "bisect"),
        help="which document (default %(default)s)",
    )
    schema.set_defaults(func=_cmd_schema)


def _add_plan_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help=COMMANDS["plan"],
        description="Validate a webhook payload and print the plan as JSON: run or skip, why, which commits. "
        "Inside Actions it also writes step outputs. With GITHUB_TOKEN set it asks the API what the "
        "decision needs (changed files, the commenter's permission, the PR's head commit); without one "
        "those are unknown, so slash commands are refused rather than trusted.",
        epilog="Exit codes: 0 planned (run or skip), 1 GitHub refused or was unreachable, 2 bad input.",
    )
    plan.add_argument("--event-name", required=True, help="the event, e.g. $GITHUB_EVENT_NAME")
    plan.add_argument(
        "--event-path", type=Path, required=True, help="the payload file, e.g. $GITHUB_EVENT_PATH"
    )
    plan.add_argument(
        "--config", type=Path, help="settings file (default: perfcheck.yml here, the base branch checkout)"
    )
    plan.add_argument("--out", type=Path, help="also write the plan to OUT/plan.json")
    plan.add_argument(
        "--respond",
        action="store_true",
        help="answer on GitHub: react to a command, reply to a malformed or refused one, and set the "
        "check (waiting for approval, or queued). Needs GITHUB_TOKEN",
    )
    plan.set_defaults(func=_cmd_plan)


def _add_publish_parser(sub: Any) -> None:
    publish = sub.add_parser(
        "publish",
        help=COMMANDS["publish"],
        description="Post what `perfcheck review` wrote in REPORT: the PR comment (updated in place; a new "
        "one when the verdict flips), the check run (conclusion, summary, annotations at the findings' "
        "lines) and, inside Actions, the job summary. result.json is validated as untrusted data and "
        "rendered here. Needs GITHUB_TOKEN and GITHUB_REPOSITORY (or --repo), unless --dry-run.",
        epilog="Exit codes: 0 published, 1 GitHub refused or was unreachable after retries, 2 bad input.",
    )
    publish.add_argument("--report", type=Path, default=Path("perfcheck-out"), help="folder with result.json")
    publish.add_argument("--sha", help="the head commit the check belongs to")
    publish.add_argument(
        "--plan-file", type=Path, help="plan.json from `perfcheck plan` (for --sha and --pr when not given)"
    )
    publish.add_argument("--pr", type=positive, help="pull request number (default: found from --sha)")
    publish.add_argument("--repo", help="OWNER/NAME (default: $GITHUB_REPOSITORY)")
    publish.add_argument("--config", type=Path, help="settings file (default: perfcheck.yml here)")
    publish.add_argument("--templates", type=Path, help="folder with your own comment.md.j2")
    publish.add_argument(
        "--status",
        choices=("queued", "in_progress", "completed"),
        default="completed",
        help="queued/in_progress: only set the check before results exist (default: completed)",
    )
    publish.add_argument("--summary", help="check summary for --status queued/in_progress")
    publish.add_argument(
        "--planned-by",
        metavar="RUN_ID",
        help="publish only if this Actions run's plan job queued the check on --sha "
        "(give the trusted event's run id, e.g. github.event.workflow_run.id)",
    )
    publish.add_argument("--no-comment", action="store_true", help="only the check run, no PR comment")
    publish.add_argument("--dry-run", action="store_true", help="print the API calls instead of making them")
    publish.set_defaults(func=_cmd_publish)


def _add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help=COMMANDS["serve"],
        description="Serve the GitHub App's webhook endpoint (WSGI; `perfcheck.bot.webhook.WebhookApp` can "
        "also be hosted by any WSGI server). Verifies X-Hub-Signature-256, drops repeated deliveries, "
        "answers at once and works in the background: reacts to `/perfcheck`, sets the check run and "
        "dispatches the probe workflow. Environment: PERFCHECK_APP_ID, PERFCHECK_APP_PRIVATE_KEY (or "
        "PERFCHECK_APP_PRIVATE_KEY_FILE), PERFCHECK_WEBHOOK_SECRET, GITHUB_API_URL (for GitHub Enterprise).",
        epilog="Exit codes: 0 stopped cleanly (Ctrl-C or SIGTERM), 2 bad settings or environment.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="port (default %(default)s)")
    serve.add_argument("--config", type=Path, help="settings file (command permission, probe workflow)")
    serve.set_defaults(func=_cmd_serve)


def _add_render_parser(sub: Any) -> None:
    render = sub.add_parser(
        "render",
        help=COMMANDS["render"],
        description="Validate a result.json as untrusted data and print its review comment.",
        epilog="Exit codes: 0 printed, 2 bad input (a result or config that cannot be read).",
    )
    render.add_argument("result", type=Path, help="path to result.json")
    render.add_argument("--templates", type=Path, help="folder with your own comment.md.j2")
    render.add_argument(
        "--config", type=Path, help="settings file: its plugins and matrix (default: perfcheck.yml here)"
    )
    render.set_defaults(func=_cmd_render)


_PARSERS: dict[str, Callable[[Any], None]] = {
    "review": _add_review_parser,
    "probe": _add_probe_parser,
    "report": _add_report_parser,
    "schema": _add_schema_parser,
    "plan": _add_plan_parser,
    "publish": _add_publish_parser,
    "serve": _add_serve_parser,
    "render": _add_render_parser,
    "trace": _add_trace_parser,
    "history": _add_history_parser,
    "html": _add_html_parser,
    "sweep": _add_sweep_parser,
    "bisect": _add_bisect_parser,
}


@contextlib.contextmanager
def _no_workflow_commands() -> Iterator[None]:
    """In a GitHub Actions step, nothing perfcheck prints is a workflow command.

    Reviews, errors and replies carry text from PR code and from comments; a line of it that
    starts with `::` (`::add-mask::`, `::error::`, `::set-output`) would be obeyed by the runner.
    GitHub's `::stop-commands::TOKEN` turns that off until `::TOKEN::`; the token is random, so
    nothing printed in between can turn it back on. perfcheck itself emits no workflow commands.
    """
    if os.environ.get("GITHUB_ACTIONS") != "true":
        yield
        return
    import secrets

    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}", flush=True)
    try:
        yield
    finally:
        sys.stderr.flush()
        print(f"::{token}::", flush=True)


def _stop(signum: int, frame: object) -> None:
    # Every process of the review ends here, before the exception unwinds through the thread pools,
    # whose shutdown would otherwise wait for every probe still running.
    from perfcheck.runner import reaper

    reaper.stop_all()
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _stopped(stop: BaseException) -> int:
    """One line for a review stopped by Ctrl-C or SIGTERM; a straggler started meanwhile is ended."""
    from perfcheck.runner import reaper

    reaper.stop_all()
    name = stop_name(stop)
    written = getattr(stop, "written", None)  # the review of what was measured before the stop
    said = f"wrote what was measured before it: {written}" if written else "no result written"
    print(f"perfcheck: stopped by {name}: {said}", file=sys.stderr)
    return 143 if isinstance(stop, Terminated) else 130


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if getattr(args.func, "__name__", "") in STOPPABLE:
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    try:
        with _no_workflow_commands():
            return int(args.func(args))
    except STOPS as stop:
        return _stopped(stop)
    except BrokenPipeError:
        # The reader went away (`perfcheck trace diff --json | head`): stop quietly, as `cat`
        # does; stdout goes to /dev/null so that the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a program a pipe stopped


if __name__ == "__main__":
    sys.exit(main())
