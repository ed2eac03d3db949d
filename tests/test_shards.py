"""`probe --shard I/N` on a fleet and `report` merging the shards (real probes, real torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import model_tree

from perfcheck.cli.main import main
from perfcheck.review import ShardError, merge_shards, parse_shard, shard_of
from perfcheck.schema import ProbeRun, Shard, SideInfo, WorkloadReview
from perfcheck.settings import WorkloadConfig

CONFIG = """
workloads:
  - {name: first, entry: model.py:build}
  - {name: second, entry: mlp-tiny}
  - {name: third, entry: model.py:build}
compile:
  backend: aot_eager
"""


def test_shards_split_round_robin_and_cover_everything() -> None:
    names = [WorkloadConfig(name=f"w{i}", entry="mlp-tiny") for i in range(7)]
    shards = [shard_of(names, Shard(index=i, count=3)) for i in (1, 2, 3)]
    assert [[w.name for w in s] for s in shards] == [["w0", "w3", "w6"], ["w1", "w4"], ["w2", "w5"]]
    assert shard_of(names[:1], Shard(index=2, count=2)) == []


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", ""])
def test_bad_shard_specs_are_refused(text: str) -> None:
    from perfcheck.review import UsageError

    with pytest.raises(UsageError, match="--shard"):
        parse_shard(text)


def _run(index: int, count: int, names: list[str], held: list[str]) -> tuple[str, ProbeRun]:
    side = SideInfo(tree="t")
    run = ProbeRun(
        tool_version="0",
        shard=Shard(index=index, count=count),
        workload_set=names,
        base=side,
        head=side,
        workloads=[WorkloadReview(name=n) for n in held],
    )
    return f"shard{index}.json", run


def test_merge_refuses_missing_repeated_or_foreign_shards() -> None:
    names = ["a", "b", "c"]
    ok = [_run(2, 2, names, ["b"]), _run(1, 2, names, ["a", "c"])]
    merged, _, _ = merge_shards(ok)
    assert [w.name for w in merged] == names
    with pytest.raises(ShardError, match="shard\\(s\\) 2/2 missing"):
        merge_shards(ok[1:])
    with pytest.raises(ShardError, match="given twice"):
        merge_shards([*ok, ok[0]])
    with pytest.raises(ShardError, match="different sets"):
        merge_shards([*ok, _run(3, 3, names, [])])
    with pytest.raises(ShardError, match="different runs"):
        merge_shards([ok[0], _run(1, 2, ["a", "b", "x"], ["a", "x"])])
    with pytest.raises(ShardError, match="holds"):
        merge_shards([ok[0], _run(1, 2, names, ["a"])])  # c was dropped


@pytest.mark.e2e
def test_two_runners_probe_their_shares_and_the_report_merges_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = h + float(h.sum().item()) * 0")
    (tmp_path / "perfcheck.yml").write_text(CONFIG)
    common = ["--base", str(base), "--head", str(head), "--config", str(tmp_path / "perfcheck.yml")]
    for i in (1, 2):
        out = tmp_path / f"shard{i}"
        assert main(["probe", *common, "--probes", "compile", "--shard", f"{i}/2", "--out", str(out)]) == 0
    held = [json.loads((tmp_path / f"shard{i}" / "probes.json").read_text()) for i in (1, 2)]
    assert [[w["name"] for w in h["workloads"]] for h in held] == [["first", "third"], ["second"]]

    capsys.readouterr()
    report = ["report", "--config", str(tmp_path / "perfcheck.yml"), "--out", str(tmp_path / "rep")]
    report += ["--probes", "compile"]  # what the run was asked for
    rc = main([*report, str(tmp_path / "shard2"), str(tmp_path / "shard1" / "probes.json")])
    assert rc == 1  # the head's .item() is a new graph break in both model.py workloads
    result = json.loads((tmp_path / "rep" / "result.json").read_text())
    assert [w["name"] for w in result["workloads"]] == ["first", "second", "third"]
    assert sorted(f["workload"] for f in result["findings"] if f["category"] == "graph_break_added") == [
        "first",
        "third",
    ]
    assert main([*report, str(tmp_path / "shard1")]) == 2
    assert "shard(s) 2/2 missing" in capsys.readouterr().err


@pytest.mark.e2e
def test_report_refuses_results_that_lack_or_add_a_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What PR code in the probe job could do to its artifact: drop the probe that would fail it,
    # or add one nobody asked for. Only the trusted config and plan say what must be there.
    tree = model_tree(tmp_path / "tree")
    (tmp_path / "perfcheck.yml").write_text(CONFIG)
    config = ["--config", str(tmp_path / "perfcheck.yml")]
    out = tmp_path / "probed"
    assert (
        main(
            [
                "probe",
                "--base",
                str(tree),
                "--head",
                str(tree),
                *config,
                "--probes",
                "compile",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    probed = json.loads((out / "probes.json").read_text())
    report = ["report", *config, "--probes", "compile", "--out", str(tmp_path / "rep")]
    tampered = tmp_path / "tampered.json"
    capsys.readouterr()

    dropped = json.loads(json.dumps(probed))
    dropped["workloads"][0]["head"] = []
    tampered.write_text(json.dumps(dropped))
    assert main([*report, str(tampered)]) == 2
    assert "missing: first/compile/head" in capsys.readouterr().err

    added = json.loads(json.dumps(probed))
    extra = dict(added["workloads"][0]["head"][0], probe="export", metrics={})  # a valid export result
    added["workloads"][0]["head"].append(extra)
    tampered.write_text(json.dumps(added))
    assert main([*report, str(tampered)]) == 2
    assert "not asked for: first/export/head" in capsys.readouterr().err

    twice = json.loads(json.dumps(probed))
    twice["workloads"][0]["base"].append(twice["workloads"][0]["base"][0])
    tampered.write_text(json.dumps(twice))
    assert main([*report, str(tampered)]) == 2
    assert "given twice: first/compile/base" in capsys.readouterr().err
    # asked for everything the config has, a compile-only set is incomplete
    assert main(["report", *config, "--out", str(tmp_path / "rep"), str(out)]) == 2


def test_a_stopped_shard_is_what_it_measured_and_never_passes(tmp_path: Path) -> None:
    """probes.json comes from the job that ran PR code: one that says it was stopped escapes the
    completeness check only into an inconclusive review, which says what is missing."""
    from perfcheck.config import parse_config
    from perfcheck.review import report

    config = parse_config(CONFIG, "perfcheck.yml")
    names = ["first", "second", "third"]
    name, run = _run(1, 1, names, names)
    with pytest.raises(ShardError, match="missing"):
        report([(name, run)], config, tmp_path / "whole")
    stopped = run.model_copy(update={"stopped": "SIGTERM", "stopped_after_s": 42.0})
    review, comment = report([(name, stopped)], config, tmp_path / "out")
    assert review.verdict == "inconclusive" and review.findings == []
    assert review.inconclusive[0] == (
        "the review was stopped by SIGTERM after 42 s: 18 of the 18 probe results asked for were not made"
    )
    assert "stopped by SIGTERM after 42 s" in comment
    with pytest.raises(ValueError, match="stopped"):
        ProbeRun.model_validate({**stopped.model_dump(), "stopped": "; rm -rf /"})
    # Stopped after every probe result was made (in the compile-latency step that follows them).
    from perfcheck.review import expected_results
    from perfcheck.schema import ProbeResult

    made = [
        WorkloadReview(
            name=n,
            **{
                side: [
                    ProbeResult(probe=p, workload=n, side=side, status="skipped", duration_s=0.0)
                    for w, p, s in sorted(expected_results(config))
                    if w == n and s == side
                ]
                for side in ("base", "head")
            },
        )
        for n in names
    ]
    late = stopped.model_copy(update={"workloads": made})
    review, _ = report([(name, late)], config, tmp_path / "late")
    assert review.verdict == "inconclusive" and review.inconclusive[0].endswith(
        "every probe result asked for was made; what comes after them (compile latency) was not"
    )


def test_a_folder_of_shards_is_read_for_its_shards_not_files_planted_inside_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 45: `report FOLDER` took a probes.json planted under a shard's files/head (where its
    # sandboxed probes, PR code, write) for a shard of the review.
    from perfcheck.cli.review_commands import shard_files

    for path in (
        "a/probes.json",
        "b/probes.json",
        "a/probes/files/head/probes.json",
        "b/probes/x/probes.json",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    assert shard_files(tmp_path) == [tmp_path / "a" / "probes.json", tmp_path / "b" / "probes.json"]
    assert "left out 2 probes.json inside a shard's own folder" in capsys.readouterr().err
    assert shard_files(tmp_path / "a") == [tmp_path / "a" / "probes.json"]
