"""Untrusted text (break reasons, error messages, source lines) must render inert."""

from __future__ import annotations

import re
from pathlib import Path

from perfcheck.core import markdown


def test_mentions_are_neutralised() -> None:
    out = markdown.text("ping @org/team and @someone")
    assert "@org" not in out.replace("@<!-- -->", "")
    assert out.count("@<!-- -->") == 2


def test_html_is_escaped() -> None:
    out = markdown.text('<img src=x onerror="alert(1)"> & <details>')
    assert "<" not in out.replace("<!-- -->", "") and ">" not in out
    assert "&lt;img" in out and "&amp;" in out


def test_markup_cannot_form() -> None:
    out = markdown.cell("[click](https://evil) *bold* `code` | pipe")
    assert "\\[click\\](https<!-- -->://evil)" in out
    assert "\\*bold\\*" in out and "\\`code\\`" in out and "\\|" in out


def test_block_markup_at_a_paragraph_start_is_escaped() -> None:
    assert markdown.text("# not a heading") == "\\# not a heading"
    assert markdown.text("1. not a list") == "1\\. not a list"
    assert markdown.text("> not a quote").startswith("&gt;")


def test_code_span_survives_backticks_and_pipes() -> None:
    assert markdown.code("a `b` c") == "``a `b` c``"
    assert markdown.code("`edge`") == "`` `edge` ``"
    assert markdown.code("x | y", in_table=True) == "`x \\| y`"


def test_fenced_block_cannot_be_closed_from_inside() -> None:
    out = markdown.block("before\n```\n@team <b>\n````")
    fence = out.splitlines()[0]
    assert fence == "`````"
    assert out.endswith("\n`````")


def test_cap_cuts_at_a_line_and_closes_what_is_open() -> None:
    body = "head\n<details><summary>x</summary>\n\n```\n" + "line\n" * 5000
    out = markdown.cap(body, 1000, "Full report: artifact.")
    assert len(out) <= 1000
    assert out.endswith("Full report: artifact.")
    assert out.count("```") % 2 == 0
    assert out.count("<details>") == out.count("</details>")


def test_cap_leaves_short_bodies_alone() -> None:
    assert markdown.cap("short", 100, "pointer") == "short"


def test_issue_references_link_nothing() -> None:
    out = markdown.text("fixes #12, org/repo#3 and GH-9")
    assert "#12" not in out and "repo#3" not in out and "GH-9" not in out
    assert out.replace("<!-- -->", "") == "fixes #12, org/repo#3 and GH-9"


def test_control_characters_are_shown_not_obeyed() -> None:
    hostile = "\x1b[2J\x1b]0;pwned\x07ok\x9b"
    for out in (markdown.cell(hostile), markdown.code(hostile), markdown.block(hostile)):
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "␛" in markdown.block(hostile)


def test_cap_closes_a_four_backtick_fence_with_four() -> None:
    body = "intro\n````\n```\ninner lines stay code\n```\n" + "x" * 200 + "\nafter\n"
    capped = markdown.cap(body, 80, "POINTER")
    assert capped.endswith("````\n\nPOINTER")
    assert len(capped) <= 80


def test_one_huge_field_cannot_crowd_out_the_rest() -> None:
    from perfcheck.core.render import render_comment
    from perfcheck.schema import load_review

    review = load_review(Path(__file__).parent / "data" / "demo-result.json")
    huge = review.findings[0].model_copy(update={"message": "y" * 200_000})
    comment = render_comment(review.model_copy(update={"findings": [huge, *review.findings[1:]]}))
    assert len(comment) < 65_536
    assert "more characters" in comment
    for f in review.findings[1:]:
        assert f.message[:30] in comment.replace("\\", "")  # every later finding is still there


# What GitHub links in plain text (GFM's extended autolinks).
AUTOLINK = re.compile(r"(?i)(https?|ftp)://|www\\.")


def _prose(comment: str) -> str:
    """What GitHub would autolink in: the comment minus fenced blocks, code spans and the targets
    of the links perfcheck itself writes (`[docs](...)`)."""
    prose = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1\s*$", "", comment)
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", prose)
    return re.sub(r"\]\((https://[^)\s]+)\)", "]()", prose)


def test_urls_in_probe_text_link_nothing() -> None:
    """Issue 29: a break reason, an error message, an op name and a workload name holding URLs, in
    the comment rendered from a real review: they read the same, GitHub links none of them; the
    documentation links perfcheck writes stay links."""
    from perfcheck.core.causes import grouped
    from perfcheck.core.render import render_comment
    from perfcheck.schema import load_review

    review = load_review(Path(__file__).parent / "data" / "demo-result.json")
    url = "see https://evil.example/login, HTTP://x.example, _www.evil.example and ftp://f.example"
    first, *rest = review.findings
    evidence = {**first.evidence, "reason": url, "break_type": url}
    hostile = first.model_copy(update={"message": url, "workload": url, "evidence": evidence})
    ops = [f.model_copy(update={"message": f"ops: {url} 0→1"}) for f in rest]
    review = review.model_copy(update={"findings": [hostile, *ops], "inconclusive": [url]})
    comment = render_comment(review)
    assert not AUTOLINK.search(_prose(comment)), AUTOLINK.findall(_prose(comment))
    assert "see https<!-- -->://evil.example/login" in comment  # still reads as the probe wrote it
    assert comment.replace("<!-- -->", "").count("https://evil.example/login") >= 3
    # perfcheck's own links are untouched: one per cause's matrix entry
    docs = re.findall(r"\[docs\]\((https://[^)]+)\)", comment)
    assert len(docs) == len(grouped(review)) == 2 and all("<!--" not in d for d in docs)
