"""`perfcheck bisect` on a real git repository the test builds: nine commits, one that adds an
`.item()` graph break, a later one that adds a float64 buffer, one that does not import, the rest
harmless. Each finding of the good → bad review must name its own commit, in at most
⌈log2 n⌉ + 1 probe runs per finding, and the commit that does not import is skipped."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from conftest import MODEL, perfcheck_cli

from perfcheck.bisect_schema import BisectDoc, Commit, Located
from perfcheck.core.bisect import Search, Target, markdown, next_index

CONFIG = "workloads: [{name: net, entry: model.py:build, timeout_s: 300}]\ncompile: {backend: aot_eager}\n"
FLOAT64 = """\
        self.register_buffer("scale", torch.full((32,), 0.5, dtype=torch.float64))
"""


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com", "GIT_COMMITTER_NAME": "Ada"}
    env |= {"GIT_COMMITTER_EMAIL": "ada@example.com", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def _commit(repo: Path, subject: str, files: dict[str, str]) -> str:
    for name, body in files.items():
        (repo / name).write_text(body)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", subject)
    return _git(repo, "rev-parse", "HEAD")


def history(repo: Path) -> dict[str, str]:
    """good, then eight commits; the subjects say what each does."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    model = MODEL.replace("{change}", "pass")
    shas = {"good": _commit(repo, "a classifier", {"model.py": model, "perfcheck.yml": CONFIG})}
    shas["docs"] = _commit(repo, "docs: how to run it", {"README.md": "python model.py\n"})
    broken = model.replace("        pass\n", "        s = h.sum().item()\n")
    shas["item"] = _commit(repo, "log the activation sum", {"model.py": broken})
    shas["comment"] = _commit(
        repo, "a comment", {"model.py": broken.replace("class Net", "# the net\nclass Net")}
    )
    no_import = "import not_a_real_module  # noqa\n" + broken
    shas["no_import"] = _commit(repo, "try a helper module", {"model.py": no_import})
    shas["fixed"] = _commit(repo, "drop the helper module", {"model.py": broken})
    wide = broken.replace("        self.calls = 0\n", "        self.calls = 0\n" + FLOAT64).replace(
        "        return self.fc2(h)", "        h = (h * self.scale).float()\n        return self.fc2(h)"
    )
    shas["float64"] = _commit(repo, "scale in double precision", {"model.py": wide})
    shas["readme"] = _commit(repo, "readme: more", {"README.md": "python model.py --help\n"})
    shas["bad"] = _commit(repo, "tidy", {"notes.txt": "done\n"})
    return shas


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
    # The user's work tree was never touched.
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "rev-parse", "HEAD") == shas["bad"]


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
    _git(repo, "init", "-q", "-b", "main")
    shas = {
        "good": _commit(repo, "one", {"model.py": MODEL.replace("{change}", "pass"), "perfcheck.yml": CONFIG})
    }
    shas["bad"] = _commit(repo, "two", {"README.md": "x\n"})
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


def test_a_folder_that_is_no_repository_or_an_unknown_probe_is_refused_first(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = perfcheck_cli("bisect", "--repo", str(plain), "--good", "a", "--bad", "b")
    assert done.returncode == 2 and "not a git repository" in done.stderr, done.stderr
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    good = _commit(repo, "one", {"model.py": MODEL.replace("{change}", "pass")})
    _commit(repo, "two", {"README.md": "x\n"})
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
