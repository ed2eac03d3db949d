"""Accepted breaks (issue 44, item 1): an `acks:` entry with a `break:` accepts the new graph breaks it
names, by Dynamo's reason (its graph-break id, or text of the reason) and by place (a file pattern,
optionally a function and a line), and no other; an entry that names no break of the head is listed
as stale; a malformed entry is a config error that names it.

The first test is a real review (aot_eager on the CPU); the others read hand-made results."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, write_tree

from perfcheck.bot import acks
from perfcheck.config import Config, ConfigError, parse_config
from perfcheck.core.causes import by_cause
from perfcheck.core.compare import compare
from perfcheck.core.probes.compile_accepted import accepts, covered_category, graph_break_id
from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics, GraphBreak, SourceLocation
from perfcheck.schema import Finding, ProbeResult, Review, SideInfo, WorkloadReview, load_review
from perfcheck.settings import BreakMatcher

# A model whose forward calls a logging helper of the tree; the PR makes the helper print, and
# adds a `.item()` to forward.
MODEL = """\
import torch
from torch import nn

from helpers.logging import log_step


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.last = 0.0

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = log_step(h)
        {change}
        return self.fc2(h)


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""
QUIET_HELPER = "def log_step(h):\n    return h\n"
PRINTING_HELPER = "def log_step(h):\n    print('step', h.shape)\n    return h\n"

ACCEPTED = """\
acks:
  - break: {id: gb0059, message: "operator `print`", file: helpers/logging.py, function: log_step}
    reason: the logging helper prints on purpose
  - break: {id: GB0124, file: helpers/}
    reason: scalars read in the helpers
"""


def _tree(root: Path, change: str, helper: str) -> Path:
    return write_tree(
        root,
        {
            "model.py": MODEL.replace("{change}", change),
            "helpers/__init__.py": "",
            "helpers/logging.py": helper,
        },
    )


def test_an_entry_accepts_exactly_the_break_it_names(review: ReviewFn, tmp_path: Path) -> None:
    """Head adds two breaks: a print in the helper the first entry names, and a `.item()` in
    forward, which is Dynamo's GB0124 as the second entry says but not where it says. The print
    is accepted, naming the entry; the `.item()` fails as it would with no entry; the second
    entry, which names no break of the head, is listed as stale."""
    base = _tree(tmp_path / "base", "pass", QUIET_HELPER)
    head = _tree(tmp_path / "head", "self.last = h.abs().max().item()", PRINTING_HELPER)
    config = fast_config(ACCEPTED)
    result = review(base, head, config, probes=("compile",))

    breaks = {f.location.path: f for f in result.findings if f.category == "graph_break_added" and f.location}
    assert set(breaks) == {"helpers/logging.py", "model.py"}, [f.message for f in result.findings]
    printed, item = breaks["helpers/logging.py"], breaks["model.py"]
    # What the entries were matched against, as torch 2.13 says it: the id from the reason's link.
    assert graph_break_id(printed.evidence["reason"]) == "GB0059"
    assert graph_break_id(item.evidence["reason"]) == "GB0124"
    assert printed.location is not None and printed.location.function == "log_step"
    assert printed.ack is not None
    assert (printed.ack.by, printed.ack.entry, printed.ack.reason) == (
        "config",
        "acks[0]",
        "the logging helper prints on purpose",
    )
    assert item.ack is None and item.severity == "error"
    assert result.verdict == "fail" and result.summary.startswith("1 cause: new graph break at model.py:")
    assert [(s.entry, s.names) for s in result.stale_acks] == [("acks[1]", "GB0124 in helpers/")]

    comment = render_comment(result)
    assert "✔️ Accepted by the config's `acks[0]`, which names this break" in comment
    assert "Accepted-break entries that matched nothing" in comment
    assert "- `acks[1]`: GB0124 in helpers/ (scalars read in the helpers)" in comment

    # publish applies the base branch's acks again: the same breaks accepted, the same entry stale.
    again = acks.apply(result, acks.from_config(config.acks))
    assert [f.ack for f in again.findings] == [f.ack for f in result.findings]
    assert again.stale_acks == result.stale_acks and again.verdict == "fail"
    # The same review with a category ack (today's form) accepts both breaks: the precision is the
    # entry's, not the workload's.
    whole = parse_config("acks: [{category: graph_break_added, reason: all of them}]", "p.yml")
    assert acks.apply(result, acks.from_config(whole.acks)).verdict == "pass"


