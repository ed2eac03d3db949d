"""Every perfcheck.yml the documentation shows is one a user can copy: each YAML block of the
README and of the pages under docs/, and each settings file under examples/, parses, and the
configuration reference (docs/configuration.md) runs a whole review, compile latency included
(issue 30: a workload's own `probes:` list, the reference's first example, crashed every review
that measured compile latency)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import DEMO, REPO

from perfcheck.config import parse_config
from perfcheck.measures import CompileMetrics
from perfcheck.review import ReviewRequest, run
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.sides import SHARED_CACHE_ENV

README = REPO / "README.md"
CONFIGURATION = REPO / "docs" / "configuration.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
EXAMPLE_CONFIGS = sorted(p for p in (REPO / "examples").rglob("perfcheck.yml") if "workflows" not in p.parts)


def yaml_blocks(page: Path) -> list[tuple[str, str]]:
    """(page:line, text) of every ```yaml block of a page."""
    text = page.read_text()
    name = str(page.relative_to(REPO))
    blocks = []
    for match in re.finditer(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((f"{name}:{line}", match.group(1)))
    return blocks


def documented_yaml_blocks() -> list[tuple[str, str]]:
    """Every ```yaml block of the README and of the pages under docs/."""
    return [block for page in DOCS for block in yaml_blocks(page)]


def reference_block() -> str:
    """The configuration reference: the block of docs/configuration.md that lists the workloads."""
    [block] = [text for _, text in yaml_blocks(CONFIGURATION) if text.startswith("workloads:")]
    return block


def test_the_docs_show_their_config_blocks() -> None:
    # A guard on the guard: the blocks below are found (the README's essentials; the reference,
    # bisect, sweep, plugins).
    assert yaml_blocks(README)
    assert len(documented_yaml_blocks()) >= 5
    assert "probes: [compile, export]" in reference_block()
    assert EXAMPLE_CONFIGS


@pytest.mark.parametrize(("where", "text"), documented_yaml_blocks(), ids=lambda v: v if ".md:" in v else "")
@pytest.mark.usefixtures("registries")  # the plugin block names tests/toyplugin, which registers
def test_every_documented_config_block_parses(where: str, text: str) -> None:
    parse_config(text, where)


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_config_parses(path: Path) -> None:
    parse_config(path.read_text(), str(path))


def test_the_configuration_reference_runs_a_review_with_compile_latency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork_servers: ForkServers
) -> None:
    # The reference as printed, on the demo's model (its entry is the demo's `model.py:build`);
    # only what keeps a CPU test short changes: aot_eager for Inductor, compile latency by wall
    # clock over two compiles a side. Cold caches: compile latency is measured only then.
    text = reference_block().replace("backend: inductor", "backend: aot_eager")
    text = text.replace("measure: auto", "measure: wall").replace("runs: 3 ", "runs: 2 ")
    config = parse_config(text, "docs/configuration.md")
    assert config.workload("classifier").probes == ["compile", "export"]
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    review, comment = run(
        ReviewRequest(
            base=DEMO / "base",
            head=DEMO / "base",
            config=config,
            out_dir=tmp_path / "out",
            workloads=("classifier",),
        ),
        fork_servers,
    )
    assert review.verdict == "pass", comment
    [wl] = review.workloads
    assert {(r.side, r.probe) for r in wl.base + wl.head} == {
        (side, probe) for side in ("base", "head") for probe in ("compile", "export")
    }
    [base_compile] = [r for r in wl.base if r.probe == "compile"]
    latency = base_compile.metrics_as(CompileMetrics).latency
    assert latency is not None and len(latency.samples) >= 2  # more where two did not decide
    assert f"compile latency (wall clock, {len(latency.samples)} cache-cold per side)" in comment
