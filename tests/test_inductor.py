"""The default backend, end to end: the demo through inductor (slow on a CPU, so only once)."""

from __future__ import annotations

import pytest
from conftest import DEMO, ReviewFn

from perfcheck.config import load_config
from perfcheck.measures import CompileMetrics
from perfcheck.runner.process.sides import SHARED_CACHE_ENV


@pytest.mark.inductor
def test_demo_with_inductor_reports_the_break_and_the_compile_split(
    review: ReviewFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The compile split is what is measured here: a cold compile, not the session's shared cache.
    monkeypatch.setenv(SHARED_CACHE_ENV, "")
    config = load_config(None, DEMO / "base")
    assert config.compile.backend == "inductor"
    # The break and the first compile's split are what this test is about; compile latency's
    # repeated cache-cold compiles have tests of their own (test_compile_latency.py).
    config = config.model_copy(update={"compile": config.compile.model_copy(update={"measure": "off"})})
    result = review(DEMO / "base", DEMO / "head", config=config, probes=("compile",))
    [gb] = [f for f in result.findings if f.category == "graph_break_added"]
    assert gb.location is not None and (gb.location.path, gb.location.line) == ("model.py", 17)
    head = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert head is not None and head.backend == "inductor"
    assert head.graph_count == 2 and head.graph_break_count == 1
    assert head.compile_breakdown_s["inductor"] > 0
    assert head.cold_compile_s >= head.compile_breakdown_s["inductor"]
