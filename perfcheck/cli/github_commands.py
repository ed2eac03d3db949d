"""`perfcheck plan`, `publish` and `serve`: the commands that talk to GitHub (decide from an event
what to review, post a review, run as a GitHub App). They run no PR code.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from perfcheck.cli.argtypes import positive

EXIT_BAD_INPUT = 2


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


def add_plan_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="decide from a GitHub event whether and what to review",
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


def add_publish_parser(sub: Any) -> None:
    publish = sub.add_parser(
        "publish",
        help="post a review: the sticky PR comment and the check run with annotations",
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


def add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run as a GitHub App: receive webhooks and answer them",
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
