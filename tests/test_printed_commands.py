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

from perfcheck.core.matrix import known, merged, resolve, where_of
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
