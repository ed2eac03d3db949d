"""Fast start (issue 28): a command imports what it runs and nothing else, so that `perfcheck
--help` and `perfcheck trace summary` on a small trace cost the interpreter and a few modules,
not pydantic, YAML, Jinja, the GitHub client or torch. The tests check which modules a fresh
process loads, never how long it takes (bench/startup.py and bench/trace_vs_hta.py
--whole-process time it; docs/benchmarks.md has the figures). And what the lazy paths build
instead must be what the heavy ones built: the full parser's help, pydantic's JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import struct
import subprocess
import sys
from pathlib import Path

import pydantic_core
import pytest

from perfcheck.cli import trace_commands as trace_cli
from perfcheck.cli.main import _PARSERS, COMMANDS, build_parser, main
from perfcheck.core.trace import by_hta_short_name, summarize
from perfcheck.trace_schema import TRACE_SCHEMA_VERSION, TraceDiffDoc, TraceSummaryDoc

DATA = Path(__file__).parent / "data"
SMALL = DATA / "h200-device-pass.trace.json.gz"  # 129 timed events
FP32 = DATA / "h200-mlp-fp32.pt.trace.json.gz"
BF16 = DATA / "h200-mlp-bf16.pt.trace.json.gz"
TRACES = (SMALL, FP32, BF16)

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


@pytest.mark.e2e
@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["trace", "--help"],
        ["trace", "summary", "--help"],
        ["trace", "summary", str(SMALL)],
        ["trace", "summary", str(SMALL), "--json"],
        ["trace", "summary", str(FP32), "--short-names", "--steps", "all"],
        ["trace", "diff", str(FP32), str(BF16)],
        ["trace", "diff", str(FP32), str(BF16), "--short-names", "--json"],
    ],
    ids=" ".join,
)
def test_the_fast_commands_import_nothing_heavy(argv: list[str]) -> None:
    done, modules = imported(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "perfcheck.cli.main" in modules  # the list is read: the command ran through it
    assert heavy(modules) == []
    if argv[0] == "trace":
        assert "perfcheck.cli.trace_commands" in modules
    else:
        # The top-level help builds no subcommand's parser, so it loads none of their modules.
        assert not {m for m in modules if m.endswith("_cli")}


@pytest.mark.e2e
def test_the_import_check_sees_a_heavy_command() -> None:
    """The check above can fail: the schema command does load pydantic (its whole purpose)."""
    done, modules = imported("schema", "trace-summary")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pydantic" in heavy(modules) and "perfcheck.schema" in modules


@pytest.mark.e2e
def test_a_trace_error_is_still_bad_input_on_the_fast_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    done, modules = imported("trace", "summary", str(bad))
    assert done.returncode == 2 and "bad.json: not a Kineto trace: the file is not JSON" in done.stderr
    assert heavy(modules) == []


@pytest.mark.e2e
@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "trace"])
def test_every_other_command_knows_every_probes_finding_categories(command: str) -> None:
    """The fsdp probe's categories exist once the probe registry is loaded: each command but trace
    loads it before it runs (a result with such a finding must validate in html, history, render)."""
    probe = (
        "import sys; from perfcheck.cli.main import build_parser; "
        "from perfcheck.vocabulary import categories; "
        "build_parser(sys.argv[1]); print(' '.join(categories()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, command], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"graph_reuse_lost", "fsdp_unit_changed", "dtensor_layout_changed", "fsdp_overlap_drop"} <= set(
        done.stdout.split()
    )


@pytest.mark.e2e
def test_the_schema_of_a_result_lists_every_probes_categories() -> None:
    done, _ = imported("schema", "result")
    assert done.returncode == 0, done.stderr[-2000:]
    enum = json.loads(done.stdout)["$defs"]["Finding"]["properties"]["category"]["enum"]
    assert "graph_reuse_lost" in enum and "environment_mismatch" in enum


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


# -- `trace --json` without pydantic: pydantic's text, to the character ----------------------------


def _pydantic_summary(path: Path, doc: dict[str, object]) -> str:
    return TraceSummaryDoc.model_validate(doc).model_dump_json(indent=1)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_summary_json_is_what_pydantic_writes(path: Path) -> None:
    for s in (summarize(path), summarize(path, hta_rounding=True), by_hta_short_name(summarize(path))):
        doc = trace_cli.summary_document(path, s)
        assert trace_cli.dumps(doc) == _pydantic_summary(path, doc)
    assert doc["schema_version"] == TRACE_SCHEMA_VERSION == trace_cli.SCHEMA_VERSION


def test_diff_json_is_what_pydantic_writes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--steps", "all"], ["--short-names"], ["--hta-rounding", "--base-steps", "1"]):
        assert main(["trace", "diff", str(FP32), str(BF16), "--json", *argv]) == 0
        printed = capsys.readouterr().out
        assert printed == TraceDiffDoc.model_validate_json(printed).model_dump_json(indent=1) + "\n"


def test_every_field_of_the_documents_is_written_in_the_models_order() -> None:
    s = summarize(FP32)
    summary = trace_cli.summary_document(FP32, s)
    assert list(summary) == list(TraceSummaryDoc.model_fields)
    diff = trace_cli.diff_document(FP32, BF16, s, summarize(BF16))
    assert list(diff) == list(TraceDiffDoc.model_fields)


def _random_floats(n: int) -> list[float]:
    rng = random.Random(28)
    out = [0.0, -0.0, 1e-5, -1.5e-5, 9.99e-5, 1e-4, 1e-6, 1e15, 1e16, -1e16, 1.7976931348623157e308, 5e-324]
    while len(out) < n:
        bits = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if math.isfinite(bits):
            out.append(bits)
        out.append(rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30))
    return out


def test_floats_are_written_as_pydantic_writes_them() -> None:
    for x in _random_floats(50_000):
        assert trace_cli.dumps({"x": [x]}) == pydantic_core.to_json({"x": [x]}, indent=1).decode(), x


def test_strings_are_escaped_as_pydantic_escapes_them() -> None:
    text = "".join(map(chr, range(0x80))) + 'é ‒ \u2028 "q" \\ 日本 🙂'
    doc = {"name": text, "ops": [], "none": None, "yes": True, "n": 3, "nested": {"a": [{}]}}
    assert trace_cli.dumps(doc) == pydantic_core.to_json(doc, indent=1).decode()
    assert json.loads(trace_cli.dumps(doc)) == doc


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_time_that_is_no_number_is_refused_as_the_schema_refuses_it(bad: float) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        trace_cli._float(bad)
    doc = trace_cli.summary_document(SMALL, summarize(SMALL))
    with pytest.raises(ValueError):  # pydantic's ValidationError, which the old --json raised
        TraceSummaryDoc.model_validate({**doc, "comm_overlap_pct": bad})
