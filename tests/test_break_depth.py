"""Graph breaks against control-flow nesting depth (issue 44, item 3): each break's depth, the
`if`/`for`/`while`/`with`/`try`/`match` blocks around its line within its own function, read with
`ast` in the probe process; said in the finding and result.json, counted per frame in the HTML
report, and the heatmap drawn by depth (`perfcheck html --by depth`, from the review or the history).

The reviews are real (aot_eager on the CPU); the rest are pure functions over hand-made data."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest
from conftest import MODEL, ReviewFn, model_tree, write_tree
from pydantic import ValidationError

from perfcheck.cli.html_command import add_html_parser
from perfcheck.config import Config
from perfcheck.core import break_depth, charts, history
from perfcheck.core.render import render_comment
from perfcheck.core.reports import render_html
from perfcheck.measures import CompileMetrics, GraphBreak, NestingBlock, SourceLocation
from perfcheck.review import assemble
from perfcheck.runner.source.nesting import blocks_around, blocks_in_file
from perfcheck.schema import ProbeResult, Review, WorkloadReview, load_review

# ---------------------------------------------------------------- the ast depth, on tricky code

TRICKY = """\
import torch


def deco(f):
    return f


class Net(torch.nn.Module):
    @deco
    def forward(self, x):
        for i in range(3):
            if i == 1:
                print(x)
            elif i == 2:
                x = x + 1
            else:
                if x.sum() > 0:
                    x = x * 2
        try:
            with torch.no_grad():
                y = x.item()
        except ValueError:
            y = 0
        finally:
            z = 1

        @deco
        def helper(t):
            if t.sum() > 0:
                return t.item()
            return t

        f = lambda v: v.item()
        while x.sum() > 0:
            x = x - 1
        else:
            print("done")
        match y:
            case 0:
                print(0)
        if (x.sum()
                > 0):
            x = torch.cat(
                [x, x.item() * x],
            )
        return helper(x) + f(x) + sum(v.item() for v in x)


async def stream(source):
    async with source:
        async for v in source:
            print(v)