# -- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acks_yaml", "error"),
    [
        (
            "[{category: recompile, reason: a}, {break: {id: GB0124}, reason: b}]",
            "p.yml: acks[1].break.file: expected a value for this required key",
        ),
        (
            "[{break: {file: utils/logging.py}, reason: b}]",
            "p.yml: acks[0].break: expected what the break is, as well as where: an `id`",
        ),
        (
            "[{break: {id: GB124, file: a.py}, reason: b}]",
            "acks[0].break.id: expected a Dynamo graph-break id",
        ),
        (
            "[{break: {id: GB0124, file: '!a.py'}, reason: b}]",
            "acks[0].break.file: expected a gitignore pattern",
        ),
        (
            "[{break: {id: GB0124, file: '#a.py'}, reason: b}]",
            "acks[0].break.file: expected a gitignore pattern",
        ),
        ("[{break: {id: GB0124, file: a.py, function: 'log step'}, reason: b}]", "acks[0].break.function:"),
        ("[{break: {id: GB0124, file: a.py, line: 0}, reason: b}]", "acks[0].break.line: expected greater"),
        (
            "[{break: {id: GB0124, file: a.py, line: '12'}, reason: b}]",
            "acks[0].break.line: expected a whole",
        ),
        ("[{break: {id: GB0124, file: a.py, where: x}, reason: b}]", "acks[0].break.where: unknown key"),
        (
            "[{brake: {id: GB0124, file: a.py}, reason: b}]",
            "acks[0].brake: unknown key (did you mean `break`?)",
        ),
        ("[{break: {id: GB0124, file: a.py}}]", "acks[0].reason: expected a value for this required key"),
        (
            "[{category: recompile, break: {id: GB0124, file: a.py}, reason: b}]",
            "acks[0]: expected `category: graph_break_added` or no category beside a `break`",
        ),
        ("[{workload: net, reason: b}]", "acks[0]: expected a `category` (findings of it are accepted) or a"),
    ],
)
def test_a_bad_entry_is_a_config_error_that_names_it(acks_yaml: str, error: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"acks: {acks_yaml}\n", "p.yml")
    assert error in str(err.value)


def test_an_entry_reads_as_written_and_today_s_form_stays_valid() -> None:
    config = parse_config(
        "acks:\n"
        "  - {category: graph_break_added, reason: every new break of net, workload: net}\n"
        "  - category: graph_break_added\n"
        "    break: {id: gb0059, message: print, file: utils/, function: 'log_*', line: 12}\n"
        "    reason: logging prints\n",
        "p.yml",
    )
    whole, named = config.acks
    assert whole.break_ is None and covered_category(whole) == "graph_break_added"
    assert named.break_ is not None and covered_category(named) == "graph_break_added"
    assert named.break_.id == "GB0059"
    assert named.break_.words() == 'GB0059 and "print" in utils/, log_*, line 12'


# -- matching ----------------------------------------------------------------------------------

LINK = "\n\n For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/{}.html"
PRINT_REASON = (
    "Failed to trace builtin operator\n  Explanation: ... builtin operator `print` ..."
    + LINK.format("gb0059")
)


def _matcher(**keys: object) -> BreakMatcher:
    return BreakMatcher.model_validate({"file": "utils/logging.py", **keys})


def _at(path: str = "utils/logging.py", line: int = 3, function: str | None = "log_step") -> SourceLocation:
    return SourceLocation(path=path, line=line, function=function)


