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
