"""The root-cause matrix (data, rules, a project's own entries) and acknowledgements."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from fakegithub import FakeGitHub

from perfcheck.bot import acks
from perfcheck.config import ConfigError, parse_config
from perfcheck.core import probes
from perfcheck.core.causes import grouped
from perfcheck.core.matrix import MatrixError, known, merged, parse_matrix, register_probe_entries, resolve
from perfcheck.core.render import render_comment
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding, load_review
from perfcheck.vocabulary import categories

DATA = Path(__file__).parent / "data"


def finding(category: str, **evidence: object) -> Finding:
    return Finding(
        category=category,  # type: ignore[arg-type]
        severity="error",
        workload="classifier",
        probe="compile",
        message="m",
        evidence=dict(evidence),
        location=SourceLocation(path="model.py", line=17),
    )


def test_every_category_has_an_entry_with_a_verify_command() -> None:
    matrix = known()
    assert set(matrix) >= set(probes.builtin_categories())
    assert all(e.verify and e.causes and e.symptom for e in matrix.values())


@pytest.mark.parametrize(
    ("category", "evidence", "expected"),
    [
        ("graph_break_added", {"break_type": "Unsupported Tensor.item() call"}, "capture_scalar_outputs"),
        ("graph_break_added", {"break_type": "builtin: print"}, "reorderable_logging_functions"),
        ("graph_break_added", {"break_type": "Attempted to call function marked as skipped"}, "disable"),
        ("recompile", {"reason": "tensor 'x' size mismatch at index 0"}, "mark_dynamic"),
        ("ddp_overlap_drop", {"splits_lost": True}, "optimize_ddp"),
        ("custom_op_check_failed", {"check": "test_faketensor"}, "register_fake"),
        ("kernel_mix_changed", {"added": ["Memcpy DtoH (Device -> Pinned)"]}, ".item()"),
        ("graph_break_added", {"break_type": "something new"}, "cannot trace"),  # no rule: first cause
    ],
)
def test_rules_refine_the_cause_from_the_evidence(category: str, evidence: dict, expected: str) -> None:
    resolved = resolve(finding(category, **evidence))
    assert resolved is not None and expected in resolved.cause


def test_verify_commands_name_the_workload() -> None:
    resolved = resolve(finding("recompile", reason="x"))
    assert resolved is not None
    assert (
        resolved.verify[0].startswith("TORCH_LOGS=recompiles")
        and "--workloads classifier" in resolved.verify[0]
    )


def test_a_project_adds_its_own_cause_first() -> None:
    config = parse_config(
        "matrix:\n  export_ir_changed:\n    causes: [our codegen flag flipped]\n    verify: [make ir-diff]\n",
        "p.yml",
    )
    resolved = resolve(finding("export_ir_changed"), merged(config.matrix))
    assert resolved is not None
    assert (resolved.cause, resolved.verify) == ("our codegen flag flipped", ["make ir-diff"])
    assert "a decomposition change" in resolved.others  # the built-in causes follow


def test_bad_matrix_data_is_refused_clearly() -> None:
    with pytest.raises(MatrixError, match=r"recompile\.causes"):
        parse_matrix(
            "recompile: {title: t, nature: structural, role: neither, severity: error, "
            "symptom: s, causes: [], verify: [x]}",
            "m.yml",
        )
    # Every category says what it is to bisect and to explain; a cause says how it is named.
    with pytest.raises(MatrixError, match=r"recompile\.nature: Field required"):
        parse_matrix("recompile: {title: t, role: neither, symptom: s, causes: [a], verify: [x]}", "m.yml")
    with pytest.raises(MatrixError, match=r"recompile\.nature: Input should be 'structural', 'measured' or"):
        parse_matrix(
            "recompile: {title: t, nature: timed, role: neither, severity: error, "
            "symptom: s, causes: [a], verify: [x]}",
            "m.yml",
        )
    with pytest.raises(MatrixError, match="`because` is given exactly where role is cause"):
        parse_matrix(
            "recompile: {title: t, nature: structural, role: cause, severity: error, "
            "symptom: s, causes: [a], verify: [x]}",
            "m.yml",
        )
    with pytest.raises(MatrixError, match="recompile: `because` is no template"):
        parse_matrix(
            "recompile: {title: t, nature: structural, role: cause, severity: error, "
            "because: 'a {{ at', symptom: s, "
            "causes: [a], verify: [x]}",
            "m.yml",
        )
    with pytest.raises(MatrixError, match="unknown categories nonsense"):
        parse_matrix("nonsense: {symptom: s, causes: [a], verify: [x]}", "m.yml")
    with pytest.raises(ConfigError, match="matrix: expected finding categories"):
        parse_config("matrix: {slow: {causes: [x]}}", "p.yml")


# perfcheck/core/matrix.yml's collective_drift once read like this: YAML splits an inline list at every
# comma, the one inside the parentheses too, so the comment showed the cause "DDP's buckets
# re-split (parameter order" and a bullet "sizes or dtypes changed)".
# A plain entry's first fields: what every category says.
PLAIN = "title: t, nature: structural, role: neither, severity: error, symptom: s"
SPLIT = "[DDP's buckets re-split (parameter order, sizes or dtypes changed), a collective moved]"


def test_a_cause_yaml_split_at_a_comma_is_refused_wherever_an_entry_comes_from() -> None:
    entry = f"collective_drift: {{{PLAIN}, causes: {SPLIT}, verify: [x]}}"
    assert len(yaml.safe_load(entry)["collective_drift"]["causes"]) == 3  # what YAML makes of it
    with pytest.raises(
        MatrixError, match=r"collective_drift\.causes\.0: one cause or command per item; .*opens '\('"
    ):
        parse_matrix(entry, "m.yml")
    # A command split the same way, a rule's cause, a probe's own entry, a project's own entry.
    with pytest.raises(MatrixError, match=r"recompile\.verify\.0: .*opens '\('"):
        parse_matrix(
            f"recompile: {{{PLAIN}, causes: [c], verify: [perfcheck review (a, b)]}}",
            "m.yml",
        )
    rule = "{when: {a: b}, cause: '`x'}"
    with pytest.raises(MatrixError, match=r"recompile\.rules\.0\.cause: .*backtick"):
        parse_matrix(
            f"recompile: {{{PLAIN}, causes: [c], verify: [v], rules: [{rule}]}}",
            "m.yml",
        )
    with pytest.raises(MatrixError, match=r"probe p: collective_drift\.causes\.0: .*opens '\('"):
        register_probe_entries("p", {"collective_drift": {"causes": yaml.safe_load(SPLIT)}}, "probe p")
    with pytest.raises(ConfigError, match=r"matrix\.collective_drift\.causes.*opens '\('"):
        parse_config(f"matrix:\n  collective_drift:\n    causes: {SPLIT}\n", "p.yml")
    # Written one per line, the same cause is one cause.
    whole = parse_matrix(
        "collective_drift:\n  title: t\n  nature: structural\n  role: neither\n  severity: error\n"
        "  symptom: s\n  causes:\n"
        "    - DDP's buckets re-split (parameter order, sizes or dtypes changed)\n  verify: [x]\n",
        "m.yml",
    )
    assert whole["collective_drift"].causes == [
        "DDP's buckets re-split (parameter order, sizes or dtypes changed)"
    ]


def _shown(category: str, probe: str, **evidence: str) -> str:
    """The comment's section for one finding of ``category`` raised by ``probe``: its message and
    its entry as the comment shows it (cause, verify command, docs, the other causes and checks)."""
    review = load_review(DATA / "demo-result.json")
    f = Finding(
        category=category,  # type: ignore[arg-type]
        severity="error",
        workload="classifier",
        probe=probe,
        message="m",
        evidence={"side": "head", **evidence},
        location=SourceLocation(path="model.py", line=17),
    )
    comment = render_comment(review.model_copy(update={"findings": [f]}))
    return comment[comment.index("**1. ") :]


def _reviews(section: str) -> list[list[str]]:
    """The commands shown that run a perfcheck review, as words."""
    spans = [part.split() for c in re.findall(r"`([^`]+)`", section) for part in c.split(";")]
    return [w for w in spans if any(a == "perfcheck" and b == "review" for a, b in itertools.pairwise(w))]


KINDS = [(kind.name, category) for kind in probes.built_in() for category in kind.raised()]


def test_every_category_is_raised_by_a_probe_that_says_so() -> None:
    assert {c for _, c in KINDS} == set(categories())


@pytest.mark.parametrize(("probe", "category"), KINDS, ids=[f"{p}-{c}" for p, c in KINDS])
def test_every_verify_command_of_every_category_runs_the_probe_that_raised_it(
    probe: str, category: str
) -> None:
    section = _shown(category, probe)
    assert "Likely cause: " in section, section
    for words in _reviews(section):
        assert "--probes" in words, words
        assert probe in words[words.index("--probes") + 1].split(","), (
            f"{probe}/{category}: {' '.join(words)}"
        )
    if probe == "fsdp":
        # FSDP's findings are explained as FSDP's: no DDP bucket, no ddp probe, no DDP notes.
        assert "DDP" not in section and "ddp" not in section, section


def test_a_shared_category_is_explained_as_the_probe_that_raised_it() -> None:
    ddp, fsdp = _shown("collective_drift", "ddp"), _shown("collective_drift", "fsdp")
    assert "DDP's buckets re-split (parameter order, sizes or dtypes changed)" in ddp
    assert "--probes ddp`" in ddp and "notes/ddp.html" in ddp
    assert "fully_shard" in fsdp and "`reshard_after_forward`" in fsdp and "MixedPrecisionPolicy" in fsdp
    assert "--probes fsdp`" in fsdp and "fsdp.fully_shard.html" in fsdp
    outside = _shown("collective_drift", "fsdp", reading="outside FSDP")
    assert "Likely cause: the model's own code runs a collective outside FSDP's units" in outside
    assert re.search(r"--probes fsdp[`;]", _shown("rank_graph_mismatch", "fsdp"))
    assert re.search(r"--probes ddp[`;]", _shown("rank_graph_mismatch", "ddp"))
    # A project's own cause comes first for every probe that raises the category.
    config = parse_config("matrix:\n  collective_drift:\n    causes: [our comm hook]\n", "p.yml")
    for probe in ("ddp", "fsdp"):
        f = finding("collective_drift").model_copy(update={"probe": probe})
        resolved = resolve(f, merged(config.matrix))
        assert resolved is not None and resolved.cause == "our comm hook"
        assert any(f"--probes {probe}" in v for v in resolved.verify)


def test_the_demo_review_shows_each_findings_entry() -> None:
    review = load_review(DATA / "demo-result.json")
    comment = render_comment(review)
    # One section per cause: the break (with the slower steps under it) and the IR change.
    assert comment.count("Likely cause:") == comment.count("verify: `") == len(grouped(review)) == 2
    assert "- Slower steps: verify with `perfcheck review" in comment
    assert "capture_scalar_outputs = True`. · verify: `TORCH_LOGS=graph_breaks" in comment


# -- acknowledgements --------------------------------------------------------------------------


def test_config_acks_accept_a_known_change_and_nothing_else() -> None:
    review = load_review(DATA / "demo-result.json")
    config = parse_config(
        "acks:\n  - {category: export_ir_changed, workload: classifier, reason: GELU on purpose}\n", "p.yml"
    )
    acked = acks.apply(review, acks.from_config(config.acks))
    ir = next(f for f in acked.findings if f.category == "export_ir_changed")
    assert ir.ack is not None and ir.ack.by == "config" and ir.ack.reason == "GELU on purpose"
    assert acked.verdict == "fail"  # the graph break is a different finding
    everything = parse_config(
        "acks:\n"
        "  - {category: export_ir_changed, reason: a}\n"
        "  - {category: graph_break_added, reason: b}\n"
        "  - {category: throughput_regression, workload: classifier, reason: c}\n",
        "p.yml",
    )
    assert acks.apply(review, acks.from_config(everything.acks)).verdict == "pass"  # both findings acked
    other_workload = parse_config("acks: [{category: graph_break_added, workload: mlp, reason: x}]", "p.yml")
    assert all(f.ack is None for f in acks.apply(review, acks.from_config(other_workload.acks)).findings)


def test_only_writers_acks_count() -> None:
    posted = [
        acks.PostedComment("maintainer", "2026-11-29T10:00:00Z", "/perfcheck ack recompile -- expected"),
        acks.PostedComment("passerby", "2026-11-29T10:01:00Z", "/perfcheck ack graph_break_added -- nah"),
        acks.PostedComment("maintainer", None, "/perfcheck ack nonsense -- malformed is ignored"),
    ]
    roles = {"maintainer": "maintain", "passerby": "read"}
    found = acks.from_comments(posted, roles.__getitem__, "write", "abc1234", "2026-11-29T09:00:00Z")
    assert [(a.category, a.by, a.at, a.sha, a.expired) for a in found] == [
        ("recompile", "maintainer", "2026-11-29T10:00:00Z", "abc1234", False)
    ]


def test_an_ack_posted_before_the_head_was_pushed_expires() -> None:
    # The attack: a writer acks a break at commit A; commits that follow add more of it.
    posted = [
        acks.PostedComment("maintainer", "2026-11-29T10:00:00Z", "/perfcheck ack graph_break_added -- ok")
    ]
    found = acks.from_comments(posted, lambda _: "write", "write", "b" * 40, "2026-11-29T11:00:00Z")
    assert [(a.expired, a.sha) for a in found] == [(True, None)]
    # When perfcheck cannot tell when the head appeared, an ack does not cover it either.
    assert acks.from_comments(posted, lambda _: "write", "write", "b" * 40, None)[0].expired
    review = acks.apply(load_review(DATA / "demo-result.json"), found)
    assert review.verdict == "fail" and all(f.ack is None for f in review.findings)
    [expired] = review.expired_acks
    assert (expired.category, expired.by) == ("graph_break_added", "maintainer")
    comment = render_comment(review)
    assert "no longer cover the head" in comment and "`/perfcheck ack` again" in comment


def test_acked_findings_render_with_who_when_and_why() -> None:
    review = load_review(DATA / "demo-result.json")
    note = acks.Ack(
        category="graph_break_added", by="octocat", reason="@org/team <b>ok</b>", at="2026-11-29T10:00:00Z"
    )
    comment = render_comment(acks.apply(review, [note]))
    assert "Acknowledged by octocat on 2026-11-29" in comment
    assert "@org" not in comment.split("Acknowledged by", 1)[1].split("\n", 1)[0]  # the reason is inert
    # The break is acknowledged; the slower steps it likely caused are not, so its cause still fails.
    assert comment.splitlines()[1].startswith("### perfcheck ❌ 2 regressions")


@pytest.mark.e2e
def test_publish_applies_writers_acks_from_the_pr(fake_github: FakeGitHub, tmp_path: Path) -> None:
    from test_github import HEAD, REPO, TOKEN, _cli, demo_result_at

    fake_github.add_repo(REPO, default_branch="master")
    fake_github.add_token(TOKEN, login="github-actions[bot]", kind="app")
    fake_github.add_pull(REPO, 2, head_sha=HEAD, base_sha="f" * 40, files=["model.py"])
    fake_github.set_permission(REPO, "Codertocat", "admin")
    fake_github.set_permission(REPO, "outsider", "read")
    # The plan job queued the head's check when it was pushed; the acks come after.
    queued = _cli(["publish", "--sha", HEAD, "--pr", "2", "--status", "queued"], fake_github, tmp_path)
    assert queued.returncode == 0, queued.stderr
    fake_github.backdate(10)
    for category in ("graph_break_added", "export_ir_changed", "throughput_regression"):
        fake_github.add_comment(
            REPO, 2, f"/perfcheck ack {category} classifier -- intended", user="Codertocat"
        )
    fake_github.add_comment(REPO, 2, "/perfcheck ack graph_break_added -- not my call", user="outsider")
    (tmp_path / "result.json").write_text(demo_result_at(HEAD))
    done = _cli(["publish", "--report", str(tmp_path), "--sha", HEAD, "--pr", "2"], fake_github, tmp_path)
    assert done.returncode == 0, done.stderr
    run = fake_github.check_runs(REPO, HEAD)[-1]
    assert run["conclusion"] == "success"  # every failing finding acknowledged by a writer
    review_comment = next(c for c in fake_github.comments(REPO, 2) if c["user"]["type"] == "Bot")
    # the demo's three findings: two causes, the slower steps in the break's table
    assert review_comment["body"].count("cknowledged by Codertocat") == 3
    assert "### perfcheck ✅ no regressions · 2 acknowledged" in review_comment["body"]
    assert "outsider" not in review_comment["body"]
    assert json.loads((DATA / "demo-result.json").read_text())["verdict"] == "fail"  # the file is untouched


@pytest.mark.e2e
def test_acks_of_an_earlier_commit_do_not_cover_a_new_head(fake_github: FakeGitHub, tmp_path: Path) -> None:
    from test_github import HEAD, REPO, TOKEN, _cli, demo_result_at

    fake_github.add_repo(REPO, default_branch="master")
    fake_github.add_token(TOKEN, login="github-actions[bot]", kind="app")
    fake_github.add_pull(REPO, 2, head_sha="a" * 40, base_sha="f" * 40, files=["model.py"])
    fake_github.set_permission(REPO, "Codertocat", "admin")
    assert (
        _cli(
            ["publish", "--sha", "a" * 40, "--pr", "2", "--status", "queued"], fake_github, tmp_path
        ).returncode
        == 0
    )
    fake_github.backdate(20)
    fake_github.add_comment(REPO, 2, "/perfcheck ack graph_break_added classifier -- fine", user="Codertocat")
    fake_github.backdate(10)
    # A push after the ack: the new head's check is queued later than the ack was posted.
    fake_github.push(REPO, 2, HEAD)
    assert (
        _cli(["publish", "--sha", HEAD, "--pr", "2", "--status", "queued"], fake_github, tmp_path).returncode
        == 0
    )
    (tmp_path / "result.json").write_text(demo_result_at(HEAD))
    done = _cli(["publish", "--report", str(tmp_path), "--sha", HEAD, "--pr", "2"], fake_github, tmp_path)
    assert done.returncode == 0, done.stderr
    assert fake_github.check_runs(REPO, HEAD)[-1]["conclusion"] == "failure"
    body = next(c for c in fake_github.comments(REPO, 2) if c["user"]["type"] == "Bot")["body"]
    assert "Acknowledged by" not in body and "no longer cover the head" in body


def test_every_category_is_defined_once_with_title_details_and_entry() -> None:
    from perfcheck.core import probes
    from perfcheck.core.matrix import builtin, known
    from perfcheck.vocabulary import SHARED_CATEGORIES

    # The shared categories' entries are perfcheck/core/matrix.yml's; each probe's own are its own, once.
    assert set(builtin()) == set(SHARED_CATEGORIES)
    own = [c for k in probes.built_in() for c in k.categories]
    assert len(own) == len(set(own)) and not set(own) & set(SHARED_CATEGORIES)
    entries = {c: known()[c] for c in probes.builtin_categories()}
    for category, entry in entries.items():
        assert entry.title and entry.symptom and entry.causes and entry.verify, category
        for d in entry.details:
            assert d.field and d.label, category
    # The templates name no category: they show what a finding carries.
    templates = Path(__file__).resolve().parent.parent / "perfcheck" / "templates"
    for template in templates.glob("*.j2"):
        text = template.read_text()
        assert not [c for c in entries if f'"{c}"' in text], template.name


def test_verify_commands_rerun_the_review_as_it_was_run() -> None:
    """The review's own settings file, device and program; a folder of the command's own; no
    compile-latency samples unless the command verifies compile latency; TORCH_LOGS's output
    shown; each value quoted for the shell."""
    from perfcheck.core.matrix import Where

    where = Where(
        "base dir",
        "head",
        "out",
        program=".venv/bin/perfcheck",
        rerun=("--config", "ci/perf check.yml", "--device", "cuda"),
    )
    [logs, *_] = resolve(finding("graph_break_added"), where=where).verify  # type: ignore[union-attr]
    assert logs == (
        "TORCH_LOGS=graph_breaks .venv/bin/perfcheck review --config 'ci/perf check.yml' --device cuda "
        "--out out/verify --no-compile-latency --base 'base dir' --head head --workloads classifier "
        "--probes compile; less out/verify/probes/head-classifier-compile.log"
    )
    latency = finding("compile_latency_regression")
    [cmd, *_] = resolve(latency, where=where).verify  # type: ignore[union-attr]
    assert "--no-compile-latency" not in cmd and "--out out/verify" in cmd


def test_a_report_repeats_only_the_options_a_rerun_needs_and_no_program_path() -> None:
    """probes.json comes from the job that ran PR code: its program and options are read
    narrowly (a name on PATH or a module run; --config, --device and the interpreters)."""
    from perfcheck.review import rerun_of
    from perfcheck.schema import ProbeRun, SideInfo

    run = ProbeRun(
        tool_version="0",
        shard={"index": 1, "count": 1},  # type: ignore[arg-type]
        workload_set=[],
        base=SideInfo(tree="b"),
        head=SideInfo(tree="h"),
        workloads=[],
        program="/tmp/evil/perfcheck",
        rerun=["--device", "cuda", "--templates", "x", "--config"],
    )
    assert rerun_of([("probes.json", run)]) == ("perfcheck", ["--device", "cuda"])
    with pytest.raises(ValueError):
        ProbeRun.model_validate({**run.model_dump(), "rerun": ["a`b"]})
    with pytest.raises(ValueError):
        ProbeRun.model_validate({**run.model_dump(), "program": "rm -rf / ; perfcheck"})


def test_a_project_moves_a_categorys_findings_from_its_own_severity_and_says_so() -> None:
    from perfcheck.core.compare import compare_workload

    review = load_review(DATA / "demo-result.json")
    (wl,) = review.workloads
    assert (
        known()["graph_break_added"].severity == "error"
        and known()["export_ir_changed"].severity == "warning"
    )
    config = parse_config(
        "matrix:\n  graph_break_added: {severity: warning}\n  export_ir_changed: {severity: error}\n", "p.yml"
    )
    got = {f.category: f for f in compare_workload(wl, config).findings}  # the recorded results, compared
    brk, ir = got["graph_break_added"], got["export_ir_changed"]
    assert brk.severity == "warning" and brk.message.endswith(
        "; a warning by this project's matrix.graph_break_added.severity, not an error"
    )
    assert brk.evidence["severity_by_default"] == "error"
    assert ir.severity == "error" and got["throughput_regression"].severity == "error"  # not named: as it was
    # The entry is still perfcheck's: a severity alone replaces no cause or command.
    assert merged(config.matrix)["graph_break_added"] == known()["graph_break_added"]
    # A finding its comparator softened (new breaks within the project's budget) keeps its severity.
    budget = parse_config(
        "budgets: {max_new_graph_breaks: 5}\nmatrix: {graph_break_added: {severity: info}}\n", "p.yml"
    )
    [within] = [f for f in compare_workload(wl, budget).findings if f.category == "graph_break_added"]
    assert within.severity == "warning" and "severity_by_default" not in within.evidence
    with pytest.raises(
        ConfigError,
        match=r"p\.yml: matrix\.recompile\.severity: expected 'error', 'warning' or 'info' \(got 'fatal'\)",
    ):
        parse_config("matrix: {recompile: {severity: fatal}}", "p.yml")
