"""Every perfcheck.yml the documentation shows is one a user can copy: each YAML block of the
README and each settings file under examples/ parses, and the README's configuration reference runs
a whole review, compile latency included (issue 30: a workload's own `probes:` list, the reference's
first example, crashed every review that measured compile latency)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import DEMO, REPO

from perfcheck.config import parse_config
from perfcheck.review import ReviewRequest, run
from perfcheck.runner.forkserver import ForkServers
from perfcheck.runner.sides import SHARED_CACHE_ENV
from perfcheck.schema import CompileMetrics

README = REPO / "README.md"
EXAMPLE_CONFIGS = sorted(p for p in (REPO / "examples").rglob("perfcheck.yml") if "workflows" not in p.parts)


def readme_yaml_blocks() -> list[tuple[int, str]]:
    """(line, text) of every ```yaml block of the README."""
    text = README.read_text()
    blocks = []
    for match in re.finditer(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S):
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


def reference_block() -> str:
    """The README's configuration reference: the block that lists the workloads."""
    [block] = [text for _, text in readme_yaml_blocks() if text.startswith("workloads:")]
    return block


def test_the_readme_shows_its_config_blocks() -> None:
    # A guard on the guard: the blocks below are found (the reference, bisect, sweep, plugins).
    assert len(readme_yaml_blocks()) >= 4
    assert "probes: [compile, export]" in reference_block()
    assert EXAMPLE_CONFIGS


@pytest.mark.parametrize(
    ("line", "text"), readme_yaml_blocks(), ids=lambda v: str(v) if isinstance(v, int) else ""
)
def test_every_readme_config_block_parses(line: int, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tests"))  # the plugin block names tests/toyplugin
    parse_config(text, f"README.md:{line}")


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_config_parses(path: Path) -> None:
    parse_config(path.read_text(), str(path))


def test_the_readme_reference_runs_a_review_with_compile_latency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork_servers: ForkServers
) -> None:
    # The reference as printed, on the demo's model (its entry is the demo's `model.py:build`);
    # only what keeps a CPU test short changes: aot_eager for Inductor, compile latency by wall
    # clock over two compiles a side. Cold caches: compile latency is measured only then.
    text = reference_block().replace("backend: inductor", "backend: aot_eager")
    text = text.replace("measure: auto", "measure: wall").replace("runs: 3 ", "runs: 2 ")
    config = parse_config(text, "README.md")
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
