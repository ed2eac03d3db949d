"""The first day with perfcheck (issue 15): no silent green, and settings whose origin is stated.

Each test runs the real command in a fresh process, as a new user would."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from conftest import perfcheck_cli, write_tree


def torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


BREAK_FREE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        {change}
        return torch.relu(h)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""

FIRST_CONFIG = """\
# perfcheck.yml, added by this PR
workloads:
  - {name: net, entry: model.py:build}
compile: {backend: aot_eager}
"""


perfcheck = perfcheck_cli


def _trees(tmp_path: Path, head_config: str | None) -> tuple[Path, Path]:
    base = write_tree(tmp_path / "base", {"model.py": BREAK_FREE.replace("{change}", "pass")})
    head_files = {"model.py": BREAK_FREE.replace("{change}", "if h.sum().item() > 0:\n            h = h * 2")}
    if head_config is not None:
        head_files["perfcheck.yml"] = head_config
    return base, write_tree(tmp_path / "head", head_files)


@pytest.mark.e2e
def test_the_first_pr_adding_a_config_is_reviewed_with_it_and_says_so(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, FIRST_CONFIG)
    out = tmp_path / "out"
    done = perfcheck(
        "review", "--base", str(base), "--head", str(head), "--probes", "compile", "--out", str(out)
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    comment = (out / "comment.md").read_text()
    top = "\n".join(comment.splitlines()[:5])
    assert "Settings from this PR" in top and "gated by the base branch's copy" in top
    result = json.loads((out / "result.json").read_text())
    assert result["config_origin"] == "head"
    [gb] = [f for f in result["findings"] if f["category"] == "graph_break_added"]
    assert gb["workload"] == "net" and gb["location"]["path"] == "model.py"


@pytest.mark.e2e
def test_the_split_workflow_reports_on_the_config_its_probe_job_followed(tmp_path: Path) -> None:
    # The report job runs on base's checkout, which has no perfcheck.yml: it must judge the
    # workloads the probe job measured, not the built-in ones, and say where the settings came from.
    base, head = _trees(tmp_path, FIRST_CONFIG)
    probed = tmp_path / "probed"
    done = perfcheck(
        "probe", "--base", str(base), "--head", str(head), "--probes", "compile", "--out", str(probed)
    )
    assert done.returncode == 0, done.stderr
    checkout = base  # the report job's working directory
    out = tmp_path / "report"
    done = perfcheck("report", str(probed), "--probes", "compile", "--out", str(out), cwd=checkout)
    assert done.returncode == 1, done.stderr
    assert "Settings from this PR" in done.stdout
    assert json.loads((out / "result.json").read_text())["config_origin"] == "head"


@pytest.mark.e2e
def test_no_config_anywhere_says_at_the_top_that_only_the_built_in_workload_ran(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, None)
    out = tmp_path / "out"
    done = perfcheck(
        "review", "--base", str(base), "--head", str(head), "--probes", "export", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    top = "\n".join((out / "comment.md").read_text().splitlines()[:5])
    assert "No perfcheck.yml" in top and "runs none of this repository's code" in top


@pytest.mark.e2e
def test_an_empty_config_is_bad_input_before_any_probe(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, None)
    for text in ("", "# workloads: to do\n"):
        (base / "perfcheck.yml").write_text(text)
        done = perfcheck("review", "--base", str(base), "--head", str(head), "--out", str(tmp_path / "out"))
        assert done.returncode == 2
        assert "perfcheck.yml: the file is empty" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "out" / "probes.json").exists()


# -- bad setup is caught before any probe runs, exit 2, named in one line --------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("model.py", "expected a built-in name"),
        ("model.py:buld", "model.py defines no 'buld' (on base and head)"),
        ("nope.py:build", "no file nope.py in base"),
        ("../elsewhere.py:build", "no file ../elsewhere.py at /"),
        ("nopkg_anywhere.mod:build", "no module 'nopkg_anywhere'"),
    ],
)
def test_a_workload_that_cannot_be_found_is_bad_input(tmp_path: Path, entry: str, said: str) -> None:
    base, head = _trees(tmp_path, None)
    (base / "perfcheck.yml").write_text(f'workloads:\n  - {{name: net, entry: "{entry}"}}\n')
    out = tmp_path / "out"
    done = perfcheck("review", "--base", str(base), "--head", str(head), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (out / "probes").exists()  # nothing ran


def _interpreter(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("exit 1", "not a Python interpreter that runs"),
        # -S: no site-packages, so neither perfcheck nor torch
        (f'exec {sys.executable} -I -S "$@"', "cannot import perfcheck"),
        # Python 3.10 has no PYTHONSAFEPATH: a PR's perfcheck/ would be imported before the walls
        ('echo \'{"python": "3.10.14"}\'', "Python 3.10.14; the probes need 3.11 or later"),
    ],
)
def test_an_interpreter_that_cannot_run_the_probes_is_bad_input(tmp_path: Path, body: str, said: str) -> None:
    base, head = _trees(tmp_path, FIRST_CONFIG)
    python = _interpreter(tmp_path, body)
    done = perfcheck(
        "review",
        "--base",
        str(base),
        "--head",
        str(head),
        "--head-python",
        str(python),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    for flag, bad in (("--base-python", "/nonexistent/python"), ("--head-python", "/etc/passwd")):
        done = perfcheck(
            "review", "--base", str(base), "--head", str(head), flag, bad, "--out", str(tmp_path / "o")
        )
        assert done.returncode == 2 and f"{flag} {bad}: no such executable file" in done.stderr


@pytest.mark.e2e
@pytest.mark.skipif(torch_sees_cuda(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_bad_input(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, FIRST_CONFIG)
    done = perfcheck(
        "review", "--base", str(base), "--head", str(head), "--device", "cuda", "--out", str(tmp_path / "o")
    )
    assert (
        done.returncode == 2
        and "--device cuda: torch" in done.stderr
        and "sees no CUDA device" in done.stderr
    )


# -- config mistakes: the file, the key, what was expected; never a class name --------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('budgets: "strict"\n', "budgets: expected a mapping of settings"),
        (
            'budgets: {max_new_graph_breaks: "0"}\n',
            "budgets.max_new_graph_breaks: expected a whole number, without quotes",
        ),
        ("workload:\n  - {name: a, entry: mlp}\n", "workload: unknown key (did you mean `workloads`?)"),
        (
            "workloads:\n  - {name: a, entry: mlp, trian: true}\n",
            "workloads[0].trian: unknown key (did you mean `train`?)",
        ),
    ],
)
def test_a_config_mistake_names_file_key_and_expectation(tmp_path: Path, text: str, said: str) -> None:
    base, head = _trees(tmp_path, None)
    (base / "perfcheck.yml").write_text(text)
    done = perfcheck("review", "--base", str(base), "--head", str(head), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and f"perfcheck.yml: {said}" in done.stderr
    assert "Config" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.e2e
def test_empty_names_do_not_mean_everything(tmp_path: Path) -> None:
    base, head = _trees(tmp_path, FIRST_CONFIG)
    for flag in ("--probes", "--workloads"):
        done = perfcheck(
            "review", "--base", str(base), "--head", str(head), flag, "", "--out", str(tmp_path / "o")
        )
        assert done.returncode == 2 and f"argument {flag}: expected comma-separated names" in done.stderr


@pytest.mark.e2e
def test_a_truncated_result_names_where_it_ends(tmp_path: Path) -> None:
    cut = tmp_path / "result.json"
    cut.write_text('{"schema_version": 2, "tool_version": "0.1.0", "verdict": "pa')
    done = perfcheck("render", str(cut))
    assert done.returncode == 2, done.stderr
    assert "invalid JSON at line 1, column" in done.stderr and "the file ends early" in done.stderr


# -- help that tells the truth ------------------------------------------------------------------


def _help(*command: str) -> str:
    from perfcheck.cli.main import build_parser

    parser = build_parser()
    for name in command:
        parser = next(a.choices[name] for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser.format_help()


@pytest.mark.parametrize(
    "command",
    ["review", "probe", "report", "schema", "render", "plan", "publish", "serve", "html", "sweep", "bisect"],
)
def test_every_command_says_what_its_exit_codes_mean(command: str) -> None:
    assert "Exit codes: 0" in _help(command)


def test_review_help_names_every_probe_the_defaults_and_the_report_it_writes() -> None:
    from perfcheck.config import default_probes, probe_names

    text = " ".join(_help("review").split())
    for name in probe_names():
        assert name in text
    assert f"else {', '.join(default_probes())}" in text
    assert "report.html" in text


@pytest.mark.e2e
def test_html_out_is_a_folder_as_everywhere_else_and_the_database_is_db(tmp_path: Path) -> None:
    result = Path(__file__).parent / "data" / "demo-result.json"
    done = perfcheck("html", str(result), "--out", str(tmp_path))
    assert done.returncode == 0 and (tmp_path / "report.html").is_file()
    done = perfcheck(
        "html", str(result), "--out", str(tmp_path / "r.html"), "--db", str(tmp_path / "none.sqlite")
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr


# -- workloads as real repositories write them ---------------------------------------------------

KEYWORDS = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, pixel_values, *, scale):
        {change}
        return torch.relu(self.fc(pixel_values)) * scale


def build(device):
    torch.manual_seed(0)
    x = torch.randn(4, 8).to(device)
    scale = torch.tensor(2.0).to(device)
    # keyword inputs, and the recompile check's own second batch, as the model is called
    return Net().to(device), {"pixel_values": x, "scale": scale}, {"pixel_values": x[:2], "scale": scale}
"""


