"""The commands a review prints run as printed and do nothing else (issue 45, item 3): every value
is quoted on its own after every substitution, in one pass, so that a forged probes.json or
result.json (a tree path, an option, a source path, a workload name) cannot make a reviewer's
pasted command, or the bot's published comment, execute what it likes. Each printed command of
every category is run under a real shell, with perfcheck and the other programs it names stubbed."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest
from conftest import write_tree
from pydantic import BaseModel

from perfcheck.core.matrix import Where, known, merged, resolve, where_of
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding, Review, SideInfo

HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "; touch {marker}",
    "x\ntouch {marker}",
    "''$(touch {marker})''{{head}}",
    "{{head}}$(touch {marker})",
    "' ; touch {marker} ; '",
]
STUBS = ("perfcheck", "less", "tlparse", "pip", "python", "python3", "tl_out")


def stub_path(root: Path) -> str:
    folder = root / "bin"
    folder.mkdir()
    for name in STUBS:
        stub = folder / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin"


@pytest.mark.e2e
def test_no_printed_command_executes_a_hostile_value(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"PATH": stub_path(tmp_path), "HOME": str(tmp_path)}
    entries = merged({})
    ran = 0
    for n, (category, template) in enumerate(itertools.product(sorted(known()), HOSTILE)):
        value = template.format(marker=markers / f"m{n}")
        # The printable parts of a result: control characters are refused by the schema where it
        # checks them, so the newline variant goes where it is not (a source path).
        clean = value.replace("\n", " ")
        review = Review(
            tool_version="0",
            verdict="fail",
            summary="",
            base=SideInfo(tree=f"base-{clean}"),
            head=SideInfo(tree=clean),
            out_dir=f"out-{clean}",
            rerun=["--config", clean.replace("`", "'")],
            rerun_env={"PYTHONPATH": clean.replace("`", "'")},
            workloads=[],
            findings=[],
        )
        finding = Finding(
            category=category,
            severity="error",
            workload="net",
            probe="compile",
            message="m",
            location=SourceLocation(path=value, line=3),
            evidence={"side": "head", "stage": value, "error": value},
        )
        resolved = resolve(finding, entries, where_of(review, traces={}))
        if resolved is None:
            continue
        for command in resolved.verify:
            ran += 1
            subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, timeout=30, check=False
            )
    assert ran > len(known())  # every category's commands ran, under each hostile value
    assert sorted(p.name for p in markers.iterdir()) == []


def _where() -> Where:
    review = Review(
        tool_version="0",
        verdict="fail",
        summary="",
        base=SideInfo(tree="b"),
        head=SideInfo(tree="h"),
        out_dir="out",
        workloads=[],
        findings=[],
    )
    return where_of(review, traces={})


def _commands(finding: Finding) -> list[str]:
    resolved = resolve(finding, merged({}), _where())
    return resolved.verify if resolved is not None else []


def test_a_finding_about_base_shows_base() -> None:
    """A verify command shows the side that has what it verifies: a removed break's log and a
    fixed export's are base's. Every category's commands name a side's log or trace by the
    finding's side, never head's by default."""
    from perfcheck.config import Config
    from perfcheck.core.compare import compare
    from perfcheck.core.probes.export import ExportMetrics
    from perfcheck.measures import CompileMetrics, GraphBreak
    from perfcheck.schema import ProbeResult, WorkloadReview

    for category in sorted(known()):
        about_base = Finding(
            category=category,
            severity="info",
            workload="net",
            probe="compile",
            message="m",
            evidence={"side": "base"},
        )
        for command in _commands(about_base):
            assert "/head-" not in command and "/files/head/" not in command, (category, command)

    def result(side: str, probe: str, metrics: BaseModel, status: str = "ok") -> ProbeResult:
        return ProbeResult.model_validate(
            {"probe": probe, "workload": "net", "side": side, "status": status, "duration_s": 1.0}
            | {"metrics": metrics.model_dump(mode="json")}
        )

    gb = GraphBreak(
        break_type="print", reason="print", location=SourceLocation(path="m.py", line=3, code="print(x)")
    )
    compiled = {
        side: CompileMetrics(
            backend="eager",
            graph_count=1,
            graph_break_count=len(breaks),
            graph_breaks=breaks,
            recompile_count=0,
            cold_compile_s=1.0,
        )
        for side, breaks in (("base", [gb]), ("head", []))
    }
    failed = ExportMetrics(error_type="UserError", error_message="data-dependent")
    exported = ExportMetrics(graph_sha256="0" * 64)
    workload = WorkloadReview(
        name="net",
        base=[result("base", "compile", compiled["base"]), result("base", "export", failed, "failed")],
        head=[result("head", "compile", compiled["head"]), result("head", "export", exported)],
    )
    found = {f.category: f for f in compare([workload], Config()).findings}
    for category, log in (
        ("graph_break_removed", "base-net-compile.log"),
        ("export_fixed", "base-net-export.log"),
    ):
        commands = _commands(found[category])
        assert any(c.endswith(f"less out/verify/probes/{log}") for c in commands), (category, commands)


def test_a_command_that_writes_a_folder_can_be_run_again() -> None:
    """tlparse writes `tl_out` where it is run and refuses to run again beside it ("Directory
    tl_out already exists; pass --overwrite to replace it or use -o OUTDIR"): every printed
    tlparse writes a folder of the verify review's own and replaces it."""
    parsed = [
        command
        for category in sorted(known())
        for command in _commands(
            Finding(category=category, severity="error", workload="net", probe="compile", message="m")
        )
        if "tlparse" in command
    ]
    assert len(parsed) >= 2  # a new break's, a slower compile's
    for command in parsed:
        assert command.endswith(" -o out/verify/tlparse --overwrite"), command


def test_a_rerun_sets_the_environment_the_review_imported_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probes inherit the review's environment, so a workload may import only through its
    PYTHONPATH: a printed review sets it as the review had it, quoted once, before the program.
    Only the variables that decide imports are carried, and a forged name is refused."""
    from perfcheck.config import Config
    from perfcheck.review import report
    from perfcheck.schema import ProbeRun

    review = Review(
        tool_version="0",
        verdict="fail",
        summary="",
        base=SideInfo(tree="b"),
        head=SideInfo(tree="h"),
        out_dir="out",
        rerun_env={"PYTHONPATH": "/w/base/src:/w/head src"},
        workloads=[],
        findings=[],
    )
    finding = Finding(
        category="graph_break_removed", severity="info", workload="net", probe="compile", message="m"
    )
    resolved = resolve(finding, merged({}), where_of(review, traces={}))
    assert resolved is not None and resolved.verify[0] == (
        "TORCH_LOGS=graph_breaks PYTHONPATH='/w/base/src:/w/head src' perfcheck review --out out/verify "
        "--no-compile-latency --base b --head h --workloads net --probes compile; "
        "less out/verify/probes/head-net-compile.log"
    )
    trace = Finding(
        category="kernel_mix_changed", severity="warning", workload="net", probe="profile", message="m"
    )
    traced = resolve(trace, merged({}), where_of(review, traces={"net": ("b.json", "h.json")}))
    assert traced is not None and traced.verify == [
        "perfcheck trace diff out/b.json out/h.json"
    ]  # imports nothing
    # A document of before the field validates; a name other than the import ones is refused.
    old = review.model_dump(mode="json")
    del old["rerun_env"]
    assert Review.model_validate(old).rerun_env == {}
    for forged in ({"LD_PRELOAD": "/x.so"}, {"PYTHONPATH=x; touch m;": "y"}, {"PYTHONPATH": "a`b"}):
        with pytest.raises(ValueError):
            Review.model_validate({**old, "rerun_env": forged})
    # The report job takes its own environment, never what the probe job wrote in probes.json.
    probed = ProbeRun(
        tool_version="0",
        shard={"index": 1, "count": 1},  # type: ignore[arg-type]
        workload_set=[],
        base=SideInfo(tree="b"),
        head=SideInfo(tree="h"),
        workloads=[],
        rerun_env={"PYTHONPATH": "/w/src"},
    )
    monkeypatch.setenv("PYTHONPATH", "/trusted/site")
    reported, _ = report([("probes.json", probed)], Config(), tmp_path, expected=set(), may_add=set())
    assert reported.rerun_env == {"PYTHONPATH": "/trusted/site"}


def test_what_the_probe_job_wrote_never_runs_from_a_pasted_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result.json forged by the job that ran PR code: PYTHONPATH into head (its
    sitecustomize.py), PYTHONHOME under head (its encodings package), head's own interpreter.
    No printed command carries them; the comment says what was left out and what to set."""
    from perfcheck.core.render import render_comment

    monkeypatch.chdir(tmp_path)
    forged = Review(
        tool_version="0",
        verdict="fail",
        summary="",
        base=SideInfo(tree="base"),
        head=SideInfo(tree="head"),
        out_dir="out",
        rerun=["--head-python", "head/py", "--base-python", f"{tmp_path}/head/bin/python", "--device", "cpu"],
        rerun_env={
            "PYTHONPATH": f"head:{tmp_path}/head/src:/opt/site",
            "PYTHONHOME": "head/home",
            "PYTHONUSERBASE": "/x",
        },
        workloads=[],
        findings=[
            Finding(
                category="graph_break_added", severity="error", workload="net", probe="compile", message="m"
            )
        ],
    )
    where = where_of(forged, traces={})
    resolved = resolve(forged.findings[0], merged({}), where)
    assert resolved is not None and resolved.verify
    for command in resolved.verify:
        assert "head/py" not in command and "PYTHONHOME" not in command and "PYTHONUSERBASE" not in command
        assert "head/bin/python" not in command and "head/src" not in command and ":head" not in command
        assert "--device cpu" in command or "perfcheck review" not in command
    pasted = [c for c in resolved.verify if "perfcheck review" in c]
    assert pasted and all("PYTHONPATH=/opt/site " in c for c in pasted), pasted
    comment = render_comment(forged)
    said = comment.split("The commands above leave out", 1)[1]
    for named in ("--head-python", "--base-python", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONPATH entries"):
        assert named in said, said


IMPORTED = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc(x)
        {change}
        return x


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""
IMPORTED_CONFIG = """\
workloads:
  - name: net
    entry: netpkg.model:build
compile:
  backend: aot_eager
  measure: 'off'
"""


@pytest.mark.e2e
def test_a_real_reviews_commands_run_as_printed_in_a_clean_environment(tmp_path: Path) -> None:
    """A review whose workload imports only through its PYTHONPATH (a namespace package under each
    tree's src/, which perfcheck does not find by itself). Base breaks the graph and fails
    torch.export on a data-dependent branch; head replaces it with torch.where and adds a print.
    Each printed command, pasted into a shell without PYTHONPATH, runs: the removed break's and
    the fixed export's show base's log, and the new break's tlparse runs twice."""
    import re
    import shutil
    import sys

    for side, change in (
        ("base", "if x.sum() > 0:\n            x = x * 2"),
        ("head", "x = torch.where(x.sum() > 0, x * 2, x)\n        print('head')"),
    ):
        write_tree(tmp_path / side / "src" / "netpkg", {"model.py": IMPORTED.replace("{change}", change)})
    (tmp_path / "perfcheck.yml").write_text(IMPORTED_CONFIG)
    bin_dir = str(Path(sys.executable).parent)
    # Only what a shell has: no PYTHONPATH; the tests' compile cache, which decides no import.
    clean = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)}
    clean |= {k: v for k, v in os.environ.items() if k == "PERFCHECK_COMPILE_CACHE"}
    path = f"{tmp_path / 'base' / 'src'}{os.pathsep}{tmp_path / 'head' / 'src'}"
    args = ["--base", "base", "--head", "head", "--config", "perfcheck.yml", "--out", "out"]
    args += ["--probes", "compile,export"]
    done = subprocess.run(
        [sys.executable, "-m", "perfcheck", "review", *args],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # the new break
    printed = set(re.findall(r"`([^`]*perfcheck review [^`]*)`", done.stdout))
    # The PYTHONPATH is the trees' own folders: a pasted command would import from the pull
    # request outside any sandbox, so the commands leave it out and the comment says to set it.
    assert printed and not any("PYTHONPATH" in c for c in printed), printed
    assert "PYTHONPATH entries that are relative or inside a tree" in done.stdout

    def run(command: str) -> subprocess.CompletedProcess[str]:
        # As the comment says: the user sets the PYTHONPATH the review had, where they trust it.
        env = {**clean, "PYTHONPATH": path}
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )

    [removed] = [c for c in printed if "base-net-compile.log" in c]
    shown = run(removed)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "Graph break" in shown.stdout and "base/src/netpkg/model.py" in shown.stdout
    [fixed] = [c for c in printed if "base-net-export.log" in c]
    shown = run(fixed)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "torch.export works again" in shown.stdout and "Traceback" in shown.stdout
    assert "data-dependent" in shown.stdout.lower()
    [parsed] = [c for c in printed if "tlparse" in c]
    assert parsed.endswith(" -o out/verify/tlparse --overwrite"), parsed
    if shutil.which("tlparse", path=clean["PATH"]) is None:
        # tlparse is not installed here (the command would install it): its review, twice.
        parsed = parsed.split(";", 1)[0]
    for _ in range(2):
        again = run(parsed)
        assert again.returncode in (0, 1), again.stderr[-3000:]
        assert "Traceback" not in again.stderr