@pytest.mark.parametrize(
    ("keys", "place", "reason", "accepted"),
    [
        ({"id": "gb0059"}, _at(), PRINT_REASON, True),
        ({"id": "GB0124"}, _at(), PRINT_REASON, False),
        # The id is the one Dynamo's own link at the end names; text before it can be the PR's.
        ({"id": "GB0124"}, _at(), "see gb/gb0124.html" + LINK.format("gb0059"), False),
        ({"id": "GB0124"}, _at(), "no link at all", False),
        ({"message": "OPERATOR `print`"}, _at(), PRINT_REASON, True),  # any case
        ({"message": "operator * print"}, _at(), PRINT_REASON, False),  # a substring, no wildcards
        ({"message": "print", "function": "log_*"}, _at(), PRINT_REASON, True),
        ({"message": "print", "function": "log_step"}, _at(function="forward"), PRINT_REASON, False),
        ({"message": "print", "function": "log_step"}, _at(function=None), PRINT_REASON, False),
        ({"message": "print", "line": 3}, _at(), PRINT_REASON, True),
        ({"message": "print", "line": 4}, _at(), PRINT_REASON, False),
        # file: a gitignore pattern from the root, as `paths` reads one.
        ({"message": "print"}, _at(path="vendor/utils/logging.py"), PRINT_REASON, False),
        ({"message": "print", "file": "logging.py"}, _at(path="vendor/utils/logging.py"), PRINT_REASON, True),
        ({"message": "print", "file": "utils/"}, _at(path="utils/deep/log.py"), PRINT_REASON, True),
        ({"message": "print", "file": "**/log_*.py"}, _at(path="a/b/log_io.py"), PRINT_REASON, True),
        ({"message": "print", "file": "utils/*.py"}, _at(path="utils/deep/log.py"), PRINT_REASON, False),
        ({"message": "print"}, None, PRINT_REASON, False),  # a break Dynamo gave no line
    ],
)
def test_an_entry_matches_by_reason_and_place(
    keys: dict[str, object], place: SourceLocation | None, reason: str, accepted: bool
) -> None:
    assert accepts(_matcher(**keys), "Failed to trace builtin operator", reason, place) is accepted


def _compile(side: str, breaks: list[GraphBreak]) -> ProbeResult:
    metrics = CompileMetrics(
        backend="eager",
        graph_count=len(breaks) + 1,
        graph_break_count=len(breaks),
        graph_breaks=breaks,
        recompile_count=0,
        recompiles=[],
        cold_compile_s=1.0,
    )
    return ProbeResult(
        probe="compile",
        workload="net",
        side=side,  # type: ignore[arg-type]
        status="ok",
        duration_s=1.0,
        metrics=metrics.model_dump(mode="json"),
    )


PRINT = GraphBreak(
    break_type="Failed to trace builtin operator",
    reason=PRINT_REASON,
    location=SourceLocation(path="utils/logging.py", line=3, function="log_step", code="print(h)"),
)
ITEM = GraphBreak(
    break_type="Unsupported Tensor.item() call",
    reason="Unsupported Tensor.item() call" + LINK.format("gb0124"),
    location=SourceLocation(path="model.py", line=9, function="forward", code="h.item()"),
)


def _reviewed(config: Config, base: list[GraphBreak], head: list[GraphBreak]) -> Review:
    """The review of a head whose compile probe recorded ``head`` against ``base``, its acks applied."""
    workloads = [WorkloadReview(name="net", base=[_compile("base", base)], head=[_compile("head", head)])]
    compared = compare(workloads, config)
    review = Review(
        tool_version="0",
        verdict=compared.verdict,
        summary="",
        base=SideInfo(tree="base"),
        head=SideInfo(tree="head"),
        workloads=workloads,
        findings=compared.findings,
        causes=by_cause(compared.findings),
    )
    return acks.apply(review, acks.from_config(config.acks))


def test_an_accepted_break_leaves_the_budget_to_the_others() -> None:
    """With one new break allowed, a head that adds an accepted print and one `.item()` is within
    its budget: the accepted break is not counted, so the `.item()` is judged as the only new one."""
    config = parse_config(
        "budgets: {max_new_graph_breaks: 1}\n"
        "acks:\n  - {break: {id: GB0059, file: utils/logging.py}, reason: prints on purpose}\n",
        "p.yml",
    )
    review = _reviewed(config, [], [PRINT, ITEM])
    by_path = {f.location.path: f for f in review.findings if f.location}
    assert by_path["utils/logging.py"].ack is not None and by_path["model.py"].ack is None
    assert by_path["model.py"].severity == "warning" and review.verdict == "pass"
    # Without the entry both count, and both fail.
    bare = _reviewed(parse_config("budgets: {max_new_graph_breaks: 1}\n", "p.yml"), [], [PRINT, ITEM])
    assert {f.severity for f in bare.findings} == {"error"} and bare.verdict == "fail"


