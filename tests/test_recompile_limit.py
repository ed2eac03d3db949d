"""A frame that recompiles until Dynamo's recompile limit stops it (issue 44, item 2): Dynamo
compiles it no more, and a call its cached entries do not accept runs eagerly. The review says
so at the line that makes the guarded value, with the limit, its value, the compiles it took and
the guard that kept failing; each frame's cache entries are in the table and result.json; what
the probe hears is what Dynamo counts.

The reviews are real (aot_eager on the CPU); the probe runs the workload's step four times on its
inputs, so a frame whose guard fails every step reaches a limit of 3 or less within it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.config import parse_config
from perfcheck.core.probes.compile import compare
from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics, Recompile, RecompileLimitHit, SourceLocation
from perfcheck.runner.dynamo import limit_log
from perfcheck.schema import ProbeResult

MODEL = """\
import torch
from torch import nn
{limit}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0

    def forward(self, x):
        {count}
        return self.fc(x) * (self.step % 7 + 1)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""
LOWERED = "torch._dynamo.config.recompile_limit = 2"
COUNT = "self.step += 1"  # line 12: an int attribute the forward reads, changed every step


def _tree(root: Path, limit: str = "", count: str = "pass") -> Path:
    return write_tree(root, {"model.py": MODEL.replace("{limit}", limit).replace("{count}", count)})


def _metrics(result: object, side: str) -> CompileMetrics:
    wl = result.workloads[0]  # type: ignore[attr-defined]
    m = getattr(wl, side)[0].metrics_as(CompileMetrics)
    assert m is not None
    return m


def test_a_head_whose_frame_hits_a_lowered_recompile_limit(review: ReviewFn, tmp_path: Path) -> None:
    """Head counts its steps in a Python int the forward reads and lowers the limit to 2: the
    third step's guard fails on a frame with two entries, Dynamo gives the frame up. One finding,
    at the line that makes the guarded value, with the recompiles that led there under it."""
    result = review(_tree(tmp_path / "base"), _tree(tmp_path / "head", LOWERED, COUNT), probes=("compile",))
    errors = [f for f in result.findings if f.severity == "error"]
    assert [f.category for f in errors] == ["recompile_limit_hit"], [f.message for f in result.findings]
    [hit] = errors
    assert hit.location is not None and (hit.location.path, hit.location.line) == ("model.py", 12)
    assert hit.location.code == COUNT
    assert hit.evidence["limit"] == "recompile_limit" and hit.evidence["value"] == 2
    assert hit.evidence["compiles"] == 2 and hit.evidence["cache_entries"] == 2
    assert hit.evidence["function"] == "forward"
    assert "self.step == " in hit.evidence["reason"]
    assert "hit the recompile limit torch._dynamo.config.recompile_limit (2) after 2 compiles" in hit.message
    assert "runs eagerly" in hit.message
    assert hit.evidence["led_there"]  # the recompile of the same guard, shown under it
    assert result.verdict == "fail"
    assert result.summary.startswith("1 cause: recompile limit hit at model.py:12 (forward runs eagerly)")

    base, head = _metrics(result, "base"), _metrics(result, "head")
    assert not base.recompile_limit_hits
    assert base.cache_entries == {"forward model.py:11": 1}
    [recorded] = head.recompile_limit_hits
    assert (recorded.limit, recorded.value, recorded.compiles) == ("recompile_limit", 2, 2)
    # Dynamo's own figures: a frame refused at the limit holds as many entries as the limit allows.
    assert head.cache_entries == {"forward model.py:11": 2}

    comment = render_comment(result)
    assert "Recompile limit hit" in comment
    assert (
        "| cache entries per frame (most) | 1 · forward (model.py:11) | "
        "2 · forward (model.py:11) · limit hit: forward (runs eagerly) | +1 |"
    ) in comment