@pytest.mark.e2e
def test_keyword_inputs_and_second_inputs_reach_every_probe(tmp_path: Path) -> None:
    base = write_tree(
        tmp_path / "base",
        {
            "model.py": KEYWORDS.replace("{change}", "pass"),
            "perfcheck.yml": "workloads:\n  - {name: net, entry: model.py:build}\n"
            "compile: {backend: aot_eager}\n"
            "timing: {compiled: false, processes: 2, max_processes: 2}\n",
        },
    )
    head = write_tree(tmp_path / "head", {"model.py": KEYWORDS.replace("{change}", 'print("step")')})
    out = tmp_path / "out"
    done = perfcheck(
        "review",
        "--base",
        str(base),
        "--head",
        str(head),
        "--probes",
        "compile,export,timing",
        "--out",
        str(out),
    )
    assert done.returncode in (1, 3), done.stderr
    result = json.loads((out / "result.json").read_text())
    statuses = {
        (r["probe"], side): r["status"]
        for wl in result["workloads"]
        for side in ("base", "head")
        for r in wl[side]
    }
    assert all(s == "ok" for s in statuses.values()), statuses
    [gb] = [f for f in result["findings"] if f["category"] == "graph_break_added"]
    assert gb["location"]["path"] == "model.py" and gb["location"]["code"] == 'print("step")'


