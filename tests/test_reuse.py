"""Base's structural results reused from a store only a trusted run writes (issue 41 parts 2 and 3,
perfcheck/core/records.py, perfcheck/runner/reuse/store.py): what a record is keyed by and when one is
refused, and real reviews: a reused review says and finds what a cold one does, and a head, or a
store edited by hand, cannot make a review take a result that is not this base's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import fast_config, model_tree, write_tree

import perfcheck.core.probes  # noqa: F401  (the registry, for ProbeResult's metrics)
from perfcheck.cli.main import main
from perfcheck.core import records
from perfcheck.core.records import Record, RecordError, RecordKey, make_record, mismatch, parse_record
from perfcheck.core.render import cost_line
from perfcheck.measures import Environment
from perfcheck.review import ReviewRequest, run
from perfcheck.runner.budget import Budget
from perfcheck.runner.process import sandbox
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.runner.reuse.reads import Reads
from perfcheck.runner.reuse.store import file_sha256, store_problem
from perfcheck.schema import ProbeResult, Review
from perfcheck.settings import WorkloadConfig
from perfcheck.spec import ProbeSpec

ENV = Environment(python="3.11.0", torch="2.5.0", cpu="test cpu")


def _result(**update: object) -> ProbeResult:
    base = ProbeResult(
        probe="export", workload="net", side="base", status="ok", duration_s=1.0, read_files=["model.py"]
    )
    return base.model_copy(update=update)


def _key(files: dict[str, str], environment: Environment = ENV) -> RecordKey:
    return RecordKey(
        workload="net", probe="export", spec="a" * 64, environment=environment, tool="t", files=files
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _check(record: Record, files: dict[str, str | None], environment: Environment | None = ENV) -> str | None:
    return mismatch(
        record,
        spec="a" * 64,
        tool="t",
        entry="model.py:build",
        hashes=lambda paths: {p: files.get(p) for p in paths},
        environment=lambda: environment,
    )


def test_a_spec_digest_leaves_out_the_side_and_places_not_the_config() -> None:
    wl = WorkloadConfig(name="net", entry="model.py:build")
    base = ProbeSpec(probe="compile", side="base", tree="/a", workload=wl)
    assert records.spec_digest(base) == records.spec_digest(
        base.model_copy(update={"side": "head", "tree": "/b", "track_reads": True})
    )
    other = base.model_copy(update={"device": "cuda"})
    assert records.spec_digest(base) != records.spec_digest(other)


def test_a_record_matches_only_its_own_content_and_environment() -> None:
    record = make_record(_key({"model.py": _digest("x")}), _result())
    assert _check(record, {"model.py": _digest("x")}) is None
    assert _check(record, {"model.py": _digest("y")}) == "model.py differs"
    assert _check(record, {}) == "model.py is not in this base"
    assert "another environment (torch differ)" in (
        _check(record, {"model.py": _digest("x")}, ENV.model_copy(update={"torch": "2.6.0"})) or ""
    )
    assert (
        _check(record, {"model.py": _digest("x")}, None)
        == "this run's environment could not be fingerprinted"
    )
    # The workload's entry must be among its files: a record of another file says nothing of it.
    other = make_record(_key({"lib.py": _digest("x")}), _result(read_files=["lib.py"]))
    assert _check(other, {"lib.py": _digest("x")}) == "the workload's entry is not among its files"


def test_an_edited_renamed_or_oversized_record_is_refused() -> None:
    record = make_record(_key({"model.py": _digest("x")}), _result())
    name = records.file_name(record.key)
    assert parse_record(record.model_dump_json().encode(), name) == record
    edited = json.loads(record.model_dump_json())
    edited["result"]["status"] = "failed"  # the result changed, its key kept
    with pytest.raises(RecordError, match="digest does not match"):
        parse_record(json.dumps(edited).encode(), name)
    with pytest.raises(RecordError, match="another key's name"):
        parse_record(record.model_dump_json().encode(), "export-0000000000000000-0000000000000000.json")
    with pytest.raises(RecordError, match="larger than"):
        parse_record(b" " * (records.MAX_RECORD_BYTES + 1), name)
    escaping = json.loads(record.model_dump_json())
    escaping["key"]["files"] = {"../outside.py": _digest("x")}
    with pytest.raises(RecordError, match="not a record"):
        parse_record(json.dumps(escaping).encode(), name)


def test_only_a_finished_structural_result_with_its_reads_is_recordable() -> None:
    entry = "model.py:build"
    assert records.recordable(_result(), True, entry) is None
    assert records.recordable(_result(probe="timing"), False, entry)
    assert records.recordable(_result(status="crashed"), True, entry)
    assert records.recordable(_result(read_files=None), True, entry)
    assert records.recordable(_result(side="head"), True, entry)
    assert records.recordable(_result(read_files=["other.py"]), True, entry)
    sampled = _result(probe="compile", metrics={"backend": "eager", "graph_count": 1, "graph_break_count": 0,
                      "recompile_count": 0, "cold_compile_s": 1.0, "latency": None})  # fmt: skip
    assert records.as_recorded(sampled) is sampled  # nothing joined: recorded as it is
    assert records.entry_files("pkg.mod:build") == ("pkg/mod.py", "pkg/mod/__init__.py")
    assert records.entry_files("../ci/bench.py:build") == ()


def test_a_built_in_workload_is_recorded_and_matched_without_tree_files() -> None:
    """A built-in workload's code is perfcheck's own (the key's tool digest): it reads nothing of
    the tree, and is recorded and reused on the key's other parts; a tree workload still needs its
    entry among the files it read."""
    empty = _result(read_files=[])
    assert records.recordable(empty, True, "resnet50", built_in=True) is None
    assert records.recordable(empty, True, "resnet50") is not None
    record = make_record(_key({}), empty)
    found = {"spec": "a" * 64, "tool": "t", "entry": "resnet50", "hashes": lambda paths: {}}
    assert mismatch(record, **found, environment=lambda: ENV, built_in=True) is None  # type: ignore[arg-type]
    assert mismatch(record, **found, environment=lambda: ENV) == "the workload's entry is not among its files"  # type: ignore[arg-type]
    other = ENV.model_copy(update={"torch": "2.6.0"})
    assert "another environment" in (
        mismatch(record, **found, environment=lambda: other, built_in=True) or ""
    )  # type: ignore[arg-type]


def test_reads_keep_the_trees_files_read_not_written_nor_bytecode(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", {"a.py": "", "data/x.txt": "", "__pycache__/a.pyc": ""})
    reads = Reads(tree)  # its hook is called by hand: an audit hook could never leave this process
    reads._hook("open", (str(tree / "a.py"), "r", 0))
    reads._hook("open", (str(tree / "data" / "x.txt").encode(), None, 0))
    reads._hook("open", (str(tree / "written.txt"), "w", 0))
    reads._hook("open", (str(tree / "__pycache__" / "a.pyc"), "rb", 0))
    reads._hook("open", (str(tmp_path / "outside.py"), "r", 0))
    assert reads.files() == ["a.py", "data/x.txt"]
    (tmp_path / "outside.py").write_text("")
    (tree / "link.py").symlink_to(tmp_path / "outside.py")
    assert file_sha256(tree, "link.py") is None  # a link out of the tree is not the tree's file
    assert file_sha256(tree, "a.py") == hashlib.sha256(b"").hexdigest()


def test_a_store_inside_a_tree_or_missing_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, head = model_tree(tmp_path / "base"), model_tree(tmp_path / "head")
    out = tmp_path / "out"
    assert "inside a tree" in (store_problem(head / "store", "--record-base", (base, head), out, False) or "")
    assert "no such folder" in (
        store_problem(tmp_path / "none", "--reuse-base", (base, head), out, True) or ""
    )
    (tmp_path / "file").write_text("")
    assert "not a folder" in (store_problem(tmp_path / "file", "--reuse-base", (base, head), out, True) or "")
    assert store_problem(tmp_path / "store", "--record-base", (base, head), out, False) is None
    args = ["review", "--base", str(base), "--head", str(head), "--out", str(out)]
    code = main([*args, "--reuse-base", str(tmp_path / "none")])
    assert code == 2
    assert "--reuse-base" in capsys.readouterr().err


def test_the_time_line_counts_reused_steps() -> None:
    budget = Budget(600)
    budget.begin("head · net · compile", 10).done()
    budget.reused("base · net · compile", "reused")
    assert "base's compile reused" in cost_line([budget.costs()])


# Real reviews from here on.


def _review(
    base: Path,
    head: Path,
    out: Path,
    forks: ForkServers,
    record: Path | None = None,
    reuse: Path | None = None,
) -> tuple[Review, str]:
    return run(
        ReviewRequest(
            base=base,
            head=head,
            config=fast_config(),
            out_dir=out,
            probes=("compile", "export"),
            record_base=record,
            reuse_base=reuse,
        ),
        forks,
    )


def _findings(review: Review) -> list[tuple[str, str, str]]:
    return sorted((f.category, f.severity, f.message) for f in review.findings)


def _store(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# Head's model, besides a graph break: at import, it tries to plant a record in the store, edit
# every record there and list the folder; what it managed is written where its log shows it.
PLANTING = """
import os, pathlib
STORE = pathlib.Path({store!r})
tried = []
try:
    tried.append(f"sees {{sorted(os.listdir(STORE))}}")
except OSError as err:
    tried.append(f"list: {{err.strerror}}")
for name in ["compile-planted.json", *(p.name for p in STORE.glob("*.json"))] if STORE.is_dir() else []:
    try:
        (STORE / name).write_text("{{}}")
        tried.append(f"WROTE {{name}}")
    except OSError as err:
        tried.append(f"write {{name}}: {{err.strerror}}")
print("store attack:", tried, flush=True)
"""


@pytest.mark.e2e
def test_a_reused_review_finds_what_a_cold_one_does_and_head_cannot_touch_the_store(
    tmp_path: Path, fork_servers: ForkServers, capfd: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", change="print('break')")
    (head / "model.py").write_text((head / "model.py").read_text() + PLANTING.format(store=str(store)))

    _review(base, base, tmp_path / "rec", fork_servers, record=store)  # the default branch's run
    recorded = _store(store)
    assert sorted(n.split("-")[0] for n in recorded) == ["compile", "export"]
    cold, cold_comment = _review(base, head, tmp_path / "cold", fork_servers)
    capfd.readouterr()
    reused, comment = _review(base, head, tmp_path / "pr", fork_servers, reuse=store)
    log = capfd.readouterr()

    assert _store(store) == recorded, "head's code changed the store"
    assert (reused.verdict, _findings(reused)) == (cold.verdict, _findings(cold))
    assert cold.verdict == "fail" and any(f.category == "graph_break_added" for f in cold.findings)
    (wl,) = reused.workloads
    assert {r.probe: r.reused_from is not None for r in wl.base} == {"compile": True, "export": True}
    assert all(r.reused_from is None for r in wl.head)
    assert all(r.reused_from is None for w in cold.workloads for r in w.base)
    assert "Base reused: compile, export from the default-branch run" in comment
    assert "same content (1 file)" in comment
    assert "base's compile reused" in comment and "Base reused" not in cold_comment
    if sandbox.unavailable() is None:  # behind the walls the store is not even there to list
        head_log = (tmp_path / "pr" / "probes" / "head-net-compile.log").read_text()
        assert "WROTE" not in head_log and "store attack:" in head_log
    assert "reuse: base · net · compile: reused" in log.out + log.err


@pytest.mark.e2e
def test_edited_replayed_or_foreign_records_are_refused_and_base_probed(
    tmp_path: Path, fork_servers: ForkServers, capfd: pytest.CaptureFixture[str]
) -> None:
    store, forged = tmp_path / "store", tmp_path / "forged"
    base = model_tree(tmp_path / "base")
    other = model_tree(tmp_path / "other", change="h = h * 2")  # another content, same file names
    _review(base, base, tmp_path / "rec", fork_servers, record=store)
    forged.mkdir()
    for path in store.iterdir():
        record = Record.model_validate_json(path.read_bytes())
        if record.key.probe == "compile":
            # Edited: the result changed, its key (and digest) kept.
            edited = json.loads(path.read_text())
            edited["result"]["metrics"]["graph_count"] += 5
            (forged / path.name).write_text(json.dumps(edited))
            # From another environment, digest and name made anew as a forger would.
            foreign_env = record.key.environment.model_copy(update={"torch": "0.0.1"})
            foreign = make_record(record.key.model_copy(update={"environment": foreign_env}), record.result)
            (forged / records.file_name(foreign.key)).write_text(foreign.model_dump_json())
        else:
            # Replayed onto other content: its files re-hashed to match another tree, made whole again.
            files = {p: file_sha256(other, p) or "" for p in record.key.files}
            replayed = make_record(record.key.model_copy(update={"files": files}), record.result)
            (forged / records.file_name(replayed.key)).write_text(replayed.model_dump_json())
    capfd.readouterr()
    review, comment = _review(base, base, tmp_path / "pr", fork_servers, reuse=forged)
    log = capfd.readouterr()
    said = log.out + log.err

    (wl,) = review.workloads
    assert all(r.reused_from is None and r.status == "ok" for r in wl.base)
    assert "Base reused" not in comment
    assert "digest does not match" in said
    assert "another environment (torch differ)" in said
    assert "model.py differs" in said
    assert "probed afresh" in said


@pytest.mark.e2e
def test_where_the_review_measures_compile_latency_base_compile_is_reused_with_its_cache(
    tmp_path: Path,
    fork_servers: ForkServers,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compile latency's cache-cold samples are made in processes that start from base's compile
    cache: the record keeps that cache, packed as base's compile probe left it, and a review that
    measures compile latency reuses base's compile only with it unpacked; a packed cache that is
    not the record's is refused and base compiled afresh."""
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)  # cold caches: compile latency is measured
    base = model_tree(tmp_path / "base")
    store = tmp_path / "store"
    store.mkdir()
    # The samples made in the compiled timing workers (as by default), so that the compile probe's
    # own result is recordable; two pairs, as few as the gate takes.
    timing = "timing: {compiled: true, processes: 2, max_processes: 2}\n"
    config = fast_config("  measure: wall\n  runs: 2\n" + timing)

    def review(out: str, **where: Path) -> Review:
        probes = ("compile", "export", "timing")
        request = ReviewRequest(base, base, config, tmp_path / out, probes=probes, **where)
        return run(request, fork_servers)[0]

    review("rec", record_base=store)
    [packed] = store.glob("*.cache.tar")
    assert sorted(p.name.split("-")[0] for p in store.glob("*.json")) == ["compile", "export"]
    assert Record.model_validate_json(
        packed.with_name(packed.name.replace(".cache.tar", ".json")).read_bytes()
    ).cache
    capfd.readouterr()
    reused = review("pr", reuse_base=store)
    log = capfd.readouterr().err
    assert "reuse: base · net · compile: reused from the recorded run, same content (1 files); " in log, log
    assert "its compile cache unpacked (" in log
    assert "reuse: base · net · export: reused" in log, log
    [wl] = reused.workloads
    reused_probes = {r.probe: r.reused_from is not None for r in wl.base}
    assert reused_probes == {"compile": True, "export": True, "timing": False}
    assert wl.compile_latency is not None and wl.compile_latency.pairs >= 2
    head_compile = next(r for r in wl.head if r.probe == "compile")
    assert head_compile.metrics["from_base_cache"], "head's compile did not start from base's unpacked cache"

    # The packed cache changed after its record was made (same size): base compiles afresh.
    data = bytearray(packed.read_bytes())
    data[len(data) // 2] ^= 1
    packed.write_bytes(bytes(data))
    refused = review("pr2", reuse_base=store)
    log = capfd.readouterr().err
    assert "its packed compile cache refused: its content is not the record's (sha256 differs)" in log, log
    assert "reuse: base · net · compile: probed afresh" in log
    [wl] = refused.workloads
    assert {r.probe: r.reused_from is not None for r in wl.base} == {
        "compile": False,
        "export": True,
        "timing": False,
    }
    assert wl.compile_latency is not None and wl.compile_latency.pairs >= 2