def test_a_limit_lowered_under_a_frame_that_recompiles_every_step(review: ReviewFn, tmp_path: Path) -> None:
    """Base recompiles every step already (four compiles in the probe, under Dynamo's default 8:
    no limit hit); head only lowers the limit. The recompile is base's; the limit hit is new."""
    result = review(
        _tree(tmp_path / "base", count=COUNT), _tree(tmp_path / "head", LOWERED, COUNT), probes=("compile",)
    )
    assert [f.category for f in result.findings if f.severity == "error"] == ["recompile_limit_hit"]
    [hit] = result.findings
    assert hit.location is not None and hit.location.code == COUNT
    assert "led_there" not in hit.evidence  # base recompiled on that guard too
    assert _metrics(result, "base").cache_entries == {"forward model.py:11": 4}
    assert not _metrics(result, "base").recompile_limit_hits


def test_a_head_that_only_recompiles_is_a_recompile(review: ReviewFn, tmp_path: Path) -> None:
    """Under Dynamo's default limit the same counter recompiles every step and hits nothing: the
    recompile finding as before, and the frame's four entries in the table."""
    result = review(_tree(tmp_path / "base"), _tree(tmp_path / "head", count=COUNT), probes=("compile",))
    assert {f.category for f in result.findings} == {"recompile"}
    head = _metrics(result, "head")
    assert not head.recompile_limit_hits and head.cache_entries == {"forward model.py:11": 4}
    assert (
        "| cache entries per frame (most) | 1 · forward (model.py:11) | 4 · forward (model.py:11) | +3 |"
        in (render_comment(result))
    )


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("limits", "hit"),
    [
        ({"recompile_limit": 2}, "recompile_limit"),
        ({"recompile_limit": 8, "accumulated_recompile_limit": 3}, "accumulated_recompile_limit"),
    ],
)
def test_what_the_probe_hears_is_what_dynamo_counts(tmp_path: Path, limits: dict[str, int], hit: str) -> None:
    """In this process, the probe's recorders against Dynamo's own counters: one hit heard per hit
    counted (``counters["unimplemented"]``), the compiles before it as ``counters["frames"]``
    counts them, and the cache entries as ``_debug_get_cache_entry_list`` lists them."""
    import torch
    import torch._dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    from perfcheck.runner.dynamo.stats import cache_entries

    root = _tree(tmp_path / "w", count=COUNT)
    spec = importlib.util.spec_from_file_location(f"limit_model_{hit}", root / "model.py")
    assert spec is not None and spec.loader is not None
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(**limits):
        net, inputs = model.build("cpu")
        compiled = torch.compile(net, backend="eager")
        with limit_log.recording() as heard:
            for _ in range(6):
                compiled(*inputs)
        frames = dict(counters["frames"])
        dynamo_counted = limit_log.counted(counters)
        entries = cache_entries()
        listed = len(_debug_get_cache_entry_list(model.Net.forward))
    torch._dynamo.reset()

    [one] = heard
    assert one.limit == hit and one.value == limits[hit]
    assert dynamo_counted == {hit: 1}
    assert one.compiles == frames["ok"] and frames["total"] == frames["ok"] + 1  # the refused one
    assert one.code[0] == "forward" and one.code[1] == str(root / "model.py")
    assert entries == {(one.code): listed} and listed == one.compiles
    assert "self.step == " in one.reason


def test_the_warning_dynamo_gives_is_read() -> None:
    """torch 2.13's warning, as the probe log shows it (tests/test_recompile_limit.py's model)."""
    warning = (
        "torch._dynamo hit config.recompile_limit (2)\n"
        "   function: 'forward' (/w/head/model.py:11)\n"
        "   last reason: 0/1: self.step == 1                                           # self.step += 1  "
        "# w/head/model.py:12 in forward (HINT: torch.compile considers integer attributes of the "
        "nn.Module to be static.)\n"
        "User stack trace:\n"
        '  File "/w/head/model.py", line 12, in forward\n'
        "    self.step += 1\n"
        'To log all recompilation reasons, use TORCH_LOGS="recompiles".\n'
        "To diagnose recompilation issues, see https://docs.pytorch.org/docs/main/"
    )
    hit = limit_log.parse(warning)
    assert hit is not None
    assert (hit.limit, hit.value, hit.code) == ("recompile_limit", 2, ("forward", "/w/head/model.py", 11))
    assert hit.reason.startswith("0/1: self.step == 1") and "User stack trace" in hit.reason
    assert limit_log.parse("torch._dynamo hit something else") is None
    counted = {
        "unimplemented": {
            "Dynamo recompile limit exceeded\n  Explanation: ...\n  Developer debug context: Limit type: "
            "accumulated_recompile_limit\n": 2,
            "Data-dependent branching": 1,
        }
    }
    assert limit_log.counted(counted) == {"accumulated_recompile_limit": 2}