def test_a_long_command_is_printed_whole() -> None:
    """Two absolute trees, the review's PYTHONPATH and a tlparse after the review pass the 500
    characters other code spans keep: a clipped command does not run, so commands are printed
    whole (up to markdown.COMMAND_LIMIT) in the comment and the job summary."""
    from perfcheck.core.render import render_comment
    from perfcheck.core.reports import render_job_summary

    deep = "/home/runner/work/a-long-repository-name/a-long-repository-name/" + "nested/" * 12
    review = Review(
        tool_version="0",
        verdict="fail",
        summary="1 regression",
        base=SideInfo(tree=f"{deep}base"),
        head=SideInfo(tree=f"{deep}head"),
        out_dir=f"{deep}perfcheck-out",
        rerun_env={"PYTHONPATH": f"{deep}site/lib:{deep}vendor/src"},
        workloads=[],
        findings=[
            Finding(
                category="graph_break_added",
                severity="error",
                workload="net",
                probe="compile",
                message="m",
                location=SourceLocation(path="model.py", line=3),
            )
        ],
    )
    resolved = resolve(review.findings[0], merged({}), where_of(review, traces={}))
    assert resolved is not None
    commands = resolved.verify
    assert min(len(c) for c in commands) > 500
    for rendered in (render_comment(review), render_job_summary(review)):
        assert f"`{commands[0]}`" in rendered and "more characters" not in rendered
    assert all(f"`{c}`" in render_comment(review) for c in commands)
