"""The command line as a user meets it: help, exit codes, and bad input without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEMO, model_tree, perfcheck_cli, write_tree

from perfcheck.cli.main import build_parser, main

SUBCOMMANDS = (
    "review",
    "probe",
    "report",
    "schema",
    "render",
    "plan",
    "publish",
    "serve",
    "trace",
    "history",
    "html",
    "sweep",
    "bisect",
)


perfcheck = perfcheck_cli


@pytest.mark.parametrize("command", [[], *[[c] for c in SUBCOMMANDS]])
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: perfcheck" in capsys.readouterr().out


def test_subcommands_are_all_listed() -> None:
    listed = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(listed) == sorted(SUBCOMMANDS)


@pytest.mark.e2e
def test_schema_prints_the_result_json_schema() -> None:
    done = perfcheck("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["title"] == "Review"
    assert "schema_version" in schema["properties"]


@pytest.mark.e2e
def test_missing_tree_is_bad_input(tmp_path: Path) -> None:
    done = perfcheck(
        "review",
        "--base",
        str(tmp_path / "nope"),
        "--head",
        str(DEMO / "head"),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2
    assert "--base" in done.stderr and "not a directory" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_bad_config_names_file_key_and_expectation(tmp_path: Path) -> None:
    tree = model_tree(tmp_path / "tree")
    (tree / "perfcheck.yml").write_text(
        "workloads:\n  - name: net\n    entry: model.py:build\n    train: maybe\n"
    )
    done = perfcheck("review", "--base", str(tree), "--head", str(tree), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert str(tree / "perfcheck.yml") in done.stderr
    assert "workloads[0].train" in done.stderr and "true or false" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_unknown_workload_name_is_bad_input(tmp_path: Path) -> None:
    done = perfcheck(
        "review",
        "--base",
        str(DEMO / "base"),
        "--head",
        str(DEMO / "head"),
        "--workloads",
        "nope",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2
    assert "unknown workload" in done.stderr and "classifier" in done.stderr


@pytest.mark.e2e
def test_review_exit_code_and_outputs(tmp_path: Path) -> None:
    tree = write_tree(
        model_tree(tmp_path / "tree"),
        {
            "perfcheck.yml": (
                "workloads:\n  - name: net\n    entry: model.py:build\ncompile:\n  backend: aot_eager\n"
            )
        },
    )
    out = tmp_path / "out"
    done = perfcheck(
        "review", "--base", str(tree), "--head", str(tree), "--out", str(out), "--probes", "export"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!-- perfcheck:review -->")
    assert (out / "comment.md").read_text() == done.stdout.rstrip("\n") + "\n"
    # progress in a log: one line per finished probe with its time
    assert "[1/2] base · net · export: ok (" in done.stderr
    assert "[2/2] head · net · export: ok (" in done.stderr
    rendered = perfcheck("render", str(out / "result.json"))
    assert rendered.returncode == 0 and rendered.stdout == done.stdout


@pytest.mark.e2e
def test_render_rejects_a_result_that_does_not_validate(tmp_path: Path) -> None:
    bad = tmp_path / "result.json"
    bad.write_text(json.dumps({"schema_version": 2, "verdict": "maybe"}))
    done = perfcheck("render", str(bad))
    assert done.returncode == 2
    assert "verdict" in done.stderr and "not a valid perfcheck document" in done.stderr


WEBHOOKS = Path(__file__).parent / "data" / "webhooks"


@pytest.mark.e2e
def test_plan_prints_json_and_writes_step_outputs(tmp_path: Path) -> None:
    import os

    payload = next(
        e for e in json.loads((WEBHOOKS / "pull_request.json").read_text()) if e["action"] == "opened"
    )
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    outputs = tmp_path / "outputs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfcheck",
            "plan",
            "--event-name",
            "pull_request",
            "--event-path",
            str(event),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "GITHUB_OUTPUT": str(outputs)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"] is True
    written = outputs.read_text()
    assert "run<<perfcheck_" in written and f"\n{payload['pull_request']['head']['sha']}\n" in written


@pytest.mark.e2e
def test_plan_refuses_a_broken_payload(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text('{"action": "opened"}')
    done = perfcheck("plan", "--event-name", "pull_request", "--event-path", str(event))
    assert done.returncode == 2 and "missing what perfcheck needs" in done.stderr
    assert "Traceback" not in done.stderr


def test_outputs_cannot_be_injected_by_event_text() -> None:
    from perfcheck.bot.actions_io import format_outputs

    hostile = "x\nrun=true\nperfcheck_0000000000000000"
    text = format_outputs({"reason": hostile, "run": False})
    key, rest = text.split("<<", 1)
    delimiter = rest.split("\n", 1)[0]
    assert key == "reason" and delimiter not in hostile
    # the value ends only at its own delimiter; the forged line stays inside it
    assert text.index("run=true") < text.index(f"\n{delimiter}\n")


def _commands_the_runner_obeys(log: str) -> list[str]:
    """GitHub's runner reading a step's log: `::x::` lines are commands, except between
    `::stop-commands::TOKEN` and `::TOKEN::`."""
    obeyed, token = [], None
    for line in log.splitlines():
        if token is not None:
            if line == f"::{token}::":
                token = None
            continue
        if line.startswith("::stop-commands::"):
            token = line.removeprefix("::stop-commands::")
        elif line.startswith("::"):
            obeyed.append(line)
    return obeyed


@pytest.mark.e2e
def test_probe_text_never_becomes_a_workflow_command(tmp_path: Path) -> None:
    # What PR code could put in a break reason, which the review quotes verbatim in a code block.
    review = json.loads((Path(__file__).parent / "data" / "demo-result.json").read_text())
    hostile = (
        "Unsupported\n::add-mask::hunter2\n::error file=model.py,line=1::all is well\n::set-output name=x::y"
    )
    for finding in review["findings"]:
        if "reason" in finding["evidence"]:
            finding["evidence"]["reason"] = hostile
    (tmp_path / "result.json").write_text(json.dumps(review))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")} | {"GITHUB_ACTIONS": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "perfcheck", "render", str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "::add-mask::hunter2" in done.stdout  # quoted in the review, as text
    assert _commands_the_runner_obeys(done.stdout + done.stderr) == []
    # Outside Actions nothing is added.
    plain = subprocess.run(
        [sys.executable, "-m", "perfcheck", "render", str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "GITHUB_ACTIONS"},
        timeout=60,
    )
    assert "stop-commands" not in plain.stdout


def test_a_missing_or_unrunnable_interpreter_is_bad_input_before_any_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag, python in (("--head-python", "/nonexistent/python"), ("--base-python", "/etc/passwd")):
        out = tmp_path / python.strip("/").replace("/", "-")
        args = ["review", "--base", str(DEMO / "base"), "--head", str(DEMO / "head"), flag, python]
        assert main([*args, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {python}: no such executable file" in err and "Traceback" not in err
        assert not (out / "probes").exists()


@pytest.mark.e2e
def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """`perfcheck schema | head`: the pipe closes under the writer, which stops quietly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfcheck", "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # before the rest of the 45 kB schema is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) in (0, 141)
    assert b"Traceback" not in err and b"BrokenPipe" not in err
