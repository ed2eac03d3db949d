"""`perfcheck bisect` on a real git repository the test builds: nine commits, one that adds an
`.item()` graph break, a later one that adds a float64 buffer, one that does not import, the rest
harmless. Each finding of the good → bad review must name its own commit, in at most
⌈log2 n⌉ + 1 probe runs per finding, and the commit that does not import is skipped."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODEL, git, git_commit, perfcheck_cli

from perfcheck.bisect_schema import BisectDoc, Commit, Located
from perfcheck.core.bisect import Search, Target, markdown, next_index

CONFIG = "workloads: [{name: net, entry: model.py:build, timeout_s: 300}]\ncompile: {backend: aot_eager}\n"
FLOAT64 = """\
        self.register_buffer("scale", torch.full((32,), 0.5, dtype=torch.float64))
"""


def history(repo: Path) -> dict[str, str]:
    """good, then eight commits; the subjects say what each does."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    model = MODEL.replace("{change}", "pass")
    shas = {"good": git_commit(repo, "a classifier", {"model.py": model, "perfcheck.yml": CONFIG})}
    shas["docs"] = git_commit(repo, "docs: how to run it", {"README.md": "python model.py\n"})
    broken = model.replace("        pass\n", "        s = h.sum().item()\n")
    shas["item"] = git_commit(repo, "log the activation sum", {"model.py": broken})
    shas["comment"] = git_commit(
        repo, "a comment", {"model.py": broken.replace("class Net", "# the net\nclass Net")}
    )
    no_import = "import not_a_real_module  # noqa\n" + broken
    shas["no_import"] = git_commit(repo, "try a helper module", {"model.py": no_import})
    shas["fixed"] = git_commit(repo, "drop the helper module", {"model.py": broken})
    wide = broken.replace("        self.calls = 0\n", "        self.calls = 0\n" + FLOAT64).replace(
        "        return self.fc2(h)", "        h = (h * self.scale).float()\n        return self.fc2(h)"
    )
    shas["float64"] = git_commit(repo, "scale in double precision", {"model.py": wide})
    shas["readme"] = git_commit(repo, "readme: more", {"README.md": "python model.py --help\n"})
    shas["bad"] = git_commit(repo, "tidy", {"notes.txt": "done\n"})
    return shas


