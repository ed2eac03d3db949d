"""Fast start (issue 28): a command imports what it runs and nothing else, so that `perfcheck
--help` and `perfcheck trace summary` on a small trace cost the interpreter and a few modules,
not pydantic, YAML, Jinja, the GitHub client or torch. The tests check which modules a fresh
process loads, never how long it takes (bench/startup.py and bench/trace_vs_hta.py
--whole-process time it; docs/benchmarks.md has the figures). And what the lazy paths build
instead must be what the heavy ones built: the full parser's help.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from perfcheck.cli import _PARSERS, COMMANDS, build_parser, main

DATA = Path(__file__).parent / "data"
SMALL = DATA / "h200-device-pass.trace.json.gz"  # 129 timed events
FP32 = DATA / "h200-mlp-fp32.pt.trace.json.gz"
BF16 = DATA / "h200-mlp-bf16.pt.trace.json.gz"

# What none of the fast commands may load: each costs more than a small trace's whole analysis.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "yaml",
    "jinja2",
    "torch",
    "github",
    "requests",
    "numpy",
    "perfcheck.config",
    "perfcheck.schema",
    "perfcheck.review",
    "perfcheck.core.probes",
)


def imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -m perfcheck ARGV`` in a fresh process; what it printed and every module it
    imported (Python's own -X importtime list, one line per module as it loads)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "perfcheck", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done, modules


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["trace", "--help"],
        ["trace", "summary", "--help"],
        ["trace", "summary", str(SMALL)],
        ["trace", "summary", str(FP32), "--short-names", "--steps", "all"],
        ["trace", "diff", str(FP32), str(BF16)],
    ],
    ids=" ".join,
)
def test_the_fast_commands_import_nothing_heavy(argv: list[str]) -> None:
    done, modules = imported(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "perfcheck.cli" in modules  # the list is read: the command ran through it
    assert heavy(modules) == []
    if argv[0] == "trace":
        assert "perfcheck.trace_cli" in modules
    else:
        # The top-level help builds no subcommand's parser, so it loads none of their modules.
        assert not {m for m in modules if m.endswith("_cli")}


def test_the_import_check_sees_a_heavy_command() -> None:
    """The check above can fail: the schema command does load pydantic (its whole purpose)."""
    done, modules = imported("schema", "trace-summary")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pydantic" in heavy(modules) and "perfcheck.schema" in modules


def test_a_trace_error_is_still_bad_input_on_the_fast_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    done, modules = imported("trace", "summary", str(bad))
    assert done.returncode == 2 and "bad.json: not a readable Kineto trace" in done.stderr
    assert heavy(modules) == []


# -- the help a lazy parser builds is the full parser's -------------------------------------------


def _choices(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_has_its_own_line_listed_in_order() -> None:
    full = _choices(build_parser())
    assert list(_PARSERS) == list(COMMANDS) == list(full.choices)
    # The lines of `perfcheck --help`: each command's own help, as its module gives it.
    assert {a.dest: a.help for a in full._choices_actions} == COMMANDS


@pytest.mark.parametrize("command", [None, "", "nonsense", *COMMANDS])
def test_the_top_level_help_is_the_full_parsers_whatever_is_built(command: str | None) -> None:
    assert build_parser(command).format_help() == build_parser().format_help()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_commands_help_is_the_full_parsers(command: str) -> None:
    lazy = _choices(build_parser(command)).choices[command]
    full = _choices(build_parser()).choices[command]
    assert lazy.format_help() == full.format_help()
    for name, sub in _choices(full).choices.items() if full._subparsers else ():
        assert _choices(lazy).choices[name].format_help() == sub.format_help()


def test_main_builds_the_command_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version", "trace"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("perfcheck ")
    with pytest.raises(SystemExit) as exit_info:
        main(["nonsense"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", "summary", "--help"])
    assert exit_info.value.code == 0
    full = _choices(_choices(build_parser()).choices["trace"]).choices["summary"]
    assert capsys.readouterr().out == full.format_help()