def test_an_entry_is_stale_only_where_it_was_checked() -> None:
    """An entry that names a break base and head both have is in use (not stale); one that names a
    break only base had is stale (the PR removed it); one for a workload whose compile probe did not
    run here is not judged."""
    config = parse_config(
        "acks:\n"
        "  - {break: {id: GB0059, file: utils/logging.py}, reason: prints on purpose}\n"
        "  - {break: {id: GB0124, file: model.py}, reason: gone in this PR}\n"
        "  - {break: {id: GB0124, file: other.py}, workload: elsewhere, reason: not reviewed here}\n"
        "  - {category: recompile, reason: not a break entry}\n",
        "p.yml",
    )
    review = _reviewed(config, [PRINT, ITEM], [PRINT])
    assert [s.entry for s in review.stale_acks] == ["acks[1]"]
    assert review.verdict == "pass"  # the removed break is good news; nothing new to accept
    # A result.json with the list reads back as it was written (an optional field: version 4 still).
    path = Path(__file__).parent / "data" / "demo-result.json"
    assert load_review(path).stale_acks == []
    assert Review.model_validate_json(review.model_dump_json()).stale_acks == review.stale_acks


def test_every_report_names_the_accepting_entry_and_the_stale_ones() -> None:
    from perfcheck.core.reports import render_check_summary, render_html, render_job_summary

    config = parse_config(
        "acks:\n"
        "  - {break: {id: GB0059, file: utils/logging.py}, reason: prints <b>on</b> purpose}\n"
        "  - {break: {id: GB0124, file: other.py}, reason: a break long gone}\n",
        "p.yml",
    )
    review = _reviewed(config, [], [PRINT, ITEM])
    for text in (render_comment(review), render_job_summary(review)):
        assert "✔️ Accepted by the config's `acks[0]`, which names this break: prints &lt;b&gt;" in text
        assert "- `acks[1]`: GB0124 in other.py (a break long gone)" in text
    assert "(accepted by `acks[0]`)" in render_check_summary(review)
    html = render_html(review)
    assert "Accepted by the config's <code>acks[0]</code>" in html
    assert "<li><code>acks[1]</code>: GB0124 in other.py (a break long gone)</li>" in html


# The `.item()` of ITEM in a method, as the probe names a frame: its qualified name.
QUALIFIED = ITEM.model_copy(
    update={
        "location": SourceLocation(path="model.py", line=9, function="Classifier.forward", code="h.item()")
    }
)
SLOWER = Finding(
    category="throughput_regression",
    severity="error",
    workload="net",
    probe="timing",
    message="step time 0.359 → 0.479 ms, +33.4 %",
    evidence={"ratio": 1.334},
)


def _with_effect(config: Config) -> Review:
    """ITEM (qualified) new on head, and the slower step a review reads as its effect."""
    reviewed = _reviewed(parse_config("{}\n", "p.yml"), [], [QUALIFIED])
    findings = [*reviewed.findings, SLOWER]
    review = reviewed.model_copy(
        update={"findings": findings, "causes": by_cause(findings), "verdict": "fail"}
    )
    return acks.apply(review, acks.from_config(config.acks))


def test_a_function_is_named_by_its_plain_or_its_qualified_name() -> None:
    place = QUALIFIED.location
    for name, accepted in (
        ("forward", True),
        ("Classifier.forward", True),
        ("Other.forward", False),
        ("for*", True),
    ):
        matcher = BreakMatcher(message="item()", file="model.py", function=name)
        assert accepts(matcher, ITEM.break_type, ITEM.reason, place) is accepted, name


def test_a_cause_accepted_alone_headlines_the_effects_that_still_fail() -> None:
    """The break is accepted; the slower step it explains is not: the headline says what fails
    (the step) and from what (the accepted break), not "1 cause: new graph break"."""
    config = parse_config(
        "acks:\n  - {break: {message: Tensor.item(), file: model.py, function: forward}, reason: logged}\n",
        "p.yml",
    )
    review = _with_effect(config)
    brk = next(f for f in review.findings if f.category == "graph_break_added")
    assert brk.ack is not None and review.verdict == "fail"
    from perfcheck.core.render import headline

    line = headline(review)
    assert line.startswith("step +33.4 % · from the accepted new graph break at model.py:9"), line
    # With its effects, as the team says: everything accepted, a pass.
    config = parse_config(
        "acks:\n  - break: {message: Tensor.item(), file: model.py, function: forward}\n"
        "    with_effects: true\n    reason: logged, and worth its cost\n",
        "p.yml",
    )
    review = _with_effect(config)
    assert all(f.ack is not None for f in review.findings) and review.verdict == "pass"
    slower = next(f for f in review.findings if f.category == "throughput_regression")
    assert slower.ack is not None and "an effect of the accepted break" in slower.ack.reason


def test_with_effects_needs_a_break() -> None:
    with pytest.raises(ConfigError, match="with_effects"):
        parse_config("acks:\n  - {category: recompile, with_effects: true, reason: r}\n", "p.yml")