def _compile_result(side: str, m: CompileMetrics) -> ProbeResult:
    return ProbeResult(
        probe="compile", workload="net", side=side, status="ok", duration_s=1.0, metrics=m.model_dump()
    )  # type: ignore[arg-type]


def test_a_limit_hit_base_has_too_is_no_finding_and_its_guard_s_other_frames_stay() -> None:
    """The comparator: a head hit takes the recompiles of its guard in its own frame under it and
    leaves that guard's other frames' a finding of their own; a hit at the same frame on both
    sides is no finding."""
    at = SourceLocation(path="model.py", line=11, function="forward", code="def forward(self, x):")
    made = SourceLocation(path="model.py", line=12, function="forward", code=COUNT)
    guard = "self.step == 1  # self.step += 1  # model.py:12 in forward"
    hit = RecompileLimitHit(
        function="forward",
        location=at,
        limit="recompile_limit",
        value=2,
        compiles=2,
        reason=guard,
        made_at=made,
    )
    other = SourceLocation(path="other.py", line=3, function="helper", code="def helper(self):")
    head = CompileMetrics(
        backend="aot_eager",
        graph_count=1,
        graph_break_count=0,
        recompile_count=2,
        recompiles=[
            Recompile(function="forward", reason=guard, location=at, made_at=made, every_step=True),
            Recompile(function="helper", reason=guard, location=other, every_step=True),
        ],
        cold_compile_s=0.1,
        cache_entries={"forward model.py:11": 2},
        recompile_limit_hits=[hit],
    )
    base = CompileMetrics(
        backend="aot_eager", graph_count=1, graph_break_count=0, recompile_count=0, cold_compile_s=0.1
    )
    config = parse_config("budgets: {max_new_graph_breaks: 0}", "c.yml")
    found = compare("net", _compile_result("base", base), _compile_result("head", head), config).findings
    assert [f.category for f in found] == ["recompile_limit_hit", "recompile"]
    assert found[0].evidence["led_there"] == "forward (model.py:11): self.step == 1"
    assert (found[0].evidence["compiles"], found[0].evidence["cache_entries"]) == (2, 2)
    assert found[0].location == made
    assert found[1].evidence["function"] == "helper"
    moved = head.model_copy(
        update={
            "recompile_limit_hits": [hit.model_copy(update={"location": at.model_copy(update={"line": 15})})]
        }
    )
    same = compare("net", _compile_result("base", moved), _compile_result("head", head), config).findings
    assert not same  # the same frame (by its source text) hit the same limit on base: nothing new


def test_a_slower_step_goes_under_the_limit_hit_that_explains_it() -> None:
    """A cause like a new break: a slower step in the same workload names it, is grouped under it,
    and the matrix says why (the frame runs eagerly), before a plain recompilation beside it."""
    from perfcheck.core.causes import by_cause
    from perfcheck.core.explain import explain
    from perfcheck.core.matrix import resolve
    from perfcheck.schema import Finding

    made = SourceLocation(path="model.py", line=12, function="forward", code=COUNT)
    hit = Finding(
        category="recompile_limit_hit",
        severity="error",
        workload="net",
        probe="compile",
        location=made,
        message="`forward` hit the recompile limit",
        evidence={"function": "forward", "limit": "recompile_limit", "value": 2, "reason": "self.step == 1"},
    )
    slower = Finding(
        category="throughput_regression",
        severity="error",
        workload="net",
        probe="timing",
        message="steps 20 % slower",
        evidence={"ratio": 1.2},
    )
    found = explain([slower, hit])
    [group] = by_cause(found)
    assert group.title == "the recompile limit hit at model.py:12 (forward runs eagerly)"
    assert [found[i].category for i in group.leads] == ["recompile_limit_hit"]
    assert [found[i].category for i in group.effects] == ["throughput_regression"]
    said = resolve(found[0])
    assert said is not None and said.cause.startswith("the recompile limit hit in this review")
