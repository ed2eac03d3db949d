"""The `perfcheck` command line. Exit codes: 0 pass, 1 fail, 2 bad input, 3 inconclusive."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfcheck import __version__
from perfcheck.cli.argtypes import names
from perfcheck.stopping import STOPS, Terminated, stop_name

EXIT_BAD_INPUT = 2
# Commands that run probes: Ctrl-C and SIGTERM end every process of theirs and say so in a line.
STOPPABLE = frozenset({"_cmd_review", "_cmd_probe", "_cmd_bisect", "_cmd_sweep"})

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


def _add_review_parser(sub: Any) -> None:
    from perfcheck.cli.review_commands import add_review_parser

    add_review_parser(sub)


def _add_probe_parser(sub: Any) -> None:
    from perfcheck.cli.review_commands import add_probe_parser

    add_probe_parser(sub)


def _add_report_parser(sub: Any) -> None:
    from perfcheck.cli.review_commands import add_report_parser

    add_report_parser(sub)


def _add_plan_parser(sub: Any) -> None:
    from perfcheck.cli.github_commands import add_plan_parser

    add_plan_parser(sub)


def _add_publish_parser(sub: Any) -> None:
    from perfcheck.cli.github_commands import add_publish_parser

    add_publish_parser(sub)


def _add_serve_parser(sub: Any) -> None:
    from perfcheck.cli.github_commands import add_serve_parser

    add_serve_parser(sub)


def _add_schema_parser(sub: Any) -> None:
    from perfcheck.cli.contract_commands import add_schema_parser

    add_schema_parser(sub)


def _add_render_parser(sub: Any) -> None:
    from perfcheck.cli.contract_commands import add_render_parser

    add_render_parser(sub)


def _add_trace_parser(sub: Any) -> None:
    from perfcheck.cli.trace_commands import add_trace_parser

    add_trace_parser(sub)


def _add_history_parser(sub: Any) -> None:
    from perfcheck.cli.history_commands import add_history_parser

    add_history_parser(sub)


def _add_html_parser(sub: Any) -> None:
    from perfcheck.cli.html_command import add_html_parser

    add_html_parser(sub)


def _add_sweep_parser(sub: Any) -> None:
    from perfcheck.cli.sweep_command import add_sweep_parser

    add_sweep_parser(sub)


def _add_bisect_parser(sub: Any) -> None:
    from perfcheck.cli.bisect_command import add_bisect_parser

    add_bisect_parser(sub, names)


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
    from perfcheck.runner.process import reaper

    reaper.stop_all()
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _stopped(stop: BaseException) -> int:
    """One line for a review stopped by Ctrl-C or SIGTERM; a straggler started meanwhile is ended."""
    from perfcheck.runner.process import reaper

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