@pytest.mark.e2e
def test_each_finding_bisects_to_its_own_commit_and_the_unimportable_one_is_skipped(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = history(repo)
    out = tmp_path / "out"
    done = perfcheck_cli(
        "bisect", "--repo", str(repo), "--good", shas["good"], "--bad", "main", "--probes", "compile,export",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = BisectDoc.model_validate_json((out / "bisect.json").read_text())
    assert doc.commits == 8 and doc.good.sha == shas["good"] and doc.bad.sha == shas["bad"]
    first = {f.key: f for f in doc.findings}
    [brk] = [f for f in doc.findings if f.category == "graph_break_added"]
    assert brk.first_bad is not None and brk.first_bad.sha == shas["item"]
    assert brk.first_bad.subject == "log the activation sum" and brk.first_bad.author == "Ada"
    assert brk.last_good is not None and brk.last_good.sha == shas["docs"]
    ir = [f for f in doc.findings if f.category == "export_ir_changed"]
    assert ir and all(f.outcome == "found" for f in ir)
    # Every op of the IR change came with the float64 buffer (export drops the unused .item()),
    # though the graph break's commit lies before it on the same path.
    commits = {f.label: f.first_bad.sha for f in ir if f.first_bad}
    assert set(commits.values()) == {shas["float64"]}, commits
    assert any("_to_copy" in label for label in commits), commits
    bound = math.ceil(math.log2(doc.commits)) + 1
    assert all(f.probe_runs <= bound for f in first.values()), [(f.label, f.probe_runs) for f in doc.findings]
    assert [s.sha for s in doc.skipped] == [shas["no_import"]]
    assert "not_a_real_module" in doc.skipped[0].why
    # No commit was probed twice: two paths (compile, export) over the eight commits at most.
    assert doc.probe_runs <= 2 * doc.commits
    assert "first bad" in done.stdout and shas["item"][:10] in done.stdout
    assert "commit 4/8" in done.stderr  # progress, per probe run
    section = (out / "bisect.md").read_text()
    assert "Where each finding came from" in section and shas["item"][:10] in section
    assert "Unverified" not in section  # the user's own search, run where it is read
    # In a review the section came from the probe job, which ran the PR's code: shown unverified,
    # with the command that checks each blame, which runs as printed and blames the same commit.
    shown = markdown(doc.model_copy(update={"findings": [brk]}), from_probe_job=True)
    assert "**Unverified:**" in shown
    [command] = [line for line in shown.splitlines() if line.startswith("perfcheck bisect ")]
    bin_dir = Path(sys.executable).parent
    rerun = subprocess.run(
        ["bash", "-c", f"{command} --out {tmp_path / 'check'}"],
        cwd=repo, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    checked = BisectDoc.model_validate_json((tmp_path / "check" / "bisect.json").read_text())
    [again] = [f for f in checked.findings if f.key == brk.key]
    assert again.first_bad is not None and again.first_bad.sha == shas["item"]
    # The user's work tree was never touched.
    assert git(repo, "status", "--porcelain") == "" and git(repo, "rev-parse", "HEAD") == shas["bad"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("good", "bad", "expected"),
    [
        ("bad", "good", "is not an ancestor of"),
        ("no-such-rev", "bad", "no such commit"),
        ("good", "good", "the same commit"),
    ],
)
def test_a_range_that_is_not_a_history_is_bad_input(
    tmp_path: Path, good: str, bad: str, expected: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {
        "good": git_commit(
            repo, "one", {"model.py": MODEL.replace("{change}", "pass"), "perfcheck.yml": CONFIG}
        )
    }
    shas["bad"] = git_commit(repo, "two", {"README.md": "x\n"})
    done = perfcheck_cli(
        "bisect", "--repo", str(repo), "--good", shas.get(good, good), "--bad", shas.get(bad, bad),
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


def _t(name: str) -> Target:
    return Target(name, name, "graph_break_added", "net", "compile")


def test_the_search_halves_the_interval_and_steps_around_skipped_commits() -> None:
    # first bad at 6 of 8, commit 4 does not build
    s = Search(_t("x"), good=0, bad=8)
    truth = {i: (None if i == 4 else i >= 6) for i in range(1, 8)}
    seen = []
    while (i := next_index([s])) is not None:
        seen.append(i)
        s.record(i, truth[i])
    assert (s.good, s.bad, s.candidates()) == (5, 6, [6]) and seen == [4, 3, 5, 6]
    # a skipped commit right before the first bad one leaves two candidates
    t = Search(_t("y"), good=0, bad=4)
    for i, present in ((2, False), (3, None)):
        t.record(i, present)
    assert t.done() and t.candidates() == [3, 4]


def test_the_section_escapes_what_the_commits_say() -> None:
    c = Commit(sha="a" * 40, subject="@everyone fix #12 <b>now</b>", author="Mallory `x`")
    doc = BisectDoc(
        good=c,
        bad=c,
        commits=2,
        probes=["compile"],
        findings=[
            Located(
                key="k",
                label="New graph break | x",
                category="graph_break_added",
                workload="net",
                probe="compile",
                outcome="found",
                first_bad=c,
                last_good=c,
                probe_runs=1,
            ),
        ],
        probe_runs=1,
    )
    text = markdown(doc)
    assert "@everyone" not in text and "<b>" not in text and "#12" not in text.replace("#<!-- -->12", "")
    assert json.loads(doc.model_dump_json())["schema_version"] == 1


@pytest.mark.e2e
def test_a_folder_that_is_no_repository_or_an_unknown_probe_is_refused_first(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = perfcheck_cli("bisect", "--repo", str(plain), "--good", "a", "--bad", "b")
    assert done.returncode == 2 and "not a git repository" in done.stderr, done.stderr
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    good = git_commit(repo, "one", {"model.py": MODEL.replace("{change}", "pass")})
    git_commit(repo, "two", {"README.md": "x\n"})
    out = tmp_path / "out"
    done = perfcheck_cli(
        "bisect",
        "--repo",
        str(repo),
        "--good",
        good,
        "--bad",
        "main",
        "--probes",
        "nosuch",
        "--out",
        str(out),
    )
    assert done.returncode == 2 and "unknown probe(s) nosuch" in done.stderr, done.stderr
    assert not out.exists()  # no tree was written out


@pytest.mark.e2e
def test_the_probe_job_bisects_from_the_merge_base_and_says_what_the_base_branch_brought(
    tmp_path: Path,
) -> None:
    """`perfcheck probe --bisect auto`, as the workflow's probe job runs it: base is the base
    branch's tip, head a PR branched off before a fix landed there. The break the base branch
    fixed is at the merge base already (the PR lacks the fix, it did not add the break); the one
    the PR's own commit adds is found at that commit."""
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    model = MODEL.replace("{change}", "pass")
    summed = model.replace("        pass\n", "        s = h.sum().item()\n")
    fork_point = git_commit(repo, "log the sum", {"model.py": summed, "perfcheck.yml": CONFIG})
    git(repo, "checkout", "-q", "-b", "pr")
    git_commit(repo, "readme", {"README.md": "python model.py\n"})
    mean = git_commit(
        repo,
        "log the mean",
        {"model.py": summed.replace("item()\n", "item()\n        m = h.mean().item()\n")},
    )
    git(repo, "checkout", "-q", "main")
    fixed = git_commit(repo, "drop the sum", {"model.py": model})
    base, head = tmp_path / "base", tmp_path / "head"
    for dest, ref in ((base, "main"), (head, "pr")):
        subprocess.run(["git", "clone", "-q", "-b", ref, str(repo), str(dest)], check=True)
    out = tmp_path / "out"
    done = perfcheck_cli(
        "probe", "--base", str(base), "--head", str(head), "--probes", "compile", "--out", str(out),
        "--bisect", "auto", "--base-sha", fixed,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"from the merge base {fork_point[:10]}" in done.stderr, done.stderr[-3000:]
    doc = BisectDoc.model_validate_json((out / "bisect.json").read_text())
    assert (doc.good.sha, doc.bad.sha, doc.commits) == (fork_point, mean, 2)
    by_code = {f.key.rsplit("|", 1)[-1]: f for f in doc.findings}
    summed_at = by_code["s = h.sum().item()"]
    assert summed_at.outcome == "present_at_good" and "merge base" in (summed_at.note or "")
    mean_at = by_code["m = h.mean().item()"]
    assert mean_at.outcome == "found" and mean_at.first_bad is not None and mean_at.first_bad.sha == mean
    assert doc.probe_runs == 2  # the merge base, then the commit between

    # The report (the publish side) keeps the shard's search and shows it in the comment.
    config = tmp_path / "perfcheck.yml"
    config.write_text(CONFIG)
    report = perfcheck_cli(
        "report", str(out), "--config", str(config), "--probes", "compile", "--out", str(tmp_path / "rep")
    )
    assert report.returncode == 1, report.stderr[-3000:]
    comment = (tmp_path / "rep" / "comment.md").read_text()
    section = comment[comment.index("Where each finding came from") :]
    assert "already at the merge base" in section and f"`{mean[:10]}` log the mean (Ada)" in section

    # The section comes from the job that ran PR code. Forged, it blames a commit of the base
    # branch (outside the range searched), a real one under another subject and author, or has
    # the last good commit after the first bad one: the report refuses each, exit 2.
    probed = json.loads((out / "probes.json").read_text())
    entry = next(i for i, f in enumerate(probed["bisect"]["findings"]) if f["outcome"] == "found")
    real = probed["bisect"]["findings"][entry]
    forgeries = {
        "is not a commit of the range searched": {"first_bad": {"sha": fixed, "subject": "drop the sum",
                                                                 "author": "Ada"}},
        "under another subject or author": {"first_bad": {**real["first_bad"], "subject": "rm -rf /",
                                                          "author": "Linus"}},
        "expected a last good commit before the first bad one": {"first_bad": real["last_good"],
                                                                 "last_good": real["first_bad"]},
    }  # fmt: skip
    for i, (why, change) in enumerate(forgeries.items()):
        doc = json.loads(json.dumps(probed))
        doc["bisect"]["findings"][entry].update(change)
        forged = tmp_path / f"forged{i}" / "probes.json"
        forged.parent.mkdir()
        forged.write_text(json.dumps(doc))
        done = perfcheck_cli(
            "report", str(forged), "--config", str(config), "--probes", "compile", "--out", str(forged.parent)
        )
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        assert why in done.stderr and "Traceback" not in done.stderr
        assert not (forged.parent / "comment.md").exists()


def test_a_search_out_of_time_says_between_which_commits(tmp_path: Path) -> None:
    from perfcheck.bisect import _located, commit_info

    repo = tmp_path / "repo"
    shas = list(history(repo).values())
    s = Search(_t("x"), good=0, bad=len(shas) - 1)
    s.record(4, False)
    entry = _located(s, [commit_info(repo, sha) for sha in shas], budget_s=60)
    assert entry.outcome == "unfinished" and entry.last_good is not None and entry.first_bad is not None
    assert (entry.last_good.sha, entry.first_bad.sha) == (shas[4], shas[-1])
    assert "time budget (60 s) ran out with 3 commits" in (entry.note or "")
    assert "at or before" in markdown(
        BisectDoc(good=entry.last_good, bad=entry.first_bad, commits=8, probes=["compile"], findings=[entry],
                  probe_runs=1)
    )  # fmt: skip


def test_the_report_keeps_only_what_it_found_itself_from_one_range() -> None:
    """A probe job's document is untrusted: entries for findings the review does not have, or a
    search of another head, are dropped; shards that searched different ranges are refused."""
    from perfcheck.core.bisect import kept, merge, targets
    from perfcheck.measures import SourceLocation
    from perfcheck.schema import Finding

    found = Finding(
        category="graph_break_added",
        workload="net",
        probe="compile",
        severity="error",
        message="Dynamo splits the graph here",
        location=SourceLocation(path="model.py", line=9, code="s = h.sum().item()"),
        evidence={"break_type": "Tensor.item"},
    )
    c1, c2 = (Commit(sha=ch * 40, subject="s", author="a") for ch in "12")

    def entry(key: str) -> Located:
        return Located(key=key, label="l", category="graph_break_added", workload="net", probe="compile",
                       outcome="found", first_bad=c2, last_good=c1)  # fmt: skip

    real = targets(found)[0].key
    doc = BisectDoc(
        good=c1,
        bad=c2,
        commits=1,
        span=[c1, c2],
        probes=["compile"],
        findings=[entry(real), entry("forged|net|x")],
        probe_runs=1,
    )
    shown = kept(doc, [found], head_revision=c2.sha)
    assert shown is not None and [f.key for f in shown.findings] == [real]
    assert kept(doc, [found], head_revision="9" * 40) is None
    assert kept(doc, [], head_revision=c2.sha) is None
    merged = merge([doc, doc.model_copy(update={"probe_runs": 3})])
    assert merged is not None and merged.probe_runs == 4 and len(merged.findings) == 4
    with pytest.raises(ValueError, match="different ranges"):
        merge([doc, doc.model_copy(update={"good": c2})])
    # A section that does not list its range, or whose span is not good..bad, cannot be checked.
    for span in ([], [c2, c1], [c1, Commit(sha="3" * 40, subject="s", author="a"), c2]):
        with pytest.raises(ValueError, match="not a search of"):
            kept(doc.model_copy(update={"span": span}), [found], head_revision=c2.sha)


# It reads time: under xdist its worker has a core of its own (conftest).
@pytest.mark.e2e
def test_a_slowdown_bisects_with_the_gates_paired_runs(tmp_path: Path) -> None:
    """--timing: each step of the search is the timing gate's paired runs of good against that
    commit, so a commit that triples the step's work is found like a graph break is."""
    from test_timing import HEAVY

    config = (
        "workloads: [{name: net, entry: model.py:build, timeout_s: 300}]\n"
        "timing: {compiled: false, processes: 3, max_processes: 5}\n"
        # Wide enough that an unchanged commit passes on a loaded machine (an A/A pair once read
        # -1.3 %, its interval from -5.4 %: inconclusive against the default); tripling is +195 %.
        "budgets: {max_throughput_regression_pct: 20}\n"
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")

    def model(repeat: int) -> str:
        return HEAVY.format(repeat=repeat, extra_mb=0, biased=[])

    good = git_commit(repo, "a net", {"model.py": model(1), "perfcheck.yml": config})
    git_commit(repo, "docs", {"README.md": "python model.py\n"})
    slow = git_commit(repo, "run the layers three times", {"model.py": model(3)})
    git_commit(repo, "readme", {"README.md": "python model.py --help\n"})
    git_commit(repo, "tidy", {"notes.txt": "done\n"})
    out = tmp_path / "out"
    done = perfcheck_cli(
        "bisect", "--repo", str(repo), "--good", good, "--bad", "main", "--probes", "timing", "--timing",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = BisectDoc.model_validate_json((out / "bisect.json").read_text())
    [slower] = [f for f in doc.findings if f.category == "throughput_regression"]
    assert slower.outcome == "found" and slower.first_bad is not None, slower
    assert slower.first_bad.sha == slow and slower.probe_runs <= math.ceil(math.log2(doc.commits)) + 1
    assert f"commit 2/4 {slow[:10]} · net · timing" in done.stderr  # the middle first, then 1


def test_a_range_is_checked_against_the_pull_requests_commits() -> None:
    from perfcheck.core.bisect import KnownCommit, git_subject, outside_pull

    good, first, bad = (Commit(sha=ch * 40, subject=f"s{ch}", author="a") for ch in "123")
    doc = BisectDoc(
        good=good, bad=bad, commits=2, span=[good, first, bad], probes=["compile"], findings=[], probe_runs=0
    )
    pull = {first.sha: KnownCommit("s2", "a", good.sha), bad.sha: KnownCommit("s3", "a", first.sha)}
    assert outside_pull(doc, pull, complete=True) == []
    assert outside_pull(doc, pull, complete=False)  # a PR longer than the API lists: unknown
    swapped = {**pull, bad.sha: KnownCommit("s3", "a", good.sha)}  # not first-parent after first
    assert outside_pull(doc, swapped, complete=True) == [f"{bad.sha[:12]} does not follow {first.sha[:12]}"]
    assert outside_pull(doc, {bad.sha: pull[bad.sha]}, complete=True) == [
        f"{first.sha[:12]} is not a commit of the pull request"
    ]
    assert git_subject("Fix the\nlong subject\n\nbody\n") == "Fix the long subject"
    assert git_subject("\r\nOne line\r\n") == "One line"