print("loaded")
"""


def _line(code: str, nth: int = 1) -> int:
    """The 1-based line of TRICKY whose text (stripped) is ``code``, the ``nth`` such."""
    lines = [i for i, text in enumerate(TRICKY.splitlines(), start=1) if text.strip() == code]
    return lines[nth - 1]


def _kinds(line: int, function: str | None) -> list[str]:
    return [b.kind for b in blocks_around(TRICKY, line, function)]


@pytest.mark.parametrize(
    ("code", "function", "kinds"),
    [
        ("print(x)", "forward", ["for", "if"]),
        ("elif i == 2:", "forward", ["for"]),  # an elif's test: a branch of the if, not inside it
        ("x = x + 1", "forward", ["for", "if"]),  # the elif's branch: one if, not an if in an else
        ("x = x * 2", "forward", ["for", "if", "if"]),  # an if inside the else: a block of its own
        ("for i in range(3):", "forward", []),  # a header runs before its block
        ("y = x.item()", "forward", ["try", "with"]),  # with inside try
        ("y = 0", "forward", ["try"]),  # an except handler is in the try block
        ("z = 1", "forward", ["try"]),  # so is finally
        ("@deco", "forward", []),  # a decorator runs in the function that defines the function (2nd)
        ("return t.item()", "helper", ["if"]),  # a nested function is a frame of its own
        ("return t.item()", "forward", []),  # seen from forward: the def statement, at its top level
        ("f = lambda v: v.item()", "<lambda>", []),  # a lambda holds no block
        ("f = lambda v: v.item()", "forward", []),
        ("x = x - 1", "forward", ["while"]),
        ('print("done")', "forward", ["while"]),  # a loop's else is in the loop's block
        ("print(0)", "forward", ["match"]),
        ("> 0):", "forward", []),  # the second line of a multi-line if test: still its header
        ("[x, x.item() * x],", "forward", ["if"]),  # a line inside a multi-line call in the if
        ("return helper(x) + f(x) + sum(v.item() for v in x)", "<genexpr>", []),
        ("print(v)", "stream", ["async with", "async for"]),
        ('print("loaded")', "<module>", []),
        ("return f", "deco", []),
    ],
)
def test_the_depth_counts_the_blocks_around_a_line_within_its_own_function(
    code: str, function: str, kinds: list[str]
) -> None:
    nth = 2 if code == "@deco" else 1
    assert _kinds(_line(code, nth), function) == kinds


def test_a_frame_named_as_dynamo_names_it_finds_its_function() -> None:
    """A resume function of Dynamo's (the code after a break) runs the rest of the function it is
    named after; a frame with no name (Dynamo's duplicate log line) is the innermost def."""
    line = _line("print(x)")
    assert _kinds(line, "torch_dynamo_resume_in_forward_at_11") == ["for", "if"]
    assert _kinds(line, None) == ["for", "if"]
    assert _kinds(line, "?") == ["for", "if"]
    assert _kinds(_line("return t.item()"), None) == ["if"]  # the innermost def: helper


def test_each_block_says_the_header_that_opens_it() -> None:
    blocks = blocks_around(TRICKY, _line("x = x + 1"), "forward")
    assert [(b.kind, b.line, b.code) for b in blocks] == [
        ("for", _line("for i in range(3):"), "for i in range(3):"),
        ("if", _line("elif i == 2:"), "elif i == 2:"),  # the branch's own header
    ]


def test_a_file_that_cannot_be_read_or_parsed_has_no_depth(tmp_path: Path) -> None:
    good = write_tree(tmp_path, {"m.py": TRICKY, "bad.py": "def f(:\n"})
    assert [b.kind for b in blocks_in_file(str(good / "m.py"), _line("print(x)"), "forward") or []] == [
        "for",
        "if",
    ]
    assert blocks_in_file(str(good / "m.py"), _line('print("loaded")'), "<module>") == []
    assert blocks_in_file(str(good / "bad.py"), 1, "f") is None
    assert blocks_in_file(str(good / "gone.py"), 1, "f") is None
    assert blocks_in_file("<string>", 1, "f") is None


# ---------------------------------------------------------------- the contract and the comparator


def _at(line: int, code: str, function: str = "forward") -> SourceLocation:
    return SourceLocation(path="model.py", line=line, function=function, code=code)


def _break(line: int, code: str, blocks: list[tuple[str, int, str]] | None) -> GraphBreak:
    nesting = [NestingBlock(kind=k, line=n, code=c) for k, n, c in blocks or []]  # type: ignore[arg-type]
    return GraphBreak(
        break_type="print",
        reason="print",
        location=_at(line, code),
        nesting_depth=None if blocks is None else len(nesting),
        nesting=nesting,
    )


def test_a_depth_that_disagrees_with_its_blocks_is_refused() -> None:
    with pytest.raises(ValidationError, match="nesting_depth 2 but 1 nesting block"):
        GraphBreak(
            break_type="print",
            reason="print",
            nesting_depth=2,
            nesting=[NestingBlock(kind="for", line=3)],
        )
    with pytest.raises(ValidationError):
        NestingBlock(kind="def", line=3)  # type: ignore[arg-type]
    assert GraphBreak(break_type="print", reason="print").nesting_depth is None  # an older result


def _compile(side: str, breaks: list[GraphBreak]) -> ProbeResult:
    metrics = CompileMetrics(
        backend="eager",
        graph_count=len(breaks) + 1,
        graph_break_count=len(breaks),
        graph_breaks=breaks,
        recompile_count=0,
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


NESTED = _break(17, 'print("nested", i)', [("for", 15, "for i in range(2):"), ("if", 16, "if i == 1:")])
TOP = _break(14, 'print("top")', [])
OLD = _break(20, 'print("old")', None)


DEMO = load_review(Path(__file__).parent / "data" / "demo-result.json")


def _review(base: list[GraphBreak], head: list[GraphBreak]) -> Review:
    wl = WorkloadReview(name="net", base=[_compile("base", base)], head=[_compile("head", head)])
    return assemble([wl], Config(), DEMO.base, DEMO.head)


def test_a_new_break_says_its_depth_and_blocks_in_its_message_and_evidence() -> None:
    review = _review([OLD], [NESTED, TOP])
    by_line = {f.location.line: f for f in review.findings if f.location}
    nested, top, removed = by_line[17], by_line[14], by_line[20]
    assert nested.message == "Dynamo splits the graph here: print (inside 2 nested blocks: for › if)"
    assert nested.evidence["nesting_depth"] == 2 and nested.evidence["nesting"] == "for › if"
    assert nested.evidence["nesting_blocks"] == "model.py:15  for i in range(2):\nmodel.py:16    if i == 1:"
    # At the top level: depth 0, said in the evidence, no words in the message.
    assert top.message == "Dynamo splits the graph here: print" and top.evidence["nesting_depth"] == 0
    # A break from a result that did not measure it: no depth at all.
    assert removed.category == "graph_break_removed" and "nesting_depth" not in removed.evidence
    comment = render_comment(review)
    assert "Inside 2 blocks of its function (outermost first)" in comment
    assert "model.py:16    if i == 1:" in comment


def test_one_block_is_said_in_the_singular() -> None:
    one = _break(16, "print(i)", [("with", 15, "with torch.no_grad():")])
    [f] = _review([], [one]).findings
    assert f.message.endswith("(inside 1 block: with)")
    assert "Inside 1 block of its function" in render_comment(_review([], [one]))


# ---------------------------------------------------------------- the per-frame table and the heatmap


def test_the_depth_table_counts_break_lines_per_frame_and_depth_base_against_head() -> None:
    helper = _break(30, "t.item()", [("if", 29, "if t:")]).model_copy(
        update={"location": _at(30, "t.item()", "helper")}
    )
    deep = _break(
        40,
        "x.item()",
        [("for", 37, "for a in b:"), ("if", 38, "if a:"), ("with", 39, "with c:"), ("try", 39, "try:")],
    )
    resumed = TOP.model_copy(update={"location": _at(50, "print(y)", "torch_dynamo_resume_in_forward_at_14")})
    table = break_depth.depth_table(_review([TOP, OLD], [NESTED, TOP, helper, deep, resumed]))
    assert table is not None
    assert table.columns == ("0", "1", "2", "3+", "unknown")  # base's old break has no depth
    rows = {(r.path, r.function): [r.cell(c) for c in table.columns] for r in table.rows}
    assert rows == {
        # a resume function's break is its function's
        ("model.py", "forward"): ["1 → 2", "—", "0 → 1", "0 → 1", "1 → 0"],
        ("model.py", "helper"): ["—", "0 → 1", "—", "—", "—"],
    }
    # A review whose breaks none has a depth for (a result recorded before it was measured): no table.
    assert break_depth.depth_table(_review([OLD], [OLD])) is None


def test_the_review_s_heatmap_by_depth() -> None:
    review = _review([], [NESTED, TOP, _break(9, "print(9)", [])])
    assert charts.break_counts(review, "depth") == {("net", "depth 0"): 2, ("net", "depth 2"): 1}
    assert charts.break_counts(review) == {("net", "print"): 3}
    html = render_html(review, heatmap_by="depth")
    assert "graph breaks by workload and nesting depth" in html
    assert "Graph breaks by nesting depth" in html and "<code>forward</code> (model.py)" in html


def test_the_history_heatmap_by_depth_and_a_store_from_before_depths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "h.sqlite"
    # A store as perfcheck wrote it before it kept depths (version 3), with one new break in it.
    with monkeypatch.context() as before:
        before.setattr(history, "MIGRATIONS", history.MIGRATIONS[:3])
        before.setattr(history, "LATEST", 3)
        conn = history.open_store(db)
        conn.execute(
            "INSERT INTO reviews (recorded_at, verdict, tool_version) "
            "VALUES ('2026-01-01T00:00:00+00:00', 'fail', '0')"
        )
        conn.execute(
            "INSERT INTO findings (review_id, category, severity, workload, message, break_type) "
            "VALUES (1, 'graph_break_added', 'error', 'net', 'm', 'print')"
        )
        conn.close()
    conn = history.open_store(db)  # migrated forward: the old finding keeps no depth
    history.record(conn, _review([], [NESTED, TOP]), repository=None, pr=None)
    history.record(conn, _review([], [NESTED]), repository=None, pr=None)
    expected = {("net", "depth 2"): 2, ("net", "depth 0"): 1, ("net", "depth unknown"): 1}
    assert history.break_heatmap(conn, 10, by="depth") == expected
    assert history.break_heatmap(conn, 2, by="depth") == {("net", "depth 2"): 2, ("net", "depth 0"): 1}
    # A value no perfcheck wrote (a store restored from elsewhere) is an unknown depth too.
    conn.execute("UPDATE findings SET nesting_depth = -4 WHERE review_id = 1")
    assert history.break_heatmap(conn, 10, by="depth") == expected
    assert history.break_heatmap(conn, 10) == {("net", "print"): 4}
    with pytest.raises(ValueError, match="unknown heatmap rows"):
        history.break_heatmap(conn, 10, by="kind")
    conn.close()

    result = tmp_path / "result.json"
    result.write_text(_review([], [NESTED]).model_dump_json())
    parser = argparse.ArgumentParser(prog="perfcheck")
    commands = parser.add_subparsers(dest="command", required=True)
    add_html_parser(commands)
    out = tmp_path / "report.html"
    args = parser.parse_args(["html", str(result), "--out", str(out), "--db", str(db), "--by", "depth"])
    assert args.func(args) == 0
    html = out.read_text()
    assert "graph breaks by workload and nesting depth" in html
    assert ">depth unknown<" in html and ">depth 2<" in html
    assert "--by {type,depth}" in commands.choices["html"].format_help()


# ---------------------------------------------------------------- a real review


NESTED_CHANGE = textwrap.indent(
    textwrap.dedent(
        """\
        print("top")
        for i in range(2):
            if i == 1:
                print("nested", i)"""
    ),
    " " * 8,
).lstrip()


def test_a_review_says_a_new_break_s_depth_inside_nested_blocks_and_0_at_the_top_level(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Head adds a print at forward's top level and one inside `for` › `if`: each new break says
    its depth, the probe's result.json has the blocks, and the HTML report's table counts them."""
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", NESTED_CHANGE)
    result = review(base, head, probes=("compile",))
    added = {f.location.code: f for f in result.findings if f.category == "graph_break_added" and f.location}
    assert set(added) == {'print("top")', 'print("nested", i)'}, [f.message for f in result.findings]
    nested, top = added['print("nested", i)'], added['print("top")']
    assert "(inside 2 nested blocks: for › if)" in nested.message
    assert (nested.evidence["nesting_depth"], nested.evidence["nesting"]) == (2, "for › if")
    assert top.evidence["nesting_depth"] == 0 and "nested block" not in top.message

    lines = MODEL.replace("{change}", NESTED_CHANGE).splitlines()
    head_breaks = result.workloads[0].head[0].metrics_as(CompileMetrics).graph_breaks
    [deep] = [gb for gb in head_breaks if gb.location and gb.location.code == 'print("nested", i)']
    assert [(b.kind, b.line, b.code) for b in deep.nesting] == [
        ("for", lines.index("        for i in range(2):") + 1, "for i in range(2):"),
        ("if", lines.index("            if i == 1:") + 1, "if i == 1:"),
    ]
    written = (tmp_path / "out" / "result.json").read_text()
    assert '"nesting_depth": 2' in written and '"nesting_depth": 0' in written

    report = (tmp_path / "out" / "report.html").read_text()
    table = report.split('id="break-depths"')[1].split("</table>")[0]
    assert "<th>depth 0</th><th>depth 1</th><th>depth 2</th><th>depth 3+</th></tr>" in table
    assert (
        '<tr><td>net</td><td><code>Net.forward</code> (model.py)</td><td class="num">0 → 1</td>'
        '<td class="num">—</td><td class="num">0 → 1</td><td class="num">—</td></tr>'
    ) in table
    assert "Inside 2 blocks of its function" in render_comment(result)


def test_the_finding_rows_record_the_depth() -> None:
    [f] = _review([], [NESTED]).findings
    assert history.finding_row(f)[-1] == 2
    bogus = f.model_copy(update={"evidence": {**f.evidence, "nesting_depth": True}})
    assert history.finding_row(bogus)[-1] is None
