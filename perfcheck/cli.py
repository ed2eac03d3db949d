"""The `perfcheck` command line. Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from perfcheck import __version__

EXIT_BAD_INPUT = 2


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return n


def _cmd_review(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, load_config
    from perfcheck.review import EXIT_CODES, ReviewRequest, UsageError, run

    try:
        config = load_config(args.config, args.base if args.base.is_dir() else None)
        review, comment = run(
            ReviewRequest(
                base=args.base,
                head=args.head,
                config=config,
                out_dir=args.out,
                device=args.device,
                workloads=args.workloads,
                probes=args.probes,
                base_python=args.base_python,
                head_python=args.head_python,
                template_dir=args.templates,
                jobs=args.jobs,
            )
        )
    except (ConfigError, UsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(comment)
    print(
        f"perfcheck: {review.verdict} — wrote {args.out / 'result.json'} and {args.out / 'comment.md'}",
        file=sys.stderr,
    )
    return EXIT_CODES[review.verdict]


def _cmd_schema(args: argparse.Namespace) -> int:
    from perfcheck.schema import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from perfcheck.bot.render import render_comment
    from perfcheck.schema import ContractError, load_review

    try:
        review = load_review(args.result)
    except ContractError as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(render_comment(review, args.templates))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from perfcheck.bot.actions_io import write_outputs
    from perfcheck.bot.events import PayloadError
    from perfcheck.bot.plan import Context, plan
    from perfcheck.config import ConfigError, load_config

    try:
        config = load_config(args.config, None)
        payload = args.event_path.read_bytes()
        decided = plan(args.event_name, payload, Context(config=config))
    except OSError as err:
        print(f"perfcheck: {args.event_path}: cannot read the event ({err.strerror})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ConfigError, PayloadError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(decided.model_dump_json(indent=2))
    write_outputs(
        {
            "run": decided.run,
            "mode": decided.mode,
            "reason": decided.reason,
            "head_sha": decided.head_sha,
            "base_sha": decided.base_sha,
            "pr_number": decided.pr_number,
            "awaiting_approval": decided.awaiting_approval,
            "plan": decided.model_dump_json(),
        }
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfcheck",
        description="Performance and IR review of changes to PyTorch compiler paths.",
        epilog="Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive.",
    )
    parser.add_argument("--version", action="version", version=f"perfcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    review = sub.add_parser(
        "review",
        help="probe a base and a head tree side by side and write the review",
        description="Run the probes on --base and --head, compare them and print the review comment. "
        "Writes OUT/result.json (the contract, see `perfcheck schema`) and OUT/comment.md.",
        epilog="Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive.",
    )
    review.add_argument(
        "--base", type=Path, required=True, help="the base tree (e.g. the merge base checkout)"
    )
    review.add_argument("--head", type=Path, required=True, help="the head tree (the PR's checkout)")
    review.add_argument(
        "--config",
        type=Path,
        help="settings file (default: perfcheck.yml or "
        ".github/perfcheck.yml in the base tree, so a PR cannot loosen its own gate)",
    )
    review.add_argument(
        "--out", type=Path, default=Path("perfcheck-out"), help="output folder (default %(default)s)"
    )
    review.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default %(default)s)"
    )
    review.add_argument(
        "--workloads", type=_csv, default=(), help="comma-separated workload names (default: all)"
    )
    review.add_argument(
        "--probes", type=_csv, default=(), help="comma-separated probes: compile,export (default: all)"
    )
    review.add_argument("--base-python", help="python interpreter for the base side (default: this one)")
    review.add_argument("--head-python", help="python interpreter for the head side (default: this one)")
    review.add_argument(
        "--templates", type=Path, help="folder with your own comment.md.j2 (falls back to the built-in)"
    )
    review.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        help="per-side probes to run at once (default 1; timing always runs alone)",
    )
    review.set_defaults(func=_cmd_review)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of result.json",
        description="Print the JSON Schema of the review result (result.json).",
    )
    schema.set_defaults(func=_cmd_schema)

    plan = sub.add_parser(
        "plan",
        help="decide from a GitHub event whether and what to review",
        description="Validate a webhook payload and print the plan as JSON: run or skip, why, which commits. "
        "Inside Actions it also writes step outputs. This command makes no API calls: what needs the API "
        "(changed files, a commenter's permission, the PR's head commit) is treated as unknown, so "
        "slash commands are refused rather than trusted.",
    )
    plan.add_argument("--event-name", required=True, help="the event, e.g. $GITHUB_EVENT_NAME")
    plan.add_argument(
        "--event-path", type=Path, required=True, help="the payload file, e.g. $GITHUB_EVENT_PATH"
    )
    plan.add_argument("--config", type=Path, help="settings file (for the paths filter)")
    plan.set_defaults(func=_cmd_plan)

    render = sub.add_parser(
        "render",
        help="render the comment from a result.json",
        description="Validate a result.json as untrusted data and print its review comment.",
    )
    render.add_argument("result", type=Path, help="path to result.json")
    render.add_argument("--templates", type=Path, help="folder with your own comment.md.j2")
    render.set_defaults(func=_cmd_render)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
