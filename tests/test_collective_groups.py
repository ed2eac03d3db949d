"""Each collective's process group across graph breaks (issue 44, item 4): the comparison of the
ddp and fsdp probes' recorded calls (perfcheck/core/probes/collective_groups.py) and the reading
of the flight recorder's entries (perfcheck/runner/distributed/comm_groups.py). The entries below have the
shape torch 2.13's gloo flight recorder gave for a model that all-reduces on a group of its own in
forward and, on head, after a print that breaks the graph, and the one Inductor's output code
gives (its frames cut to the ones that matter; NCCL's recorder, on an H100 with torch 2.11, gave
entries of the same shape); tests/test_ddp.py and tests/test_fsdp.py review such models for real
under torchrun."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfcheck.core.causes import by_cause
from perfcheck.core.explain import explain
from perfcheck.core.matrix import resolve
from perfcheck.core.probes.collective_groups import (
    CollectiveCall,
    RankCalls,
    group_changes,
    group_findings,
    place_said,
    resumed_after,
)
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding

MODEL = SourceLocation(path="model.py", line=14, function="forward", code="def forward(self, x):")
BREAK = SourceLocation(
    path="model.py", line=18, function="torch_dynamo_resume_in_forward_at_18", code='print("synced")'
)
NAMED_AT = SourceLocation(path="model.py", line=17, function="forward", code="dist.all_reduce(s, group=g)")


def _call(**kw: Any) -> CollectiveCall:
    fields: dict[str, Any] = {
        "op": "all_reduce",
        "dtype": "float32",
        "bytes": 4,
        "group": "1",
        "ranks": [0, 1],
    }
    return CollectiveCall(**{**fields, **kw})


# DDP's own bucket all-reduce in backward, on WORLD, from no frame of the tree.
BUCKET = _call(bytes=33_280, group="0", world=True)
NAMED = _call(graph=True, frame="forward", frame_at=MODEL, site=NAMED_AT)
ON_WORLD = _call(
    group="0", world=True, graph=True, frame="torch_dynamo_resume_in_forward_at_18", frame_at=BREAK, site=None
)


def _ranks(*calls: CollectiveCall, ranks: tuple[int, ...] = (0, 1)) -> list[RankCalls]:
    return [RankCalls(ranks=list(ranks), calls=list(calls))]


def test_a_resumed_function_names_the_break_it_resumes_after() -> None:
    assert resumed_after("torch_dynamo_resume_in_forward_at_18") == ("forward", 18)
    # A break in code Dynamo resumed already: the last break, and the function it all belongs to.
    assert resumed_after("torch_dynamo_resume_in_torch_dynamo_resume_in_forward_at_18_at_25") == (
        "forward",
        25,
    )
    assert resumed_after("resume_at_3_forward") is None and resumed_after(None) is None


def test_a_collective_moved_onto_the_default_group_by_a_break_is_found_at_the_break() -> None:
    base, head = _ranks(NAMED, BUCKET), _ranks(ON_WORLD, BUCKET)
    [change] = group_changes(base, head)
    assert (change.change, change.ranks, change.moved_how) == (
        "default group",
        [0, 1],
        "across a graph break",
    )
    eager_base = _ranks(_call(frame="forward", frame_at=NAMED_AT, site=NAMED_AT), BUCKET)
    eager_head = _ranks(
        _call(group="0", world=True, frame="forward", frame_at=NAMED_AT.model_copy(update={"line": 19})),
        BUCKET,
    )
    [f] = group_findings("net", "ddp", [("eager", eager_base, eager_head), ("compiled_ddp", base, head)])
    # Both variants are one finding; the compiled one's break says where.
    assert f.category == "collective_group_changed" and f.severity == "error"
    assert f.evidence["variants"] == "eager, compiled_ddp"
    assert f.location == BREAK.model_copy(update={"function": "forward"})
    assert f.message == (
        "all_reduce of 4 B float32 now runs on the default group (WORLD, ranks 0, 1), where base ran it "
        "on group 1 (ranks 0, 1) (eager, compiled_ddp); in compiled_ddp it moved from the compiled "
        "graph of forward (model.py) to the compiled graph of forward after the graph break at model.py:18"
    )
    entry = resolve(f)
    assert entry is not None and entry.cause.startswith("a graph break moved the collective into other code")
    # Eager alone: no break, the call's own line.
    [eager] = group_findings("net", "ddp", [("eager", eager_base, eager_head)])
    assert eager.location is not None and eager.location.line == 19
    assert eager.message.endswith(", in eager code of forward at model.py:19")
    assert eager.evidence["moved"] == ""


def test_fewer_ranks_and_another_group_and_what_is_no_change() -> None:
    base = _ranks(NAMED, BUCKET)
    # new_group([0]): rank 0 runs it alone, rank 1, no member, not at all.
    fewer = [
        RankCalls(
            ranks=[0],
            calls=[_call(group="2", ranks=[0], graph=True, frame="forward", frame_at=MODEL), BUCKET],
        ),
        RankCalls(ranks=[1], calls=[BUCKET]),
    ]
    [f] = group_findings("net", "fsdp", [("compiled_layers", base, fewer)])
    assert f.evidence["change"] == "fewer ranks" and f.evidence["ranks"] == [0]
    assert (
        "now runs on group 2 (rank 0 only), where base ran it on group 1 (ranks 0, 1): 1 of base's 2 ranks"
        in (f.message)
    )
    assert f.location is None  # in a graph, with no node for it: the function's first line says nothing
    entry = resolve(f)
    assert entry is not None and entry.cause.startswith("the collective now runs on a group of fewer ranks")
    other = _ranks(_call(group="3", ranks=[2, 3], graph=True, frame="forward", frame_at=MODEL, site=NAMED_AT))
    [g] = group_changes(_ranks(NAMED, ranks=(0, 1, 2, 3)), _ranks(other[0].calls[0], ranks=(0, 1, 2, 3)))
    assert g.change == "another group" and not g.moved
    # Another name for a group of the same ranks (each side names groups in the order it makes
    # them), a call added before it, a side that recorded nothing: none is a change of group.
    renamed = _ranks(_call(bytes=8, group="5"), NAMED.model_copy(update={"group": "7"}), BUCKET)
    assert group_changes(base, renamed) == []
    assert group_findings("net", "ddp", [("compiled_ddp", base, [])]) == []


def test_the_drift_a_group_change_brings_is_shown_under_it() -> None:
    [moved] = group_findings("net", "ddp", [("compiled_ddp", _ranks(NAMED), _ranks(ON_WORLD))])
    drift = Finding(
        category="collective_drift",
        severity="error",
        workload="net",
        probe="ddp",
        message="compiled_ddp: collectives per step changed",
        evidence={"variant": "compiled_ddp", "calls": [2, 2], "bytes": [8, 8]},
    )
    findings = explain([drift, moved])
    assert findings[0].message.endswith(
        "; likely from the collective moved to another process group at model.py:18 "
        "(all_reduce on the default group (WORLD, ranks 0, 1), was group 1 (ranks 0, 1))"
    )
    [group] = by_cause(findings)
    assert group.caused and group.leads == [1] and group.effects == [0]
    entry = resolve(findings[0])
    assert entry is not None and entry.cause.startswith("a collective moved to another process group")


def test_where_it_ran_in_words() -> None:
    assert place_said(BUCKET) == "torch's own code (no frame of the tree)"
    assert (
        place_said(BUCKET.model_copy(update={"graph": True}))
        == "a compiled graph outside the tree's code (backward)"
    )
    eager_after = ON_WORLD.model_copy(update={"graph": False})
    assert place_said(eager_after) == "eager code of forward after the graph break at model.py:18"


# -- the flight recorder's entries ----------------------------------------------------------------


def _frame(name: str, filename: str, line: int) -> dict[str, Any]:
    return {"name": name, "filename": filename, "line": line}


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from perfcheck.runner.distributed import comm_groups

    tree = tmp_path / "tree"
    tree.mkdir()
    model = tree / "model.py"
    model.write_text("".join(f"line {i}\n" for i in range(1, 31)))
    torch_dir = "/venv/lib/python3.11/site-packages/torch"
    # Innermost first, as the recorder lists them.
    in_graph = [
        _frame("redispatch", f"{torch_dir}/_ops.py", 882),
        _frame("forward", "<eval_with_key>.7", 9),
        _frame("_compiled_forward", "<eval_with_key>.9 codegen(compiled_function_forward)", 2),
        _frame("runtime_wrapper", f"{torch_dir}/_functorch/_aot_autograd/runtime_wrappers.py", 1141),
        _frame("_fn", f"{torch_dir}/_dynamo/eval_frame.py", 1446),
        _frame("torch_dynamo_resume_in_forward_at_18", str(model), 18),
        _frame("forward", str(model), 18),
        _frame("_run_ddp_forward", f"{torch_dir}/nn/parallel/distributed.py", 1715),
    ]
    eager = [
        _frame("all_reduce", f"{torch_dir}/distributed/distributed_c10d.py", 2950),
        _frame("forward", str(model), 21),
        _frame("_call_impl", f"{torch_dir}/nn/modules/module.py", 1789),
    ]
    backward = [_frame("_engine_run_backward", f"{torch_dir}/autograd/graph.py", 979)]
    # Inductor's output code carries a frame of the tree at the line that called the collective.
    inductor = [
        _frame("redispatch", f"{torch_dir}/_ops.py", 882),
        _frame("forward", str(model), 23),
        _frame("__call__", f"{torch_dir}/_inductor/output_code.py", 763),
        _frame("runtime_wrapper", f"{torch_dir}/_functorch/_aot_autograd/runtime_wrappers.py", 1141),
        _frame("forward", str(model), 14),
    ]
    entries = [
        {"record_id": 4, "process_group": ("0", "default_pg"), "profiling_name": "gloo:broadcast"},
        *[
            {
                "record_id": 5 + i,
                "process_group": group,
                "profiling_name": "gloo:all_reduce",
                "input_sizes": sizes,
                "input_dtypes": ["Float"],
                "frames": frames,
            }
            for i, (group, sizes, frames) in enumerate(
                [
                    (("2", "undefined"), [[1]], in_graph),
                    (("2", "undefined"), [[1]], in_graph),
                    (("1", "undefined"), [[1]], eager),
                    (("0", "default_pg"), [[4160]], backward),
                    (("1", "undefined"), [[2]], inductor),
                ]
            )
        ],
    ]
    monkeypatch.setattr(comm_groups, "_entries", lambda: entries)
    groups = {"0": ([0, 1], True), "1": ([0, 1], False), "2": ([0], False)}
    monkeypatch.setattr(comm_groups._Groups, "of", lambda self, name: groups[name])
    return tree


def test_the_recorders_entries_read_as_calls_with_their_group_and_place(recorded: Path) -> None:
    from perfcheck.runner.distributed import comm_groups

    assert comm_groups.mark() == 9
    sites = comm_groups.GraphSites()
    model = str(recorded / "model.py")
    # The resumed function's graph traced one collective, at line 19 of the tree.
    sites.by_frame[("torch_dynamo_resume_in_forward_at_18", model)] = {
        "1/0": [f'File "{model}", line 19, in forward\n    dist.all_reduce(s, group=g)\n']
    }
    calls = comm_groups.calls_since(4, recorded, sites)
    assert [(c.op, c.group, c.ranks, c.world, c.graph, c.count) for c in calls] == [
        ("all_reduce", "2", [0], False, True, 2),  # twice in a row: one entry, counted
        ("all_reduce", "1", [0, 1], False, False, 1),
        ("all_reduce", "0", [0, 1], True, False, 1),
        ("all_reduce", "1", [0, 1], False, True, 1),
    ]
    moved, eager, bucket, fused = calls
    assert (moved.dtype, moved.bytes, moved.frame) == ("float32", 4, "torch_dynamo_resume_in_forward_at_18")
    assert moved.frame_at is not None and (moved.frame_at.line, moved.frame_at.code) == (18, "line 18")
    assert moved.site is not None and moved.site.line == 19  # the graph's node: the call's own line
    assert eager.site == eager.frame_at and eager.site is not None and eager.site.line == 21
    assert (bucket.frame, bucket.site, bucket.bytes) == (None, None, 4160 * 4)
    assert fused.frame == "forward" and fused.frame_at is not None and fused.frame_at.line == 14
    assert fused.site is not None and fused.site.line == 23
    # A mark the ring has overwritten since: no partial step.
    assert comm_groups.calls_since(2, recorded, sites) == []
    # Every rank's calls gathered as lines; ranks that issued the same are one entry.
    lines = comm_groups.lines(calls)
    assert comm_groups.by_ranks([lines, lines, lines[1:]]) == [
        RankCalls(ranks=[0, 1], calls=calls),
        RankCalls(ranks=[2], calls=calls[1:]),
    ]


def test_gloos_collectives_take_the_size_of_the_group_they_were_recorded_on() -> None:
    from perfcheck.core.probes.ddp import Collective
    from perfcheck.runner.distributed.comm_groups import with_group_sizes

    # gloo's trace: every collective over the world's 2 ranks, whatever its group.
    traced = [
        Collective(op="all_reduce", group_size=2, dtype="float", bytes=4, count=2),
        Collective(op="all_reduce", group_size=2, dtype="float", bytes=4160 * 4),
        Collective(op="broadcast", group_size=2, dtype="float", bytes=8),
    ]
    recorded = [
        _call(group="2", ranks=[0]),  # the 4-byte all_reduce, on new_group([0])
        BUCKET,
        _call(op="broadcast", bytes=8, group="0", world=True),
        _call(
            op="broadcast", bytes=8, group="1", ranks=[0]
        ),  # one op and size on two sizes of group: as traced
    ]
    assert [c.group_size for c in with_group_sizes(traced, recorded, world=2)] == [1, 2, 2]