# The same model as a package module: no build() (the workload file outside the tree has it).
SRC_MODEL = BREAK_FREE.partition("\n\ndef build")[0] + "\n"

OUTSIDE_WORKLOAD = """\
import torch
from tinypkg.model import Net


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


@pytest.mark.e2e
def test_a_src_layout_package_and_a_workload_file_outside_the_repository(tmp_path: Path) -> None:
    def repo(root: Path, change: str) -> Path:
        return write_tree(
            root,
            {
                "pyproject.toml": '[project]\nname = "tinypkg"\nversion = "1.2.3"\n',
                # importing from a bare checkout must find the project's metadata, as installed
                "src/tinypkg/__init__.py": "from importlib.metadata import version\n"
                '__version__ = version("tinypkg")\n',
                "src/tinypkg/model.py": SRC_MODEL.replace("{change}", change),
            },
        )

    base = repo(tmp_path / "base", "pass")
    head = repo(tmp_path / "head", "if h.sum().item() > 0:\n            h = h * 2")
    write_tree(tmp_path / "ci", {"bench.py": OUTSIDE_WORKLOAD})  # kept out of the repository
    config = write_tree(
        tmp_path / "cfg",
        {
            "perfcheck.yml": "workloads:\n  - {name: net, entry: ../ci/bench.py:build}\n"
            "compile: {backend: aot_eager}\n"
        },
    )
    out = tmp_path / "out"
    done = perfcheck(
        "review",
        "--base",
        str(base),
        "--head",
        str(head),
        "--config",
        str(config / "perfcheck.yml"),
        "--probes",
        "compile",
        "--out",
        str(out),
    )
    assert done.returncode == 1, done.stderr
    result = json.loads((out / "result.json").read_text())
    [gb] = [f for f in result["findings"] if f["category"] == "graph_break_added"]
    assert gb["location"]["path"] == "src/tinypkg/model.py" and gb["location"]["line"] == 12


@pytest.mark.e2e
def test_a_build_that_raises_on_both_sides_is_bad_input_and_on_head_only_a_finding(tmp_path: Path) -> None:
    raising = BREAK_FREE.replace("    torch.manual_seed(0)\n", '    raise RuntimeError("no weights here")\n')
    config = "workloads:\n  - {name: net, entry: model.py:build}\ncompile: {backend: aot_eager}\n"
    base = write_tree(tmp_path / "base", {"model.py": raising, "perfcheck.yml": config})
    head = write_tree(tmp_path / "head", {"model.py": raising})
    done = perfcheck(
        "review",
        "--base",
        str(base),
        "--head",
        str(head),
        "--probes",
        "compile",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2, done.stderr
    assert "workload 'net' fails on base and head before any probe measured it" in done.stderr
    assert "no weights here" in done.stderr and "Traceback" not in done.stderr
    (base / "model.py").write_text(BREAK_FREE.replace("{change}", "pass"))
    done = perfcheck(
        "review",
        "--base",
        str(base),
        "--head",
        str(head),
        "--probes",
        "compile",
        "--out",
        str(tmp_path / "out2"),
    )
    assert done.returncode == 1, done.stderr
    result = json.loads((tmp_path / "out2" / "result.json").read_text())
    assert [f["category"] for f in result["findings"]] == ["probe_crashed"]
